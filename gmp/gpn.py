"""Gaussian-Poincaré normalization (Lu, Gould & Ajanthan, *Bidirectionally Self-Normalizing
Neural Networks*).

A function ``phi`` is Gaussian-Poincaré normalized (GPN, Definition 3, Eq. (7)) when
``E[phi(x)^2] = E[phi'(x)^2] = 1`` for ``x ~ N(0, 1)``. Proposition 3 turns any
activation with finite, non-zero moments into a GPN one by the affine map
``a * phi(x) + b`` with ``a = E[phi'^2]^(-1/2)`` and ``b = a * c``, where ``c`` solves
``(E[phi] + c)^2 = E[phi'^2] - Var[phi]`` (Eqs. (9), (10) and (30)-(32)).

Expectations are computed by composite Gauss-Legendre quadrature on the two half-lines
``(-inf, 0)`` and ``(0, inf)`` separately, as the paper does for the activations with a
kink at 0 (ReLU, LeakyReLU, SELU): the integrands are smooth on each half-line, so the
quadrature is accurate to about 1e-12 for every activation of Table 1.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from numpy.polynomial import hermite_e
from scipy import special

__all__ = ["ACTIVATIONS", "ACTIVATION_LABELS", "AUTHOR_CONSTANTS", "PAPER_ROOTS", "GPN", "activation",
           "gaussian_moments", "gpn_constants", "hermite_coefficients", "make_activation"]

Activation = Callable[[torch.Tensor], torch.Tensor]


def _leaky_relu(x: torch.Tensor) -> torch.Tensor:
    """LeakyReLU with slope 0.01 (footnote 1 of Lu et al.)."""
    return F.leaky_relu(x, 0.01)


def _elu(x: torch.Tensor) -> torch.Tensor:
    """ELU with alpha = 1 (footnote 1 of Lu et al.)."""
    return F.elu(x, 1.0)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU in the sigmoid form x / (1 + exp(-1.702 x)) (footnote 1 of Lu et al.)."""
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS: dict[str, Activation] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "leaky_relu": _leaky_relu,
    "elu": _elu,
    "selu": F.selu,
    "gelu": _gelu,
}
"""The activations of Table 1 of Lu et al., with the hyperparameters of its footnote 1."""

ACTIVATION_LABELS: dict[str, str] = {"tanh": "Tanh", "relu": "ReLU", "leaky_relu": "LeakyReLU",
                                     "elu": "ELU", "selu": "SELU", "gelu": "GELU"}
"""The names the paper prints for the activations of :data:`ACTIVATIONS`."""

PAPER_ROOTS: dict[str, str] = {"tanh": "+", "relu": "+", "leaky_relu": "+", "elu": "+",
                               "selu": "+", "gelu": "-"}
"""The root of Eq. (10) that Table 1 of Lu et al. reports, ``b = a(-E[phi] +- sqrt(...))``."""


AUTHOR_CONSTANTS: dict[str, tuple[float, float]] = {
    "tanh": (1.4674, 0.3886), "relu": (1.4142, 0.0), "leaky_relu": (1.4141, 0.0),
    "elu": (1.2234, 0.0742), "selu": (0.9660, 0.2585), "gelu": (1.4915, -0.9097)}
"""``(a, b)`` of the GPN activations as the first author's ``bsnn.py`` types them, to four
decimals (the root of :data:`PAPER_ROOTS`): :func:`gpn_constants` rounded, except the ``b`` of
Tanh (0.3886 for 0.38854) and SELU (0.2585 for 0.25845), one unit off in the last digit. The
paper-scale run of ``lu_real`` uses them, as the author's ``mnist.py`` did."""


def activation(name: str) -> Activation:
    """The torch callable of a named activation of :data:`ACTIVATIONS` (case-insensitive)."""
    key = name.lower().replace("-", "_").replace("leakyrelu", "leaky_relu")
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}: expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[key]


