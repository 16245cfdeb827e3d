"""How much one run of the lu_real chapter's networks is one draw: the change in training loss
that a change of summation order alone makes, step by step.

Every number a network computes on a mini-batch (the mean cross-entropy, the batch statistics
of BN, the gradients) is a sum over the batch's rows, so reordering the rows of every
mini-batch leaves the function computed unchanged; only the order in which floating-point
sums are taken changes, as it does between two processors of different vector width, between
one thread and two, or between a CPU and a GPU. A network whose training amplifies that
rounding-level change is chaotic: its trajectory, and the numbers read off it after many
steps, are one draw among those the same code gives on other machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from gmp.config import scaled

from .training import Training, load_split

SETTINGS = scaled(
    common=dict(labels=["ReLU-GPN-BN", "SELU-BN", "SELU", "Tanh-GPN"], steps=3),
    smoke=dict(depth=8, width=16, labels=["ReLU-GPN-BN", "GELU-BN", "ReLU-GPN"]),
    small=dict(depth=50, width=64, lr=1e-4),
    paper=dict(depth=200, width=500, lr=1e-4),
)
"""The networks the chapter measures at each scale (two with BN, two without), the steps, and
the depth, width and learning rate: the paper's optimiser from the default build on, the paper's
depth and width only at paper scale (about a minute of CPU; the default build's depth 50 and width 64
take seconds and still show the BN network's amplification). Kept apart from the chapter's config,
whose digest keys its journals."""


def _losses(training: Training, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    losses = []
    for xb, yb in batches:
        training.opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(training.model(xb), yb)
        losses.append(loss.item())
        if not np.isfinite(losses[-1]):
            break
        loss.backward()
        training.opt.step()
    return losses + [float("nan")] * (len(batches) - len(losses))


def order_sensitivity(labels: Sequence[str], x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any],
                      steps: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, np.ndarray]:
    """Relative change ``|L'_k - L_k| / |L_k|`` of each network's training loss at steps
    ``k = 0 .. steps-1`` when the rows of every mini-batch are reversed.

    Each network (a run label, :func:`~gmp.experiments.lu_real.paper.run_label`) is built from
    ``seed`` as the chapter builds it and trained ``steps`` SGD steps on consecutive
    mini-batches of ``cfg["batch_size"]`` rows of ``(x, y)`` (the first rows, in order),
    twice: once as given and once with every mini-batch's rows reversed. Both runs compute the
    same function, so the returned change is rounding amplified by training. A step whose loss
    is not finite in either run, and every later one, is NaN.
    """
    size = int(cfg["batch_size"])
    if steps < 1 or steps * size > x.shape[0]:
        raise ValueError(f"steps must be at least 1 and steps * batch_size ({steps} * {size}) at most the "
                         f"{x.shape[0]} rows given")
    x = x.to(dtype)
    batches = [(x[k * size:(k + 1) * size], y[k * size:(k + 1) * size]) for k in range(steps)]
    reversed_rows = [(xb.flip(0), yb.flip(0)) for xb, yb in batches]
    out = {}
    for label in labels:
        runs = []
        for given in (batches, reversed_rows):
            training = Training(label.removesuffix("-BN"), label.endswith("-BN"), x.shape[1], cfg, seed=seed)
            training.model.to(dtype)
            runs.append(np.array(_losses(training, given)))
        out[label] = np.abs(runs[1] - runs[0]) / np.abs(runs[0])
    return out


def measure(cfg: Mapping[str, Any], seed: int = 0) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """:func:`order_sensitivity` as the chapter runs it at ``cfg``'s scale: the networks,
    steps, depth, width and learning rate of :data:`SETTINGS` (``cfg``'s where it gives none),
    every other setting (momentum, batch size, initialisation) from ``cfg``, on the first
    training rows of its MNIST stand-in, in float32 as the chapter trains. Returns the settings
    used and the changes."""
    settings = {"lr": cfg["lr"], **SETTINGS[cfg.scale], "data": cfg["data"]["mnist"]}
    run_cfg = {**cfg, **{key: settings[key] for key in ("depth", "width", "lr")}}
    x, y = load_split(settings["data"], True, settings["steps"] * int(cfg["batch_size"]))
    return settings, order_sensitivity(settings["labels"], x, y, run_cfg, settings["steps"], seed=seed)
