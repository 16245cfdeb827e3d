"""Hyperspherical coordinates: angles <-> unit vectors (Eq. (6) of Chen & Ge).

A unit vector ``u`` in R^n is written with ``n - 1`` angles ``theta``::

    u_1 = cos(theta_1)
    u_i = sin(theta_1) ... sin(theta_{i-1}) cos(theta_i)      1 < i < n
    u_n = sin(theta_1) ... sin(theta_{n-1})

:func:`angles_to_unit` computes the map with one cumulative product (no loop over units
or over the dimension) and a hand-written backward pass that costs O(n) per unit, so a
geometric-parameterization layer pays O(out * in) per step for its direction.
:func:`unit_to_angles` is its exact inverse for every nonzero vector, including those
with a negative last coordinate: the first ``n - 2`` angles lie in [0, pi] and the last
one in (-pi, pi]. (The official TensorFlow code of Chen & Ge loses the sign of ``u_n``
at initialisation; ours does not.)
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

__all__ = ["angles_to_unit", "unit_to_angles", "uniform_directions"]


def _prefix_products(sines: torch.Tensor) -> torch.Tensor:
    """``P`` with ``P_0 = 1`` and ``P_j = sin(theta_1) ... sin(theta_j)``, shape (..., n)."""
    ones = torch.ones_like(sines[..., :1])
    return torch.cat([ones, torch.cumprod(sines, dim=-1)], dim=-1)


def _unit_from_prefix(prefix: torch.Tensor, cosines: torch.Tensor) -> torch.Tensor:
    """Eq. (6): ``u_i = P_{i-1} cos(theta_i)`` and ``u_n = P_{n-1}``."""
    unit = prefix.clone()
    unit[..., :-1] *= cosines
    return unit


def _angles_to_unit_reference(theta: torch.Tensor) -> torch.Tensor:
    """Eq. (6) in plain differentiable torch ops (autograd through ``cumprod``)."""
    prefix = _prefix_products(torch.sin(theta))
    return torch.cat([prefix[..., :-1] * torch.cos(theta), prefix[..., -1:]], dim=-1)


class _AnglesToUnit(torch.autograd.Function):
    """Eq. (6) with an O(n) backward per unit.

    With ``P_j`` the prefix products of the sines and ``g = dL/du``, the gradient of the
    angle ``theta_j`` (0-based) is ::

        dL/dtheta_j = -g_j P_{j+1} + cot(theta_j) * sum_{i > j} g_i u_i,

    because ``theta_j`` enters ``u_j`` through ``cos`` and every later ``u_i`` through
    the factor ``sin(theta_j)``. The tail sums are one reverse cumulative sum. Units for
    which a prefix product vanishes (an angle exactly 0 or pi, so the cotangent formula
    reads 0/0) take the exact gradient of the plain ``cumprod`` formula instead.
    """

    @staticmethod
    def forward(ctx, theta: torch.Tensor) -> torch.Tensor:
        sines, cosines = torch.sin(theta), torch.cos(theta)
        prefix = _prefix_products(sines)
        unit = _unit_from_prefix(prefix, cosines)
        ctx.save_for_backward(theta, sines, cosines, prefix, unit)
        return unit

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_unit: torch.Tensor) -> torch.Tensor:
        theta, sines, cosines, prefix, unit = ctx.saved_tensors
        tail = (grad_unit[..., 1:] * unit[..., 1:]).flip(-1).cumsum(-1).flip(-1)
        grad = torch.addcdiv(-grad_unit[..., :-1] * prefix[..., 1:], tail * cosines, sines)
        threshold = torch.finfo(theta.dtype).tiny ** 0.5
        degenerate = (prefix[..., 1:].abs() < threshold).any(dim=-1)
        if bool(degenerate.any()):
            with torch.enable_grad():
                rows = theta[degenerate].detach().requires_grad_(True)
                (exact,) = torch.autograd.grad(_angles_to_unit_reference(rows), rows,
                                               grad_unit[degenerate])
            grad[degenerate] = exact
        return grad


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
    return _AnglesToUnit.apply(theta)


def unit_to_angles(u: torch.Tensor) -> torch.Tensor:
    """Hyperspherical angles of nonzero vectors: the exact inverse of :func:`angles_to_unit`.

    ``theta_i = atan2(||u_{i+1:n}||, u_i)`` in [0, pi] for ``i < n - 1``, and
    ``theta_{n-1} = atan2(u_n, u_{n-1})`` in (-pi, pi], which keeps the sign of ``u_n``.
    The tail norms are reverse cumulative sums (accurate in float32 for n in the
    thousands). The vectors need not be normalised; their norm is discarded.

    Args:
        u: vectors of shape ``(..., n)`` with ``n >= 2``, none of them zero.

    Returns:
        Angles of shape ``(..., n - 1)`` with ``angles_to_unit(theta) == u / ||u||``.
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
    theta[..., -1] = torch.atan2(v[..., -1] + 0.0, v[..., -2])  # + 0.0 maps -0.0 to 0.0: angle pi, not -pi
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
