"""Experiment of the chapter book/part3/sbsnn_gap.md: why our image fits (Figs. 4-7 of the
SBSNN paper) fall short of the paper's, tested on the choices that the paper leaves open.

Two of them are measured without training: how much of the image an output limited to the
encoder's frequencies can hold (:func:`band_limited_psnr`), and the magnitude of the first
hidden layer's pre-activations at initialization (:func:`first_layer_statistics`). Then
the ``sqrt(2) sin(x + pi/4)`` network is fitted with and without each change, every fit in
the same run: the rotated encoder with SIREN's number of frequencies or with as many as
the image's Nyquist frequency needs, each with the paper's orthogonal first layer or with
one whose pre-activations have mean square 1 (Fig. 7's schedule); and the SIREN first layer
of Fig. 4 as it is, with a ``sqrt(2)`` on its output, and with a larger frequency scale
``omega_0`` (Fig. 4's schedule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gmp.config import scaled
from gmp.data.images import TEXT_READING_IMAGE, cameraman, image_fitting_data
from gmp.encoders import PositionalEncoding
from gmp.implicit import (FitResult, build_model, default_levels, fit_spec, mse_to_psnr, plot_psnr_panels, psnr,
                          psnr_steps_table)
from gmp.models.implicit import SIREN_OMEGA_0, SineLayer
from gmp.results import missing_cell
from gmp import style

CONFIG = scaled(
    common=dict(activation="sin", hidden_features=192, hidden_layers=5, encoder="rotated",
                schedules={"encoder": {"lr": 2e-3, "plateau": {"factor": 0.5, "patience": 10}},
                           "siren": {"lr": 2e-4, "plateau": {"factor": 0.5, "patience": 40}}},
                wide_omega_0=90.0, mse_target=1e-5, compile=False),
    smoke=dict(side=32, steps=6),
    small=dict(side=32, steps=25),
    paper=dict(side=256, steps=500, compile=True),
)

LABELS = {"default": "rotated encoder, SIREN's L", "default+gain": "rotated encoder, SIREN's L, unit first layer",
          "full": "rotated encoder, Nyquist L", "full+gain": "rotated encoder, Nyquist L, unit first layer",
          "siren": "SIREN first layer", "siren+scale": "SIREN first layer ×√2",
          "siren+omega": "SIREN first layer, larger ω0"}
"""Short names of the fits, in the order of the chapter's table.

