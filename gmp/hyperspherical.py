"""Hyperspherical coordinates: angles <-> unit vectors (Eq. (6) of Chen & Ge).

A unit vector ``u`` in R^n is written with ``n - 1`` angles ``theta``::

    u_1 = cos(theta_1)
    u_i = sin(theta_1) ... sin(theta_{i-1}) cos(theta_i)      1 < i < n
    u_n = sin(theta_1) ... sin(theta_{n-1})

:func:`angles_to_unit` computes the map with one cumulative product (no loop over units
or over the dimension) and a hand-written backward pass that costs O(n) per unit, so a
geometric-parameterization layer pays O(out * in) per step for its direction;
:func:`scaled_directions` computes ``r u(theta)`` at the same cost.
:func:`unit_to_angles` is its exact inverse for every nonzero vector, including those
with a negative last coordinate: the first ``n - 2`` angles lie in [0, pi] and the last
one in (-pi, pi]. (The official TensorFlow code of Chen & Ge loses the sign of ``u_n``
at initialisation; ours does not.)
"""

from __future__ import annotations

import math
import typing

import torch
from torch.autograd.function import once_differentiable

__all__ = ["angles_to_unit", "scaled_directions", "unit_to_angles", "uniform_directions", "fourth_moment_test",
           "FourthMomentTest"]


def _angles_to_unit_reference(theta: torch.Tensor) -> torch.Tensor:
    """Eq. (6) in plain differentiable torch ops (autograd through ``cumprod``)."""
    prefix = torch.cat([torch.ones_like(theta[..., :1]), torch.cumprod(torch.sin(theta), dim=-1)], dim=-1)
    return torch.cat([prefix[..., :-1] * torch.cos(theta), prefix[..., -1:]], dim=-1)


