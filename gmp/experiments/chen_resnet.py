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
from gmp.experiments.chen_vgg import _capped, digit_images, run_key, table_payload
from gmp.models.resnet import resnet34
from gmp.results import NOT_REPRODUCED, NOT_RUN, PARTLY, REPRODUCED, Claim, Store

CHAPTER = "chen_resnet"

VARIANTS: dict[str, str] = {"WN+MBN": "wn_mbn", "BN": "bn", "GmP+MN": "gmp_mn"}
"""The rows of Table 3 -> ``param`` of :func:`gmp.models.resnet34`."""

CONFIG = scaled(
    common=dict(variants=list(VARIANTS), lr={v: 0.1 for v in VARIANTS}, momentum=0.9, monitor="val_top5",
                plateau_factor=0.1, plateau_patience=5, stop_patience=10, paper_batch_sizes=[512],
                estimate=dict(seeds=3, images=1_281_167, epochs=90, sustained_tflops=150)),
    smoke=dict(dataset="digits", image_size=16, width=4, batch_sizes=[256], epochs=1, seeds=[0],
               mn_momentum=0.1, checkpoint=False),
    small=dict(dataset="digits", image_size=16, width=8, batch_sizes=[64], epochs=4, seeds=[0],
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


def _gmp_mn_best(payload: Mapping[str, Any]) -> tuple[str, str]:
    batch = str(payload["batch_sizes"][0])
    classes = 1000 if payload["dataset"] == "imagenet" else 10
    chance = {"top1": 100 / classes, "top5": 500 / classes}
    wins = []
    for metric in ("top1", "top5"):
        values = {}
        for v, c in payload["summary"].items():
            seeds = c[batch].get(f"{metric}_seeds", [c[batch][metric]])
            values[v] = float(np.mean([chance[metric] if x is None else x for x in seeds]))
        wins.append((metric, max(values, key=values.get), values))
    diverged = [v for v, c in payload["summary"].items()
                if any(x is None for x in c[batch].get("top1_seeds", [c[batch]["top1"]]))]
    text = ("; ".join(f"{m}: best {b} (" + ", ".join(f"{v} {x:.2f}" for v, x in vals.items()) + ")"
                      for m, b, vals in wins)
            + (f"; no accuracy (diverged), counted as chance: {', '.join(diverged)}" if diverged else ""))
    best = sum(b == "GmP+MN" for _, b, _ in wins)
    verdict = REPRODUCED if best == 2 else PARTLY if best == 1 else NOT_REPRODUCED
    return text, _capped(payload, verdict, paper_dataset="imagenet")


CLAIMS = [
    Claim(key="chen-resnet-gmpmn-best", paper="chen", source="paper", result="table3",
          text="ResNet-34 on ImageNet: GmP+MN outperforms BN (torchvision's ResNet) and WN+MBN in top-1 and "
               "top-5 validation accuracy (Table 3).",
          rule="reproduced if GmP+MN has the highest mean top-1 and top-5 over the seeds (a seed with no "
               "accuracy, its run diverged, counts as chance); partly if one of them; else not reproduced; on a stand-in data "
               "set (not ImageNet) the verdict is at most 'partly', and only the paper-scale run can reproduce "
               "the claim",
          check=_gmp_mn_best),
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
