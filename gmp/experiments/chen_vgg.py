"""Experiment of the chapter book/part1/chen_vgg.md (Table 2 and Fig. 4 of Chen & Ge): VGG-6 on
ImageNet32 under SP, WN, WN+MBN, BN, GmP and GmP+MN at batch sizes 256, 512 and 1024.

Paper scale: the paper's settings (the official code's network and data pipeline; SGD with
momentum 0.9, lr 0.1 for GmP and GmP+MN and 0.01 for the others, lr x0.1 after 5 epochs
without improvement of the validation top-5 accuracy, stop after 10, at most 500 epochs;
the validation split is the ImageNet32 validation set). It needs the ImageNet32 files under
``GMP_DATA/imagenet32`` and a GPU. Smaller scales run the same code on scikit-learn's 8x8
digits (offline), with a narrower VGG-6, smaller batches and fewer epochs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from gmp.classify import checkpoint_dir, fit_classifier
from gmp.config import Config, resolve_device, scaled
from gmp.data.classification import digits
from gmp.data.imagenet import ImageArrays, imagenet32_arrays, IMAGENET32_MEAN
from gmp.models.vgg import vgg6
from gmp.results import NOT_REPRODUCED, NOT_RUN, PARTLY, REPRODUCED, Claim, PowerTest, Store, paired_interval
from gmp.train import EarlyStopping, ReduceLROnPlateau
from gmp import style

CHAPTER = "chen_vgg"

VARIANTS: dict[str, str] = {"SP": "sp", "WN": "wn", "WN+MBN": "wn_mbn", "BN": "bn", "GmP": "gmp", "GmP+MN": "gmp_mn"}
"""The rows of Table 2 -> ``param`` of :func:`gmp.models.vgg6`."""

_LR = {"SP": 0.01, "WN": 0.01, "WN+MBN": 0.01, "BN": 0.01, "GmP": 0.1, "GmP+MN": 0.1}

CONFIG = scaled(
    common=dict(variants=list(VARIANTS), lr=_LR, momentum=0.9, monitor="val_top5", plateau_factor=0.1,
                plateau_patience=5, stop_patience=10,
                gmp_init="glorot", paper_batch_sizes=[256, 512, 1024], fast_fraction=0.25,
                estimate=dict(widths=[128, 256, 512], batch_sizes=[256, 512, 1024], seeds=3, images=1_281_167,
                              epochs=40, sustained_tflops=150)),
    smoke=dict(dataset="digits", widths=[4, 4, 8], batch_sizes=[64, 128, 256], epochs=2, seeds=[0],
               mn_momentum=0.1, checkpoint=False),
    small=dict(dataset="digits", widths=[8, 8, 16], batch_sizes=[64, 128, 256], epochs=4, seeds=[0],
               mn_momentum=0.1, checkpoint=False),
    paper=dict(dataset="imagenet32", widths=[128, 256, 512], batch_sizes=[256, 512, 1024], epochs=500,
               seeds=[0, 1, 2], mn_momentum=0.01, checkpoint=True),
)

PAPER = {
    # Table 2 of Chen & Ge: mean top-1 / top-5 validation accuracy (%) ± standard error,
    # VGG-6 on ImageNet32, batch sizes 256, 512, 1024. Values: (mean, standard error).
    "table2": {
        "SP": {"top1": {256: (38.31, 0.13), 512: (36.99, 0.11), 1024: (35.02, 0.03)},
               "top5": {256: (62.48, 0.14), 512: (60.71, 0.18), 1024: (58.14, 0.39)}},
        "WN": {"top1": {256: (39.13, 0.10), 512: (37.92, 0.12), 1024: (36.17, 0.03)},
               "top5": {256: (63.28, 0.02), 512: (61.93, 0.09), 1024: (60.16, 0.18)}},
        "WN+MBN": {"top1": {256: (42.22, 0.01), 512: (40.96, 0.02), 1024: (39.33, 0.07)},
                   "top5": {256: (66.04, 0.07), 512: (65.08, 0.03), 1024: (63.32, 0.08)}},
        "BN": {"top1": {256: (42.79, 0.03), 512: (41.90, 0.19), 1024: (41.39, 0.02)},
               "top5": {256: (67.17, 0.08), 512: (66.50, 0.25), 1024: (65.89, 0.06)}},
        "GmP": {"top1": {256: (40.76, 0.09), 512: (41.65, 0.09), 1024: (41.29, 0.08)},
                "top5": {256: (65.08, 0.08), 512: (65.76, 0.05), 1024: (65.49, 0.06)}},
        "GmP+MN": {"top1": {256: (43.14, 0.05), 512: (43.62, 0.08), 1024: (42.70, 0.15)},
                   "top5": {256: (67.36, 0.05), 512: (67.76, 0.09), 1024: (66.98, 0.18)}},
    },
}


# ---------------------------------------------------------------- data and networks

def digit_images(train: bool, seed: int = 0, size: int | None = None) -> ImageArrays:
    """scikit-learn's digits as 1-channel images (8x8, or ``size`` x ``size`` by nearest upsampling).

    The stand-in for ImageNet32 at the smoke and small scales: :func:`gmp.data.digits`
    (standardised pixels, stratified 80/20 split by ``seed``) reshaped to (N, 1, 8, 8).
    No flips: a mirrored digit is another symbol.
    """
    x, y = digits(train=train, seed=seed)
    images = x.float().view(-1, 1, 8, 8)
    if size is not None and size != 8:
        images = nn.functional.interpolate(images, size=(size, size), mode="nearest")
    return ImageArrays(images, y)


@lru_cache(maxsize=2)
def _imagenet32_arrays(train: bool) -> tuple[np.ndarray, np.ndarray]:
    return imagenet32_arrays(train)


def datasets(cfg: Config | Mapping[str, Any], seed: int) -> tuple[ImageArrays, ImageArrays]:
    """(training, validation) data of ``cfg["dataset"]`` ("imagenet32" or "digits")."""
    if cfg["dataset"] == "imagenet32":
        (x, y), (xv, yv) = _imagenet32_arrays(True), _imagenet32_arrays(False)
        return (ImageArrays(x, y, mean=IMAGENET32_MEAN, flip=True, seed=seed),
                ImageArrays(xv, yv, mean=IMAGENET32_MEAN))
    if cfg["dataset"] == "digits":
        return digit_images(True, seed), digit_images(False, seed)
    raise ValueError(f"unknown dataset {cfg['dataset']!r}: expected 'imagenet32' or 'digits'")


def num_classes(cfg: Config | Mapping[str, Any]) -> int:
    return 1000 if cfg["dataset"] == "imagenet32" else 10


def build(cfg: Config | Mapping[str, Any], variant: str) -> nn.Module:
    """VGG-6 of ``variant`` (a row of Table 2) at ``cfg["widths"]`` for ``cfg["dataset"]``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    channels = 3 if cfg["dataset"] == "imagenet32" else 1
    return vgg6(VARIANTS[variant], num_classes=num_classes(cfg), in_channels=channels,
                widths=list(cfg["widths"]), init=cfg["gmp_init"], mn_momentum=cfg["mn_momentum"])


