"""The chapter's figures and tables: the cameraman photographs, the README's two runs, Fig. 7 on three axes
(epochs, Adam updates, seconds), the renders of the held-out fits, and the tables beside the paper's
numbers (held-out PSNRs, the networks, the any-values fits, when each network reaches each target, both
ablations, the further seeds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gmp.activations import ACTIVATION_TEXT, PAPER_COLOURS
from gmp.data.images import grey_image
from gmp.encoders import AuthorEncoding
from gmp.minibatch import EpochCurves
from gmp import style

from .claims import ANY_VALUES_BAR, _passes_text
from .protocol import (ANY_VALUES, HELDOUT_NETS, PAPER, PSNR_TARGETS, SEED_ROWS, ablation_changes, ablation_network,
                       ablation_settings, encoder_text, figure_spec, reverse_changes, script_spec)


def label(name: str) -> str:
    """A curve's name in the figures: ``"sin/rotated"`` -> ``"√2 sin(x + π/4), rotated"``."""
    net, variant = name.split("/")
    if net == "script":
        return f"author's script network, {variant.replace('_', ' ')}"
    if net == "siren":
        return "SIREN, " + {"minibatch": "mini-batch, constant rate 1e-4", "schedule": "mini-batch, the figure's schedule",
                            "slow": "mini-batch, constant rate 1e-5"}.get(variant, "full batch")
    if variant == "siren_layer":
        return f"{ACTIVATION_TEXT[net]} + SIREN layer"
    return f"{ACTIVATION_TEXT[net]}, {'rotated' if variant == 'rotated' else 'axis-aligned'}"


def colour(name: str) -> str:
    net = name.split("/")[0]
    return {"script": "#444444"}.get(net, PAPER_COLOURS.get(net, "grey"))


