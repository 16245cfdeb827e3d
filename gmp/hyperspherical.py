"""Hyperspherical coordinates: angles <-> unit vectors (Eq. (6) of Chen & Ge).

A unit vector ``u`` in R^n is written with ``n - 1`` angles ``theta``::

    u_1 = cos(theta_1)
    u_i = sin(theta_1) ... sin(theta_{i-1}) cos(theta_i)      1 < i < n
    u_n = sin(theta_1) ... sin(theta_{n-1})

:func:`angles_to_unit` computes the map at O(n) per unit in each direction, so a
geometric-parameterization layer pays O(out * in) per step for its direction;
:func:`scaled_directions` computes ``r u(theta)`` at the same cost. On the CPU (float32 and
float64) each direction is one compiled pass over the angles (:mod:`gmp._native`, built on first
use with the system's C compiler); elsewhere, or without a compiler, a few vectorised torch
passes (one sine, one cosine, one blocked cumulative product forward; one blocked suffix sum
backward, no reversed copies, no second evaluation of sines or cosines) that never read a
tensor back to the host. Both give the same values and gradients to rounding.
:func:`unit_to_angles` is its exact inverse for every nonzero vector, including those
with a negative last coordinate: the first ``n - 2`` angles lie in [0, pi] and the last
one in (-pi, pi]. (The official TensorFlow code of Chen & Ge loses the sign of ``u_n``
at initialisation; ours does not.)
"""

from __future__ import annotations

import functools
import math
import typing

import torch
from torch.autograd.function import once_differentiable

from gmp import _native

__all__ = ["angles_to_unit", "scaled_directions", "unit_to_angles", "uniform_directions", "fourth_moment_test",
           "FourthMomentTest"]


def _angles_to_unit_reference(theta: torch.Tensor) -> torch.Tensor:
    """Eq. (6) in plain differentiable torch ops (autograd through ``cumprod``)."""
    prefix = torch.cat([torch.ones_like(theta[..., :1]), torch.cumprod(torch.sin(theta), dim=-1)], dim=-1)
    return torch.cat([prefix[..., :-1] * torch.cos(theta), prefix[..., -1:]], dim=-1)


_BLOCK = 16
"""Width of the blocks in which long rows are scanned (see :func:`_padded_width`)."""