def checkpoint_path(cfg: Config, variant: str, batch_size: int, seed: int):
    """Where the run's checkpoint lives (``$GMP_CHECKPOINTS/<chapter>/<scale>-<digest>/...``)."""
    safe = variant.replace("+", "_")
    return checkpoint_dir() / cfg.chapter / f"{cfg.scale}-{cfg.digest}" / f"{safe}-b{batch_size}-s{seed}.pt"


def run_one(cfg: Config, variant: str, batch_size: int, seed: int, device: torch.device | str = "auto",
            builder=build, data=datasets) -> dict[str, Any]:
    """Train one network of the table and return its result (JSON-serialisable).

    The validation top-1/top-5 reported are those of the epoch with the best validation
    top-5 (the early-stopping monitor). With ``cfg.checkpoint`` the run checkpoints every
    epoch and resumes (also a run started by ``python -m gmp.classify``).
    """
    device = resolve_device(device) if isinstance(device, str) else device
    torch.manual_seed(seed)
    model = builder(cfg, variant)
    train, validation = data(cfg, seed)
    history = fit_classifier(
        model, train, validation, epochs=cfg["epochs"], batch_size=batch_size, lr=cfg["lr"][variant],
        momentum=cfg["momentum"], seed=seed,
        plateau=ReduceLROnPlateau(monitor=cfg["monitor"], mode="max", factor=cfg["plateau_factor"],
                                  patience=cfg["plateau_patience"]),
        early_stopping=EarlyStopping(monitor=cfg["monitor"], mode="max", patience=cfg["stop_patience"]),
        device=device, checkpoint=checkpoint_path(cfg, variant, batch_size, seed) if cfg["checkpoint"] else None,
        fingerprint={"chapter": cfg.chapter, "scale": cfg.scale, "digest": cfg.digest, "variant": variant},
        progress=None, description=f"{variant} b{batch_size} s{seed}")
    return {"variant": variant, "batch_size": batch_size, "seed": seed, "epochs": history.epochs,
            "best_epoch": history.best_epoch, "diverged": history.diverged,
            "diverged_epoch": history.diverged_epoch, "top1": history.at_best("val_top1"),
            "top5": history.at_best("val_top5"), "history": history.to_dict()}


