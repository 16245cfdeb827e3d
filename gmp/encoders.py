"""Positional encoders for implicit representations (Section 6 of the SBSNN paper).

The encoder of Mildenhall et al. (NeRF) maps a coordinate ``p`` to
``(sin(2^0 pi p), cos(2^0 pi p), ..., sin(2^(L-1) pi p), cos(2^(L-1) pi p))``; its squared
norm is half its dimension, so the SBSNN paper scales it by ``sqrt(2)`` to give the
encoded vector the squared norm equal to its dimension that a self-normalizing network
expects. The rotated variant encodes the input pair ``(x, y)`` and its rotations by one and
two thirds of a turn, ``D_{2 pi/3}(x, y)`` and ``D_{4 pi/3}(x, y)``, and concatenates the
three encodings; it removes the line artefacts of the axis-aligned encoder (Figs. 5-7).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def rotation_matrix(theta: float) -> Tensor:
    """The 2x2 matrix ``D_theta`` of a rotation by ``theta`` in the x-y plane."""
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


class PositionalEncoding(nn.Module):
    """``sqrt(2)`` times the NeRF encoding of every coordinate, optionally of three rotated copies.

    ``levels`` is ``L``, the number of frequencies ``2^0 pi, ..., 2^(L-1) pi``. Input
    ``(..., d)``; output ``(..., 2 L d)``, or ``(..., 3 * 2 L d)`` when ``rotated`` (then
    ``d`` must be 2). Per coordinate the features are ordered ``sin, cos`` by increasing
    frequency, coordinates one after the other; rotated copies follow the original in the
    order ``D_0, D_{2 pi/3}, D_{4 pi/3}``.
    """

    def __init__(self, levels: int, rotated: bool = False):
        super().__init__()
        if not isinstance(levels, int) or levels < 1:
            raise ValueError(f"levels must be a positive integer, got {levels!r}")
        self.levels = levels
        self.rotated = bool(rotated)
        self.register_buffer("frequencies", math.pi * 2.0 ** torch.arange(levels, dtype=torch.float64),
                             persistent=False)
        rotations = [rotation_matrix(k * 2 * math.pi / 3) for k in range(3)] if rotated else []
        self.register_buffer("rotations", torch.stack(rotations) if rotated else torch.empty(0),
                             persistent=False)

    def out_features(self, in_features: int) -> int:
        """Dimension of the encoding of an ``in_features``-dimensional input."""
        return 2 * self.levels * in_features * (3 if self.rotated else 1)

    def _encode(self, p: Tensor) -> Tensor:
        angles = p.unsqueeze(-1) * self.frequencies.to(p.dtype)
        features = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)
        return math.sqrt(2.0) * features.flatten(start_dim=-3)

    def forward(self, p: Tensor) -> Tensor:
        if not self.rotated:
            return self._encode(p)
        if p.shape[-1] != 2:
            raise ValueError(f"the rotated encoder takes 2-D coordinates (..., 2), got shape {tuple(p.shape)}")
        copies = [p @ rotation.to(p.dtype).T for rotation in self.rotations]
        return torch.cat([self._encode(q) for q in copies], dim=-1)

    def extra_repr(self) -> str:
        return f"levels={self.levels}, rotated={self.rotated}"
