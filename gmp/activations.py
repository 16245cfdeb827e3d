"""Activation functions of strongly bidirectionally self-normalizing networks (SBSNN).

An activation ``f`` satisfies the *strong condition* of the SBSNN paper (Section 2,
Definition 1) when ``f(x)^2 - 1`` and ``f'(x)^2 - 1`` are odd functions; then
``E[f(W)^2] = E[f'(W)^2] = 1`` for every symmetric distribution ``W ~ -W``, not only for
the standard normal of Gaussian-Poincaré normalization (Lu et al.).

Theorem 1 of the paper: the differentiable, Lipschitz solutions with Lipschitz derivative
are exactly ``f(x) = S sqrt(2) sin(w x + pi/4)`` with ``S, w`` in ``{1, -1}`` (the
``+-sqrt(2) sin(x + pi/4)`` and ``+-sqrt(2) cos(x + pi/4)`` of its statement, since
``sqrt(2) cos(x + pi/4) = sqrt(2) sin(-x + pi/4)``). Theorem 2 admits kinks: with ``w``
even in ``{1, -1}`` and ``S`` jumping only at zeros, ``sqrt(2) S(x) sin(int_0^x w + pi/4)``
satisfies the condition with one-sided derivatives. Its two examples (Fig. 3) are the
triangle-wave sine and the absolute sine below. ``sqrt(2 sigmoid(x))`` (Fig. 1) satisfies
the first half of the condition only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

SQRT2 = math.sqrt(2.0)


def _check_wave(amplitude: float, period: float) -> None:
    if not (math.isfinite(amplitude) and math.isfinite(period) and amplitude > 0 and period > 0):
        raise ValueError(f"amplitude and period must be finite and positive, got {amplitude!r} and {period!r}")


def _sign(value: int, name: str) -> int:
    if value not in (1, -1):
        raise ValueError(f"{name} must be 1 or -1, got {value!r}")
    return value


def sbsnn_sin(x: Tensor, S: int = 1, w: int = 1) -> Tensor:
    """``S sqrt(2) sin(w x + pi/4)``, the SBSNN activations of Theorem 1 (``S, w = +-1``)."""
    return _sign(S, "S") * SQRT2 * torch.sin(_sign(w, "w") * x + math.pi / 4)


def triangle_wave(x: Tensor, amplitude: float = 1.5, period: float = 6.0) -> Tensor:
    """The odd triangle wave ``T`` of Fig. 3: ``T(0) = 0``, slope ``4 amplitude / period`` at 0.

    With the paper's amplitude 1.5 and period 6 the slope is ``+-1`` everywhere, so ``T`` is
    ``int_0^x w(s) ds`` for an even ``w`` in ``{1, -1}`` as Theorem 2 requires.
    """
    _check_wave(amplitude, period)
    quarter = period / 4
    return (amplitude / quarter) * (torch.abs(torch.remainder(x - quarter, period) - 2 * quarter) - quarter)


def sbsnn_triangle(x: Tensor, amplitude: float = 1.5, period: float = 6.0) -> Tensor:
    """``sqrt(2) sin(T(x) + pi/4)`` with ``T`` the odd triangle wave (Theorem 2, Fig. 3, pink)."""
    return SQRT2 * torch.sin(triangle_wave(x, amplitude, period) + math.pi / 4)


def sbsnn_abs_sin(x: Tensor) -> Tensor:
    """``sqrt(2) |sin(x + pi/4)|`` (Theorem 2 with ``S`` flipping at the zeros; Fig. 3, orange)."""
    return SQRT2 * torch.abs(torch.sin(x + math.pi / 4))


def sqrt_sigmoid(x: Tensor) -> Tensor:
    """``sqrt(2 / (1 + e^-x))`` (Fig. 1, gold): ``f(x)^2 - 1 = tanh(x/2)`` is odd, ``f'^2 - 1`` is not."""
    return torch.sqrt(2 * torch.sigmoid(x))


class SBSNNSin(nn.Module):
    """Module form of :func:`sbsnn_sin`: ``S sqrt(2) sin(w x + pi/4)`` (Theorem 1)."""

    def __init__(self, S: int = 1, w: int = 1):
        super().__init__()
        self.S = _sign(S, "S")
        self.w = _sign(w, "w")

    def forward(self, x: Tensor) -> Tensor:
        return sbsnn_sin(x, self.S, self.w)

    def extra_repr(self) -> str:
        return f"S={self.S}, w={self.w}"


class SBSNNTriangle(nn.Module):
    """Module form of :func:`sbsnn_triangle`: ``sqrt(2) sin(T(x) + pi/4)`` (Theorem 2)."""

    def __init__(self, amplitude: float = 1.5, period: float = 6.0):
        super().__init__()
        _check_wave(amplitude, period)
        self.amplitude = float(amplitude)
        self.period = float(period)

    def forward(self, x: Tensor) -> Tensor:
        return sbsnn_triangle(x, self.amplitude, self.period)

    def extra_repr(self) -> str:
        return f"amplitude={self.amplitude}, period={self.period}"


class SBSNNAbsSin(nn.Module):
    """Module form of :func:`sbsnn_abs_sin`: ``sqrt(2) |sin(x + pi/4)|`` (Theorem 2)."""

    def forward(self, x: Tensor) -> Tensor:
        return sbsnn_abs_sin(x)


class SqrtSigmoid(nn.Module):
    """Module form of :func:`sqrt_sigmoid`: ``sqrt(2 / (1 + e^-x))`` (Fig. 1)."""

    def forward(self, x: Tensor) -> Tensor:
        return sqrt_sigmoid(x)


_GPN_BASES = {"gpn_tanh": "tanh", "gpn_gelu": "gelu", "gpn_elu": "elu",
              "gpn_leaky_relu": "leaky_relu", "gpn_relu": "relu"}

