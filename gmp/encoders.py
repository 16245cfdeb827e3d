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


ACCURACY = 1e-3
"""How far a :class:`PositionalEncoding` feature may lie from the exact encoding of its
coordinates (in ``[-1, 1]``): more levels than this allows in the input's precision are refused."""


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

    def error_bound(self, dtype: torch.dtype = torch.float32) -> float:
        """A bound on how far a feature computed in ``dtype`` lies from the exact encoding of the
        given coordinates, for coordinates in ``[-1, 1]``: ``sqrt(2) K eps 2^(L-1) pi``.

        Each angle ``p f`` is formed with ``f = 2^k pi`` rounded to ``dtype`` and the product
        rounded, an error of at most ``eps |p| f`` (``eps`` is twice the unit roundoff), which
        the sine and cosine pass on and ``sqrt(2)`` scales; their own rounding (``~eps``) is
        negligible beside it. ``K = 1``; ``K = 2`` for the rotated copies, whose coordinates reach
        ``sqrt(2)`` on ``[-1, 1]^2`` and are themselves rounded. The error grows in proportion to
        ``|p|`` beyond ``[-1, 1]``.
        """
        return (math.sqrt(2.0) * (2 if self.rotated else 1) * torch.finfo(dtype).eps
                * math.pi * 2.0 ** (self.levels - 1))

    def max_levels(self, dtype: torch.dtype = torch.float32) -> int:
        """The most levels whose :meth:`error_bound` in ``dtype`` is at most :data:`ACCURACY`
        (float32: 11, or 10 rotated; float64: 40, or 39 rotated)."""
        per_level = math.sqrt(2.0) * (2 if self.rotated else 1) * torch.finfo(dtype).eps * math.pi
        return int(math.floor(math.log2(ACCURACY / per_level))) + 1

    def out_features(self, in_features: int) -> int:
        """Dimension of the encoding of an ``in_features``-dimensional input."""
        return 2 * self.levels * in_features * (3 if self.rotated else 1)

    def _encode(self, p: Tensor) -> Tensor:
        angles = p.unsqueeze(-1) * self.frequencies.to(p.dtype)
        features = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)
        return math.sqrt(2.0) * features.flatten(start_dim=-3)

    def forward(self, p: Tensor) -> Tensor:
        """Encode ``p`` in float64 when it is float64 and in float32 otherwise (float16 and
        bfloat16 inputs are encoded in float32 and the features rounded back at the end).
        Integer input is refused, as are more levels than :meth:`max_levels` of that precision."""
        if not p.is_floating_point():
            raise ValueError(f"PositionalEncoding needs floating-point coordinates, got dtype {p.dtype}; "
                             "convert them first, e.g. p.float() (integer frequencies would round pi to 3)")
        compute = torch.float64 if p.dtype == torch.float64 else torch.float32
        most = self.max_levels(compute)
        if self.levels > most:
            hint = "use fewer levels" + ("" if p.dtype == torch.float64 else " or float64 coordinates")
            raise ValueError(
                f"levels={self.levels} is too many for {p.dtype} input: computed in {compute}, the top frequency "
                f"2^{self.levels - 1} pi = {math.pi * 2.0 ** (self.levels - 1):.3g} times the rounding of a "
                f"coordinate in [-1, 1] (eps = {torch.finfo(compute).eps:.2g}) lets a feature err by up to "
                f"{self.error_bound(compute):.2g}, more than {ACCURACY:.0e}; at most {most} levels are accepted "
                f"{'with rotated copies ' if self.rotated else ''}in {compute} ({hint})")
        q = p.to(compute)
        if not self.rotated:
            return self._encode(q).to(p.dtype)
        if p.shape[-1] != 2:
            raise ValueError(f"the rotated encoder takes 2-D coordinates (..., 2), got shape {tuple(p.shape)}")
        copies = [q @ rotation.to(compute).T for rotation in self.rotations]
        return torch.cat([self._encode(c) for c in copies], dim=-1).to(p.dtype)

    def extra_repr(self) -> str:
        return f"levels={self.levels}, rotated={self.rotated}"


