"""Experiment of the chapter book/part3/sbsnn_author_figs.md: Figs. 4, 5 and 6 of the SBSNN paper under
its author's protocol (epochs of mini-batches of 32, [0, 1] targets, his encoder, no biases,
Keras's Adam and plateau rule), beside SIREN under the same protocol."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from gmp.config import scaled
from gmp.experiments import sbsnn_author
from gmp.experiments.sbsnn_author import (FIG7_ACTIVATIONS, ONE_SEED, SBSNN_FAMILY, SEED_POWER, SEED_T, TRAINED_DB,
                                          SEEDS_TO_DECIDE, THIN_MARGIN, over_seeds, data, encoded, family_reach,
                                          figure_spec, fit_row, label, one_seed, PSNR_TARGETS, seed_rule,
                                          seeds_provisional, siren_spec)
from gmp.experiments.sbsnn_encoders import CLAIMS as ENCODER_CLAIMS
from gmp.experiments.sbsnn_encoders import CONFIG as ENCODER_CONFIG
from gmp.experiments.sbsnn_encoders import _fig5_check, axis_energy, plot_fig5
from gmp.minibatch import EpochCurves, fit_stack, layers
from gmp.results import (INCONCLUSIVE, NOT_REPRODUCED, PARTLY, REPRODUCED, SIGN_LEVEL, Claim, EarlierDesign, EarlierRule,
                         NotYetRun, PowerTest, paired_interval, sign_test)
from gmp import style

FIG4_ACTIVATIONS = ["sin", "triangle", "gpn_tanh", "gpn_relu", "gpn_elu", "abs_sin"]
"""The activations of Fig. 4, in the order of its caption (SIREN is the seventh curve)."""

CONFIG = scaled(
    common=dict(image="author", width=192, hidden_layers=5, batch_size=32, lr=2e-4,
                plateau={"factor": 0.5, "patience": 40, "rule": "keras"}, siren_lr=1e-4, siren_slow_lr=1e-5,
                compare_epoch=500,
                compile=False),
    smoke=dict(side=32, width=48, fig4=["sin", "gpn_relu"], fig6=["sin", "gpn_relu"], epochs=3, compare_epoch=2,
               more_seeds=[1]),
    small=dict(side=32, fig4=["sin", "triangle", "gpn_relu"], fig6=["sin", "gpn_relu"], epochs=4, compare_epoch=3,
               more_seeds=[1]),
    paper=dict(side=256, fig4=FIG4_ACTIVATIONS, fig6=FIG7_ACTIVATIONS, epochs=550, compile=True),
)

QUEUED = {"paper": dict(more_seeds=[1, 2, 3, 4])}
"""Settings of the paper scale queued for the prepared GPU command's second job (:mod:`gmp.gpu`) and not yet in
``CONFIG``: ``more_seeds``, the seeds besides 0 of Fig. 4's SBSNN-family networks (units ``fig4seeds-``, each a
stack of these seeds fitted for ``compare_epoch`` epochs, the paper's "around 500") and of Fig. 6's networks
(``fig6seeds-``, one stack per activation and encoder, for ``epochs``).