``default`` is the rotated encoder with SIREN's ``L`` (as in Fig. 7) and ``full`` the one with
``L = log2(N)``; ``+gain`` gives the first layer pre-activations of mean square 1. ``siren`` is
the SIREN first layer of Fig. 4 (SIREN's ``omega_0 = 30``), ``+scale`` puts ``sqrt(2)`` on its
output and ``+omega`` gives it the config's ``wide_omega_0``.
"""


def full_levels(side: int) -> int:
    """The number ``L`` of NeRF frequencies whose highest, ``2^(L-1)`` cycles per image, is the Nyquist ``side / 2``."""
    if side < 2 or side & (side - 1):
        raise ValueError(f"need a power-of-two image side, got {side!r}")
    return int(math.log2(side))


def specs(cfg) -> dict[str, dict[str, Any]]:
    """The networks of :data:`LABELS` as :func:`gmp.implicit.fit_spec` specs."""
    base = {"model": "sbsnn", "activation": cfg.activation, "hidden_features": cfg.hidden_features,
            "hidden_layers": cfg.hidden_layers, "steps": cfg.steps, "compile": cfg.compile}
    out = {}
    for name, levels in (("default", default_levels(cfg.side)), ("full", full_levels(cfg.side))):
        width_in = PositionalEncoding(levels, rotated=cfg.encoder == "rotated").out_features(2)
        schedule = cfg.schedules["encoder"]
        spec = {**base, "encoder": cfg.encoder, "levels": levels, "first_layer": "orthogonal",
                "lr": schedule["lr"], "plateau": schedule["plateau"]}
        out[name] = spec
        out[f"{name}+gain"] = {**spec, "first_gain": math.sqrt(cfg.hidden_features / width_in)}
    schedule = cfg.schedules["siren"]
    out["siren"] = {**base, "first_layer": "siren", "lr": schedule["lr"], "plateau": schedule["plateau"]}
    out["siren+scale"] = {**out["siren"], "siren_scale": math.sqrt(2.0)}
    out["siren+omega"] = {**out["siren"], "omega_0": cfg.wide_omega_0}
    return out


def unit_key(name: str, seed: int) -> str:
    """The journal key of the fit of variant ``name``."""
    return f"{name}-{seed}"


def units(cfg, store, seed: int, device) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every fit of the chapter, by :func:`unit_key` (see :func:`gmp.experiments.sbsnn_fitting.units`)."""
    coords, pixels = image_fitting_data(cfg.side, source=TEXT_READING_IMAGE)

    def fit(name: str, spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: fit_spec(spec, coords, pixels, seed=seed, device=device, desc=name,
                                checkpoint=store.scratch(unit_key(name, seed))).to_json()

    return {unit_key(name, seed): fit(name, spec) for name, spec in specs(cfg).items()}


def run(cfg, store, seed: int, device) -> dict[str, FitResult]:
    """Fit every variant, journalled by ``store.memo``."""
    todo = units(cfg, store, seed, device)
    return {name: FitResult.from_json(store.memo(unit_key(name, seed), todo[unit_key(name, seed)]))
            for name in specs(cfg)}


def band_limited_psnr(image: Tensor | np.ndarray, cycles: int) -> float:
    """PSNR (SIREN's, :func:`gmp.psnr`) of ``image`` (values in ``[-1, 1]``) against its ideal low-pass.

    The low-pass keeps the 2-D DFT coefficients with at most ``cycles`` cycles per image
    along both axes and zeroes the rest: the best least-squares fit by a function with no
    higher frequency. A NeRF-type encoder of ``L`` levels on the ``[-1, 1]`` grid holds
    ``2^0, ..., 2^(L-1)`` cycles per image along each encoded direction, so a network whose
    output kept the encoder's frequencies could reach no higher PSNR than this with
    ``cycles = 2^(L-1)``; its nonlinearities must create the higher ones.
    """
    x = torch.as_tensor(image, dtype=torch.float64)
    if x.ndim != 2 or cycles < 0:
        raise ValueError(f"need a 2-D image and cycles >= 0, got shape {tuple(x.shape)} and cycles {cycles!r}")
    k0 = torch.fft.fftfreq(x.shape[0], d=1.0 / x.shape[0]).abs()
    k1 = torch.fft.fftfreq(x.shape[1], d=1.0 / x.shape[1]).abs()
    keep = (k0[:, None] <= cycles) & (k1[None, :] <= cycles)
    low = torch.fft.ifft2(torch.fft.fft2(x) * keep).real
    return psnr(low, x)


def band_limit_curve(side: int) -> dict[str, list[float]]:
    """:func:`band_limited_psnr` of the cameraman at every power of two of cycles up to Nyquist."""
    image = cameraman(side, source=TEXT_READING_IMAGE)
    cycles = [2 ** k for k in range(int(math.log2(side)))]
    return {"cycles": cycles, "psnr": [band_limited_psnr(image, c) for c in cycles]}


def _first_activation(model: nn.Module, coords: Tensor) -> tuple[Tensor, Tensor]:
    """The input and output of the first hidden activation of an :class:`gmp.models.ImplicitMLP` at ``coords``."""
    h = model.encoder(coords)
    for layer in model.net:
        out = layer(h)
        if not isinstance(layer, (nn.Linear, SineLayer)):
            return h, out
        h = out
    raise ValueError("the model has no hidden activation")


@torch.no_grad()
def first_layer_statistics(spec: Mapping[str, Any], side: int, seed: int) -> dict[str, float]:
    """At initialization: the mean square of the first hidden activation's input ``z`` (1 is what a
    self-normalizing layer expects), and the share of its output's mean square ``E[f(z)^2]`` that
    varies with the pixel (the rest, ``E_units[E_x[f(z)]^2]``, is the same for every pixel)."""
    coords, _ = image_fitting_data(side, source=TEXT_READING_IMAGE)
    torch.manual_seed(seed)
    z, f = _first_activation(build_model(spec, side), coords)
    total = float((f ** 2).mean())
    constant = float((f.mean(dim=0) ** 2).mean())
    return {"z_mean_square": float((z ** 2).mean()), "varying_share": 1.0 - constant / total}


def summary(cfg, fits: Mapping[str, FitResult], seed: int) -> dict[str, Any]:
    """The chapter's payload: per variant its settings, initial statistics and fit; the low-pass curve."""
    curve = band_limit_curve(cfg.side)
    bounds = dict(zip(curve["cycles"], curve["psnr"]))
    out = {}
    for name, spec in specs(cfg).items():
        fit = fits[name]
        levels = spec.get("levels")
        out[name] = {"levels": levels, "first_gain": spec.get("first_gain", 1.0),
                     "siren_scale": spec.get("siren_scale", 1.0), "omega_0": spec.get("omega_0", SIREN_OMEGA_0),
                     "cycles": 2 ** (levels - 1) if levels else None,
                     "band_limit_psnr": bounds[2 ** (levels - 1)] if levels else None,
                     **first_layer_statistics(spec, cfg.side, seed),
                     "final_psnr": float(fit.psnr[-1]), "best_psnr": float(np.nanmax(fit.psnr)),
                     "first_below_target": fit.first_step_below(cfg.mse_target),
                     "steps_to_psnr": fit.steps_to_psnr(), "steps": len(fit.mse), "diverged_at": fit.diverged_at,
                     "seconds": fit.seconds}
    return {"side": cfg.side, "steps": cfg.steps, "rows": out, "band_limit": curve}


def curves(fits: Mapping[str, FitResult]) -> dict[str, np.ndarray]:
    """PSNR curves (float32) keyed ``psnr_<variant>``."""
    return {f"psnr_{name}": fit.psnr.astype(np.float32) for name, fit in fits.items()}


_STYLES = {"default": ("#1f77b4", "-"), "default+gain": ("#1f77b4", "--"), "full": ("#d62728", "-"),
           "full+gain": ("#d62728", "--"), "siren": ("black", "-"), "siren+scale": ("black", "--"),
           "siren+omega": ("black", ":")}


def plot_fits(live: Mapping[str, Any], live_curves: Mapping[str, np.ndarray], cached: Mapping[str, Any] | None,
              cached_curves: Mapping[str, np.ndarray] | None, scale: str, mse_target: float):
    """PSNR per step of every variant, this build and (when cached) paper scale."""
    def line_style(key: str) -> dict[str, Any]:
        name = key.removeprefix("psnr_")
        colour, ls = _STYLES[name]
        return dict(color=colour, ls=ls, label=LABELS[name])

    return plot_psnr_panels(live_curves, cached_curves, scale=scale, side=live["side"],
                            cached_side=cached["side"] if cached else None, mse_target=mse_target,
                            line_style=line_style)


def plot_band_limit(live: Mapping[str, Any], cached: Mapping[str, Any] | None, mse_target: float):
    """PSNR of the low-passed cameraman against the highest kept frequency, with the fits' best PSNRs."""
    payloads = [("this build", live)] + ([("paper scale", cached)] if cached else [])
    fig, axes = style.subplots(1, len(payloads), figsize=(12 if cached else 7, 4), squeeze=False)
    for ax, (title, payload) in zip(axes[0], payloads):
        curve = payload["band_limit"]
        ax.plot(curve["cycles"], curve["psnr"], "o-", color="grey", label="low-passed image (bound)")
        for name, row in payload["rows"].items():
            if row["cycles"] is None:
                continue
            colour, ls = _STYLES[name]
            ax.plot([row["cycles"]], [row["best_psnr"]], marker="s" if ls == "-" else "^", ls="none",
                    color=colour, ms=8, label=f"best fit: {LABELS[name]}")
        ax.axhline(mse_to_psnr(mse_target), color="grey", ls="--", lw=0.8, label=f"MSE {mse_target:g}")
        top = mse_to_psnr(mse_target) + 10  # at the Nyquist frequency the low-pass is the image itself
        for cycles, value in zip(curve["cycles"], curve["psnr"]):
            if value > top:
                ax.annotate("exact", (cycles, top), xytext=(0, -12), textcoords="offset points", ha="center",
                            fontsize=8, color="grey", arrowprops=dict(arrowstyle="->", color="grey"))
        ax.set_ylim(top=top)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("highest frequency kept (cycles per image, each axis)")
        ax.set_title(f"{title} ({payload['side']}×{payload['side']}, {payload['steps']} steps)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("PSNR (dB)")
    fig.tight_layout()
    style.legend_below(fig, ncol=3)
    return fig


def _bound(value: float | None) -> str:
    if value is None:
        return "—"
    return "exact (Nyquist)" if value > 100 else f"{value:.1f}"


def table(live: Mapping[str, Any], cached: Mapping[str, Any] | None, status: str):
    """Per variant: settings, initial statistics, low-pass bound and best PSNR, each of this build and of paper scale
    (the statistics and the bound depend on the image's side and the encoder's L, which the scales set apart)."""
    import pandas as pd

    missing = missing_cell(status)
    rows = []
    for name, row in live["rows"].items():
        other = cached["rows"].get(name) if cached else None
        def both(text: Callable[[Mapping[str, Any]], str]) -> str:
            return f"{text(row)} / {text(other) if other else '—'}"

        rows.append({
            "network (√2 sin(x + π/4))": LABELS[name],
            "L (this build / paper)": both(lambda r: str(r["levels"])) if row["levels"] else "—",
            "first layer (this build / paper)": both(lambda r: f"gain {r['first_gain']:.2f}") if row["levels"]
            else f"ω0 = {row['omega_0']:g}, output ×{row['siren_scale']:.2f}",
            "mean square of first pre-activation (this build / paper)": both(lambda r: f"{r['z_mean_square']:.3f}"),
            "pixel-dependent share of first activation (this build / paper)": both(
                lambda r: f"{r['varying_share']:.3f}"),
            "low-pass bound, dB (this build / paper)": both(lambda r: _bound(r["band_limit_psnr"])),
            "best PSNR, this build (dB)": f"{row['best_psnr']:.2f}",
            "best PSNR, paper scale (dB)": f"{other['best_psnr']:.2f}" if other else missing,
        })
    return pd.DataFrame(rows).style.hide(axis="index")


def steps_table(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Steps to 25-50 dB per variant, this build and paper scale."""
    return psnr_steps_table(live["rows"], cached["rows"] if cached else None, LABELS)


def effect(payload: Mapping[str, Any], change: str, base: str) -> float:
    """Best PSNR of variant ``change`` minus that of ``base`` (dB)."""
    rows = payload["rows"]
    return rows[change]["best_psnr"] - rows[base]["best_psnr"]


CHANGES = {"full": ("default", "Nyquist L instead of SIREN's"), "default+gain": ("default", "unit first layer"),
           "full+gain": ("default", "both"), "siren+scale": ("siren", "√2 on the SIREN layer's output"),
           "siren+omega": ("siren", "larger ω0 on the SIREN layer")}
"""Each change tested, as (variant, the variant it changes, a short name)."""


def effects_table(live: Mapping[str, Any], cached: Mapping[str, Any] | None, status: str):
    """The change of best PSNR each change makes, this build and paper scale."""
    import pandas as pd

    missing = missing_cell(status)
    rows = [{"change": text, "from → to": f"{LABELS[base]} → {LABELS[name]}",
             "this build (dB)": f"{effect(live, name, base):+.2f}",
             "paper scale (dB)": f"{effect(cached, name, base):+.2f}" if cached else missing}
            for name, (base, text) in CHANGES.items()]
    return pd.DataFrame(rows).style.hide(axis="index")


def conclusion(payload: Mapping[str, Any], mse_target: float) -> str:
    """One sentence: does any variant reach ``mse_target``, and which one comes closest."""
    rows = payload["rows"]
    best = max(rows, key=lambda name: rows[name]["best_psnr"])
    reached = {name: row["first_below_target"] for name, row in rows.items() if row["first_below_target"] is not None}
    where = f"({payload['side']}×{payload['side']}, {payload['steps']} steps)"
    if reached:
        first = min(reached, key=reached.get)
        return (f"{LABELS[first]} reaches MSE {mse_target:g} at step {reached[first]} {where}; "
                f"{len(reached)} of {len(rows)} variants reach it")
    return (f"no variant reaches MSE {mse_target:g} {where}; the best, {LABELS[best]}, reaches "
            f"{rows[best]['best_psnr']:.1f} dB, against {mse_to_psnr(mse_target):.1f} dB for the target")


def effects_sentence(payload: Mapping[str, Any], mse_target: float) -> str:
    """The range of the changes' effects on the best PSNR, beside the distance of the best fit from the target."""
    effects = {name: effect(payload, name, base) for name, (base, _) in CHANGES.items()}
    low, high = min(effects, key=effects.get), max(effects, key=effects.get)
    best = max(row["best_psnr"] for row in payload["rows"].values())
    return (f"the changes move the best PSNR by {effects[low]:+.1f} dB ({CHANGES[low][1]}) to "
            f"{effects[high]:+.1f} dB ({CHANGES[high][1]}), while the best fit stays "
            f"{mse_to_psnr(mse_target) - best:.1f} dB short of an MSE of {mse_target:g}")
