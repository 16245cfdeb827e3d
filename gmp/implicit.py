"""Fitting an implicit representation to an image (Sections 5-6 of the SBSNN paper).

Full-batch Adam on the mean squared error over all pixels (values in ``[-1, 1]``), with
either a constant learning rate (SIREN's notebook: ``1e-4``) or the SBSNN paper's schedule:
start at ``lr`` and halve it when the training MSE has not improved for ``patience`` steps
(``torch.optim.lr_scheduler.ReduceLROnPlateau``; 40 steps in Section 5). The PSNR is
computed as in SIREN's code: prediction and target are mapped from ``[-1, 1]`` to
``[0, 1]``, clipped, and compared with data range 1.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gmp.encoders import PositionalEncoding
from gmp.models.implicit import SIREN_OMEGA_0, ImplicitMLP, Siren
from gmp.progress import bar
from gmp.results import atomic_write_bytes
from gmp.train import check_fit_arguments, load_checkpoint, restore_state
from gmp import style


CHECKPOINT_KEYS = ("settings", "step", "stopped", "seconds", "model", "optimizer", "scheduler", "mse", "psnr", "lr",
                   "snapshots", "diverged_at")
"""The entries of a :func:`fit_image` checkpoint."""


def psnr(prediction: Tensor, target: Tensor) -> float:
    """PSNR in dB of images in ``[-1, 1]``, as SIREN computes it (mapped to ``[0, 1]``, clipped)."""
    if prediction.shape != target.shape:
        raise ValueError(f"prediction and target shapes differ: {tuple(prediction.shape)} vs {tuple(target.shape)}")
    p = ((prediction.detach().double() + 1) / 2).clamp(0, 1)
    t = ((target.detach().double() + 1) / 2).clamp(0, 1)
    mse = torch.mean((p - t) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def mse_to_psnr(mse: float) -> float:
    """The PSNR of an MSE measured on ``[-1, 1]`` values (unclipped): ``10 log10(4 / mse)``."""
    if mse <= 0:
        raise ValueError(f"mse must be positive, got {mse!r}")
    return 10 * math.log10(4.0 / mse)


def build_model(spec: Mapping[str, Any], side: int | None = None) -> nn.Module:
    """A network from a JSON spec, as the chapters' configs write them.

    ``{"model": "siren", "hidden_features": 256, "hidden_layers": 3}`` is SIREN;
    ``{"model": "sbsnn", "activation": "sin", "first_layer": "siren"}`` the paper's MLP with
    an initial SIREN layer; add ``"encoder": "nerf"`` or ``"rotated"`` (with
    ``"first_layer": "orthogonal"``) for a positional encoder of ``"levels"`` frequencies,
    default ``floor(log2(side / 4))`` as in SIREN's NeRF baseline; ``"first_gain"`` and
    ``"siren_scale"`` are those of :class:`gmp.models.ImplicitMLP`.
    """
    kind = spec.get("model")
    sizes = {k: spec[k] for k in ("hidden_features", "hidden_layers") if k in spec}
    if kind == "siren":
        return Siren(2, 1, omega_0=spec.get("omega_0", SIREN_OMEGA_0), **sizes)
    if kind != "sbsnn":
        raise ValueError(f"spec['model'] must be 'siren' or 'sbsnn', got {kind!r}")
    encoder = None
    if spec.get("encoder") is not None:
        if spec["encoder"] not in ("nerf", "rotated"):
            raise ValueError(f"spec['encoder'] must be 'nerf', 'rotated' or None, got {spec['encoder']!r}")
        levels = spec.get("levels")
        if levels is None:
            if side is None:
                raise ValueError("give spec['levels'] or the image side to derive it")
            levels = default_levels(side)
        encoder = PositionalEncoding(levels, rotated=spec["encoder"] == "rotated")
    return ImplicitMLP(spec["activation"], 2, 1, first_layer=spec.get("first_layer", "siren"),
                       encoder=encoder, omega_0=spec.get("omega_0", SIREN_OMEGA_0), first_gain=spec.get("first_gain", 1.0),
                       siren_scale=spec.get("siren_scale", 1.0), **sizes)


def default_levels(side: int) -> int:
    """SIREN's number of NeRF frequencies for an image of ``side`` pixels: ``floor(log2(side / 4))``."""
    if side < 8:
        raise ValueError(f"need an image side of at least 8 pixels, got {side!r}")
    return int(math.floor(math.log2(side / 4)))


