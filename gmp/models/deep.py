"""Deep fully connected networks of Lu et al. (BSNN): Definition 1 with constrained weights.

``h^(l) = W^(l) x^(l)`` and ``x^(l+1) = phi(h^(l))`` for ``l = 1, ..., L`` (Eq. (1)), with
square ``n x n`` weights that are exactly orthogonal (Section 2.1; Haar-distributed at
initialisation, Assumption 2), row-normalised (the relaxation of Section 3.2, Eq. (55):
``W = (v_1/||v_1||, ..., v_n/||v_n||)^T``) or plain Gaussian. Optionally batch
normalisation before the activation ("-BN" in Table 2), and one unconstrained linear layer
at the bottom and one at the top to fit the input and output dimensions (Section 3.2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize

from gmp.gpn import make_activation

__all__ = ["DeepMLP", "RowNormalized", "RowNormalizedLinear", "deep_mlp", "orthogonality_drift",
           "row_normalized_linear", "WEIGHTS"]

WEIGHTS: tuple[str, ...] = ("orthogonal", "row_normalized", "gaussian")


class RowNormalized(nn.Module):
    """Parametrization ``W = (v_i / ||v_i||_2)_i``: every row has unit norm (Eq. (55) of Lu et al.)."""

    def forward(self, V: torch.Tensor) -> torch.Tensor:
        return V / V.norm(dim=1, keepdim=True)


class _RowNormalizedLinear(torch.autograd.Function):
    """``h = x W^T`` with ``W = (v_i / ||v_i||_2)_i`` (Eq. (55) of Lu et al.), computed as
    ``h = (x V^T) diag(s)``, ``s_i = 1 / ||v_i||_2``, so that ``W`` is never formed.

    Backward, with ``u = x V^T`` and ``g = dE/dh``: ``dE/dx = (g diag(s)) V`` and
    ``dE/dV = (g diag(s))^T x + diag(c) V``, ``c_i = -s_i^3 sum_b g_bi u_bi`` (the chain rule
    through ``ds_i/dv_i = -s_i^3 v_i``): two matrix products and one pass over ``V``, where
    autograd through ``V / ||V||`` and ``F.linear`` makes the same products and several passes.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        s = torch.linalg.vector_norm(V, dim=-1).reciprocal_().unsqueeze(-2)
        u = x @ V.transpose(-1, -2)
        ctx.save_for_backward(x, V, s, u)
        return u * s

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, V, s, u = ctx.saved_tensors
        du = g * s
        dx = du @ V if ctx.needs_input_grad[0] else None
        dV = None
        if ctx.needs_input_grad[1]:
            c = (g * u).sum(-2, keepdim=True).mul_(s.pow(3)).neg_()
            dV = (du.transpose(-1, -2) @ x).addcmul_(V, c.transpose(-1, -2))
        return dx, dV