def _resolve(phi: str | Activation) -> tuple[str | None, Activation]:
    if isinstance(phi, str):
        key = phi.lower().replace("-", "_").replace("leakyrelu", "leaky_relu")
        return key, activation(phi)
    if not callable(phi):
        raise ValueError(f"expected an activation name or a torch callable, got {type(phi).__name__}")
    probe = torch.linspace(-1.0, 1.0, 3, dtype=torch.float64, requires_grad=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what a non-torch function warns before it fails
            out = phi(probe)
    except Exception as err:
        raise ValueError(f"{_name(phi)} is not a torch function: applied to a float64 torch tensor it raised "
                         f"{type(err).__name__}: {err}. Pass an elementwise torch function (e.g. torch.sin "
                         "rather than math.sin or np.sin).") from None
    if not isinstance(out, torch.Tensor) or out.shape != probe.shape:
        raise ValueError(f"{_name(phi)} is not an elementwise torch function: applied to a torch tensor of "
                         f"shape (3,) it returned {type(out).__name__} "
                         f"{tuple(out.shape) if hasattr(out, 'shape') else ''}. Pass e.g. torch.tanh rather "
                         "than np.tanh.")
    return None, phi


def _name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', None) or ''}.{getattr(fn, '__name__', repr(fn))}".lstrip(".")


def _numpy_pair(phi: Activation, derivative: Activation | None
                ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Vectorised ``x -> (phi(x), phi'(x))`` in float64; phi' by autograd unless given."""

    def pair(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = torch.as_tensor(np.atleast_1d(np.asarray(x, dtype=np.float64)))
        if derivative is not None:
            with torch.no_grad():
                return phi(t).numpy(), derivative(t).numpy()
        t = t.clone().requires_grad_(True)
        with torch.enable_grad():
            y = phi(t)
            if not y.requires_grad:  # phi does not depend on x: phi' = 0
                return y.detach().numpy(), np.zeros(t.shape)
            (dy,) = torch.autograd.grad(y.sum(), t, allow_unused=True)
        dy = torch.zeros_like(t) if dy is None else dy
        return y.detach().numpy(), dy.numpy()

    return pair


_CUTOFF = 40.0
"""Beyond |x| = 40 the Gaussian weight exp(-x^2/2) < 1e-347 underflows to 0 in float64."""
_PANELS, _NODES = 160, 16


@functools.lru_cache(maxsize=4)
def _half_line_rule(panels: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes and weights on (0, _CUTOFF), including the N(0, 1)
    density, from ``scipy.special.roots_legendre``."""
    t, w = special.roots_legendre(nodes)
    edges = np.linspace(0.0, _CUTOFF, panels + 1)
    half = 0.5 * np.diff(edges)[:, None]
    x = (edges[:-1, None] + half * (t[None, :] + 1.0)).ravel()
    weights = (half * w[None, :]).ravel() * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return x, weights


def _gaussian_integral(integrand: Callable[[np.ndarray], np.ndarray], what: str) -> np.ndarray:
    """E[g(x)] for x ~ N(0, 1) and a vector-valued g (``integrand`` maps m points to an
    (m, k) array), integrated on (-inf, 0) and (0, inf) separately so that a kink at 0 is
    never inside a quadrature panel. Composite Gauss-Legendre with 160 panels of 16 nodes
    per half-line, checked against the rule with half the panels; the integrand must decay
    by |x| = 40."""
    results = []
    for panels in (_PANELS // 2, _PANELS):
        x, w = _half_line_rule(panels, _NODES)
        nodes = np.concatenate([-x, x])
        with np.errstate(all="ignore"):
            values = np.asarray(integrand(nodes), dtype=np.float64).reshape(nodes.size, -1)
            weighted = values * np.concatenate([w, w])[:, None]
        for bad, kind in ((np.isnan(values), "NaN"), (np.isinf(values), "infinite (beyond float64)")):
            if bad.any():
                where = np.unique(nodes[bad.any(axis=1)])
                raise ValueError(f"{what} cannot be computed: the integrand is {kind} at {where.size} "
                                 f"quadrature nodes, x = {where[0]:.4g} ... {where[-1]:.4g}; evaluate the "
                                 "activation (and its derivative) to finite float64 values on |x| <= 40")
        total = weighted.sum(axis=0)
        tail = np.abs(weighted[np.abs(nodes) > _CUTOFF - 2.0]).sum(axis=0)
        if np.any(tail > 1e-12 * np.maximum(1.0, np.abs(total))):
            raise ValueError(f"{what} is infinite or too heavy-tailed to integrate: the integrand times the "
                             f"Gaussian density still weighs {tail.max():.3g} at |x| > {_CUTOFF - 2.0:g} "
                             f"(against a total of {np.abs(total).max():.3g}); expected an activation with "
                             "finite Gaussian moments")
        results.append(total)
    coarse, fine = results
    if np.any(np.abs(fine - coarse) > 1e-9 * np.maximum(1.0, np.abs(fine))):
        raise ValueError(f"{what}: the quadrature did not converge; expected an activation that is "
                         "smooth on each half-line")
    return fine


def gaussian_moments(phi: str | Activation, derivative: Activation | None = None
                     ) -> tuple[float, float, float]:
    """``(E[phi], E[phi^2], E[phi'^2])`` for ``x ~ N(0, 1)``: the quantities of Eqs. (7)-(10).

    ``phi`` is a name of :data:`ACTIVATIONS` or a torch callable applied element-wise;
    ``phi'`` comes from autograd unless ``derivative`` is given. Kinks at 0 are handled by
    integrating each half-line separately, as in Section 2.2 of Lu et al.
    """
    key, fn = _resolve(phi)
    if key is not None and derivative is None:
        return _named_moments(key)
    return _moments(fn, derivative)


@functools.lru_cache(maxsize=None)
def _named_moments(key: str) -> tuple[float, float, float]:
    """:func:`gaussian_moments` of a named activation, computed once per process."""
    return _moments(ACTIVATIONS[key], None)


def _moments(fn: Activation, derivative: Activation | None) -> tuple[float, float, float]:
    pair = _numpy_pair(fn, derivative)

    def integrand(x: np.ndarray) -> np.ndarray:
        y, dy = pair(x)
        return np.stack([y, y ** 2, dy ** 2], axis=1)

    m, s2, d2 = _gaussian_integral(integrand, "a Gaussian moment of the activation")
    return float(m), float(s2), float(d2)


def gpn_constants(phi: str | Activation, derivative: Activation | None = None
                  ) -> tuple[float, float, float]:
    """``(a, b, b_alt)`` such that ``a * phi(x) + b`` is Gaussian-Poincaré normalized.

    Proposition 3 and Eqs. (9)-(10) of Lu et al.: ``a = E[phi'^2]^(-1/2)`` and
    ``b = a * (-E[phi] + sqrt(E[phi'^2] - Var[phi]))``; ``b_alt`` is the other root
    ``a * (-E[phi] - sqrt(...))``. The square root is real by the Gaussian-Poincaré
    inequality (Theorem 1) for every differentiable ``phi``.

    Raises ValueError when no such constants exist: ``E[phi'^2] = 0`` (constant functions,
    step functions), ``E[phi^2] = 0``, non-finite moments, or ``Var[phi] > E[phi'^2]``
    (possible only for a function that is not differentiable, e.g. one with a jump).
    """
    m, s2, d2 = gaussian_moments(phi, derivative)
    if d2 <= 1e-14:
        raise ValueError(f"E[phi'(x)^2] = {d2:.3g}: no GPN constants exist for an activation "
                         "whose derivative vanishes almost everywhere (Proposition 3 needs it non-zero)")
    if s2 <= 1e-14:
        raise ValueError(f"E[phi(x)^2] = {s2:.3g}: Proposition 3 needs a non-zero second moment")
    discriminant = d2 - (s2 - m * m)
    if discriminant < -1e-9 * max(1.0, d2):
        raise ValueError(f"Var[phi] = {s2 - m * m:.6g} exceeds E[phi'^2] = {d2:.6g}: the quadratic "
                         "(E[phi] + c)^2 = E[phi'^2] - Var[phi] has no real root; the Gaussian-Poincaré "
                         "inequality fails, so phi is not differentiable")
    root = math.sqrt(max(discriminant, 0.0))
    a = 1.0 / math.sqrt(d2)
    return a, a * (-m + root), a * (-m - root)


@functools.lru_cache(maxsize=None)
def _named_constants(key: str) -> tuple[float, float, float]:
    """:func:`gpn_constants` of a named activation, computed once per process."""
    return gpn_constants(key)


class GPN(torch.nn.Module):
    """The Gaussian-Poincaré normalized version ``a * phi(x) + b`` of an activation.

    Proposition 3 of Lu et al. ``root`` picks ``b`` (``"+"``) or ``b_alt`` (``"-"``) of
    :func:`gpn_constants`; ``None`` takes the root that Table 1 of the paper reports for a
    named activation (``"-"`` for GELU, ``"+"`` otherwise) and ``"+"`` for a callable.
    """

    def __init__(self, activation: str | Activation, root: str | None = None,
                 derivative: Activation | None = None, constants: tuple[float, float] | None = None):
        super().__init__()
        key, fn = _resolve(activation)
        if root is None:
            root = PAPER_ROOTS.get(key, "+") if key is not None else "+"
        if root not in ("+", "-"):
            raise ValueError(f"root must be '+', '-' or None (the paper's choice), got {root!r}")
        if constants is not None:
            if len(constants) != 2 or not all(math.isfinite(c) for c in constants):
                raise ValueError(f"constants must be two finite numbers (a, b), got {constants!r}")
            a, b_plus, b_minus = constants[0], constants[1], constants[1]
        elif key is not None and derivative is None:
            a, b_plus, b_minus = _named_constants(key)
        else:
            a, b_plus, b_minus = gpn_constants(fn, derivative)
        self.phi = fn
        self.name = ACTIVATION_LABELS.get(key, getattr(fn, "__name__", "phi")) if key else \
            getattr(fn, "__name__", "phi")
        self.root = root
        self.a = a
        self.b = b_plus if root == "+" else b_minus

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * self.phi(x) + self.b

    def extra_repr(self) -> str:
        return f"{self.name}, a={self.a:.4f}, b={self.b:.4f}, root='{self.root}'"


class _Named(torch.nn.Module):
    """A plain activation of :data:`ACTIVATIONS` as a module."""

    def __init__(self, key: str):
        super().__init__()
        self.key = key
        self.phi = ACTIVATIONS[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.phi(x)

    def extra_repr(self) -> str:
        return ACTIVATION_LABELS[self.key]


def make_activation(spec: str | torch.nn.Module | Activation, constants: str = "quadrature") -> torch.nn.Module:
    """An activation module from a name as the paper prints it: ``"Tanh"``, ``"ReLU"``,
    ``"LeakyReLU"``, ``"ELU"``, ``"SELU"``, ``"GELU"``, each optionally with the suffix
    ``"-GPN"`` (the GPN version with the root of Table 1); a module or callable is wrapped.
    ``constants`` picks a GPN version's ``(a, b)``: ``"quadrature"`` (:func:`gpn_constants`)
    or ``"author"`` (:data:`AUTHOR_CONSTANTS`, as the author's code types them)."""
    if constants not in ("quadrature", "author"):
        raise ValueError(f"constants must be 'quadrature' or 'author', got {constants!r}")
    if isinstance(spec, torch.nn.Module):
        return spec
    if isinstance(spec, str):
        name = spec.strip()
        if name.lower().endswith("-gpn"):
            key, _ = _resolve(name[:-4])
            return GPN(key, constants=AUTHOR_CONSTANTS[key] if constants == "author" else None)
        key, _ = _resolve(name)
        return _Named(key)
    if callable(spec):
        return _Lambda(spec)
    raise ValueError(f"expected an activation name, module or callable, got {type(spec).__name__}")


class _Lambda(torch.nn.Module):
    def __init__(self, fn: Activation):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def hermite_coefficients(phi: str | Activation, K: int) -> np.ndarray:
    """Coefficients ``a_0, ..., a_K`` of ``phi = sum_k a_k H_k`` in the orthonormal
    probabilists' Hermite basis ``H_k = He_k / sqrt(k!)`` (Eqs. (20)-(21) of Lu et al.),
    ``a_k = E[phi(x) H_k(x)]`` for ``x ~ N(0, 1)``.

    Proposition 2's proof uses ``E[phi^2] = sum a_k^2`` and ``E[phi'^2] = sum k a_k^2``
    (Eq. (27)); both hold in the limit ``K -> inf``.
    """
    if not isinstance(K, (int, np.integer)) or K < 0 or K > 150:
        raise ValueError(f"K must be an integer in [0, 150], got {K!r}")
    _, fn = _resolve(phi)
    pair = _numpy_pair(fn, None)
    norms = np.exp(-0.5 * np.array([math.lgamma(k + 1.0) for k in range(K + 1)]))

    def integrand(x: np.ndarray) -> np.ndarray:
        y, _ = pair(x)
        return y[:, None] * hermite_e.hermevander(x, K) * norms[None, :]

    return _gaussian_integral(integrand, "a Hermite coefficient of the activation")