def plot_photographs(side: int = 256):
    """The cameraman photographs: scikit-image's of today, the classic one (SIREN's) and the author's file."""
    panels = [("classic", "classic cameraman\n(scikit-image 0.17, SIREN)"),
              ("author", "the SBSNN author's 256×256 file"),
              ("skimage", "skimage.data.camera() today\n(scikit-image ≥ 0.18)")]
    fig, axes = style.subplots(1, 3, figsize=(12, 4.4))
    for ax, (source, title) in zip(axes, panels):
        ax.imshow(grey_image(side, source).numpy(), cmap="gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize=11)
        ax.axis("off")
    fig.tight_layout()
    return fig


def _targets(ax, which: str = "train") -> None:
    ax.axhline(PSNR_TARGETS["author"], color="grey", ls=":", lw=1, label="MSE 1e-5 on [0, 1] (50 dB)")
    ax.axhline(PSNR_TARGETS["siren"], color="grey", ls="--", lw=1, label="SIREN's MSE 1e-5 on [-1, 1] (56.0 dB)")


def plot_readme(panels: Mapping[str, Mapping[str, EpochCurves]]):
    """The README's two runs: epoch-mean PSNR (the author's plot, solid) and whole-image PSNR (dashed) per epoch.

    ``panels`` maps a panel title to the fits (:func:`~gmp.experiments.sbsnn_author.payload.fits_of`) to draw in it.
    """
    fig, axes = style.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, (title, fits) in zip(axes[0], panels.items()):
        for schedule, shade in (("aggressive", "#d62728"), ("less_aggressive", "#1f77b4")):
            fit = fits.get(f"script/{schedule}")
            if fit is None:
                continue
            epochs = np.arange(1, len(fit.epoch_loss) + 1)
            name = schedule.replace("_", " ")
            ax.plot(epochs, fit.psnr("epoch"), color=shade, lw=1.6, label=f"{name}: epoch-mean loss (author's plot)")
            ax.plot(epochs, fit.psnr("train"), color=shade, lw=1.2, ls="--", label=f"{name}: whole image after epoch")
        ax.axhline(PAPER["readme_aggressive_db"], color="#d62728", lw=0.8, ls=":", label="README: 60 dB in 100")
        ax.axhline(PAPER["readme_less_aggressive_db"], color="#1f77b4", lw=0.8, ls=":", label="README: 95 dB in 550")
        ax.set_xlabel("epochs (the author's 'iterations')")
        ax.set_ylabel("PSNR (dB, [0, 1] scale)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot_axes(rows: Mapping[str, Mapping[str, EpochCurves]]):
    """Fig. 7 under the author's protocol on three axes: epochs, Adam updates and wall-clock seconds.

    ``rows`` maps a row title to its fits (:func:`~gmp.experiments.sbsnn_author.payload.fits_of`): one row of three
    panels each. Whole-image PSNR after each epoch ([0, 1] scale); solid lines the rotated encoder, dotted the
    axis-aligned one; SIREN under its own protocol (dashed: full batch, one update per "epoch") and under the author's.
    """
    import matplotlib.pyplot as plt

    fig, axes = style.subplots(len(rows), 3, figsize=(16, 4.6 * len(rows) + 1.2), sharey=True, squeeze=False)
    for row, (title, fits) in zip(axes, rows.items()):
        for name, fit in fits.items():
            if name.startswith("script/"):
                continue
            variant = name.split("/")[1]
            epochs = np.arange(1, len(fit.train_mse) + 1)
            line = dict(color=colour(name), lw=1.4, label=label(name),
                        ls=":" if variant == "nerf" else "--" if variant == "fullbatch" else "-")
            for ax, x in zip(row, (epochs, epochs * fit.updates_per_epoch, fit.seconds)):
                ax.plot(x, fit.psnr("train"), **line)
        for ax, xlabel in zip(row, ("epochs (the paper's 'iterations')", "Adam updates",
                                    "seconds per network (this CPU)")):
            _targets(ax)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
            ax.set_xlabel(xlabel)
            ax.grid(True, which="both", alpha=0.3)
        row[1].set_title(title)
    fig.supylabel("whole-image PSNR (dB, [0, 1] scale)")  # once: a row is too short for it
    fig.tight_layout()
    style.legend_below(fig)  # every curve of any row, once
    return fig


def heldout_table(held: Mapping[str, Any] | None, paper: Mapping[str, Any] | None):
    """Held-out PSNR of each network beside interpolating the held-out pixels: this build and paper scale."""
    import pandas as pd

    rows = []
    for key, (text, _, _) in HELDOUT_NETS.items():
        row = {"predictor": text}
        for column, source in (("this build", held), ("paper scale", paper)):
            net = (source or {}).get("networks", {}).get(key)
            missing = "not yet run" if source else "—"
            row[f"{column}: training pixels"] = f"{net['train_psnr']:.1f}" if net else missing
            row[f"{column}: held-out pixels"] = f"{net['heldout_psnr']:.1f}" if net else missing
        rows.append(row)
    for method in ("nearest", "linear", "cubic"):
        row = {"predictor": f"{method} interpolation of the kept pixels"}
        for column, source in (("this build", held), ("paper scale", paper)):
            value = (source or {}).get("interpolation", {}).get(method)
            row[f"{column}: training pixels"] = "exact"
            row[f"{column}: held-out pixels"] = f"{value:.1f}" if value is not None else "—"
        rows.append(row)
    return pd.DataFrame(rows).style.hide(axis="index")


def networks_table(cfg):
    """Every network of the chapter with its encoder (frequencies, features, amplitude) and its sine layers."""
    import pandas as pd

    script = script_spec(cfg)["sizes"]
    figure = figure_spec(cfg, "sin")["sizes"]
    text_encoder, text_sizes = ablation_network(cfg, ablation_settings(cfg, 0))
    rows = [("the author's script network (README runs, held-out fit)",
             encoder_text(AuthorEncoding(script[1], rotated=True, scale_factor=cfg.script_scale_factor)), script),
            ("Fig. 7, axis-aligned encoder", encoder_text(AuthorEncoding(cfg.width)), figure),
            ("Fig. 7, rotated encoder (and the held-out sin network, and the ablation from its step 4)",
             encoder_text(AuthorEncoding(cfg.width, rotated=True)), figure),
            ("the ablation, steps 0-3 (the text's reading)", encoder_text(text_encoder), text_sizes)]
    out = [{"network": name, "encoder": enc, "sine layers": f"{len(sizes) - 3}: "
            + " → ".join(str(n) for n in sizes[1:-1]) + " → 1 (linear)"} for name, enc, sizes in rows]
    out.append({"network": "SIREN (both protocols)", "encoder": "none: sin(30 (W x + b)) first layer on the coordinates",
                "sine layers": "4: 2 → 256 → 256 → 256 → 256 → 1 (linear)"})
    return pd.DataFrame(out).style.hide(axis="index")


def any_values_table(live: Mapping[str, Any] | None, paper: Mapping[str, Any] | None):
    """The script's network fitted to the image and to each assignment of
    :data:`~gmp.experiments.sbsnn_author.protocol.ANY_VALUES`: the pass at which its whole-image PSNR first reaches
    :data:`~gmp.experiments.sbsnn_author.claims.ANY_VALUES_BAR`, its best PSNR and that of predicting the targets' mean,
    this build and paper scale."""
    import pandas as pd

    def cells(payload: Mapping[str, Any] | None, arm: str) -> tuple[str, str, str]:
        row = (payload or {}).get("rows", {}).get("script/aggressive") if arm == "image" else \
            ((payload or {}).get("any_values") or {}).get(arm)
        if row is None:
            return ("not yet run",) * 3 if payload else ("—",) * 3
        mean = row.get("mean_db")
        return _passes_text(row), f"{row['best_train_psnr']:.1f}", "—" if mean is None else f"{mean:.1f}"

    rows = []
    for arm, text in {"image": "the image (the README's aggressive run)", **ANY_VALUES}.items():
        row = {"targets": text}
        for column, payload in (("this build", live), ("paper scale", paper)):
            passes, best, mean = cells(payload, arm)
            row[f"{column}: {ANY_VALUES_BAR:.0f} dB first at"] = passes
            row[f"{column}: best PSNR (dB)"] = best
            row[f"{column}: PSNR of the mean (dB)"] = mean
        rows.append(row)
    return pd.DataFrame(rows).style.hide(axis="index")


def plot_renders(rows: Mapping[str, tuple[Mapping[str, np.ndarray], Any]]):
    """The central crop of each held-out fit rendered on the finer grid, beside the bilinear upsampling of the image.

    ``rows`` maps a row title to ``(arrays, cfg)``: :func:`~gmp.experiments.sbsnn_author.payload.to_arrays` of the run
    and its config.
    """
    from torchvision.transforms.functional import InterpolationMode, resize

    columns = 1 + len(HELDOUT_NETS)
    fig, axes = style.subplots(len(rows), columns, figsize=(3.4 * columns, 3.8 * len(rows)), squeeze=False)
    for row, (title, (arrays, cfg)) in zip(axes, rows.items()):
        image = grey_image(cfg.side, cfg.image)
        up = resize(image[None], [cfg.render_side] * 2, interpolation=InterpolationMode.BILINEAR, antialias=False)[0]
        lo = (cfg.render_side - cfg.render_crop) // 2
        panels = [("bilinear upsampling", up[lo:lo + cfg.render_crop, lo:lo + cfg.render_crop].numpy())]
        panels += [(short, arrays.get(f"render__{k}")) for k, (_, short, _) in HELDOUT_NETS.items()]
        for ax, (text, crop) in zip(row, panels):
            ax.axis("off")
            if crop is None:
                continue
            ax.imshow(np.clip(crop, 0, 1), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(f"{title}\n{text}" if ax is row[0] else text, fontsize=10)
    fig.tight_layout()
    return fig


def reach_table(payload: Mapping[str, Any] | None):
    """When each network first passes 50 and 56.0 dB (whole image), in epochs, Adam updates and seconds."""
    import pandas as pd

    rows = []
    for name, row in (payload or {}).get("rows", {}).items():
        if name == "siren/fullbatch":
            cells = {}
            for target, key in (("author", "first_below_author_target"), ("siren", "first_below_siren_target")):
                if key not in row:  # a cache written before this target was recorded
                    continue
                step, db = row[key], f"{PSNR_TARGETS[target]:.1f} dB"
                seconds = row["seconds"] * (step + 1) / row["steps"] if step is not None else None
                cells.update({f"{db}: epochs": f"{step:,}" if step is not None else "never",
                              f"{db}: updates": f"{step:,}" if step is not None else "never",
                              f"{db}: seconds": f"{seconds:,.0f}" if seconds is not None else "never"})
            rows.append({"network": label(name) + " (an epoch is one update)", **cells})
            continue
        out = {"network": label(name)}
        for target in ("author", "siren"):
            reach = row["reach"][f"{target}-train"]
            db = f"{PSNR_TARGETS[target]:.1f} dB"
            out[f"{db}: epochs"] = "never" if reach["epochs"] is None else f"{reach['epochs']:,}"
            out[f"{db}: updates"] = "never" if reach["updates"] is None else f"{reach['updates']:,}"
            out[f"{db}: seconds"] = "never" if reach["seconds"] is None else f"{reach['seconds']:,.0f}"
        rows.append(out)
    if not rows:
        return pd.DataFrame({"network": ["no paper-scale fit has finished yet"]}).style.hide(axis="index")
    return pd.DataFrame(rows).fillna("—").style.hide(axis="index")


def ablation_table(cfg, live: Mapping[str, Any], paper: Mapping[str, Any] | None):
    """The ablation: per step, every setting it changes (:func:`~gmp.experiments.sbsnn_author.protocol.ablation_changes`
    of ``cfg``), the final whole-image PSNR and the updates made, this build and paper scale."""
    import pandas as pd

    def cells(payload: Mapping[str, Any] | None, step: int) -> tuple[str, str, str]:
        row = next((r for r in (payload or {}).get("ablation", []) if r["step"] == step), None)
        if row is None:
            return "—", "—", "—"
        return f"{row['final_psnr']:.1f}", f"{row['best_psnr']:.1f}", f"{row['updates']:,}"

    rows = []
    for step, (change, changes) in enumerate(zip(cfg.ablation, ablation_changes(cfg))):
        mine, theirs = cells(live, step), cells(paper, step)
        rows.append({"step": change["name"], "what changes": "; ".join(changes) or "the starting point",
                     "this build: final PSNR": mine[0], "this build: updates": mine[2],
                     "paper scale: final PSNR": theirs[0], "paper scale: best PSNR": theirs[1],
                     "paper scale: updates": theirs[2]})
    return pd.DataFrame(rows).style.hide(axis="index")


def reverse_table(cfg, payload: Mapping[str, Any] | None):
    """The reverse ablation: per arm, what it changes from the author's protocol
    (:func:`~gmp.experiments.sbsnn_author.protocol.reverse_changes`), its whole-image PSNR after the run's epochs by
    seed and on average, and the paired difference from the author's protocol with its 95% interval; then the same for
    the passes to SIREN's accuracy (56.0 dB)."""
    import pandas as pd

    rows = {r["arm"]: r for r in (payload or {}).get("reverse", [])}
    out = []
    for arm, (change, changes) in enumerate(zip(cfg.reverse, reverse_changes(cfg))):
        row = rows.get(arm)
        diff = row.get("difference") if row else None
        out.append({"arm": change["name"], "what changes": "; ".join(changes) or "the starting point",
                    "PSNR by seed (dB)": ", ".join(f"{v:.1f}" for v in row["final_psnr"]) if row else "—",
                    "mean (dB)": f"{row['mean_psnr']:.1f}" if row else "—",
                    "− author's protocol (dB, 95% interval)":
                        f"{diff[0]:+.1f} ({diff[1]:+.1f} to {diff[2]:+.1f})" if diff else "—",
                    f"passes to {PSNR_TARGETS['siren']:.1f} dB by seed":
                        ", ".join("never" if v is None else str(v) for v in row["passes"]) if row and "passes" in row
                        else "—",
                    "− author's protocol (passes, 95% interval)": "{:+.0f} ({:+.0f} to {:+.0f})".format(
                        *row["passes_difference"]) if row and row.get("passes_difference") else "—"})
    return pd.DataFrame(out).style.hide(axis="index")


SEED_COLUMNS = {"best_epoch_psnr": "best epoch-mean PSNR (dB)", "best_train_psnr": "best whole-image PSNR (dB)"}
"""The seed table's PSNR columns by payload key."""


def seeds_table(payload: Mapping[str, Any] | None):
    """The thin-margin networks over seeds, in the order of :data:`~gmp.experiments.sbsnn_author.protocol.SEED_ROWS`:
    per network, each seed's best epoch-mean and whole-image PSNR in its run, and the epoch at which it first passes the
    target its claim judges (the README's bar for the script, 56.0 dB whole-image for Fig. 7's networks)."""
    import pandas as pd

    out = []
    seeds = (payload or {}).get("seeds", {})
    for row, fits in sorted(seeds.items(), key=lambda item: list(SEED_ROWS.values()).index(item[0])):
        script = row.startswith("script/")
        reach = [f["reach_readme"]["epoch"]["epochs"] if script else f["reach"]["siren-train"]["epochs"] for f in fits]
        entry = {"network": label(row), "seeds": ", ".join(str(f["seed"]) for f in fits)}
        for key, name in SEED_COLUMNS.items():
            values = [f[key] for f in fits]
            entry[name] = ", ".join(f"{v:.1f}" for v in values) + f" (mean {np.mean(values):.1f})"
        target = (f"{PAPER['readme_' + row.split('/')[1] + '_db']:g} dB epoch-mean" if script else
                  f"{PSNR_TARGETS['siren']:.1f} dB whole-image")
        entry["first epoch at the claim's target"] = f"{target}: " + ", ".join("never" if r is None else str(r)
                                                                             for r in reach)
        out.append(entry)
    if not out:
        return "The further seeds have not run yet."
    return pd.DataFrame(out).style.hide(axis="index")