class _ScaledUnit(torch.autograd.Function):
    """``scale[:, None] * u(theta)`` for angles of shape (m, n - 1), Eq. (6), with an O(n)
    backward per row.

    Forward: one cumulative product ``P_0 = scale``, ``P_{j+1} = P_j sin(theta_j)``
    (0-based), then ``w_j = P_j cos(theta_j)`` for ``j < n - 1`` and ``w_{n-1} = P_{n-1}``.
    Backward, with ``g = dL/dw``: ``theta_j`` enters ``w_j`` through ``cos`` and every later
    ``w_i`` through the factor ``sin(theta_j)``, so ::

        dL/dtheta_j = -g_j P_{j+1} + cot(theta_j) * sum_{i > j} g_i w_i
                    = -g_j P_{j+1} + (w_j / P_{j+1}) * sum_{i > j} g_i w_i,
        dL/dscale   = sum_i g_i w_i / scale,

    where the tail sums are one reverse cumulative sum, and ``cot(theta_j) = w_j / P_{j+1}``
    holds to rounding, so only ``P`` and ``w`` are kept for the backward pass. Rows whose
    last (hence smallest, as ``|sin| <= 1``) prefix product vanishes (an angle exactly 0 or
    pi, or a zero scale: the formulas read 0/0) take the exact gradient of the plain
    ``cumprod`` formula. Folding the scale into the first prefix product makes ``r u(theta)``
    of a GmP layer cost no pass more than ``u(theta)``.
    """

    @staticmethod
    def forward(ctx, theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        m, n = theta.shape[0], theta.shape[1] + 1
        prefix = torch.empty(m, n, dtype=theta.dtype, device=theta.device)
        prefix[:, 0] = scale
        torch.sin(theta, out=prefix[:, 1:])
        prefix.cumprod_(dim=1)
        weight = torch.empty_like(prefix)
        torch.cos(theta, out=weight[:, :-1])
        weight[:, :-1] *= prefix[:, :-1]
        weight[:, -1] = prefix[:, -1]
        ctx.save_for_backward(theta, scale, prefix, weight)
        return weight

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta, scale, prefix, weight = ctx.saved_tensors
        # reversed[:, k] = sum_{i >= n - 1 - k} g_i w_i: the tail sums, last column first.
        reversed_tails = (grad_weight * weight).flip(1).cumsum_(1)
        grad_theta = reversed_tails[:, :-1].flip(1)  # sum_{i > j} g_i w_i, a fresh contiguous buffer
        grad_theta.mul_(weight[:, :-1]).div_(prefix[:, 1:])
        grad_theta.addcmul_(grad_weight[:, :-1], prefix[:, 1:], value=-1.0)
        grad_scale = reversed_tails[:, -1] / scale
        degenerate = prefix[:, -1].abs() < torch.finfo(theta.dtype).tiny ** 0.5
        if bool(degenerate.any()):
            with torch.enable_grad():
                rows = theta[degenerate].detach().requires_grad_(True)
                row_scale = scale[degenerate].detach().requires_grad_(True)
                exact = row_scale[:, None] * _angles_to_unit_reference(rows)
                grad_rows, grad_row_scale = torch.autograd.grad(exact, (rows, row_scale), grad_weight[degenerate])
            grad_theta[degenerate] = grad_rows
            grad_scale[degenerate] = grad_row_scale
        return grad_theta, grad_scale


def _scaled_unit(theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:class:`_ScaledUnit`, or under ``torch.compile`` the same formula in plain ops: its
    forward writes into slices and its backward tests for degenerate rows on the host,
    which a compiled graph cannot do; the compiler differentiates ``cumprod`` exactly itself."""
    if torch.compiler.is_compiling():
        return scale[:, None] * _angles_to_unit_reference(theta)
    return _ScaledUnit.apply(theta, scale)


def scaled_directions(theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``scale[:, None] * u(theta)``: rows of length ``|scale|`` along Eq. (6)'s unit vectors.

    Args:
        theta: angles of shape ``(m, n - 1)``.
        scale: one factor per row, shape ``(m,)``.

    Returns:
        Shape ``(m, n)``; differentiable in both arguments at O(m n) cost.
    """
    _check_floating(theta, "theta")
    if theta.dim() != 2 or scale.shape != theta.shape[:1]:
        raise ValueError(f"expected theta (m, n - 1) and scale (m,), got {tuple(theta.shape)} and {tuple(scale.shape)}")
    return _scaled_unit(theta, scale.to(theta.dtype))


def _check_floating(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension (..., n), got a scalar")


def angles_to_unit(theta: torch.Tensor) -> torch.Tensor:
    """Unit vectors from hyperspherical angles, Eq. (6) of Chen & Ge.

    Args:
        theta: angles of shape ``(..., n - 1)``; any real values (the map is periodic).

    Returns:
        Unit vectors of shape ``(..., n)``. With ``n - 1 = 0`` angles the result is 1.
    """
    _check_floating(theta, "theta")
    flat = theta.reshape(math.prod(theta.shape[:-1]), theta.shape[-1])
    unit = _scaled_unit(flat, torch.ones(flat.shape[0], dtype=theta.dtype, device=theta.device))
    return unit.reshape(*theta.shape[:-1], theta.shape[-1] + 1)


def unit_to_angles(u: torch.Tensor, half_sphere: bool = False) -> torch.Tensor:
    """Hyperspherical angles of nonzero vectors: the exact inverse of :func:`angles_to_unit`.

    ``theta_i = atan2(||u_{i+1:n}||, u_i)`` in [0, pi] for ``i < n - 1``, and
    ``theta_{n-1} = atan2(u_n, u_{n-1})`` in (-pi, pi], which keeps the sign of ``u_n``.
    The tail norms are reverse cumulative sums (accurate in float32 for n in the
    thousands). The vectors need not be normalised; their norm is discarded.

    Args:
        u: vectors of shape ``(..., n)`` with ``n >= 2``, none of them zero.
        half_sphere: reproduce the official code's inverse instead, whose last angle
            ``atan2(|u_n|, u_{n-1})`` lies in [0, pi]: it maps ``u`` to the direction of
            ``(u_1, ..., u_{n-1}, |u_n|)``, so every direction lands in the half-sphere
            ``u_n >= 0`` (the quirk the book measures; never use it otherwise).

    Returns:
        Angles of shape ``(..., n - 1)`` with ``angles_to_unit(theta) == u / ||u||``
        (with ``|u_n|`` in place of ``u_n`` when ``half_sphere``).
    """
    _check_floating(u, "u")
    n = u.shape[-1]
    if n < 2:
        raise ValueError(f"unit_to_angles needs vectors of dimension n >= 2 (shape (..., n)), got n = {n}")
    if not bool(torch.isfinite(u).all()):
        raise ValueError("unit_to_angles needs finite vectors; got inf or nan")
    scale = u.abs().amax(dim=-1, keepdim=True)
    if bool((scale == 0).any()):
        raise ValueError("unit_to_angles needs nonzero vectors: the direction of the zero vector is undefined")
    v = u / scale
    tail_norms = (v[..., 1:] ** 2).flip(-1).cumsum(-1).flip(-1).sqrt()
    theta = torch.atan2(tail_norms, v[..., :-1])
    last = v[..., -1].abs() if half_sphere else v[..., -1]
    theta[..., -1] = torch.atan2(last + 0.0, v[..., -2])  # + 0.0 maps -0.0 to 0.0: angle pi, not -pi
    return theta


def uniform_directions(out: int, n: int, generator: torch.Generator | None = None,
                       dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None) -> torch.Tensor:
    """``out`` directions drawn uniformly on the unit sphere of R^n, shape ``(out, n)``.

    A standard Gaussian vector is rotation invariant, so its normalisation is uniform on
    the sphere (Sec. 3.3 of Chen & Ge). Uniform *angles* are not: they crowd the poles.
    """
    if not isinstance(out, int) or out < 0:
        raise ValueError(f"out must be a non-negative int, got {out!r}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    gaussian = torch.randn(out, n, generator=generator, dtype=dtype, device=device)
    return gaussian / gaussian.norm(dim=-1, keepdim=True)


class FourthMomentTest(typing.NamedTuple):
    """Result of :func:`fourth_moment_test`."""

    ratio: float
    """Mean of ``sum_i u_i^4`` over the directions divided by its value ``3 / (n + 2)`` on the sphere."""
    z: float
    """``(mean - 3 / (n + 2))`` in standard errors of the mean under uniformity."""
    p_value: float
    """Two-sided p-value of ``z`` (normal approximation, exact moments)."""


def fourth_moment_test(u: torch.Tensor) -> FourthMomentTest:
    """Test whether the rows of ``u`` (unit vectors, shape ``(m, n)``) are uniform on the sphere.

    The second moments cannot tell: ``E[u_i^2] = 1/n`` for any direction whose coordinates
    are exchangeable, such as the normalised i.i.d. weights of any initialisation. The fourth
    moments can: on the unit sphere of R^n, ``E[u_i^4] = 3 / (n (n + 2))``, so each row's
    ``s = sum_i u_i^4`` has mean ``3 / (n + 2)`` and variance
    ``(9 n + 96) / ((n + 2)(n + 4)(n + 6)) - 9 / (n + 2)^2`` (from ``E[u_i^8] = 105 / (n (n + 2)
    (n + 4)(n + 6))`` and ``E[u_i^4 u_j^4] = 9 / (n (n + 2)(n + 4)(n + 6))``). The rows are
    independent, so the mean of ``s`` over ``m`` rows is compared with ``3 / (n + 2)`` in
    standard errors ``sqrt(var / m)``. Normalised i.i.d. uniform weights (Glorot-uniform) have
    ``E[u_i^4] ~ 9 / (5 n^2)``, 40% less, and are rejected at ``n = 100`` with a few hundred
    directions; normalised Gaussian weights are uniform (Sec. 3.3 of Chen & Ge) and are not.
    """
    if u.ndim != 2 or u.shape[1] < 2 or u.shape[0] < 1:
        raise ValueError(f"u must have shape (m, n) with m >= 1 and n >= 2, got {tuple(u.shape)}")
    n, m = u.shape[1], u.shape[0]
    s = (u.double() ** 4).sum(dim=1)
    mean = 3 / (n + 2)
    var = (9 * n + 96) / ((n + 2) * (n + 4) * (n + 6)) - 9 / (n + 2) ** 2
    z = (float(s.mean()) - mean) / math.sqrt(var / m)
    return FourthMomentTest(ratio=float(s.mean()) / mean, z=z, p_value=math.erfc(abs(z) / math.sqrt(2)))