ACTIVATION_LABELS: dict[str, str] = {
    "sin": r"$\sqrt{2}\sin(x+\pi/4)$",
    "triangle": r"$\sqrt{2}\sin(T(x)+\pi/4)$",
    "abs_sin": r"$\sqrt{2}|\sin(x+\pi/4)|$",
    "sqrt_sigmoid": r"$\sqrt{2/(1+e^{-x})}$",
    "gpn_tanh": "GPN tanh",
    "gpn_gelu": "GPN GELU",
    "gpn_elu": "GPN ELU",
    "gpn_leaky_relu": "GPN leaky ReLU",
    "gpn_relu": "GPN ReLU",
}
"""Every activation name that :func:`activation` accepts, with its legend label."""

ACTIVATION_TEXT: dict[str, str] = {
    "sin": "√2 sin(x + π/4)", "triangle": "√2 sin(T(x) + π/4)", "abs_sin": "√2 |sin(x + π/4)|",
    "sqrt_sigmoid": "√(2/(1 + e^−x))", "gpn_tanh": "GPN tanh", "gpn_gelu": "GPN GELU", "gpn_elu": "GPN ELU",
    "gpn_leaky_relu": "GPN leaky ReLU", "gpn_relu": "GPN ReLU",
}
"""Plain-text names of the activations, for tables."""

PAPER_COLOURS: dict[str, str] = {
    "sin": "black", "triangle": "hotpink", "abs_sin": "darkorange", "sqrt_sigmoid": "goldenrod",
    "gpn_tanh": "red", "gpn_gelu": "turquoise", "gpn_elu": "blue", "gpn_leaky_relu": "purple",
    "gpn_relu": "green", "siren": "seagreen",
}
"""The colour the SBSNN paper's figure captions give each activation (and SIREN)."""


def activation(name: str) -> nn.Module:
    """The activation module called ``name`` (a key of :data:`ACTIVATION_LABELS`).

    ``gpn_*`` names wrap the base function in :class:`gmp.GPN` (Gaussian-Poincaré
    normalization of Lu et al., Proposition 3).
    """
    simple: dict[str, Callable[[], nn.Module]] = {
        "sin": SBSNNSin, "triangle": SBSNNTriangle, "abs_sin": SBSNNAbsSin, "sqrt_sigmoid": SqrtSigmoid}
    if name in simple:
        return simple[name]()
    if name in _GPN_BASES:
        from gmp.gpn import GPN

        return GPN(_GPN_BASES[name])
    raise ValueError(f"unknown activation {name!r}: expected one of {', '.join(ACTIVATION_LABELS)}")


@dataclasses.dataclass(frozen=True)
class StrongCondition:
    """Outcome of :func:`strong_condition` on a grid ``[-radius, radius]``.

    ``value_violation`` is ``max |f(x)^2 + f(-x)^2 - 2|`` (zero iff ``f^2 - 1`` is odd on the
    grid); ``derivative_violation`` the same for ``f'`` with left and right derivatives.
    """

    holds: bool
    value_violation: float
    derivative_violation: float
    tol: float
    radius: float


def strong_condition(f: Callable[[Tensor], Tensor], *, radius: float = 10.0, points: int = 20001,
                     tol: float = 1e-5, step: float = 1e-7) -> StrongCondition:
    """Check numerically whether ``f(x)^2 - 1`` and ``f'(x)^2 - 1`` are odd (SBSNN, Definition 1).

    ``f`` is evaluated in float64 on ``points`` grid points symmetric about zero. Derivatives
    are taken by autograd just left and right of each grid point (at ``x -+ step``), so that
    at a kink both one-sided derivatives of Theorem 2 are checked. Every pairing of a
    one-sided derivative at ``x`` with one at ``-x`` must satisfy
    ``f'(x)^2 + f'(-x)^2 = 2`` to within ``tol``.
    """
    if not (math.isfinite(radius) and radius > 0) or points < 3:
        raise ValueError(f"need a finite radius > 0 and at least 3 points, got radius={radius!r}, points={points!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be finite and >= 0 (an infinite tolerance accepts anything), got {tol!r}")
    if not 0 < step < radius / points:
        raise ValueError(f"step must lie in (0, grid spacing), got {step!r}")
    x = torch.linspace(-radius, radius, points, dtype=torch.float64)
    with torch.no_grad():
        value = f(x)
        value_violation = (value ** 2 + value.flip(0) ** 2 - 2).abs().max().item()
    sides = []
    for shift in (-step, step):
        z = (x + shift).requires_grad_(True)
        (grad,) = torch.autograd.grad(f(z).sum(), z)
        sides.append(grad.detach() ** 2)
    derivative_violation = max((a + b.flip(0) - 2).abs().max().item() for a in sides for b in sides)
    finite = math.isfinite(value_violation) and math.isfinite(derivative_violation)
    holds = finite and value_violation <= tol and derivative_violation <= tol
    return StrongCondition(holds, value_violation, derivative_violation, tol, radius)


def symbolic_strong_condition(expr, x):
    """Symbolic residuals ``(f(x)^2 + f(-x)^2 - 2, f'(x)^2 + f'(-x)^2 - 2)`` of a sympy ``expr``.

    Both are identically zero exactly when ``expr`` satisfies the strong condition
    (Definition 1); they are returned simplified so that ``== 0`` tests Theorem 1.
    """
    import sympy

    derivative = sympy.diff(expr, x)
    value_residual = sympy.simplify(sympy.expand_trig(expr ** 2 + expr.subs(x, -x) ** 2 - 2))
    derivative_residual = sympy.simplify(sympy.expand_trig(derivative ** 2 + derivative.subs(x, -x) ** 2 - 2))
    return value_residual, derivative_residual