PSNR_LEVELS = (25.0, 30.0, 35.0, 40.0, 50.0)
"""The PSNR levels (dB) of :meth:`FitResult.steps_to_psnr` and :func:`psnr_steps_table`."""


@dataclasses.dataclass
class FitResult:
    """Per-step curves of one fit; entry ``i`` is measured after ``i`` Adam updates.

    ``snapshots`` maps a step to the predicted image at that step; ``diverged_at`` is the
    first step whose loss was not finite (the curves are NaN from there), else None.
    """

    mse: np.ndarray
    psnr: np.ndarray
    lr: np.ndarray
    snapshots: dict[int, np.ndarray]
    diverged_at: int | None
    seconds: float

    def first_step_below(self, mse: float) -> int | None:
        """The first step whose training MSE is at most ``mse`` (None if never)."""
        hits = np.flatnonzero(self.mse <= mse)
        return int(hits[0]) if hits.size else None

    def steps_to_psnr(self, levels: Iterable[float] = PSNR_LEVELS) -> dict[str, int | None]:
        """Per PSNR level (dB, keyed like ``"30"``), the first step whose PSNR reaches it (None if never)."""
        out = {}
        for level in levels:
            hits = np.flatnonzero(self.psnr >= level)
            out[f"{level:g}"] = int(hits[0]) if hits.size else None
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (NaN as None) for ``Store.memo``; :meth:`from_json` inverts it."""
        def clean(a: np.ndarray) -> list[float | None]:
            return [None if not math.isfinite(v) else float(v) for v in a]

        return {"mse": clean(self.mse), "psnr": clean(self.psnr), "lr": clean(self.lr),
                "snapshots": {str(k): v.tolist() for k, v in self.snapshots.items()},
                "diverged_at": self.diverged_at, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FitResult:
        """The :class:`FitResult` that :meth:`to_json` wrote (None back to NaN)."""

        def arr(values: list[float | None]) -> np.ndarray:
            return np.array([np.nan if v is None else v for v in values], dtype=float)

        return cls(arr(data["mse"]), arr(data["psnr"]), arr(data["lr"]),
                   {int(k): np.asarray(v, dtype=np.float32) for k, v in data["snapshots"].items()},
                   data["diverged_at"], float(data["seconds"]))


def fit_image(model: nn.Module, coords: Tensor, pixels: Tensor, *, steps: int, lr: float,
              plateau: Mapping[str, float] | None = None, snapshot_steps: Iterable[int] = (),
              stop_below: float | None = None, min_steps: int = 0, compile: bool = False,
              checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 200,
              device: torch.device | str = "cpu", progress: bool | None = None, desc: str | None = None
              ) -> FitResult:
    """Fit ``model`` to ``pixels`` at ``coords`` with full-batch Adam for ``steps`` updates.

    ``plateau`` is ``{"factor": 0.5, "patience": 40}`` for the SBSNN paper's schedule
    (multiply the learning rate by ``factor`` after ``patience`` steps without improvement
    of the training MSE) or None for a constant learning rate. ``snapshot_steps`` are the
    steps at which the predicted image is kept (the image must be square).

    ``stop_below`` ends the fit at the first step whose training MSE is at most that value,
    once the curves hold at least ``min_steps`` entries; the curves then end at that step.
    ``compile`` runs the model through ``torch.compile`` (on two CPU cores at 256 x 256 we
    measured 0.67 s per step against 1.40 s eagerly for the SBSNN MLP, 0.80 against 1.27 s
    for SIREN); if compilation fails, a warning is issued and the fit runs eagerly.

    ``checkpoint`` is a file that makes a long fit resumable: every ``checkpoint_every``
    steps, and at the end, the model, optimiser, schedule and curves so far are written to
    it (atomically). A later call with the same file and settings continues from there and
    gives the same curves as an uninterrupted fit; a finished checkpoint is returned as is.
    It holds tensors and plain values only and is read with ``weights_only=True``
    (:func:`gmp.train.load_checkpoint`).
    """
    check_fit_arguments(coords, pixels, lr=lr, names=("coords", "pixels"), stop_below=stop_below,
                        counts={"steps": steps, "checkpoint_every": checkpoint_every}, at_least_zero={"min_steps": min_steps})
    snapshot_steps = sorted(set(snapshot_steps))
    if snapshot_steps and not 0 <= snapshot_steps[0] <= snapshot_steps[-1] < steps:
        raise ValueError(f"snapshot steps must lie in [0, {steps}), got {snapshot_steps}")
    side = math.isqrt(pixels.shape[0])
    if snapshot_steps and side * side != pixels.shape[0]:
        raise ValueError("snapshots need a square image")
    device = torch.device(device)
    model = model.to(device)
    coords, pixels = coords.to(device), pixels.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = None
    if plateau is not None:
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=plateau["factor"], patience=plateau["patience"])
    mse = np.full(steps, np.nan)
    psnrs = np.full(steps, np.nan)
    lrs = np.full(steps, np.nan)
    snapshots: dict[int, np.ndarray] = {}
    diverged_at = None
    start, stopped, spent = 0, None, 0.0
    settings = {"steps": steps, "lr": lr, "plateau": dict(plateau) if plateau else None,
                "snapshot_steps": snapshot_steps, "stop_below": stop_below, "min_steps": min_steps,
                "pixels": int(pixels.shape[0])}
    checkpoint = Path(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and checkpoint.is_file():
        state = load_checkpoint(checkpoint, map_location=device, keys=CHECKPOINT_KEYS)
        if state["settings"] != settings:
            raise ValueError(f"checkpoint {checkpoint} was written by a fit with settings {state['settings']}, "
                             f"not {settings}; delete it or pass another checkpoint file")
        restore_state(checkpoint, "model", lambda: model.load_state_dict(state["model"]))
        restore_state(checkpoint, "optimizer", lambda: optimizer.load_state_dict(state["optimizer"]))
        if scheduler is not None:
            restore_state(checkpoint, "scheduler", lambda: scheduler.load_state_dict(state["scheduler"]))
        mse[:], psnrs[:], lrs[:] = (state[k].cpu().numpy() for k in ("mse", "psnr", "lr"))
        snapshots = {step: image.cpu().numpy() for step, image in state["snapshots"].items()}
        diverged_at = state["diverged_at"]
        start, stopped, spent = state["step"], state["stopped"], state["seconds"]
        restore_state(checkpoint, "step", lambda: _check_step(state, mse, steps))

    def save(step: int) -> None:
        state = {"settings": settings, "step": step, "stopped": stopped, "seconds": spent + time.perf_counter() - began,
                 "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict() if scheduler is not None else None,
                 "mse": torch.from_numpy(mse), "psnr": torch.from_numpy(psnrs), "lr": torch.from_numpy(lrs),
                 "snapshots": {step: torch.from_numpy(image) for step, image in snapshots.items()},
                 "diverged_at": diverged_at}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(checkpoint, buffer.getvalue())

    forward: Callable[[Tensor], Tensor] = torch.compile(model) if compile else model
    began = time.perf_counter()
    finished = diverged_at is not None or stopped is not None or start >= steps
    for step in bar(range(start, steps if not finished else start), desc=desc,
                    disable=None if progress is None else not progress, leave=False, initial=start, total=steps):
        if checkpoint is not None and step > start and step % checkpoint_every == 0:
            save(step)
        try:
            prediction = forward(coords)
        except Exception as err:  # torch.compile needs a working C++ toolchain; fall back to eager mode
            if forward is model:
                raise
            warnings.warn(f"torch.compile failed ({type(err).__name__}: {err}); fitting in eager mode", stacklevel=2)
            forward = model
            prediction = forward(coords)
        loss = torch.mean((prediction - pixels) ** 2)
        value = loss.item()
        if not math.isfinite(value):
            diverged_at = step
            break
        mse[step] = value
        psnrs[step] = psnr(prediction, pixels)
        lrs[step] = optimizer.param_groups[0]["lr"]
        if step in snapshot_steps:
            snapshots[step] = prediction.detach().reshape(side, side).float().cpu().numpy()
        if stop_below is not None and value <= stop_below and step + 1 >= min_steps:
            stopped = step
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step(value)
    if checkpoint is not None and not finished:
        save(steps)
    seconds = spent + (time.perf_counter() - began if not finished else 0.0)
    end = stopped + 1 if stopped is not None else steps
    return FitResult(mse[:end], psnrs[:end], lrs[:end], snapshots, diverged_at, seconds)


def _check_step(state: Mapping[str, Any], mse: np.ndarray, steps: int) -> None:
    """ValueError unless a :func:`fit_image` checkpoint's ``step`` agrees with what it holds: one of 1 to
    ``steps`` and, for a fit not yet finished (neither diverged nor stopped nor at ``steps``), exactly
    ``step`` measured MSEs, the first ``step``, and as many optimiser steps; a changed step would
    otherwise resume with curves padded with NaN or shifted."""
    step = state["step"]
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 < step <= steps):
        raise ValueError(f"its step {step!r} is not one of 1 to {steps}")
    if state["diverged_at"] is not None or state["stopped"] is not None or step == steps:
        return
    if not (np.isfinite(mse[:step]).all() and np.isnan(mse[step:]).all()):
        raise ValueError(f"its step {step} disagrees with its curves, which hold {int(np.isfinite(mse).sum())} "
                         f"measured steps")
    taken = {float(s["step"]) for s in state["optimizer"]["state"].values() if "step" in s}
    if taken and taken != {float(step)}:
        raise ValueError(f"its step {step} disagrees with its optimiser's {sorted(taken)} steps")


def fit_spec(spec: Mapping[str, Any], coords: Tensor, pixels: Tensor, *, seed: int,
             device: torch.device | str = "cpu", snapshot_steps: Iterable[int] = (), desc: str | None = None,
             checkpoint: str | os.PathLike | None = None) -> FitResult:
    """Build the network of ``spec`` (see :func:`build_model`) from ``seed`` and fit it.

    ``spec`` also holds the optimisation settings: ``"steps"``, ``"lr"`` and ``"plateau"``
    (``{"factor": ..., "patience": ...}`` or None for a constant learning rate), and
    optionally ``"stop_below"``, ``"min_steps"`` and ``"compile"`` (see :func:`fit_image`).
    ``checkpoint`` makes the fit resumable (see :func:`fit_image`).
    """
    side = math.isqrt(pixels.shape[0])
    torch.manual_seed(seed)
    model = build_model(spec, side)
    return fit_image(model, coords, pixels, steps=spec["steps"], lr=spec["lr"], plateau=spec.get("plateau"),
                     stop_below=spec.get("stop_below"), min_steps=spec.get("min_steps", 0),
                     compile=spec.get("compile", False), snapshot_steps=snapshot_steps, device=device, desc=desc,
                     checkpoint=checkpoint)


def psnr_steps_table(live: Mapping[str, Mapping[str, Any]], paper: Mapping[str, Mapping[str, Any]] | None,
                     labels: Mapping[str, str]):
    """Steps to each PSNR level per network: ``"this build / paper scale"`` in each cell.

    ``live`` and ``paper`` map a network to its payload row, whose ``"steps_to_psnr"`` is
    :meth:`FitResult.steps_to_psnr`. ``labels`` names the networks and gives the rows and
    their order (one that neither ran is left out); a network missing from ``live`` or from
    ``paper`` (or no ``paper`` at all) shows "not run" there, and a level that a run never
    reached shows "never".
    """
    import pandas as pd

    def shown(row: Mapping[str, Any] | None, level: str) -> str:
        if row is None:
            return "not run"
        step = row["steps_to_psnr"][level]
        return "never" if step is None else str(step)

    rows = []
    for name, label in labels.items():
        mine, theirs = live.get(name), paper.get(name) if paper else None
        if mine is None and theirs is None:
            continue
        levels = (mine or theirs)["steps_to_psnr"]
        rows.append({"network": label, **{f"{level} dB": f"{shown(mine, level)} / {shown(theirs, level)}"
                                          for level in levels}})
    return pd.DataFrame(rows).style.hide(axis="index")


def target_reading(rows: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str], family: Iterable[str],
                   mse_target: float, compare_step: int, family_name: str = "the networks of the SBSNN family") -> str:
    """One or two sentences on a set of fits against an MSE target, for a chapter's prose.

    ``rows`` maps a network to its payload row (``first_below_target``, ``psnr_at_compare``,
    ``best_psnr``, ``steps``); ``labels`` names them; ``family`` are the networks a claim
    is about (by default those that satisfy the strong condition), ``family_name`` their
    name in the text. Says which networks reach the target
    and when, where the family stands at ``compare_step``, how far the best of it gets, and
    which other networks get further.
    """
    target = f"an MSE of {mse_target:g} ({mse_to_psnr(mse_target):.1f} dB)"
    reached = {k: r["first_below_target"] for k, r in rows.items() if r["first_below_target"] is not None}
    if reached:
        text = "; ".join(f"{labels[k]} reaches {target} at step {step}" for k, step in reached.items())
    else:
        text = f"no network reaches {target} within its run"
    family = [k for k in family if k in rows]
    if family:
        text += (f". At step {compare_step} {family_name} stand at "
                 + ", ".join(f"{rows[k]['psnr_at_compare']:.1f} dB ({labels[k]})" for k in family))
        best = max(family, key=lambda k: rows[k]["best_psnr"])
        text += (f"; the best of them reaches {rows[best]['best_psnr']:.1f} dB ({labels[best]}, "
                 f"{rows[best]['steps']} steps)")
        better = sorted((k for k in rows if k not in family and rows[k]["best_psnr"] > rows[best]["best_psnr"]),
                        key=lambda k: -rows[k]["best_psnr"])
        if better:
            text += ". Other networks fit better: " + ", ".join(
                f"{labels[k]} ({rows[k]['best_psnr']:.1f} dB)" for k in better)
    return text + "."


def paper_source(current: bool, shown: bool) -> str:
    """Where a chapter's paper-scale numbers come from, for its prose: a ``current`` cache, or (``shown``) an unfinished run."""
    return "the cached run" if current else "the networks an unfinished run has finished" if shown else "not yet run"