def _padded_width(n: int) -> int:
    """Columns of the work buffers of a row of ``n`` coordinates: ``n`` itself when one
    triangular ``(n, n)`` matrix product scans it (``n <= 2 * _BLOCK``), else ``n`` rounded up
    to whole blocks of ``_BLOCK``, which are scanned separately and then joined."""
    return n if n <= 2 * _BLOCK else -(-n // _BLOCK) * _BLOCK


@functools.lru_cache(maxsize=64)
def _lower_ones(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``M[i, j] = 1`` for ``i >= j``: ``x @ M`` is the reverse inclusive cumulative sum of the rows of ``x``."""
    return torch.ones(size, size, dtype=dtype, device=device).tril_()


def _cumprod_(prefix: torch.Tensor) -> torch.Tensor:
    """Cumulative product along the rows of ``prefix`` (m, N), in place, N from :func:`_padded_width`.

    A scan along a row is one chain of dependent multiplications, latency-bound; on rows
    longer than ``2 * _BLOCK`` the chains are cut into blocks, then each block is multiplied
    by the product of the blocks before it (a scan over block totals, ``_BLOCK`` times shorter).
    """
    m, width = prefix.shape
    if width <= 2 * _BLOCK:
        return prefix.cumprod_(1)
    blocks = prefix.view(m, width // _BLOCK, _BLOCK).cumprod_(2)
    blocks[:, 1:] *= blocks[:, :-1, -1].cumprod(1)[:, :, None]
    return prefix


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """``R[:, l] = sum_{i >= l} x[:, i]`` for ``x`` (m, N), N from :func:`_padded_width`.

    On the CPU, without reversed copies: within a block, one product with a triangular matrix
    of ones (``0 * x`` adds an exact zero, so every sum holds exactly its own terms); across
    blocks, the suffix sums of the block totals (``_BLOCK`` times fewer numbers) are added to
    each block. Where a matrix product may round its float32 operands to TF32 or bfloat16 (a
    GPU, or ``torch.set_float32_matmul_precision`` below "highest"), a cumulative sum between
    two reversals instead.
    """
    if not _exact_matmul(x):
        return x.flip(1).cumsum(1).flip(1)
    m, width = x.shape
    if width <= 2 * _BLOCK:
        return x @ _lower_ones(width, x.dtype, x.device)
    blocks = (x.view(-1, _BLOCK) @ _lower_ones(_BLOCK, x.dtype, x.device)).view(m, width // _BLOCK, _BLOCK)
    later = blocks[:, 1:, 0].flip(1).cumsum(1).flip(1)  # sum of the blocks after block b, for b < last
    blocks[:, :-1] += later[:, :, None]
    return blocks.view(m, width)


def _exact_matmul(x: torch.Tensor) -> bool:
    """Whether a matrix product of ``x`` on its device keeps ``x``'s precision: on the CPU, for
    float32 only while products may not drop to bfloat16 (the default)."""
    if x.device.type != "cpu":
        return False
    if x.dtype != torch.float32:
        return True
    matmul = getattr(torch.backends.mkldnn, "matmul", None)
    if matmul is not None and hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision in ("none", "ieee")
    return torch.get_float32_matmul_precision() == "highest"


class _ScaledUnit(torch.autograd.Function):
    """``scale[:, None] * u(theta)`` for angles of shape (m, n - 1), Eq. (6), with an O(n)
    backward per row.

    Write the factors ``f_0 = scale``, ``f_{j+1} = sin(theta_j)`` and their prefix products
    ``P_l = f_0 ... f_l``; then ``w_j = P_j cos(theta_j)`` for ``j < n - 1`` and
    ``w_{n-1} = P_{n-1}``. Forward: one sine pass written into the work buffer, one scan
    (:func:`_cumprod_`), one cosine pass written into the output and one product; the sines
    and cosines are not evaluated again in the backward pass. Backward, with ``g = dL/dw``
    and the suffix sums ``R_l = sum_{i >= l} g_i w_i`` (:func:`_reverse_cumsum`; on the CPU no
    reversed copies): ``f_l`` multiplies every ``w_i`` with ``i >= l``, so ``dL/df_l = R_l / f_l`` and ::

        dL/dtheta_j = -g_j P_{j+1} + cos(theta_j) R_{j+1} / sin(theta_j)
                    = -g_j P_{j+1} + R_{j+1} w_j / P_{j+1},
        dL/dscale   = R_0 / scale.

    Where a prefix product is zero (a zero angle, a zero scale, or underflow), the quotients
    read 0/0 and those positions take their exact value instead
    (:func:`_degenerate_factor_grads`), on a GPU with masks over every row, so that no step
    waits for the host.
    Folding the scale into the first factor makes ``r u(theta)`` of a GmP layer cost no
    pass more than ``u(theta)``.
    """

    @staticmethod
    def forward(ctx, theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        m, k = theta.shape
        n, width = k + 1, _padded_width(k + 1)
        prefix = torch.empty(m, width, dtype=theta.dtype, device=theta.device)
        prefix[:, 0] = scale
        torch.sin(theta, out=prefix[:, 1:n])
        if width > n:
            prefix[:, n:] = 1.0
        _cumprod_(prefix)
        weight = torch.empty(m, n, dtype=theta.dtype, device=theta.device)
        torch.cos(theta, out=weight[:, :k]).mul_(prefix[:, :k])
        weight[:, k] = prefix[:, k]
        ctx.save_for_backward(theta, prefix, weight)
        return weight

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta, prefix, weight = ctx.saved_tensors
        m, n = weight.shape
        k, width = n - 1, prefix.shape[1]
        products = torch.empty(m, width, dtype=weight.dtype, device=weight.device)
        torch.mul(grad_weight, weight, out=products[:, :n])
        if width > n:
            products[:, n:] = 0.0
        tails = _reverse_cumsum(products)
        following = prefix[:, 1:n]
        grad_theta = torch.mul(tails[:, 1:n], weight[:, :k]).div_(following).addcmul_(grad_weight[:, :k], following,
                                                                                      value=-1.0)
        grad_scale = tails[:, 0] / prefix[:, 0]
        if not _index_rows(theta.device):  # every row, masked: no host synchronisation
            return _degenerate_factor_grads(theta, prefix[:, :n], grad_weight, grad_theta, grad_scale)
        # |P_l| never grows along a row (|sin| <= 1), so the last one tells whether a row has a zero.
        rows = (prefix[:, k] == 0).nonzero()[:, 0]
        if len(rows):
            grad_theta[rows], grad_scale[rows] = _degenerate_factor_grads(
                theta[rows], prefix[rows, :n], grad_weight[rows], grad_theta[rows], grad_scale[rows])
        return grad_theta, grad_scale


def _index_rows(device: torch.device) -> bool:
    """Whether the backward pass of :class:`_ScaledUnit` picks the degenerate rows by index
    (on the CPU, where reading a tensor costs no synchronisation) rather than treating every
    row with masks (elsewhere)."""
    return device.type == "cpu"


def _degenerate_factor_grads(theta: torch.Tensor, prefix: torch.Tensor, grad_weight: torch.Tensor,
                             grad_theta: torch.Tensor, grad_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :class:`_ScaledUnit` with the positions of zero prefix products (a
    suffix of each row, where the quotients ``R_l / f_l`` read 0/0) replaced by their exact values.

    Let ``z`` be the first zero of a row: ``f_z`` is zero (a zero scale, a zero sine) or the
    product underflowed there. ``dL/df_z = sum_{i >= z} g_i w_i / f_z`` is the same sum with
    ``f_z`` replaced by 1 in every ``w_i``: one more scan with that factor set to 1. For
    ``l > z``, ``dL/df_l`` carries the factor ``P_z = 0`` and is 0. Hence
    ``dL/dtheta_j = cos(theta_j) dL/df_{j+1} - g_j P_{j+1}`` there, and ``dL/dscale = dL/df_0``.
    """
    m, n = prefix.shape
    zero = prefix == 0
    first = zero.clone()
    first[:, 1:] &= ~zero[:, :-1]
    factors = torch.ones(m, _padded_width(n), dtype=theta.dtype, device=theta.device)
    torch.sin(theta, out=factors[:, 1:n])
    factors[:, 0] = prefix[:, 0]
    factors[:, :n].masked_fill_(first, 1.0)
    _cumprod_(factors)
    cos = torch.cos(theta)
    factors[:, :n - 1] *= cos
    factors[:, :n] *= grad_weight
    factors[:, n:] = 0.0
    at_first = _reverse_cumsum(factors)[:, :n].masked_fill_(~first, 0.0)
    exact_theta = torch.addcmul(cos * at_first[:, 1:], grad_weight[:, :-1], prefix[:, 1:], value=-1.0)
    return (torch.where(zero[:, 1:], exact_theta, grad_theta),
            torch.where(zero[:, 0], at_first[:, 0], grad_scale))


class _CompiledScaledUnit(torch.autograd.Function):
    """:class:`_ScaledUnit` on the CPU in one compiled pass per direction (:mod:`gmp._native`):
    it reads each row of angles once, evaluates its sines and cosines again in the backward pass
    rather than storing them, and has no quotient, so degenerate rows need no second pass."""

    @staticmethod
    def forward(ctx, theta: torch.Tensor, scale: torch.Tensor, kernel: _native.Kernel) -> torch.Tensor:
        ctx.kernel = kernel
        ctx.save_for_backward(theta, scale)
        return kernel.forward(theta, scale)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        theta, scale = ctx.saved_tensors
        return *ctx.kernel.backward(theta, scale, grad_weight), None


def _scaled_unit(theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:class:`_CompiledScaledUnit` where the kernel serves ``theta`` (float32 or float64 on the
    CPU), else :class:`_ScaledUnit`; under ``torch.compile`` the same formula in plain ops
    instead: their forward passes write into slices or call a library and their backward passes
    test for degenerate rows on the host, which a compiled graph cannot do; the compiler
    differentiates ``cumprod`` exactly itself."""
    if torch.compiler.is_compiling():
        return scale[:, None] * _angles_to_unit_reference(theta)
    kernel = _native.kernel(theta)
    if kernel is not None and scale.device == theta.device:
        return _CompiledScaledUnit.apply(theta.contiguous(), scale.contiguous(), kernel)
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