class AuthorEncoding(nn.Module):
    """The positional encoders of the SBSNN author's public Keras code (``PositionalEncoders.py``).

    They differ from the paper text's (and :class:`PositionalEncoding`) in four ways, each a
    setting here so that an ablation can switch them one at a time:

    * frequencies ``2^k`` for ``k = 0 .. K-1`` with **no factor pi**, and as many of them as
      fill ``width`` features: ``K = width / 4`` (axis-aligned) or ``K = width / 12``
      (``rotated``). At width 192 that is up to ``2^47`` or ``2^15`` on a grid of 256 pixels,
      far above its Nyquist rate, so most features alias to pseudo-random pixel patterns;
    * every feature scaled by ``sqrt(2 scale_factor)`` (the builders' default
      ``scale_factor = 1`` gives the paper's ``sqrt(2)``; the author's script passes 0.5);
    * the feature order of the code: axis-aligned ``[sin(x f), sin(y f), cos(x f), cos(y f)]``
      (each block over the ``K`` frequencies), rotated for each of its three copies
      ``[cos(x f), cos(y f), sin(x f), sin(y f)]``;
    * ``matrices="author"``: the rotated copies are ``p M`` and ``p (M * M)`` with
      ``M = [[cos 2pi/3, sin 2pi/3], [sin 2pi/3, cos 2pi/3]]`` (symmetric, determinant -1/2:
      not a rotation) and ``M * M`` its elementwise square, as the code does;
      ``matrices="rotations"``: the true rotations by ``2pi/3`` and ``4pi/3`` that the paper
      text describes.

    The copies are formed in the input's dtype (float32 in the author's code); the sines and
    cosines are computed in float64 from those exact arguments, so the aliased features are
    well-defined functions of the input and not artefacts of a float32 ``sin`` at ``2^47``.
    """

    def __init__(self, width: int, rotated: bool = False, scale_factor: float = 1.0, matrices: str = "author"):
        super().__init__()
        per = 12 if rotated else 4
        if not isinstance(width, int) or width < per or width % per:
            raise ValueError(f"width must be a positive multiple of {per} for the "
                             f"{'rotated' if rotated else 'axis-aligned'} encoder, got {width!r}")
        if not math.isfinite(scale_factor) or scale_factor <= 0:
            raise ValueError(f"scale_factor must be a positive number, got {scale_factor!r}")
        if matrices not in ("author", "rotations"):
            raise ValueError(f"matrices must be 'author' or 'rotations', got {matrices!r}")
        reach = 2.0 if rotated else 1.0  # bounds |coordinate| of every copy of a point of [-1, 1]^2 (1.37 for 'author')
        most = math.frexp(torch.finfo(torch.float64).max / reach)[1]  # K - 1 < log2(max / reach)
        if width // per > most:
            raise ValueError(f"width={width} gives K = {width // per} frequencies up to 2^{width // per - 1}, and its "
                             f"angles on coordinates in [-1, 1] overflow float64 (in which the features are "
                             f"computed) to inf, so the features would be NaN; at most K = {most}, width "
                             f"{most * per}, is accepted{' for the rotated encoder' if rotated else ''}")
        self.width = width
        self.rotated = bool(rotated)
        self.scale_factor = float(scale_factor)
        self.matrices = matrices
        self.register_buffer("frequencies", 2.0 ** torch.arange(width // per, dtype=torch.float64), persistent=False)

    @property
    def levels(self) -> int:
        """``K``, the number of frequencies."""
        return self.frequencies.numel()

    def copy_matrices(self) -> list[Tensor]:
        """The matrices ``A`` of the three copies ``p A`` of a row of coordinates ``p`` (rotated encoder)."""
        c, s = math.cos(2 * math.pi / 3), math.sin(2 * math.pi / 3)
        if self.matrices == "author":
            m = torch.tensor([[c, s], [s, c]], dtype=torch.float64)
            return [torch.eye(2, dtype=torch.float64), m, m * m]
        return [rotation_matrix(k * 2 * math.pi / 3).T for k in range(3)]

    def forward(self, p: Tensor) -> Tensor:
        if p.shape[-1] != 2 or not p.is_floating_point():
            raise ValueError(f"the encoder takes floating-point 2-D coordinates (..., 2), got {p.dtype} "
                             f"of shape {tuple(p.shape)}")
        amplitude = math.sqrt(2.0 * self.scale_factor)

        def blocks(q: Tensor, first, second) -> list[Tensor]:
            angles = q.double().unsqueeze(-1) * self.frequencies  # (..., 2, K)
            return [first(angles).flatten(-2), second(angles).flatten(-2)]

        if not self.rotated:
            parts = blocks(p, torch.sin, torch.cos)
        else:
            parts = [part for a in self.copy_matrices() for part in blocks(p @ a.to(p.dtype), torch.cos, torch.sin)]
        return (amplitude * torch.cat(parts, dim=-1)).to(p.dtype)

    def extra_repr(self) -> str:
        return (f"width={self.width}, rotated={self.rotated}, levels={self.levels}, "
                f"scale_factor={self.scale_factor}, matrices={self.matrices!r}")