def unfinished_title(done: int, total: int, side: int) -> str:
    """The title of a PSNR panel that shows the networks an unfinished paper-scale run has journalled."""
    if done == total:
        return f"paper scale, unfinished run: all {total} networks of this figure ({side}×{side})"
    return f"paper scale, unfinished run: {done} of {total} networks so far ({side}×{side})"


def plot_psnr_panels(live: Mapping[str, np.ndarray], cached: Mapping[str, np.ndarray] | None, *,
                     scale: str, side: int, cached_side: int | None, mse_target: float,
                     line_style: Callable[[str], Mapping[str, Any]], cached_title: str | None = None):
    """PSNR per Adam update of several fits: this build's, and beside it the paper-scale cache.

    ``live`` and ``cached`` map curve names to PSNR arrays (index = step);
    ``line_style(name)`` gives each curve's matplotlib keywords, its ``label`` included.
    The dashed line marks the PSNR of ``mse_target``. ``cached_title`` replaces the second
    panel's title (for the partial results of an unfinished paper-scale run). Used by
    Figs. 4, 6 and 7 of SBSNN.
    """
    panels = [(f"this build ({scale}, {side}×{side})", live)]
    if cached is not None:
        panels.append((cached_title or f"paper scale (cache, {cached_side}×{cached_side})", cached))
    fig, axes = style.subplots(1, len(panels), figsize=(12 if len(panels) == 2 else 9, 4.2), squeeze=False)
    for ax, (title, arrays) in zip(axes[0], panels):
        for name, curve in arrays.items():
            ax.plot(np.arange(1, len(curve)), curve[1:], lw=1.3, **line_style(name))
        ax.axhline(mse_to_psnr(mse_target), color="grey", ls="--", lw=0.8, label=f"MSE {mse_target:g}")
        ax.set_xscale("log")
        ax.set_xlabel("Adam updates")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("PSNR (dB)")
    fig.tight_layout()
    style.legend_below(fig)  # every curve of either panel, once (a partial paper panel lacks some)
    return fig
