"""The two synthetic problems of Chen & Ge: 1-D Levy regression (Fig. 2) and 2-D banana
classification (Fig. 3).

Both follow the settings of the authors' public TensorFlow code (see the book's notes on
it); the random draws use NumPy's ``default_rng(seed)``, so they are not the same points
as the authors' runs, only the same distribution.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

import numpy as np
import pandas as pd
import torch

from gmp.data._fetch import fetch

LEVY_DOMAIN: tuple[float, float] = (-10.0, 10.0)
"""Inputs of the Levy task are drawn from, and tested on, this interval."""

LEVY_TEST_POINTS = 201
"""The noiseless test grid -10, -9.9, ..., 10."""

BANANA_RELPATH = "banana/2d_banana.csv"
BANANA_COMMIT = "0c48483a1089c16183308216a990f4235219a0ca"
BANANA_URL = ("https://raw.githubusercontent.com/Wenlin-Chen/geometric-parameterization/"
              f"{BANANA_COMMIT}/2d_banana/2d_banana.csv")
BANANA_SHA256 = "c76502bdf63e4f74e0290bd98da2c425aab247c919cee6dfbfe856694c484e55"
"""The 5,300-point banana set (Rätsch's IDA benchmark, KEEL export) as shipped with the
official code of Chen & Ge; header ``At1,At2,Class``, labels -1 / +1."""

Array = TypeVar("Array", np.ndarray, torch.Tensor)


@dataclasses.dataclass(frozen=True)
class ToyData:
    """Training and test tensors of a synthetic task; ``x_val``/``y_val`` are None unless a
    validation set was carved out of the training points. ``mean``/``scale`` are the input
    statistics the inputs were standardised with (zero and one when they were not)."""

    name: str
    seed: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None


def levy_function(x: Array) -> Array:
    """The 1-D Levy function ``f(x) = sin^2(pi w) + (w - 1)^2 (1 + sin^2(2 pi w))``,
    ``w = 1 + (x - 1) / 4`` (the target of Fig. 2 of Chen & Ge). Its global minimum is
    ``f(1) = 0``. Works on NumPy arrays and torch tensors alike."""
    sin = torch.sin if isinstance(x, torch.Tensor) else np.sin
    w = 1 + (x - 1) / 4
    return sin(math.pi * w) ** 2 + (w - 1) ** 2 * (1 + sin(2 * math.pi * w) ** 2)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


LEVY_DRAWS = ("notebook", "default_rng")
"""The draws of :func:`levy`'s training points. ``"notebook"`` draws them as the official notebook does;
``"default_rng"`` draws them by NumPy's ``default_rng(seed)``, the book's draw until 2026-11-26, kept for the check
arm that reruns that earlier design (``gmp.experiments.chen_levy_arms``)."""


def levy(n_train: int = 50, noise: float = 0.1, seed: int = 0, dtype: torch.dtype = torch.float64,
         draw: str = "notebook") -> ToyData:
    """The Levy regression task of Fig. 2 of Chen & Ge.

    ``n_train`` inputs ``x ~ U(-10, 10)`` with targets ``f(x) + noise * N(0, 1)``; the test
    set is the noiseless grid -10, -9.9, ..., 10 (201 points). Inputs are not standardised
    (as in the official code). Tensors have shape (rows, 1) and the given ``dtype``
    (float64 as in the paper). The points and the noise are drawn as the official notebook
    draws them after ``np.random.seed(seed)`` (NumPy's legacy generator, the inputs first), so
    seed 0 gives the training data of the paper's Fig. 2. ``draw="default_rng"`` draws them instead by
    ``np.random.default_rng(seed)``: the inputs, then the noise as ``noise`` times standard normals
    (:data:`LEVY_DRAWS`).
    """
    if isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1:
        raise ValueError(f"n_train must be an integer >= 1, got {n_train!r}")
    if not noise >= 0:
        raise ValueError(f"noise must be a standard deviation >= 0, got {noise!r}")
    if draw == "notebook":
        rng = np.random.RandomState(_check_seed(seed))  # the official notebook's draw, np.random.seed(seed)
        x = rng.uniform(*LEVY_DOMAIN, size=(n_train, 1))[:, 0]
        y = levy_function(x) + rng.normal(0.0, noise, size=(n_train, 1))[:, 0]
    elif draw == "default_rng":
        generator = np.random.default_rng(_check_seed(seed))
        x = generator.uniform(*LEVY_DOMAIN, size=n_train)
        y = levy_function(x) + noise * generator.standard_normal(n_train)
    else:
        raise ValueError(f"draw must be one of {', '.join(map(repr, LEVY_DRAWS))}, got {draw!r}")
    grid = np.linspace(*LEVY_DOMAIN, LEVY_TEST_POINTS)

    def column(values: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(values[:, None], dtype=dtype)

    return ToyData(name="levy", seed=int(seed), x_train=column(x), y_train=column(y),
                   x_test=column(grid), y_test=column(levy_function(grid)),
                   mean=np.zeros(1), scale=np.ones(1))


def banana_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 5,300 banana points: inputs (n, 2) float64 and labels (n,) in {0, 1} (-1 -> 0)."""
    frame = pd.read_csv(fetch(BANANA_RELPATH, BANANA_URL, BANANA_SHA256))
    expected = ["At1", "At2", "Class"]
    if list(frame.columns) != expected:
        raise ValueError(f"{BANANA_RELPATH} should have the columns {expected}, found {list(frame.columns)}")
    labels = frame["Class"].to_numpy()
    if not set(np.unique(labels)) <= {-1, 1}:
        raise ValueError(f"{BANANA_RELPATH}: labels should be -1 / +1, found {sorted(set(labels))}")
    return frame[["At1", "At2"]].to_numpy(np.float64), (labels == 1).astype(np.int64)


def banana(seed: int = 0, n: int = 1000, test_fraction: float = 0.2, validation_fraction: float | None = None,
           dtype: torch.dtype = torch.float32) -> ToyData:
    """The banana classification task of Fig. 3 of Chen & Ge.

    ``n`` of the 5,300 points are drawn without replacement (the first ``n`` of a
    ``default_rng(seed)`` permutation); the first ``ceil(test_fraction * n)`` of them form
    the test set (200 of 1,000), the rest the training set (800). With
    ``validation_fraction``, the last ``ceil(validation_fraction * n_train)`` training
    points are held out as a validation set (the book's clean protocol; the official code
    monitors the test set instead). Inputs are standardised with the mean and standard
    deviation (``ddof=0``) of the points used for training. Labels are int64 in {0, 1}.
    """
    x, y = banana_arrays()
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= len(x):
        raise ValueError(f"n must be an integer in [2, {len(x)}], got {n!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if validation_fraction is not None and not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be None or lie in (0, 1), got {validation_fraction!r}")
    chosen = np.random.default_rng(_check_seed(seed)).permutation(len(x))[:n]
    n_test = math.ceil(test_fraction * n)
    test, rest = chosen[:n_test], chosen[n_test:]
    n_val = math.ceil(validation_fraction * len(rest)) if validation_fraction is not None else 0
    if n_val >= len(rest):
        raise ValueError(f"validation_fraction={validation_fraction} leaves no training points out of {len(rest)}")
    train, val = rest[:len(rest) - n_val], rest[len(rest) - n_val:]
    mean, scale = x[train].mean(axis=0), x[train].std(axis=0)

    def inputs(rows: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((x[rows] - mean) / scale, dtype=dtype)

    def labels(rows: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(y[rows], dtype=torch.int64)

    has_val = validation_fraction is not None
    return ToyData(name="banana", seed=int(seed), x_train=inputs(train), y_train=labels(train),
                   x_test=inputs(test), y_test=labels(test),
                   x_val=inputs(val) if has_val else None, y_val=labels(val) if has_val else None,
                   mean=mean, scale=scale)