def row_normalized_linear(x: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``x W^T`` with the row-normalised ``W = (v_i / ||v_i||_2)_i`` of Eq. (55) of Lu et al.,
    differentiable in ``x`` and ``V`` (see :class:`RowNormalizedLinear`). Batched: ``x`` of
    shape ``(..., batch, n)`` and ``V`` of shape ``(..., n, n)`` (one ``V`` per leading index,
    e.g. a stack of networks) give ``(..., batch, n)``."""
    return _RowNormalizedLinear.apply(x, V)


class RowNormalizedLinear(nn.Module):
    """A bias-free ``n x n`` layer ``x -> x W^T``, ``W = (v_i / ||v_i||_2)_i`` (Eq. (55) of Lu et al.).

    The same function and gradient as ``nn.Linear`` with the :class:`RowNormalized`
    parametrization, in one autograd node per layer: the product is taken with ``V`` and its
    rows are scaled afterwards, and the backward pass makes two matrix products and one pass
    over ``V`` (:func:`row_normalized_linear`). ``V`` is the free parameter the optimiser
    updates; :attr:`weight` is the effective ``W``.
    """

    def __init__(self, width: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.in_features = self.out_features = width
        self.V = nn.Parameter(torch.empty(width, width, dtype=dtype))
        self.bias = None

    @property
    def weight(self) -> torch.Tensor:
        """The effective row-normalised matrix ``W`` (Eq. (55))."""
        return RowNormalized()(self.V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return row_normalized_linear(x, self.V)


def orthogonality_drift(W: torch.Tensor) -> float:
    """``max_ij |(W W^T - I)_ij|``: how far a square ``W`` is from orthogonal.

    Zero exactly for an orthogonal ``W`` (the constraint of Section 2.1 of Lu et al.), which
    the row-normalised relaxation of Eq. (55) keeps only on the diagonal (unit rows): with
    row-normalised weights the drift is the largest ``|cos|`` between two rows.
    """
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"orthogonality_drift needs a square matrix, got shape {tuple(W.shape)}")
    W = W.detach()
    gram = W @ W.T
    gram.diagonal().sub_(1)
    return float(gram.abs().max())


class DeepMLP(nn.Module):
    """A depth-``L`` network of width ``n`` in the sense of Definition 1 of Lu et al.

    ``layers[l]`` is the ``n x n`` linear map ``W^(l+1)`` (0-based list, 1-based paper),
    ``norms[l]`` the optional batch normalisation applied to ``h^(l+1)``, ``phi`` the
    activation, ``first``/``last`` the optional unconstrained input and output layers.
    """

    def __init__(self, layers: nn.ModuleList, phi: nn.Module, norms: nn.ModuleList | None,
                 first: nn.Linear | None, last: nn.Linear | None, weights: str, first_activation: bool = False):
        super().__init__()
        self.layers = layers
        self.phi = phi
        self.norms = norms
        self.first = first
        self.last = last
        self.weights = weights
        self.first_activation = first_activation

    @property
    def width(self) -> int:
        return self.layers[0].in_features

    @property
    def depth(self) -> int:
        return len(self.layers)

    def pre_activation(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """``h^(l+1)`` from ``x^(l+1)`` for the 0-based layer index ``l`` (after BN if any)."""
        h = self.layers[l](x)
        return self.norms[l](h) if self.norms is not None else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first is not None:
            x = self.first(x)
            if self.first_activation:
                x = self.phi(x)
        for l in range(self.depth):
            x = self.phi(self.pre_activation(l, x))
        if self.last is not None:
            x = self.last(x)
        return x

    def square_weights(self) -> list[torch.Tensor]:
        """The effective (constrained) matrices ``W^(1), ..., W^(L)``."""
        return [layer.weight for layer in self.layers]

    def orthogonality_drift(self) -> list[float]:
        """:func:`orthogonality_drift` of each square weight ``W^(1), ..., W^(L)``."""
        return [orthogonality_drift(w) for w in self.square_weights()]

    def free_parameters(self) -> list[torch.Tensor]:
        """The unconstrained tensors the optimiser updates for each square layer: ``V`` for
        row-normalised weights (Eq. (56) of Lu et al.), the trivialisation's parameter for
        orthogonal ones, ``W`` itself for Gaussian ones."""
        out = []
        for layer in self.layers:
            if isinstance(layer, RowNormalizedLinear):
                out.append(layer.V)
            elif parametrize.is_parametrized(layer, "weight"):
                out.append(layer.parametrizations.weight.original)
            else:
                out.append(layer.weight)
        return out


def _haar_orthogonal_(weight: torch.Tensor, generator: torch.Generator | None) -> None:
    """Fill a square matrix with a Haar-distributed orthogonal matrix (QR of a Gaussian
    matrix with the signs of R's diagonal absorbed, Mezzadri 2007)."""
    with torch.no_grad():
        g = torch.randn(weight.shape, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        weight.copy_(q.to(weight.dtype))


def deep_mlp(width: int, depth: int, activation: str | nn.Module | Callable[[torch.Tensor], torch.Tensor],
             weights: str = "orthogonal", batchnorm: bool = False, in_features: int | None = None,
             out_features: int | None = None, bias: bool = False, parametrized: bool = True,
             dtype: torch.dtype | None = None, generator: torch.Generator | None = None,
             fused: bool = False, edge_bias: bool | None = None, first_activation: bool = False) -> DeepMLP:
    """Build the deep network of Lu et al. (Definition 1, Eq. (1)).

    ``activation``: a paper name (``"Tanh"``, ``"ReLU"``, ``"LeakyReLU"``, ``"ELU"``,
    ``"SELU"``, ``"GELU"``), optionally suffixed ``"-GPN"``, or a module / callable.
    ``weights``: ``"orthogonal"`` (exactly orthogonal during training via
    ``torch.nn.utils.parametrizations.orthogonal``, Haar-random at initialisation),
    ``"row_normalized"`` (Eq. (55), ``V`` Gaussian at initialisation) or ``"gaussian"``
    (``N(0, 1/n)`` entries, unconstrained). ``batchnorm`` inserts ``BatchNorm1d`` between
    each square layer and the activation. ``in_features``/``out_features`` add one
    unconstrained ``nn.Linear`` (PyTorch default initialisation, no activation after it) at
    the bottom / top, as in Section 3.2. ``bias`` applies to every linear layer; the paper
    omits biases (Definition 1). ``parametrized=False`` keeps the initial weights (Haar
    orthogonal or row-normalised) as plain parameters without the parametrization, which
    is exact and much cheaper for untrained networks (Section 3.1) but does not keep the
    constraint under training. ``dtype`` (default: torch's default dtype) is used for every
    parameter; ``generator`` seeds the square weights. ``fused=True`` (row-normalised weights
    only, without bias) builds each square layer as a :class:`RowNormalizedLinear`: the same
    function and gradients, about 1.5 times as fast to train as the parametrization on a CPU
    (``python -m gmp.bench --deep``). ``edge_bias`` (default: ``bias``) gives the bottom and top
    layers biases whatever ``bias`` is, and ``first_activation`` applies the activation after
    the bottom layer too: both as in the first author's ``mnist.py``.
    """
    if not isinstance(width, int) or width < 1 or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"width and depth must be positive integers, got {width!r} and {depth!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    if fused and (weights != "row_normalized" or bias or not parametrized):
        raise ValueError(f"fused=True builds row-normalised layers without bias that keep their constraint "
                         f"(weights='row_normalized', bias=False, parametrized=True), got weights={weights!r}, "
                         f"bias={bias!r}, parametrized={parametrized!r}")
    phi = make_activation(activation)
    layers = nn.ModuleList()
    for _ in range(depth):
        if fused:
            layer = RowNormalizedLinear(width, dtype=dtype)
            with torch.no_grad():
                layer.V.normal_(0.0, width ** -0.5, generator=generator)
            layers.append(layer)
            continue
        layer = nn.Linear(width, width, bias=bias, dtype=dtype)
        if bias:
            nn.init.zeros_(layer.bias)
        if weights == "orthogonal":
            _haar_orthogonal_(layer.weight, generator)
            if parametrized:
                parametrizations.orthogonal(layer)
        else:
            with torch.no_grad():
                layer.weight.normal_(0.0, width ** -0.5, generator=generator)
            if weights == "row_normalized":
                if parametrized:
                    parametrize.register_parametrization(layer, "weight", RowNormalized())
                else:
                    with torch.no_grad():
                        layer.weight.copy_(RowNormalized()(layer.weight))
        layers.append(layer)
    norms = nn.ModuleList(nn.BatchNorm1d(width, dtype=dtype) for _ in range(depth)) if batchnorm else None
    edge_bias = bias if edge_bias is None else edge_bias
    first = nn.Linear(in_features, width, bias=edge_bias, dtype=dtype) if in_features is not None else None
    last = nn.Linear(width, out_features, bias=edge_bias, dtype=dtype) if out_features is not None else None
    if first_activation and first is None:
        raise ValueError("first_activation=True needs a bottom layer (in_features)")
    return DeepMLP(layers, phi, norms, first, last, weights, first_activation)