def run_key(variant: str, batch_size: int, seed: int) -> str:
    return f"{variant}/b{batch_size}/s{seed}"


def run_grid(cfg: Config, store: Store, device: torch.device | str = "auto", run=run_one) -> list[dict[str, Any]]:
    """Every (batch size, variant, seed) of the config, each journalled by ``store.memo``."""
    return [store.memo(run_key(v, b, s), lambda v=v, b=b, s=s: run(cfg, v, b, s, device))
            for b in cfg["batch_sizes"] for v in cfg["variants"] for s in cfg["seeds"]]


# ---------------------------------------------------------------- summaries

def _mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    mean = float(np.mean(values))
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return mean, se


def table_payload(cfg: Config, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean and standard error (%) of validation top-1/top-5 per variant and batch size, over the
    seeds that gave an accuracy, and (``top1_seeds``, ``top5_seeds``) each seed's accuracy in the
    order of ``cfg["seeds"]``, None for a seed whose run diverged before any evaluation."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for variant in cfg["variants"]:
        summary[variant] = {}
        for b in cfg["batch_sizes"]:
            mine = [r for r in runs if r["variant"] == variant and r["batch_size"] == b]
            cell: dict[str, Any] = {"n": len(mine), "diverged": sum(bool(r["diverged"]) for r in mine),
                                    "epochs": [r["epochs"] for r in mine]}
            for metric in ("top1", "top5"):
                seeds = [None if r[metric] is None else 100 * r[metric] for r in mine]
                cell[metric], cell[f"{metric}_se"] = _mean_se(seeds)
                cell[f"{metric}_seeds"] = seeds
            summary[variant][str(b)] = cell
    return {"dataset": cfg["dataset"], "scale": cfg.scale, "batch_sizes": list(cfg["batch_sizes"]),
            "paper_batch_sizes": list(cfg["paper_batch_sizes"]), "summary": summary}


def curves_payload(cfg: Config, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Top-5 training and validation accuracy (%) per epoch at the largest batch size (Fig. 4):
    mean and standard error over the seeds, over the epochs that all seeds ran; and
    (``train_top5_seeds``, ``val_top5_seeds``) each seed's whole curve, in the order of the runs,
    None for an epoch with no accuracy (the epoch a run diverged in)."""
    batch = max(cfg["batch_sizes"])
    curves: dict[str, dict[str, list[Any]]] = {}
    for variant in cfg["variants"]:
        mine = [r["history"] for r in runs if r["variant"] == variant and r["batch_size"] == batch]
        length = min(len(h["train_top5"]) for h in mine)
        curves[variant] = {}
        for name in ("train_top5", "val_top5"):
            stats = [_mean_se([None if h[name][e] is None else 100 * h[name][e] for h in mine]) for e in range(length)]
            curves[variant][name] = [m for m, _ in stats]
            curves[variant][f"{name}_se"] = [s for _, s in stats]
            curves[variant][f"{name}_seeds"] = [[None if x is None else 100 * x for x in h[name]] for h in mine]
    return {"dataset": cfg["dataset"], "scale": cfg.scale, "batch_size": batch, "curves": curves,
            "fast_fraction": cfg["fast_fraction"]}


def paper_payload() -> dict[str, Any]:
    """The paper's Table 2 (``PAPER``) in the format of :func:`table_payload`."""
    batches = [256, 512, 1024]
    summary = {v: {str(b): {m: PAPER["table2"][v][m][b][0] for m in ("top1", "top5")} for b in batches}
               for v in PAPER["table2"]}
    return {"dataset": "imagenet32", "scale": "paper", "batch_sizes": batches, "paper_batch_sizes": batches,
            "summary": summary}


def best_method(payload: Mapping[str, Any], batch_size: int, metric: str = "top1") -> str:
    """The method with the highest mean ``metric`` at ``batch_size``."""
    values = {v: c[str(batch_size)][metric] for v, c in payload["summary"].items() if c[str(batch_size)][metric] is not None}
    return max(values, key=values.get) if values else "none"


# ---------------------------------------------------------------- claims

SEEDS = len(CONFIG["paper"]["seeds"])
"""How many seeds each cell of the paper-scale run has, so how many pairs every comparison of the claims has."""

_PAIRED = (f"paired by seed (a seed gives every variant the same batch order and flips, SP, WN, WN+MBN and BN "
           f"the same initial kernels, and GmP and GmP+MN theirs), with its 95% Student-t interval over the "
           f"{SEEDS} paper-scale seeds")
_DIVERGED = ("; a seed with no accuracy (its run diverged before any evaluation) counts as chance in its "
             "variant's values")
_STAND_IN = ("; on a stand-in data set (not ImageNet32) the verdict is at most 'partly', "
             "and only the paper-scale run can reproduce the claim")


def _capped(payload: Mapping[str, Any], verdict: str, paper_dataset: str = "imagenet32") -> str:
    """``verdict``, lowered from "reproduced" to "partly" when measured on a stand-in data set."""
    if payload.get("dataset") != paper_dataset and verdict == REPRODUCED:
        return PARTLY
    return verdict


def chance(payload: Mapping[str, Any], metric: str) -> float:
    """Top-1 or top-5 accuracy (%) of guessing: what a cell with no accuracy (its runs diverged
    before any evaluation) counts as in the claims."""
    return 100 * (1 if metric == "top1" else 5) / num_classes(payload)


def seed_accuracies(payload: Mapping[str, Any], variant: str, batch: int, metric: str) -> list[float]:
    """Each seed's ``metric`` (%) of ``variant`` at ``batch``, in the order of the runs, a seed whose
    run diverged counting as :func:`chance` (the paper's table, which has no seeds, gives its mean
    as the one value)."""
    cell = payload["summary"][variant][str(batch)]
    return [chance(payload, metric) if v is None else v for v in cell.get(f"{metric}_seeds", [cell[metric]])]


def claim_accuracy(payload: Mapping[str, Any], variant: str, batch: int, metric: str) -> float:
    """The mean of :func:`seed_accuracies`: a seed whose run diverged counts as :func:`chance`."""
    return float(np.mean(seed_accuracies(payload, variant, batch, metric)))


def _differences(first: Sequence[float], second: Sequence[float]) -> list[float]:
    if len(first) != len(second) and 1 not in (len(first), len(second)):
        raise ValueError(f"paired values need one per seed on both sides, got {len(first)} and {len(second)}")
    n = max(len(first), len(second))
    return [a - b for a, b in zip(list(first) * (n // len(first)), list(second) * (n // len(second)))]


def paired_gap(first: Sequence[float], second: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)`` of ``first - second`` paired by seed, with its 95% Student-t interval
    (:func:`gmp.results.paired_interval`); unbounded with a single seed. A side with one value where
    the other has several (a variant given by its mean alone, as in the paper's table) is that
    constant for every seed."""
    return paired_interval(_differences(first, second))


def _interval(gap: tuple[float, float, float]) -> str:
    mean, low, high = gap
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"


def _diverged_cells(payload: Mapping[str, Any]) -> str:
    cells = []
    for v, row in payload["summary"].items():
        for b in payload["batch_sizes"]:
            cell = row[str(b)]
            gone = sum(x is None for x in cell.get("top1_seeds", [cell["top1"]]))
            if gone:
                cells.append(f"{v} b{b}" + (f" ({gone} of {len(cell['top1_seeds'])} seeds)"
                                            if "top1_seeds" in cell else ""))
    return f"; no accuracy (diverged), counted as chance: {', '.join(cells)}" if cells else ""


def _seed_count(payload: Mapping[str, Any]) -> int:
    return len(seed_accuracies(payload, "GmP+MN", payload["batch_sizes"][0], "top1"))


def _gmp_mn_best(payload: Mapping[str, Any]) -> tuple[str, str]:
    best, beyond, notes = 0, 0, []
    for b in payload["batch_sizes"]:
        for metric in ("top1", "top5"):
            means = {v: claim_accuracy(payload, v, b, metric) for v in payload["summary"]}
            ours = seed_accuracies(payload, "GmP+MN", b, metric)
            gaps = {v: paired_gap(ours, seed_accuracies(payload, v, b, metric))
                    for v in payload["summary"] if v != "GmP+MN"}
            leader = max(means, key=means.get)
            best += leader == "GmP+MN"
            beyond += all(low > 0 for _, low, _ in gaps.values())
            weakest = min(gaps, key=lambda v: gaps[v][1])
            notes.append(f"b{b} {metric}: best {leader}, GmP+MN minus {weakest} {_interval(gaps[weakest])}")
    cells = len(notes)
    text = (f"GmP+MN has the highest mean in {best} of {cells} (batch, metric) cells, beyond noise against every "
            f"other variant in {beyond}; per cell, the best mean and GmP+MN's weakest comparison (95% paired "
            f"interval over {_seed_count(payload)} seed(s)): {'; '.join(notes)}" + _diverged_cells(payload))
    verdict = REPRODUCED if beyond == cells else PARTLY if best == cells else NOT_REPRODUCED
    return text, _capped(payload, verdict)


def _rival(payload: Mapping[str, Any], batch: int, metric: str) -> str:
    others = {v: claim_accuracy(payload, v, batch, metric) for v in payload["summary"] if v != "GmP+MN"}
    return max(others, key=others.get)


def margins(payload: Mapping[str, Any], metric: str = "top1") -> list[float]:
    """GmP+MN's mean accuracy minus the highest mean of the other variants, per batch size (points
    of %); a seed with no accuracy counts as chance."""
    return [claim_accuracy(payload, "GmP+MN", b, metric)
            - claim_accuracy(payload, _rival(payload, b, metric), b, metric) for b in payload["batch_sizes"]]


def margin_growth(payload: Mapping[str, Any], metric: str = "top1") -> tuple[float, float, float]:
    """``(mean, low, high)`` over the seeds of GmP+MN's margin at the largest batch size minus its margin
    at the smallest, each seed's margin taken against the other variant with the highest mean at that
    batch size (:func:`paired_gap`); the mean is the difference of the ends of :func:`margins`."""
    ends = [_differences(seed_accuracies(payload, "GmP+MN", b, metric),
                         seed_accuracies(payload, _rival(payload, b, metric), b, metric))
            for b in (payload["batch_sizes"][0], payload["batch_sizes"][-1])]
    return paired_gap(ends[1], ends[0])


def _advantage_grows(payload: Mapping[str, Any]) -> tuple[str, str]:
    small, large = payload["batch_sizes"][0], payload["batch_sizes"][-1]
    parts, growth = [], {}
    for metric, label in (("top1", "top-1"), ("top5", "top-5")):
        ends = margins(payload, metric)
        growth[metric] = margin_growth(payload, metric)
        parts.append(f"{label} {ends[0]:+.2f} (vs {_rival(payload, small, metric)}) -> {ends[-1]:+.2f} "
                     f"(vs {_rival(payload, large, metric)}), growth {_interval(growth[metric])}")
    text = (f"margin of GmP+MN over the best other variant, batch {small} -> {large}, and its growth (95% paired "
            f"interval over {_seed_count(payload)} seed(s)): " + "; ".join(parts) + " points"
            + _diverged_cells(payload))
    if all(low > 0 for _, low, _ in growth.values()):
        verdict = REPRODUCED
    else:
        verdict = PARTLY if all(mean > 0 for mean, _, _ in growth.values()) else NOT_REPRODUCED
    return text, _capped(payload, verdict)


def _mn_helps(payload: Mapping[str, Any]) -> tuple[str, str]:
    gaps = {b: paired_gap(seed_accuracies(payload, "GmP+MN", b, "top1"), seed_accuracies(payload, "GmP", b, "top1"))
            for b in payload["batch_sizes"]}
    text = (f"top-1 of GmP+MN minus GmP per batch size (95% paired interval over {_seed_count(payload)} seed(s)): "
            + ", ".join(f"b{b} {_interval(gap)}" for b, gap in gaps.items()) + " points" + _diverged_cells(payload))
    if all(low > 0 for _, low, _ in gaps.values()):
        verdict = REPRODUCED
    else:
        verdict = PARTLY if all(mean > 0 for mean, _, _ in gaps.values()) else NOT_REPRODUCED
    return text, _capped(payload, verdict)


GMP_VARIANTS = ("GmP", "GmP+MN")
"""The variants the convergence claim credits to GmP."""


def early_areas(payload: Mapping[str, Any], name: str = "train_top5") -> dict[str, list[float]]:
    """Each seed's mean top-5 accuracy (%) over the first ``fast_fraction`` of the epochs (rounded up,
    of the shortest curve of a run that did not diverge), per variant; an epoch with no accuracy (the
    epoch a run diverged in, and those it did not reach) counts as :func:`chance`. A payload without
    per-seed curves gives the mean curve as its one seed."""
    runs = {v: c[f"{name}_seeds"] if f"{name}_seeds" in c else [c[name]] for v, c in payload["curves"].items()}
    whole = [len(x) for xs in runs.values() for x in xs if None not in x]
    length = min(whole) if whole else max(len(x) for xs in runs.values() for x in xs)
    k = max(1, math.ceil(payload["fast_fraction"] * length))
    floor = chance(payload, "top5")
    return {v: [float(np.mean([x[e] if e < len(x) and x[e] is not None else floor for e in range(k)])) for x in xs]
            for v, xs in runs.items()}


def _gmp_fastest(payload: Mapping[str, Any]) -> tuple[str, str]:
    leads, beyond, parts, seeds = 0, 0, [], 0
    for name in ("train_top5", "val_top5"):
        areas = early_areas(payload, name)
        means = {v: float(np.mean(a)) for v, a in areas.items()}
        ours = max((v for v in GMP_VARIANTS if v in areas), key=means.get)
        gaps = {v: paired_gap(areas[ours], a) for v, a in areas.items() if v not in GMP_VARIANTS}
        leader = max(means, key=means.get)
        leads += leader in GMP_VARIANTS
        beyond += all(low > 0 for _, low, _ in gaps.values())
        seeds = len(areas[ours])
        parts.append(f"{name}: fastest {leader} ({means[leader]:.1f}%); {ours} minus "
                     + ", ".join(f"{v} {_interval(gap)}" for v, gap in gaps.items()))
    gone = {v: sum(None in x for x in c["val_top5_seeds"]) for v, c in payload["curves"].items()
            if "val_top5_seeds" in c}
    text = (f"mean top-5 accuracy over the first {payload['fast_fraction']:.0%} of the epochs, 95% paired "
            f"intervals over {seeds} seed(s): "
            + "; ".join(parts) + " points"
            + "".join(f"; {v}: {n} diverged run(s), chance from the epoch it diverged in"
                      for v, n in gone.items() if n))
    verdict = REPRODUCED if beyond == 2 else PARTLY if leads == 2 else NOT_REPRODUCED
    return text, _capped(payload, verdict)


CLAIMS = [
    Claim(key="chen-vgg-gmpmn-best", paper="chen", source="paper", result="table2",
          text="VGG-6 on ImageNet32: GmP+MN achieves the best top-1 and top-5 validation accuracy for all batch "
               "sizes (256, 512, 1024) (Table 2).",
          rule="in every (batch size, metric) cell (6 at the paper's three batch sizes), GmP+MN's accuracy minus "
               "each other variant's, " + _PAIRED + ": reproduced if all five intervals of every cell lie above 0 "
               "(GmP+MN best beyond noise everywhere); partly if GmP+MN has the highest mean in every cell but "
               "not beyond noise; else not reproduced" + _DIVERGED + _STAND_IN,
          check=_gmp_mn_best, test=PowerTest("t", SEEDS)),
    Claim(key="chen-vgg-batch-advantage", paper="chen", source="paper", result="table2",
          text="The improvement of GmP+MN over the other methods becomes larger as the batch size increases "
               "(Table 2).",
          rule="per seed, margin = GmP+MN's accuracy minus that of the other variant with the highest mean at "
               "that batch size, and growth = the margin at the largest batch size minus that at the smallest, "
               + _PAIRED + ": reproduced if the intervals of the growth in top-1 and in top-5 both lie above 0; "
               "partly if both mean growths are positive but not both beyond noise; else not reproduced"
               + _DIVERGED + _STAND_IN,
          check=_advantage_grows, test=PowerTest("t", SEEDS)),
    Claim(key="chen-vgg-mn-helps", paper="chen", source="paper", result="table2",
          text="Mean normalization improves GmP in deep networks: GmP+MN beats GmP (Table 2).",
          rule="at each batch size, GmP+MN's top-1 minus GmP's, " + _PAIRED + ": reproduced if every interval "
               "lies above 0; partly if every mean difference is positive but not every one beyond noise; else "
               "not reproduced" + _DIVERGED + _STAND_IN,
          check=_mn_helps, test=PowerTest("t", SEEDS)),
    Claim(key="chen-vgg-fastest", paper="chen", source="paper", result="fig4",
          text="GmP achieves the fastest convergence among all compared methods (Fig. 4, batch size 1024).",
          rule="at the largest batch size, each seed's mean top-5 accuracy over the first quarter of the epochs "
               "(of the shortest run that did not diverge; an epoch with no accuracy counts as chance), for the "
               "training and the validation curve; of GmP and GmP+MN the one with the higher mean, minus each of "
               "SP, WN, WN+MBN and BN, " + _PAIRED + ": reproduced if for both curves all four intervals lie "
               "above 0; partly if for both curves GmP or GmP+MN has the highest mean but not beyond noise; else "
               "not reproduced" + _STAND_IN,
          check=_gmp_fastest, test=PowerTest("t", SEEDS)),
]


# ---------------------------------------------------------------- cost estimate

def forward_flops(model: nn.Module, input_shape: Sequence[int]) -> float:
    """Multiply-adds x 2 of one forward pass of one input (convolutions and linear layers).

    A GmP convolution costs what a plain one costs plus its O(weights) hyperspherical map,
    which is negligible per image at batch sizes in the hundreds.
    """
    from gmp.conv import GmPConv2d

    total = 0.0

    def hook(module, inputs, output):
        nonlocal total
        if isinstance(module, nn.Conv2d | GmPConv2d):
            kh, kw = module.kernel_size
            total += 2.0 * output[0].numel() * module.in_channels // module.groups * kh * kw
        elif isinstance(module, nn.Linear):
            total += 2.0 * module.in_features * module.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d | GmPConv2d | nn.Linear)]
    try:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *input_shape))
        model.train(was_training)
    finally:
        for handle in handles:
            handle.remove()
    return total


def gpu_hours(flops_per_image: float, images: int, epochs: int, runs: int, sustained_tflops: float) -> float:
    """An estimate: training costs 3 forward passes per image (forward + backward)."""
    return 3.0 * flops_per_image * images * epochs * runs / (sustained_tflops * 1e12) / 3600.0


def gpu_hours_estimate(cfg: Config | Mapping[str, Any]) -> dict[str, float]:
    """GPU-hours of the paper-scale grid, from FLOPs: an estimate, not a measurement.

    One forward pass of VGG-6 on a 32x32 image (:func:`forward_flops`), three per trained
    image, ``estimate["images"]`` images per epoch, ``estimate["epochs"]`` epochs per run
    (the paper does not report how long its runs lasted: an assumption), every run of the
    config, at ``estimate["sustained_tflops"]`` (a sustained rate, far below the GPU's peak).
    """
    est = cfg["estimate"]
    flops = forward_flops(vgg6("sp", widths=est["widths"]), (3, 32, 32))
    runs = len(cfg["variants"]) * len(est["batch_sizes"]) * est["seeds"]
    return {"forward_gflops": flops / 1e9, "runs": runs,
            "hours_per_run": gpu_hours(flops, est["images"], est["epochs"], 1, est["sustained_tflops"]),
            "hours": gpu_hours(flops, est["images"], est["epochs"], runs, est["sustained_tflops"])}


# ---------------------------------------------------------------- table and figure

def _cell(mean: float | None, se: float | None) -> str:
    if mean is None:
        return "diverged"
    return f"{mean:.2f} ± {se:.2f}" if se else f"{mean:.2f}"


def _matched_batches(payload: Mapping[str, Any], paper_batches: Sequence[int]) -> list[int | None]:
    """Our batch size standing for each of the paper's: by position when the scale has as many
    (the stand-ins scale them down), else the same value or None."""
    ours = list(payload["batch_sizes"])
    if len(ours) == len(paper_batches):
        return ours
    return [b if b in ours else None for b in paper_batches]


def table_frame(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Table 2 side by side: the paper, this build, and the paper-scale cache (or a note).

    Rows: (variant, source); columns: (metric, batch size of the paper, with ours beside).
    """
    import pandas as pd

    paper_batches = list(live["paper_batch_sizes"])
    ours = _matched_batches(live, paper_batches)
    columns = pd.MultiIndex.from_tuples(
        [(label, f"{pb}" + ("" if b in (pb, None) else f" (ours: {b})")) for label in ("top-1 (%)", "top-5 (%)")
         for pb, b in zip(paper_batches, ours)])

    def measured(payload: Mapping[str, Any], variant: str, batches: list[int | None]) -> list[str]:
        cells = payload["summary"][variant]
        return [_cell(cells[str(b)][m], cells[str(b)][f"{m}_se"]) if b is not None else "not run"
                for m in ("top1", "top5") for b in batches]

    rows, index = [], []
    for variant in live["summary"]:
        paper = PAPER["table2"][variant]
        rows.append([_cell(*paper[m][pb]) for m in ("top1", "top5") for pb in paper_batches])
        index.append((variant, "paper"))
        rows.append(measured(live, variant, ours))
        index.append((variant, f"ours, {live['scale']} scale ({live['dataset']})"))
        if cached is not None:
            rows.append(measured(cached, variant, _matched_batches(cached, paper_batches)))
        else:
            rows.append([NOT_RUN] * len(columns))
        index.append((variant, "ours, paper scale (cache)"))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["method", "source"]), columns=columns)


COLOURS = {"SP": "tab:gray", "WN": "tab:blue", "WN+MBN": "tab:cyan", "BN": "tab:green", "GmP": "tab:orange",
           "GmP+MN": "tab:red"}


def plot_curves(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Fig. 4: top-5 training (top) and validation (bottom) accuracy per epoch at the largest
    batch size, mean ± standard error; this build on the left, the paper-scale cache on the right."""
    sources = [(f"{live['scale']} scale, {live['dataset']}, batch {live['batch_size']}", live)]
    if cached is not None:
        sources.append((f"paper scale, {cached['dataset']}, batch {cached['batch_size']}", cached))
    fig, axes = style.subplots(2, len(sources), figsize=(10 if len(sources) > 1 else 8, 7), squeeze=False,
                               sharex="col")
    for col, (title, payload) in enumerate(sources):
        for row, (name, label) in enumerate((("train_top5", "top-5 training accuracy (%)"),
                                             ("val_top5", "top-5 validation accuracy (%)"))):
            ax = axes[row, col]
            for variant, curve in payload["curves"].items():
                mean = np.array([np.nan if v is None else v for v in curve[name]], dtype=float)
                se = np.array([0.0 if v is None else v for v in curve[f"{name}_se"]], dtype=float)
                epochs = np.arange(1, len(mean) + 1)
                ax.plot(epochs, mean, label=variant, color=COLOURS.get(variant))
                ax.fill_between(epochs, mean - se, mean + se, color=COLOURS.get(variant), alpha=0.2)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(title)
            else:
                ax.set_xlabel("epoch")
    axes[0, 0].legend(loc="lower right")
    fig.tight_layout()
    return fig
