"""Experiment of the chapter book/part1/chen_resnet.md (Table 3 of Chen & Ge): ResNet-34 on
ImageNet (ILSVRC 2012) under WN+MBN, BN and GmP+MN.

Paper scale: the paper's settings (Sec. 5): ``torchvision.models.resnet34(weights=None)``,
SGD with momentum 0.9, learning rate 0.1 and batch size 512 for every method, lr x0.1 after
5 epochs without improvement of the validation top-5 accuracy, stop after 10; random
L x L resize with L ~ U[256, 480], random 224 crop and flip; validation images resized to
368 x 368 and centre-cropped. It needs ImageNet under ``GMP_DATA/imagenet`` and GPUs. The
smaller scales train the same three variants, at a reduced width, on scikit-learn's digits
upsampled to 16 x 16 (offline). The training loop and the summaries are those of
:mod:`gmp.experiments.chen_vgg`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from gmp.config import Config, scaled
from gmp.data.imagenet import imagenet
from gmp.experiments import chen_vgg
from gmp.experiments.chen_vgg import _capped, digit_images, paired_gap, run_key, table_payload
from gmp.models.resnet import resnet34
from gmp.results import NOT_REPRODUCED, NOT_RUN, PARTLY, REPRODUCED, Claim, PowerTest, Store

CHAPTER = "chen_resnet"

VARIANTS: dict[str, str] = {"WN+MBN": "wn_mbn", "BN": "bn", "GmP+MN": "gmp_mn"}
"""The rows of Table 3 -> ``param`` of :func:`gmp.models.resnet34`."""

CONFIG = scaled(
    common=dict(variants=list(VARIANTS), lr={v: 0.1 for v in VARIANTS}, momentum=0.9, monitor="val_top5",
                plateau_factor=0.1, plateau_patience=5, stop_patience=10, paper_batch_sizes=[512],
                estimate=dict(seeds=3, images=1_281_167, epochs=90, sustained_tflops=150)),
    smoke=dict(dataset="digits", image_size=16, width=4, batch_sizes=[256], epochs=1, seeds=[0],
               mn_momentum=0.1, checkpoint=False),
    small=dict(dataset="digits", image_size=16, width=8, batch_sizes=[64], epochs=2, seeds=[0],
               mn_momentum=0.1, checkpoint=False),
    paper=dict(dataset="imagenet", image_size=224, width=64, batch_sizes=[512], epochs=500, seeds=[0, 1, 2],
               mn_momentum=0.01, checkpoint=True),
)

PAPER = {
    # Table 3 of Chen & Ge: mean top-1 / top-5 validation accuracy (%) ± standard error of
    # ResNet-34 on ImageNet (ILSVRC 2012), batch size 512. Values: (mean, standard error).
    "table3": {
        "WN+MBN": {"top1": (66.57, 0.16), "top5": (86.69, 0.11)},
        "BN": {"top1": (66.85, 0.05), "top5": (86.92, 0.02)},
        "GmP+MN": {"top1": (67.24, 0.21), "top5": (87.19, 0.15)},
    },
}


@lru_cache(maxsize=2)
def _imagenet(train: bool):
    return imagenet(train)


def datasets(cfg: Config | Mapping[str, Any], seed: int):
    """(training, validation) data: ImageNet folders, or the digits stand-in at ``image_size``."""
    if cfg["dataset"] == "imagenet":
        return _imagenet(True), _imagenet(False)
    if cfg["dataset"] == "digits":
        return digit_images(True, seed, cfg["image_size"]), digit_images(False, seed, cfg["image_size"])
    raise ValueError(f"unknown dataset {cfg['dataset']!r}: expected 'imagenet' or 'digits'")


def build(cfg: Config | Mapping[str, Any], variant: str) -> nn.Module:
    """ResNet-34 of ``variant`` (a row of Table 3) at ``cfg["width"]``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    imagenet_data = cfg["dataset"] == "imagenet"
    return resnet34(VARIANTS[variant], num_classes=1000 if imagenet_data else 10, width=cfg["width"],
                    in_channels=3 if imagenet_data else 1, mn_momentum=cfg["mn_momentum"])


def run_one(cfg: Config, variant: str, batch_size: int, seed: int, device: torch.device | str = "auto"):
    """One network of Table 3 (see :func:`gmp.experiments.chen_vgg.run_one`)."""
    return chen_vgg.run_one(cfg, variant, batch_size, seed, device, builder=build, data=datasets)


def run_grid(cfg: Config, store: Store, device: torch.device | str = "auto") -> list[dict[str, Any]]:
    """Every (variant, seed) of the config, each journalled by ``store.memo``."""
    return chen_vgg.run_grid(cfg, store, device, run=run_one)


def result_payload(cfg: Config, runs) -> dict[str, Any]:
    """Table 3 (means and standard errors in %) plus each variant's validation curves."""
    payload = table_payload(cfg, runs)
    payload["curves"] = {v: [r["history"]["val_top1"] for r in runs if r["variant"] == v] for v in cfg["variants"]}
    return payload