They are out of reach of a 2-core CPU (about 4.5 hours for Fig. 4's three networks and 20 for Fig. 6's fourteen),
so a GPU lease computes them, one unit after another, into the journal of the config with them
(:func:`gmp.gpu.unit_config`); kept out of ``CONFIG`` meanwhile, so that the chapter's cache stays current. Once
every such unit is journalled, they move into ``CONFIG`` and the chapter's run carries the cached units over
(:func:`gmp.results.carry`). The smoke and small scales fit ``more_seeds`` in the chapter itself."""

SIREN_ARMS = {"siren": ("siren/minibatch", "at its own constant rate 1e-4"),
              "sirenschedule": ("siren/schedule", "under the figure's schedule"),
              "sirenslow": ("siren/slow", "at the constant rate 1e-5")}
"""SIREN's mini-batch arms by unit kind, each with its curve name and the words the verdicts name it by
(the rates are the config's ``siren_lr`` and ``siren_slow_lr``)."""

PAPER = {
    # Section 5 and Fig. 4: with an initial SIREN layer the SBSNNs exceed SIREN's accuracy (MSE 1e-5)
    # "in around 500 iterations" with Adam 2e-4 halved on 40-epoch plateaus.
    "fig4_epochs": 500,
}


def siren_layer_spec(cfg, activation: str) -> dict[str, Any]:
    """Fig. 4's network as the author builds it: a SIREN first layer to ``width``, five layers, output."""
    return {**figure_spec(cfg, activation), "first_layer": "siren"}


FIG6_ENCODERS = ("nerf", "rotated")
"""Fig. 6's two encoders, the author's axis-aligned and rotated ones, by curve-name suffix."""


def seeded_fig4(cfg) -> list[str]:
    """The activations of Fig. 4 whose networks are fitted again for each of ``more_seeds``: the SBSNN family's."""
    return [a for a in SBSNN_FAMILY if a in cfg.fig4]


def units(cfg, store, seed: int, device) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every fit: ``fig4-<activation>`` (SIREN first layer), ``fig6-<activation>`` (both encoders, trained
    together), and SIREN under the same mini-batch protocol three ways: ``siren`` (at its own constant
    rate), ``sirenschedule`` (under the figures' own schedule, the one every SBSNN of them gets) and
    ``sirenslow`` (at the constant rate ``siren_slow_lr``, one at which it trains in mini-batches of 32);
    each for ``epochs`` epochs. With ``more_seeds`` (:data:`QUEUED`), the same networks over those seeds, each
    network one stack: ``fig4seeds-<activation>`` (:func:`seeded_fig4`, for ``compare_epoch`` epochs) and
    ``fig6seeds-<activation>-<encoder>`` (``nerf`` or ``rotated``, for ``epochs``). A stack of four such
    networks checkpoints in about 9 MB, under the 16 MiB a GPU machine returns, so that the GPU command can
    resume it in a later lease (:mod:`gmp.gpu`)."""
    coords, pixels = data(cfg)
    common = dict(epochs=cfg.epochs, batch_size=cfg.batch_size, device=device, compile=cfg.compile)

    def fig4(activation: str) -> Callable[[], dict[str, Any]]:
        key = f"fig4-{activation}-{seed}"
        return lambda: fit_stack(layers(siren_layer_spec(cfg, activation)), [seed], coords, pixels, lr=cfg.lr,
                                 plateau=cfg.plateau, checkpoint=store.scratch(key), desc=key, **common)[0].to_json()

    def fig6(activation: str) -> Callable[[], dict[str, Any]]:
        key = f"fig6-{activation}-{seed}"

        def compute() -> dict[str, Any]:
            inputs = torch.stack([encoded(coords, cfg.width, False), encoded(coords, cfg.width, True)])
            fits = fit_stack(layers(figure_spec(cfg, activation)), [seed, seed], inputs, pixels, lr=cfg.lr,
                             plateau=cfg.plateau, checkpoint=store.scratch(key), desc=key, **common)
            return {"nerf": fits[0].to_json(), "rotated": fits[1].to_json()}

        return compute

    def siren(kind: str, lr: float, plateau: Mapping[str, Any] | None) -> Callable[[], dict[str, Any]]:
        key = f"{kind}-{seed}"
        return lambda: fit_stack(layers(siren_spec()), [seed], coords, pixels, lr=lr, plateau=plateau,
                                 checkpoint=store.scratch(key), desc=key, **common)[0].to_json()

    def fig4_seeds(activation: str) -> Callable[[], dict[str, Any]]:
        key = f"fig4seeds-{activation}-{seed}"
        return lambda: {"seeds": list(cfg.more_seeds), "fits": [fit.to_json() for fit in fit_stack(
            layers(siren_layer_spec(cfg, activation)), list(cfg.more_seeds), coords, pixels, lr=cfg.lr,
            plateau=cfg.plateau, checkpoint=store.scratch(key), desc=key, **{**common, "epochs": cfg.compare_epoch})]}

    def fig6_seeds(activation: str, encoder: str) -> Callable[[], dict[str, Any]]:
        key = f"fig6seeds-{activation}-{encoder}-{seed}"
        return lambda: {"seeds": list(cfg.more_seeds), "fits": [fit.to_json() for fit in fit_stack(
            layers(figure_spec(cfg, activation)), list(cfg.more_seeds), encoded(coords, cfg.width, encoder == "rotated"),
            pixels, lr=cfg.lr, plateau=cfg.plateau, checkpoint=store.scratch(key), desc=key, **common)]}

    out = {f"fig4-{a}-{seed}": fig4(a) for a in cfg.fig4}
    out[f"siren-{seed}"] = siren("siren", cfg.siren_lr, None)
    out[f"sirenschedule-{seed}"] = siren("sirenschedule", cfg.lr, cfg.plateau)
    out[f"sirenslow-{seed}"] = siren("sirenslow", cfg.siren_slow_lr, None)
    out.update({f"fig6-{a}-{seed}": fig6(a) for a in cfg.fig6})
    if cfg.get("more_seeds"):
        out.update({f"fig4seeds-{a}-{seed}": fig4_seeds(a) for a in seeded_fig4(cfg)})
        out.update({f"fig6seeds-{a}-{e}-{seed}": fig6_seeds(a, e) for a in cfg.fig6 for e in FIG6_ENCODERS})
    out[f"fig5-{seed}"] = lambda: fig5_fit(cfg, seed, device)
    return out


FIG5_UPDATES = ENCODER_CONFIG["paper"]["fig5_step"]
"""Fig. 5's early frame under the author's protocol, in mini-batch Adam updates.

As many as the Adam updates of the text reading's early frame (``fig5_step`` of ``sbsnn_encoders`` at paper scale),
fixed before the run."""

FIG5_ACTIVATION = "sin"
"""The activation of Fig. 5's networks (``fig5_activation`` of ``sbsnn_encoders``)."""


def fig5_fit(cfg, seed: int, device) -> dict[str, Any]:
    """Fig. 5 under the author's protocol: Fig. 6's :data:`FIG5_ACTIVATION` networks with his axis-aligned and
    rotated encoders (same seed, so the same initial weights and pixel order), after :data:`FIG5_UPDATES` updates
    of the figure's Adam and rate on mini-batches of ``batch_size`` pixels; the predicted image of each, on the
    pixel grid.

    The first ``FIG5_UPDATES`` mini-batches of an epoch are that many batches of distinct pixels drawn at random,
    so the fit draws them (``torch.randperm`` of ``seed``) and trains one epoch on them alone: the rest are held
    out of ``fit_stack``, which then makes exactly ``FIG5_UPDATES`` updates (the plateau rule acts only after an
    epoch). Eager (``compile=False``): compiling would cost more than the twenty updates."""
    coords, pixels = data(cfg)
    count = pixels.shape[0]
    seen = torch.randperm(count, generator=torch.Generator().manual_seed(seed))[:FIG5_UPDATES * cfg.batch_size]
    held = torch.ones(count, dtype=torch.bool)
    held[seen] = False
    inputs = torch.stack([encoded(coords, cfg.width, False), encoded(coords, cfg.width, True)])
    net: dict[str, Any] = {}
    fits = fit_stack(layers(figure_spec(cfg, FIG5_ACTIVATION)), [seed, seed], inputs, pixels, epochs=1, lr=cfg.lr,
                     plateau=cfg.plateau, batch_size=cfg.batch_size, heldout=held.nonzero().flatten(), device=device,
                     compile=False, keep=net, desc=f"fig5-{seed}")
    with torch.no_grad():
        frames = torch.cat([net["model"](chunk.to(device)) for chunk in inputs.split(8192, dim=1)], dim=1)
    side = cfg.side
    return {"updates": fits[0].updates_per_epoch, "pixels_seen": int(seen.numel()), "activation": FIG5_ACTIVATION,
            "frames": {e: frames[k, :, 0].reshape(side, side).cpu().double().numpy().round(5).tolist()
                       for k, e in enumerate(FIG6_ENCODERS)}}


def fig5_summary(cfg, units_done: Mapping[str, Any]) -> dict[str, Any] | None:
    """The payload of Fig. 5's claim from the ``fig5-`` unit (None when not journalled), in the form of
    ``sbsnn_encoders``' (so that its rule judges it): per encoder the axis share (``axis_energy``) of the frame's
    spectrum and of its error, and the target's."""
    unit = next((value for key, value in units_done.items() if key.startswith("fig5-")), None)
    if unit is None:
        return None
    _, pixels = data(cfg)
    target = pixels.reshape(cfg.side, cfg.side).double().numpy()
    frames: dict[str, Any] = {e: {"axis_energy_frame": axis_energy(np.asarray(unit["frames"][e])),
                                  "axis_energy_error": axis_energy(np.asarray(unit["frames"][e]) - target)}
                              for e in FIG6_ENCODERS}
    frames["target"] = {"axis_energy_frame": axis_energy(target)}
    return {"side": cfg.side, "step": unit["updates"], "pixels_seen": unit["pixels_seen"],
            "activation": unit["activation"], "frames": frames}


FIG5_ARRAYS = "fig5__"
"""The prefix of Fig. 5's arrays among the chapter's saved arrays (:func:`fig5_arrays`)."""


def fig5_arrays(cfg, units_done: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Fig. 5's frames and the target on ``sbsnn_encoders``' [-1, 1] scale, for ``Store.save`` beside
    :func:`to_arrays` (keys :data:`FIG5_ARRAYS` + ``frame_nerf``, ``frame_rotated``, ``target``); empty when the
    ``fig5-`` unit is not journalled. :func:`fig5_frames` reads them back for ``plot_fig5``."""
    unit = next((value for key, value in units_done.items() if key.startswith("fig5-")), None)
    if unit is None:
        return {}
    _, pixels = data(cfg)
    out = {f"frame_{e}": 2 * np.asarray(unit["frames"][e], dtype=np.float32) - 1 for e in FIG6_ENCODERS}
    out["target"] = 2 * pixels.reshape(cfg.side, cfg.side).numpy().astype(np.float32) - 1
    return {FIG5_ARRAYS + key: value for key, value in out.items()}


def fig5_frames(arrays: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    """The arrays of ``sbsnn_encoders``' ``plot_fig5`` from :func:`fig5_arrays` among ``arrays`` (None without them)."""
    out = {key.removeprefix(FIG5_ARRAYS): value for key, value in (arrays or {}).items() if key.startswith(FIG5_ARRAYS)}
    return out or None


def fig5_reading(payload: Mapping[str, Any] | None) -> str:
    """Fig. 5 under the author's protocol in the words of its rule: the axis shares of the early frames' spectra
    against the image's, and what they show."""
    fig5 = (payload or {}).get("fig5")
    if fig5 is None:
        return "Fig. 5 under the author's protocol has not run yet."
    frames = fig5["frames"]
    nerf, rotated = frames["nerf"]["axis_energy_frame"], frames["rotated"]["axis_energy_frame"]
    target = frames["target"]["axis_energy_frame"]
    order = ("more" if nerf > rotated else "less") + " of its spectrum on the two axes than the rotated one's"
    excess = ("above" if nerf > target else "below") + " the image's own share"
    return (f"After {fig5['step']} mini-batch updates ({fig5['pixels_seen']:,} of the {fig5['side'] ** 2:,} pixels "
            f"seen), the axis-aligned encoder's frame has {nerf:.3f} of its spectral energy on the two frequency axes "
            f"and the rotated encoder's {rotated:.3f}: the axis-aligned frame puts {order}, and lies {excess} "
            f"({target:.3f}). Their errors have {frames['nerf']['axis_energy_error']:.3f} and "
            f"{frames['rotated']['axis_energy_error']:.3f} of theirs on the axes.")


def units_keys(cfg, seed: int) -> list[str]:
    """The journal keys of :func:`units`, in its order."""
    keys = [f"fig4-{a}-{seed}" for a in cfg.fig4] + [f"{kind}-{seed}" for kind in SIREN_ARMS] + \
        [f"fig6-{a}-{seed}" for a in cfg.fig6]
    if cfg.get("more_seeds"):
        keys += [f"fig4seeds-{a}-{seed}" for a in seeded_fig4(cfg)]
        keys += [f"fig6seeds-{a}-{e}-{seed}" for a in cfg.fig6 for e in FIG6_ENCODERS]
    return keys + [f"fig5-{seed}"]


def run(cfg, store, seed: int, device) -> dict[str, Any]:
    """Every unit of :func:`units`, journalled by ``store.memo``."""
    return {key: store.memo(key, compute) for key, compute in units(cfg, store, seed, device).items()}


def journalled(cfg, journal: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The units of :func:`units` that an unfinished run at ``cfg``'s scale has journalled."""
    return {key: journal[key] for key in units_keys(cfg, seed) if key in journal}


def fits_of(units_done: Mapping[str, Any]) -> dict[str, dict[str, EpochCurves]]:
    """The fits by figure (``"fig4"``, ``"fig6"``) and curve name (``"sin/siren_layer"``, ``"sin/rotated"``,
    ``"siren/minibatch"``, ``"siren/schedule"``, ``"siren/slow"``; SIREN is drawn in both figures)."""
    out: dict[str, dict[str, EpochCurves]] = {"fig4": {}, "fig6": {}}
    for key, unit in units_done.items():
        kind, rest = key.split("-", 1)
        if kind.endswith("seeds"):  # drawn by seed 0 alone; the claims read the other seeds (seed_rows)
            continue
        activation = rest.rsplit("-", 1)[0]
        if kind == "fig4":
            out["fig4"][f"{activation}/siren_layer"] = EpochCurves.from_json(unit)
        elif kind == "fig6":
            for encoder in ("nerf", "rotated"):
                out["fig6"][f"{activation}/{encoder}"] = EpochCurves.from_json(unit[encoder])
        elif kind in SIREN_ARMS:
            for figure in out.values():
                figure[SIREN_ARMS[kind][0]] = EpochCurves.from_json(unit)
    return out


def summary(cfg, units_done: Mapping[str, Any], siren_own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The payload of the claims: per figure and curve, :func:`gmp.experiments.sbsnn_author.payload.fit_row`; and,
    where given, SIREN under its own protocol on the same image (:func:`siren_reference`) as ``siren_own``, which
    must be a fit of ``cfg.side`` pixels a side (ValueError otherwise: passes to a PSNR over images of two sizes are
    no comparison)."""
    if siren_own and siren_own["side"] != cfg.side:
        raise ValueError(f"SIREN's same-image fit ({siren_own['source']}) has {siren_own['side']} pixels a side and "
                         f"these figures' fits {cfg.side}: the sbsnn_author and sbsnn_author_figs configs at this "
                         f"scale give the image two sizes; give them one side, or leave SIREN's fit out")
    fits = fits_of(units_done)
    return {"side": cfg.side, "compare_epoch": cfg.compare_epoch,
            "figures": {figure: {name: fit_row(fit, "less_aggressive", at_epoch=cfg.compare_epoch)
                                 for name, fit in curves.items()} for figure, curves in fits.items()},
            "seeds": seed_rows(cfg, units_done), "fig5": fig5_summary(cfg, units_done),
            **({"siren_own": dict(siren_own)} if siren_own else {})}


def siren_reference(scale: str) -> dict[str, Any] | None:
    """SIREN under its own protocol (full batch, one update per pass over the pixels) on the author's file, as the
    :mod:`gmp.experiments.sbsnn_author` cache at ``scale`` holds it (its held-out fit, on the kept pixels): the
    passes to each target of ``PSNR_TARGETS``, the kept pixels and the cache it was read from; None where that
    cache is not current or predates these numbers."""
    from gmp import results

    entry = results.cached("sbsnn_author", "author", scale)
    found = sbsnn_author.same_image_siren(entry.payload) if entry.current else None
    if found is None:
        return None
    provenance = entry.provenance or {}
    return {**found, "side": entry.payload["side"],
            "source": f"the sbsnn_author {scale}-scale cache (run of {provenance.get('date', '?')})"}


def _best(curve: np.ndarray) -> float | None:
    """The highest finite value of ``curve`` (None if it has none: diverged at once)."""
    finite = curve[np.isfinite(curve)]
    return float(finite.max()) if finite.size else None


def seed_rows(cfg, units_done: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per network fitted over ``more_seeds`` whose ``fig4seeds-``/``fig6seeds-`` unit is journalled, by curve
    name (``"sin/siren_layer"``, ``"sin/nerf"``, ``"sin/rotated"``): per seed (the run's seed first), its best
    epoch-mean and whole-image PSNR, Fig. 4's by ``compare_epoch`` (the paper's "around 500"), Fig. 6's in the run."""
    out: dict[str, list[dict[str, Any]]] = {}

    def rows(fits: Mapping[int, EpochCurves], epochs: int) -> list[dict[str, Any]]:
        return [{"seed": s, "best_epoch_psnr": _best(fit.psnr("epoch")[:epochs]),
                 "best_train_psnr": _best(fit.psnr("train")[:epochs])} for s, fit in fits.items()]

    for key, unit in units_done.items():
        kind, rest = key.split("-", 1)
        if kind == "fig4seeds":
            (activation, seed), variant, epochs = rest.rsplit("-", 1), "siren_layer", cfg.compare_epoch
            main = units_done.get(f"fig4-{activation}-{seed}")
        elif kind == "fig6seeds":
            (activation, variant, seed), epochs = rest.rsplit("-", 2), cfg.epochs
            main = units_done.get(f"fig6-{activation}-{seed}", {}).get(variant)
        else:
            continue
        if main is not None:
            fits = {int(seed): EpochCurves.from_json(main),
                    **{s: EpochCurves.from_json(f) for s, f in zip(unit["seeds"], unit["fits"])}}
            out[f"{activation}/{variant}"] = rows(fits, epochs)
    return out


def to_arrays(fits: Mapping[str, Mapping[str, EpochCurves]]) -> dict[str, np.ndarray]:
    """Whole-image and epoch-mean PSNR curves for ``Store.save``, keyed ``<figure>__<activation>__<variant>__<which>``."""
    return {f"{figure}__{name.replace('/', '__')}__{which}": fit.psnr(which).astype(np.float32)
            for figure, curves in fits.items() for name, fit in curves.items() for which in ("epoch", "train")}


def plot_figure(rows: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]], targets: bool = True):
    """Whole-image PSNR per epoch: one panel per title in ``rows``, whose value maps a curve name to its
    PSNR curves (``"train"``, the whole image, is drawn; ``"epoch"``, the epoch-mean loss the author
    plots, is not). Dotted: the axis-aligned encoder; SIREN's arms: solid, dashed (the figure's schedule)
    and dash-dotted (the 1e-5 rate)."""
    from gmp.experiments.sbsnn_author.figures import _targets, colour

    fig, axes = style.subplots(1, len(rows), figsize=(7.5 * len(rows), 5.4), squeeze=False, sharey=True)
    for ax, (title, curves) in zip(axes[0], rows.items()):
        for name, psnr in curves.items():
            epochs = np.arange(1, len(psnr["train"]) + 1)
            style_of = {"siren/schedule": "--", "siren/slow": "-."}.get(name, ":" if name.endswith("/nerf") else "-")
            ax.plot(epochs, psnr["train"], color=colour(name), lw=1.4, ls=style_of, label=label(name))
        if targets:
            _targets(ax)
        ax.set_xlabel("epochs (the paper's 'iterations')")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("whole-image PSNR (dB, [0, 1] scale)")
    fig.tight_layout()
    style.legend_below(fig)
    return fig


def curves_for_plot(fits: Mapping[str, EpochCurves]) -> dict[str, dict[str, np.ndarray]]:
    """The PSNR curves of :func:`plot_figure` from fits."""
    return {name: {which: fit.psnr(which) for which in ("epoch", "train")} for name, fit in fits.items()}


def curves_from_arrays(arrays: Mapping[str, np.ndarray], figure: str) -> dict[str, dict[str, np.ndarray]]:
    """The PSNR curves of :func:`plot_figure` for ``figure`` from :func:`to_arrays`."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, values in arrays.items():
        if key.startswith(FIG5_ARRAYS):
            continue
        fig, net, variant, which = key.split("__")
        if fig == figure:
            out.setdefault(f"{net}/{variant}", {})[which] = values
    return out


def reach_table(payload: Mapping[str, Any] | None, siren_full: Mapping[str, Any] | None = None):
    """:func:`gmp.experiments.sbsnn_author.figures.reach_table` for the networks of Figs. 4 and 6 and SIREN's
    mini-batch arms, with ``siren_full``, SIREN's full-batch row of the ``sbsnn_author`` payload, as the reference."""
    rows = {name: row for curves in (payload or {}).get("figures", {}).values() for name, row in curves.items()}
    if rows and siren_full is not None:
        rows["siren/fullbatch"] = siren_full
    return sbsnn_author.reach_table({"rows": rows})


def updates_reading(payload: Mapping[str, Any] | None, siren_full: Mapping[str, Any] | None) -> str:
    """The Adam updates the fastest Fig. 4 network and SIREN's full batch (``sbsnn_author``'s row) take to
    50 dB (whole image, [0, 1] scale), as a sentence; empty when either has not got there."""
    rows = (payload or {}).get("figures", {}).get("fig4", {})
    reached = {name: row["reach"]["author-train"]["updates"] for name, row in rows.items()
               if name.endswith("/siren_layer") and row["reach"]["author-train"]["updates"] is not None}
    siren = (siren_full or {}).get("first_below_author_target")
    if not reached or siren is None:
        return ""
    fastest = min(reached, key=reached.get)
    return (f"Counted in Adam updates, the fastest network of Fig. 4 to 50 dB (whole image), {label(fastest)}, "
            f"took {reached[fastest]:,}; SIREN under its own full-batch protocol took {siren:,} (a ratio of "
            f"{reached[fastest] / max(siren, 1):,.0f}), though each of its updates sees every pixel and each "
            f"mini-batch update 32.")


def reading(payload: Mapping[str, Any]) -> str:
    """Where the SBSNN networks of Figs. 4 and 6 stand against the targets, as prose."""
    parts = []
    for figure, variant in (("fig4", "siren_layer"), ("fig6", "rotated")):
        rows = payload["figures"][figure]
        for name in [f"{a}/{variant}" for a in SBSNN_FAMILY if f"{a}/{variant}" in rows]:
            row = rows[name]
            reach = row["reach"]["author-epoch"]["epochs"]
            parts.append(f"{label(name)}: " + (f"50 dB (epoch-mean) at epoch {reach}" if reach else
                                               f"best {row['best_epoch_psnr']:.1f} dB (epoch-mean)")
                         + f", best {row['best_train_psnr']:.1f} dB whole image in {row['epochs']} epochs")
        for name, _ in SIREN_ARMS.values():
            if name in rows and figure == "fig4":
                parts.append(f"{label(name)}: best {rows[name]['best_train_psnr']:.1f} dB whole image")
    return ("; ".join(parts) + ".") if parts else "no fit has finished yet."


def _faster_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    rows, epoch = payload["figures"]["fig4"], payload["compare_epoch"]
    arms = {text: rows.get(name) for name, text in SIREN_ARMS.values()}
    reached = [row["psnr_train_at"] for row in arms.values() if row and row["psnr_train_at"] is not None]
    siren = max(reached, default=-math.inf)  # a diverged or missing arm sets no bar
    names = [f"{a}/siren_layer" for a in SBSNN_FAMILY if f"{a}/siren_layer" in rows]
    at = {n: rows[n]["psnr_train_at"] for n in names}
    better = [n for n in names if at[n] is not None and at[n] > siren]

    def db(value: float | None, unit: str = "") -> str:
        return "diverged" if value is None else f"{value:.1f}{unit}"

    measured = (f"whole-image PSNR at epoch {epoch}: SIREN "
                + ", ".join(("not run" if row is None else db(row["psnr_train_at"], " dB")) + f" {text}"
                            for text, row in arms.items())
                + "; " + ", ".join(f"{n.split('/')[0]} {db(at[n])}" for n in names))
    verdict = REPRODUCED if names and len(better) == len(names) else PARTLY if better else NOT_REPRODUCED
    trained = [row for row in arms.values() if row and (row["best_train_psnr"] or -math.inf) >= TRAINED_DB]
    if verdict == REPRODUCED and not trained:
        measured += (f"; no SIREN arm trained (best whole-image PSNR below {TRAINED_DB:g} dB), so this is a "
                     f"comparison with an untrained SIREN")
        verdict = PARTLY
    return measured, verdict


def _rotated_wins(payload: Mapping[str, Any]) -> tuple[list[tuple[str, float, float]], int, float, str]:
    """Fig. 6's one-seed comparison, the activations as the pairs: ``(pairs, wins, p, measured)``, the pairs
    ``(activation, axis-aligned, rotated)`` of best whole-image PSNR, how many the rotated encoder wins, the
    one-sided sign test's p of that count (:func:`gmp.results.sign_test`) and the words of it; today's one-seed
    rule and the rule before f30e927 read it alike."""
    rows = payload["figures"]["fig6"]
    pairs = [(a, rows[f"{a}/nerf"]["best_train_psnr"], rows[f"{a}/rotated"]["best_train_psnr"])
             for a in FIG7_ACTIVATIONS if f"{a}/nerf" in rows and f"{a}/rotated" in rows]
    wins = sum(rotated > nerf for _, nerf, rotated in pairs)
    p = sign_test(wins, len(pairs)) if pairs else 1.0
    return pairs, wins, p, (f"rotated better for {wins} of {len(pairs)} activations (best whole-image PSNR; sign "
                            f"test p = {p:.2g})")


def _rotated_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    pairs, wins, p, measured = _rotated_wins(payload)
    if pairs and wins == len(pairs) and p < SIGN_LEVEL:
        return measured, REPRODUCED
    losses = sum(rotated < nerf for _, nerf, rotated in pairs)
    return measured, NOT_REPRODUCED if pairs and sign_test(losses, len(pairs)) < SIGN_LEVEL else INCONCLUSIVE


FIG6_SEEDS = [f"{a}/{encoder}" for a in FIG7_ACTIVATIONS for encoder in FIG6_ENCODERS]
"""The seed rows (:func:`seed_rows`) of Fig. 6's networks."""


def _rotated_seeds_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    """``sbsnn-fig6-rotated-author`` decided over seeds (see its rule); :func:`_rotated_check`, marked
    :data:`ONE_SEED`, while a network of Fig. 6 has fewer than :data:`SEEDS_TO_DECIDE` seeds."""
    seeds = payload.get("seeds", {})
    names = [a for a in FIG7_ACTIVATIONS if f"{a}/rotated" in payload["figures"]["fig6"]]
    if not names or any(len(seeds.get(f"{a}/{e}", [])) < SEEDS_TO_DECIDE for a in names for e in FIG6_ENCODERS):
        return one_seed(_rotated_check(payload))
    status, parts = {}, []
    for a in names:
        nerf = {r["seed"]: r["best_train_psnr"] for r in seeds[f"{a}/nerf"]}
        diffs = [r["best_train_psnr"] - nerf[r["seed"]] for r in seeds[f"{a}/rotated"]]
        mean, low, high = paired_interval(diffs)
        status[a] = "better" if low > 0 else "worse" if high < 0 else "undecided"
        parts.append(f"{a} {mean:+.1f} dB ({low:+.1f} to {high:+.1f})")
    better, worse = (sum(v == which for v in status.values()) for which in ("better", "worse"))
    measured = (f"{len(diffs)} seeds per network, rotated minus axis-aligned best whole-image PSNR, mean (95% "
                f"interval): " + ", ".join(parts) + f"; rotated better for {better} of {len(names)} activations, "
                f"worse for {worse}")
    verdict = REPRODUCED if better == len(names) else PARTLY if better else NOT_REPRODUCED if worse else INCONCLUSIVE
    return measured, verdict


def _earlier_rotated_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``sbsnn-fig6-rotated-author`` in force when its paper-scale run was made (replaced by
    issue #27: a count beyond noise in neither direction is inconclusive, not 'partly'), as it was."""
    pairs, wins, p, measured = _rotated_wins(payload)
    verdict = REPRODUCED if pairs and wins == len(pairs) and p < SIGN_LEVEL else PARTLY if wins > len(pairs) / 2 \
        else NOT_REPRODUCED
    return measured, verdict


def _earlier_reach_check(payload: Mapping[str, Any], which: str, target: str) -> tuple[str, str]:
    """The rule of the ``sbsnn-fit-500`` claims in force when their paper-scale run was made (replaced by issue
    #28: judged at the run's last epoch, 550, not at the paper's 'around 500', and not marked as one seed's)."""
    return family_reach(payload["figures"]["fig4"], "siren_layer", which, target, "epochs", 550)


_EARLIER_FIG4 = dict(commits="63da6da", replaced="2026-11-26 16:38 UTC",
                     why="The paper says 'around 500 iterations': a network that gets there only after epoch 500 of a "
                         "550-epoch run does not meet it; and one seed cannot decide a margin within the spread of "
                         "single runs.")


def _fig4_unfinished(units: Mapping[str, Any], seed: int = 0, with_seeds: bool = False) -> dict[str, Any] | None:
    """The payload an unfinished paper-scale run's journal (``units``: key to value) gives the claims of
    Fig. 4 once its networks and SIREN's three arms are journalled (they need no Fig. 6 unit), ``with_seeds``
    the ``fig4seeds-`` units of a config with ``more_seeds`` too; else None."""
    from gmp.config import load

    cfg = load("sbsnn_author_figs", "paper")
    needed = [f"fig4-{a}-{seed}" for a in cfg.fig4] + [f"{kind}-{seed}" for kind in SIREN_ARMS]
    if with_seeds and cfg.get("more_seeds"):
        needed += [f"fig4seeds-{a}-{seed}" for a in seeded_fig4(cfg)]
    if not all(key in units for key in needed):
        return None
    return summary(cfg, {key: units[key] for key in needed})


_FIG4_UNFINISHED = (" An unfinished paper-scale run is judged once the Fig. 4 networks and SIREN's three arms "
                    "are journalled: the claim needs no Fig. 6 unit, so its verdict is final then.")

FIG4_SEEDS = [f"{a}/siren_layer" for a in SBSNN_FAMILY]
"""The seed rows (:func:`seed_rows`) of Fig. 4's SBSNN-family networks."""

_SEEDS_QUEUED = (" An unfinished paper-scale run is judged once the Fig. 4 networks (with their more_seeds when the "
                 "config has them) and SIREN's three arms are journalled. The seed rule was written on 2026-11-26, "
                 "before any seed but 0 ran; the seeds are queued in the prepared GPU command (QUEUED).")


def _fig4_check(payload: Mapping[str, Any], which: str, target: str) -> tuple[str, str]:
    """A Fig. 4 reach claim (``which`` PSNR to ``target`` of :data:`PSNR_TARGETS` by epoch 500) decided over
    seeds, with the one-seed rule while a network has fewer than :data:`SEEDS_TO_DECIDE`."""
    epochs = PAPER["fig4_epochs"]
    measured, verdict = over_seeds(
        payload, FIG4_SEEDS, f"best_{which}_psnr", PSNR_TARGETS[target],
        lambda q: family_reach(q["figures"]["fig4"], "siren_layer", which, target, "epochs", epochs))
    return (measured if measured.startswith(ONE_SEED) else f"{measured}; each seed's best by epoch {epochs}"), verdict

def _faster_than_siren_as_run(payload: Mapping[str, Any]) -> tuple[str, str]:
    """``sbsnn-fit-faster-author`` against SIREN as SIREN is run: passes over the pixels to the author's 50 dB bar
    (whole image), each SBSNN-family network against SIREN's full-batch steps on the same image."""
    rows, siren = payload["figures"]["fig4"], payload.get("siren_own")
    if siren is None or siren["passes"]["author"] is None:
        return ("SIREN's full-batch fit of the same image is not at hand (the sbsnn_author cache is absent, stale or "
                "predates it)"), INCONCLUSIVE
    reference = siren["passes"]["author"]
    names = [f"{a}/siren_layer" for a in SBSNN_FAMILY if f"{a}/siren_layer" in rows]
    reach = {n: rows[n]["reach"]["author-train"] for n in names}
    faster = [n for n in names if reach[n]["epochs"] is not None and reach[n]["epochs"] < reference]

    def item(n: str) -> str:
        r = reach[n]
        if r["epochs"] is None:
            return f"{n.split('/')[0]} never within its {rows[n]['epochs']} epochs"
        return (f"{n.split('/')[0]} after {r['epochs']} passes (1/{reference / r['epochs']:.1f} of SIREN's) and "
                f"{r['updates']:,} Adam updates ({r['updates'] / reference:.0f} times SIREN's)")

    measured = (f"passes to {PSNR_TARGETS['author']:g} dB (whole image): SIREN under its own protocol (full batch, "
                f"its kept {siren['kept_pixels']:,} of {siren['side'] ** 2:,} pixels) {reference:,}, one update each; "
                + "; ".join(item(n) for n in names))
    verdict = REPRODUCED if names and len(faster) == len(names) else PARTLY if faster else NOT_REPRODUCED
    return measured, verdict


def _earlier_faster_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``sbsnn-fit-faster-author`` before b2ac113, aee23da and dbe70d7 added the 30 dB bar and the 1e-5
    arm (SIREN under the better of its first two arms), as it was, kept so that the ledger shows its verdict."""
    rows, epoch = payload["figures"]["fig4"], payload["compare_epoch"]
    own, schedule = rows["siren/minibatch"]["psnr_train_at"], rows["siren/schedule"]["psnr_train_at"]
    siren = max(own, schedule)
    names = [f"{a}/siren_layer" for a in SBSNN_FAMILY if f"{a}/siren_layer" in rows]
    better = [n for n in names if rows[n]["psnr_train_at"] is not None and rows[n]["psnr_train_at"] > siren]
    measured = (f"whole-image PSNR at epoch {epoch}: SIREN {own:.1f} dB at its own constant rate, {schedule:.1f} dB "
                f"under the figure's schedule; " + ", ".join(f"{n.split('/')[0]} {rows[n]['psnr_train_at']:.1f}"
                                                             for n in names))
    return measured, REPRODUCED if names and len(better) == len(names) else PARTLY if better else NOT_REPRODUCED


FIG5_RULE = next(claim.rule for claim in ENCODER_CLAIMS if claim.key == "sbsnn-fig5-lines")
"""The rule of Fig. 5 under the text's reading (``sbsnn_encoders``), which Fig. 5 under the author's protocol keeps."""


def _fig5_author_check(payload: Mapping[str, Any]) -> tuple[str, str]:
    """``sbsnn_encoders``' Fig. 5 rule on the author's-protocol frames (:func:`fig5_summary`), its "step" one
    mini-batch update; :class:`gmp.results.NotYetRun` while the payload has none."""

    fig5 = payload.get("fig5")
    if fig5 is None:
        raise NotYetRun(f"not yet run: this run holds no unit fig5 (the frames after {FIG5_UPDATES} mini-batch "
                        f"updates)")
    measured, verdict = _fig5_check(fig5)
    return (f"after {fig5['step']} mini-batch updates of {fig5['pixels_seen'] // fig5['step']} pixels "
            f"({fig5['pixels_seen']:,} of the {fig5['side'] ** 2:,} pixels seen), " + measured), verdict


def _fig5_author_caveat(payload: Mapping[str, Any]) -> str:
    """What the Fig. 5 verdict under the author's protocol rests on where neither encoder's early frame holds more of
    its spectral energy on the axes than the target image itself: "" otherwise, or while the payload has no frames."""
    fig5 = payload.get("fig5")
    if fig5 is None:
        return ""
    shares = {name: fig5["frames"][name]["axis_energy_frame"] for name in ("nerf", "rotated", "target")}
    if max(shares["nerf"], shares["rotated"]) > shares["target"]:
        return ""
    return (f"neither encoder's early frame holds more of its energy on the axes than the target image itself "
            f"(axis-aligned {shares['nerf']:.3f} and rotated {shares['rotated']:.3f}, against {shares['target']:.3f}): "
            f"no line artefacts beyond the image's own; the verdict rests only on the axis-aligned frame's share "
            f"exceeding the rotated one's")


def _fig4_reach_claim(key: str, which: str, target: str, reading: str, db: str, text: str) -> Claim:
    """A claim that Fig. 4's SBSNN-family networks reach ``target`` of :data:`PSNR_TARGETS` (``db`` dB, the
    ``reading`` of the ``which`` PSNR) by epoch 500 (:func:`_fig4_check`), decided over seeds; the rule at the run's
    last epoch it replaced kept as its :class:`~gmp.results.EarlierRule`."""
    return Claim(key=key, paper="sbsnn", source="paper", provisional=seeds_provisional(FIG4_SEEDS), test=SEED_T,
                 text=text, result="figs",
                 rule=seed_rule(f"a network's best {reading} PSNR by epoch 500 (the paper's 'around 500 iterations') "
                                f"minus {db} dB", True)
                 + f"reproduced if each of the three SBSNN-family networks reaches {db} dB {reading} PSNR by epoch 500 "
                   f"(the paper's 'around 500 iterations'; the run has 550); partly if at least one does; else not "
                   f"reproduced. " + THIN_MARGIN + _SEEDS_QUEUED,
                 check=functools.partial(_fig4_check, which=which, target=target),
                 unfinished=functools.partial(_fig4_unfinished, with_seeds=True),
                 earlier=EarlierRule(rule=f"reproduced if each of the three SBSNN-family networks reaches {db} dB "
                                          f"{reading} PSNR within the run's 550 epochs; partly if at least one does; "
                                          f"else not reproduced",
                                     check=functools.partial(_earlier_reach_check, which=which, target=target),
                                     **_EARLIER_FIG4, at_run="610a43c", gave=PARTLY))


CLAIMS = [
    _fig4_reach_claim("sbsnn-fit-500-author", "epoch", "author", "epoch-mean", "50",
                      "Fig. 4 as the author ran it: SBSNNs with an initial SIREN layer pass MSE 1e-5 on [0, 1] values "
                      "(50 dB) in around 500 iterations (epochs of mini-batches of 32), by the PSNR he plots."),
    _fig4_reach_claim("sbsnn-fit-500-siren-scale", "train", "siren", "whole-image", "56.0",
                      "Fig. 4 against SIREN's own bar: the same networks pass SIREN's MSE 1e-5 on [-1, 1] values "
                      "(56.0 dB) within the run's epochs, by a whole-image evaluation."),
    Claim(key="sbsnn-fit-faster-author", paper="sbsnn", source="paper",
          text="Fig. 4 as the author ran it: these SBSNNs fit the image faster than SIREN, SIREN run as SIREN is (its "
               "own protocol, the paper's reference: full batch, Adam 1e-4), in passes over the pixels, the figure's "
               "iterations.",
          short="Fig. 4: these SBSNNs fit the image in fewer passes than SIREN under its own protocol",
          result="figs",
          rule="Per SBSNN-family network, the passes over the pixels (epochs) to the author's bar, 50 dB whole-image "
               "PSNR on the [0, 1] scale, against SIREN's full-batch steps (one pass each) to it under its own "
               "protocol on the same image (the author's file; the book's only such fit is the held-out one of "
               "sbsnn_author, on the kept three quarters of the pixels). Reproduced if each network needs fewer passes "
               "than SIREN; partly if at least one does; else not reproduced. A network that never reaches the bar "
               "within its run is not shown faster. One seed. Written on 2026-11-27, after the run, when the headline's "
               "reference moved from SIREN in mini-batches to SIREN as SIREN is run (issue #37); the mini-batch "
               "reference is the check sbsnn-fit-faster-author-minibatch.",
          check=_faster_than_siren_as_run, caveat=lambda p: "" if "siren_own" not in p else (
              "SIREN's reference was fitted to the kept three quarters of the pixels, the SBSNNs to the whole image"),
          earlier_design=EarlierDesign(
              design="SIREN run in mini-batches of 32 under the author's protocol (three arms: its own constant rate "
                     "1e-4, the figure's schedule, the constant rate 1e-5), compared by whole-image PSNR at epoch 500",
              commits="b1b3ef2", changed="2026-11-27 17:59 UTC", run="dcc7385",
              gave=REPRODUCED, check_run=_faster_check, kept_as="sbsnn-fit-faster-author-minibatch",
              chapter="sbsnn_author_figs",
              why="SIREN in mini-batches is not SIREN as its paper runs it: its best arm reaches 34 dB, while under its "
                  "own protocol it reaches 56 dB; the paper's Fig. 4 reference is SIREN's own. The change was made after "
                  "the mini-batch comparison had been seen, and it lowers the verdict.")),
    Claim(key="sbsnn-fit-faster-author-minibatch", paper="sbsnn", source="check",
          text="Fig. 4 as the author ran it: these SBSNNs fit the image faster than SIREN run under the same "
               "mini-batch protocol (at its own constant rate, 1e-4, under the figure's schedule, and at the lower "
               "constant rate 1e-5).",
          short="Fig. 4: these SBSNNs fit faster than SIREN run in the author's mini-batches",
          result="figs", rule="reproduced if each of the three SBSNN-family networks has a higher whole-image PSNR "
                              "at epoch 500 (or the last epoch of a shorter run) than SIREN has under the best of "
                              "its three arms (a diverged arm sets no bar); partly if at least one has, or if all "
                              "have but no SIREN arm trained (best whole-image PSNR below 30 dB, a blur); else not "
                              "reproduced. One seed. The 1e-5 arm and the 30 dB bar were added after the first "
                              "paper-scale run showed SIREN at 18 to 19 dB under the other two arms." + _FIG4_UNFINISHED,
          check=_faster_check, unfinished=_fig4_unfinished,
          earlier=EarlierRule(
              rule="reproduced if each of the three SBSNN-family networks has a higher whole-image PSNR at epoch 500 "
                   "(or the last epoch of a shorter run) than SIREN has under the better of its two arms; partly if "
                   "at least one has; else not reproduced. One seed",
              check=_earlier_faster_check, commits="b2ac113, aee23da and dbe70d7", replaced="2026-11-25 20:44 UTC",
              why="Added after the paper-scale journal showed SIREN peaking at 18 to 19 dB under its first two arms: "
                  "beating a SIREN that does not train says nothing about speed.")),
    Claim(key="sbsnn-fig6-rotated-author", paper="sbsnn", source="paper",
          text="Fig. 6 as the author ran it: the rotated encoder (his matrices) gives a better fit than the "
               "axis-aligned one.",
          result="figs", provisional=seeds_provisional(FIG6_SEEDS),
          rule=f"Over at least {SEEDS_TO_DECIDE} seeds per activation and encoder (seed 0's run and the chapter's "
               "more_seeds, the same seeds for both encoders): per activation, the paired differences rotated minus "
               "axis-aligned in best whole-image PSNR, their mean with its 95% Student-t interval "
               "(gmp.results.paired_interval); the rotated encoder is better for that activation if the interval "
               "lies above 0, worse if below, else undecided. Reproduced if better for every activation; partly if "
               "better for at least one; not reproduced if better for none and worse for at least one; else "
               f"inconclusive. {SEED_POWER}. With fewer seeds, the one-seed rule: one fit (seed) per activation and "
               "encoder, so the activations are the paired comparisons: reproduced if the rotated encoder has the "
               "higher best whole-image PSNR for every activation and that count is beyond noise by a one-sided "
               "sign test over the activations (p < 0.05); not reproduced if the axis-aligned encoder's count is "
               "beyond noise by the same test; else inconclusive (the count cannot tell the encoders apart). The "
               "seed rule was written on 2026-11-26, before any seed but 0 ran; the seeds are queued in the "
               "prepared GPU command (QUEUED).",
          check=_rotated_seeds_check, test=PowerTest("sign", len(FIG7_ACTIVATIONS), alternative="greater"),
          earlier=EarlierRule(
              rule="one fit (seed) per activation and encoder, so the activations are the paired comparisons: "
                   "reproduced if the rotated encoder has the higher best whole-image PSNR for every activation "
                   "and that count is beyond noise by a one-sided sign test over the activations (p < 0.05); "
                   "partly if for more than half; else not reproduced",
              check=_earlier_rotated_check, commits="f30e927", replaced="2026-11-26 13:51 UTC",
              why="A count beyond noise in neither direction (a sign test's p of 0.5 for 4 of 7) cannot tell the "
                  "encoders apart: it is inconclusive, not a weak reproduction.", at_run="610a43c", gave=PARTLY)),
    Claim(key="sbsnn-fig5-lines-author", paper="sbsnn", source="paper",
          text="Fig. 5 under the author's protocol: early in fitting, the sqrt(2)-scaled axis-aligned (NeRF-type) "
               "encoder produces line artefacts along constant coordinates, which the rotated encoder removes (his "
               "encoders, his file, [0, 1] targets, Adam 2e-4 on mini-batches of 32, Fig. 6's sin networks, seed 0).",
          short="Fig. 5 under the author's protocol: the axis-aligned encoder's early frame has line artefacts, the "
                "rotated one's not",
          result="figs",
          rule=f"The early frame is the predicted image after {FIG5_UPDATES} mini-batch Adam updates (the Adam updates "
               f"of the text reading's early frame; fixed before the run, as the paper says only 'early'). The rule of "
               f"sbsnn-fig5-lines, with its measure (gmp.experiments.sbsnn_encoders.axis_energy): " + FIG5_RULE
               + ". Fixed before the run: committed before the paper-scale unit fig5-0 was computed.",
          check=_fig5_author_check, caveat=_fig5_author_caveat),
]
