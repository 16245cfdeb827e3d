"""Multilayer perceptrons under the parameterizations compared by Chen & Ge (Sec. 5).

:func:`mlp` builds ``sizes[0] -> sizes[1] -> ... -> sizes[-1]`` with hidden layers in
one of :data:`PARAMS` and a linear output layer, following the official code:

- "sp": Linear (Glorot-uniform weight, zero bias) -> activation.
- "wn": weight-normalized Linear (``w = g v / ||v||``, ``g`` initialised to ``||v||``,
  ``v`` Glorot) -> activation; the output layer is weight-normalized too.
- "bn": Linear -> BatchNorm1d (framework defaults) -> activation.
- "wn_mbn": weight-normalized Linear -> :class:`gmp.MeanNorm` -> activation (the Linear's
  bias is cancelled by the mean subtraction; kept to match the official code).
- "gmp": :class:`gmp.GmPLinear` (activation included), Eq. (10).
- "gmp_mn": GmPLinear followed by a :class:`gmp.MeanNorm` after every hidden layer, so
  that every layer after the first sees mean-normalized inputs (Eq. (11); the official
  code puts MN after every GmP unit).

Every standard Linear (hidden or output) starts from a Glorot-uniform weight and zero bias
(the Keras defaults of the official code).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from gmp.layers import GmPLinear, MeanNorm

__all__ = ["mlp", "PARAMS", "MLP_INITS"]

#: The parameterizations :func:`mlp` builds.
PARAMS: tuple[str, ...] = ("sp", "wn", "bn", "wn_mbn", "gmp", "gmp_mn")
#: The initialisations of the GmP layers :func:`mlp` builds.
MLP_INITS: tuple[str, ...] = ("glorot", "uniform", "glorot_half")
_ACTIVATIONS = {"relu": nn.ReLU, "identity": nn.Identity}


def _linear(n_in: int, n_out: int, dtype: torch.dtype | None, wn: bool) -> nn.Module:
    layer = nn.Linear(n_in, n_out, dtype=dtype)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return weight_norm(layer) if wn else layer


def mlp(sizes: Sequence[int], param: str = "sp", activation: str = "relu",
        dtype: torch.dtype | None = None, init: str = "glorot") -> nn.Sequential:
    """A ReLU MLP with hidden layers under parameterization ``param``.

    Args:
        sizes: layer widths ``[in, hidden..., out]`` (at least two entries, all >= 1).
        param: one of :data:`PARAMS` (see the module docstring).
        activation: "relu" or "identity".
        dtype: parameter dtype (e.g. ``torch.float64`` for the regression tasks).
        init: "glorot" (official code: GmP layers convert a Glorot weight, ``r = ||w||``,
            ``lam = 0``) or "uniform" (GmP only, paper text Sec. 3.3: uniform directions,
            ``lam = 0``, ``r = 1``) or "glorot_half" (GmP only: the Glorot conversion with
            the official inverse map's half-sphere quirk, see :class:`gmp.GmPLinear`).

    Returns:
        An ``nn.Sequential`` whose last module is the output layer (no activation).
    """
    if param not in PARAMS:
        raise ValueError(f"unknown param {param!r}: expected one of {', '.join(PARAMS)}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}: expected one of {', '.join(_ACTIVATIONS)}")
    if init not in MLP_INITS:
        raise ValueError(f"unknown init {init!r}: expected one of {', '.join(MLP_INITS)}")
    if init != "glorot" and param not in ("gmp", "gmp_mn"):
        raise ValueError(f"init={init!r} applies to GmP layers only (param 'gmp' or 'gmp_mn'), got param {param!r}")
    sizes = list(sizes)
    if len(sizes) < 2 or not all(isinstance(s, int) and s >= 1 for s in sizes):
        raise ValueError(f"sizes must be at least two ints >= 1 ([in, hidden..., out]), got {sizes!r}")
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1]):
        if param in ("gmp", "gmp_mn"):
            layers.append(GmPLinear(n_in, n_out, activation=activation, init=init, dtype=dtype))
            if param == "gmp_mn":
                layers.append(MeanNorm(n_out, dtype=dtype))
            continue
        layers.append(_linear(n_in, n_out, dtype, wn=param in ("wn", "wn_mbn")))
        if param == "bn":
            layers.append(nn.BatchNorm1d(n_out, dtype=dtype))
        elif param == "wn_mbn":
            layers.append(MeanNorm(n_out, dtype=dtype))
        layers.append(_ACTIVATIONS[activation]())
    layers.append(_linear(sizes[-2], sizes[-1], dtype, wn=param in ("wn", "wn_mbn")))
    return nn.Sequential(*layers)