def table_frame(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Table 3 side by side: the paper, this build, the paper-scale cache (or a plain note)."""
    import pandas as pd

    from gmp.experiments.chen_vgg import _cell

    batch = str(live["batch_sizes"][0])
    live_source, cache_source = f"ours, {live['scale']} scale ({live['dataset']})", "ours, paper scale (cache)"
    rows = {}
    for variant in live["summary"]:
        row = {("paper", m): _cell(*PAPER["table3"][variant][m]) for m in ("top1", "top5")}
        cell = live["summary"][variant][batch]
        row.update({(live_source, m): _cell(cell[m], cell[f"{m}_se"]) for m in ("top1", "top5")})
        for m in ("top1", "top5"):
            if cached is not None:
                c = cached["summary"][variant][str(cached["batch_sizes"][0])]
                row[(cache_source, m)] = _cell(c[m], c[f"{m}_se"])
            else:
                row[(cache_source, m)] = NOT_RUN
        rows[variant] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.columns = pd.MultiIndex.from_tuples([(s, {"top1": "top-1 (%)", "top5": "top-5 (%)"}[m])
                                               for s, m in frame.columns])
    frame.index.name = "method"
    return frame


SEEDS = len(CONFIG["paper"]["seeds"])
"""How many seeds each variant of the paper-scale run has, so how many pairs every comparison of the claim has."""


def seed_accuracies(payload: Mapping[str, Any], variant: str, metric: str) -> list[float]:
    """Each seed's ``metric`` (%) of ``variant``, in the order of the runs, a seed whose run diverged
    counting as chance (0.1% top-1 and 0.5% top-5 on ImageNet; the paper's table, which has no seeds,
    gives its mean as the one value)."""
    cell = payload["summary"][variant][str(payload["batch_sizes"][0])]
    classes = 1000 if payload["dataset"] == "imagenet" else 10
    chance = 100 * (1 if metric == "top1" else 5) / classes
    return [chance if x is None else x for x in cell.get(f"{metric}_seeds", [cell[metric]])]


def _gmp_mn_best(payload: Mapping[str, Any]) -> tuple[str, str]:
    best, beyond, parts = 0, 0, []
    for metric in ("top1", "top5"):
        values = {v: seed_accuracies(payload, v, metric) for v in payload["summary"]}
        means = {v: float(np.mean(x)) for v, x in values.items()}
        gaps = {v: paired_gap(values["GmP+MN"], x) for v, x in values.items() if v != "GmP+MN"}
        leader = max(means, key=means.get)
        best += leader == "GmP+MN"
        beyond += all(low > 0 for _, low, _ in gaps.values())
        parts.append(f"{metric}: best {leader} (" + ", ".join(f"{v} {x:.2f}" for v, x in means.items())
                     + "), GmP+MN minus " + ", ".join(f"{v} {m:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                                                      for v, (m, lo, hi) in gaps.items()))
    batch = str(payload["batch_sizes"][0])
    diverged = [v for v, c in payload["summary"].items()
                if any(x is None for x in c[batch].get("top1_seeds", [c[batch]["top1"]]))]
    seeds = len(seed_accuracies(payload, "GmP+MN", "top1"))
    text = (f"95% paired intervals over {seeds} seed(s): " + "; ".join(parts)
            + (f"; no accuracy (diverged), counted as chance: {', '.join(diverged)}" if diverged else ""))
    verdict = REPRODUCED if beyond == 2 else PARTLY if best == 2 else NOT_REPRODUCED
    return text, _capped(payload, verdict, paper_dataset="imagenet")


CLAIMS = [
    Claim(key="chen-resnet-gmpmn-best", paper="chen", source="paper", result="table3",
          text="ResNet-34 on ImageNet: GmP+MN outperforms BN (torchvision's ResNet) and WN+MBN in top-1 and "
               "top-5 validation accuracy (Table 3).",
          rule=f"GmP+MN's top-1 and top-5 minus BN's and WN+MBN's, paired by seed (a seed gives the three "
               f"variants the same torchvision initial weights, reparameterized for WN+MBN and GmP+MN, and the "
               f"same batch order), each with its 95% Student-t interval over the {SEEDS} paper-scale seeds: "
               f"reproduced if all four intervals lie above 0 (GmP+MN better beyond noise); partly if GmP+MN has "
               f"the highest mean top-1 and top-5 but not beyond noise; else not reproduced; a seed with no "
               f"accuracy (its run diverged) counts as chance; on a stand-in data set (not ImageNet) the verdict "
               f"is at most 'partly', and only the paper-scale run can reproduce the claim",
          check=_gmp_mn_best, test=PowerTest("t", SEEDS)),
]


def paper_payload() -> dict[str, Any]:
    """The paper's Table 3 (``PAPER``) in the format of :func:`result_payload`."""
    summary = {v: {"512": {m: PAPER["table3"][v][m][0] for m in ("top1", "top5")}} for v in PAPER["table3"]}
    return {"dataset": "imagenet", "scale": "paper", "batch_sizes": [512], "paper_batch_sizes": [512],
            "summary": summary}


def gpu_hours_estimate(cfg: Config | Mapping[str, Any]) -> dict[str, float]:
    """GPU-hours of the paper-scale runs from FLOPs: an estimate (``cfg["estimate"]`` holds the
    assumed epochs per run and sustained TFLOP/s; JPEG decoding and data loading not counted)."""
    est = cfg["estimate"]
    flops = chen_vgg.forward_flops(resnet34("bn"), (3, 224, 224))
    runs = len(cfg["variants"]) * est["seeds"]
    return {"forward_gflops": flops / 1e9, "runs": runs,
            "hours_per_run": chen_vgg.gpu_hours(flops, est["images"], est["epochs"], 1, est["sustained_tflops"]),
            "hours": chen_vgg.gpu_hours(flops, est["images"], est["epochs"], runs, est["sustained_tflops"])}


__all__ = ["CONFIG", "PAPER", "CLAIMS", "VARIANTS", "build", "datasets", "run_one", "run_grid", "run_key",
           "result_payload", "table_frame", "paper_payload", "gpu_hours_estimate"]
