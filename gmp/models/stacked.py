"""Several deep networks of Lu et al. of one shape as one batched computation (a network axis).

``StackedDeepMLP`` holds ``N`` networks of :func:`gmp.deep_mlp` (row-normalised square layers,
Eq. (55), built with ``fused=True``) as tensors with a leading network axis, so that one
forward and backward pass of the stack is one ``torch.bmm`` per layer where ``N`` separate
networks would launch ``N`` products: what keeps a GPU busy with arithmetic rather than
kernel launches. Every network keeps its own function exactly:

* its own weights, optional biases of the bottom and top layers, and activation (plain or
  GPN ``a phi + b``, Proposition 3), chosen per network;
* batch normalisation, when a network has it, with statistics over that network's batch
  alone and running statistics of its own (``nn.BatchNorm1d``'s rule, momentum 0.1);
* nothing is summed across networks but the loss, whose gradient with respect to one
  network's parameters is that network's own gradient.

Trained by :class:`gmp.experiments.lu_real.stacked.StackedTraining`, the square layers take SGD with
momentum in the backward pass (:meth:`StackedDeepMLP.update_in_backward`), so that their
gradients are never formed: the fewest passes over each ``n x n`` weight.

All networks see the same mini-batch at each step (a paired design). A network whose
numbers become infinite or NaN stays so within its own slice of every tensor and changes no
other network. :meth:`StackedDeepMLP.load_into` gives back network ``i`` as a :class:`DeepMLP`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from gmp.gpn import ACTIVATIONS, GPN, _Named
from gmp.models.deep import DeepMLP, RowNormalizedLinear

__all__ = ["SGDInBackward", "StackedDeepMLP"]

_KINDS = list(ACTIVATIONS)


def _kind(phi: nn.Module) -> tuple[int, float, float]:
    """``(index in ACTIVATIONS, a, b)`` of a plain (``a = 1, b = 0``) or GPN activation module."""
    if isinstance(phi, GPN) and phi.phi in ACTIVATIONS.values():
        return list(ACTIVATIONS.values()).index(phi.phi), float(phi.a), float(phi.b)
    if isinstance(phi, _Named):
        return _KINDS.index(phi.key), 1.0, 0.0
    raise ValueError(f"a stacked network's activation must be a named activation of gmp.gpn.ACTIVATIONS or its "
                     f"GPN version (gmp.make_activation), got {phi!r}")


def _check_same_shape(networks: Sequence[DeepMLP]) -> None:
    if not networks:
        raise ValueError("StackedDeepMLP needs at least one network")
    first = networks[0]
    for i, net in enumerate(networks):
        if not isinstance(net, DeepMLP) or not all(isinstance(layer, RowNormalizedLinear) for layer in net.layers):
            raise ValueError(f"network {i}: StackedDeepMLP stacks gmp.deep_mlp networks built with "
                             "weights='row_normalized' and fused=True")
        if net.first is None or net.last is None:
            raise ValueError(f"network {i}: StackedDeepMLP needs a bottom and a top layer (in_features, out_features)")
        shape = (net.width, net.depth, net.first.in_features, net.last.out_features, net.first.bias is not None,
                 net.last.bias is not None, net.first_activation, net.layers[0].V.dtype)
        if shape != (first.width, first.depth, first.first.in_features, first.last.out_features,
                     first.first.bias is not None, first.last.bias is not None, first.first_activation,
                     first.layers[0].V.dtype):
            raise ValueError(f"network {i} differs in shape from network 0 (width, depth, input and output widths, "
                             "biases, activation after the bottom layer and dtype must agree)")


def _stacked_phi(h: torch.Tensor, kind: torch.Tensor, a: torch.Tensor, b: torch.Tensor, kinds: tuple[int, ...],
                 gpn: bool) -> torch.Tensor:
    """``a phi_kind(h) + b`` per network: every kind in ``kinds`` computed, the network's own kept."""
    y = None
    for k in kinds:
        out = ACTIVATIONS[_KINDS[k]](h)
        y = out if y is None else torch.where(kind == k, out, y)
    return a * y + b if gpn else y


def _scaled_phi(u: torch.Tensor, s: torch.Tensor, kind: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                kinds: tuple[int, ...], gpn: bool) -> torch.Tensor:
    """``phi(u diag(s))`` per network: the row scaling of Eq. (55) and the activation in one pass."""
    return _stacked_phi(u * s, kind, a, b, kinds, gpn)


def _stacked_batchnorm(h: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor, mask: torch.Tensor | None, training: bool, momentum: float,
                       eps: float) -> torch.Tensor:
    """``nn.BatchNorm1d`` of each network on its own batch (running statistics ``mean``, ``var``
    ``(N, n)`` updated in training mode, used in eval mode): one ``F.batch_norm`` over the ``N * n``
    features of all networks, each its own channel; a network whose ``mask`` is false keeps ``h``."""
    size, batch, width = h.shape
    flat = h.transpose(0, 1).reshape(batch, size * width)
    out = nn.functional.batch_norm(flat, mean.view(-1), var.view(-1), weight.view(-1), bias.view(-1), training,
                                   momentum, eps)
    out = out.view(batch, size, width).transpose(0, 1).contiguous()  # one layout for what follows
    return out if mask is None else torch.where(mask, out, h)


def _scaled_batchnorm_phi(u: torch.Tensor, s: torch.Tensor, bn: tuple, kind: torch.Tensor, a: torch.Tensor,
                          b: torch.Tensor, kinds: tuple[int, ...], gpn: bool) -> torch.Tensor:
    """``phi(BN(u diag(s)))`` per network (``bn`` the arguments of :func:`_stacked_batchnorm` after ``h``)."""
    return _stacked_phi(_stacked_batchnorm(u * s, *bn), kind, a, b, kinds, gpn)


def _inverse_row_norms(V: torch.Tensor) -> torch.Tensor:
    """``s_i = 1 / ||v_i||_2`` of every row of every network, ``(N, 1, n)``."""
    return torch.linalg.vector_norm(V, dim=-1).reciprocal().unsqueeze(-2)


def _radial(ds: torch.Tensor, s: torch.Tensor, gram_a: torch.Tensor, gram_x: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(c, ||dE/dV||_F^2, share)`` per network from ``ds = dE/ds``: ``c_i = -s_i^3 dE/ds_i`` (the
    chain rule through ``ds_i/dv_i = -s_i^3 v_i``) and, with ``P = A^T X`` (``A = dE/du``, ``X`` the
    layer's input), ``dE/dV = P + diag(c) V``, whose rows are those of ``P`` less their component
    along ``w_i = s_i v_i``: ``||dE/dV||^2 = ||P||^2 - sum_i (c_i / s_i)^2`` with ``||P||^2 =
    <A A^T, X X^T>``, read from two batch-by-batch Gram matrices instead of an ``n x n`` gradient.

    ``share = ||dE/dV||^2 / ||P||^2`` (1 where ``P = 0``): the difference loses about
    ``eps / share`` of its relative precision (``eps`` the dtype's), so a share near ``eps`` means
    the norm of that step is rounding, not a gradient norm."""
    c = -ds * s.pow(3)
    full = (gram_a * gram_x).sum((-1, -2))
    norm_sq = full - (c / s).pow(2).sum((-1, -2))
    return c, norm_sq, torch.where(full > 0, norm_sq / full, torch.ones_like(full))


def _momentum_step(V: torch.Tensor, buf: torch.Tensor, c: torch.Tensor, lr: float, s: torch.Tensor) -> None:
    """``buf += diag(c) V; V -= lr buf`` in place, the rest of SGD with momentum once
    ``buf = momentum buf + A^T X``, and ``s`` set to the new ``V``'s inverse row norms for the
    next forward pass (when compiled, one pass over ``V`` and ``buf`` does all three)."""
    buf.addcmul_(V, c.transpose(-1, -2))
    V.add_(buf, alpha=-lr)
    s.copy_(_inverse_row_norms(V))


_EAGER = {"phi": _stacked_phi, "scaled_phi": _scaled_phi, "scaled_batchnorm_phi": _scaled_batchnorm_phi,
          "inverse_row_norms": _inverse_row_norms, "radial": _radial, "momentum_step": _momentum_step}
"""The element-wise pieces of a stacked layer; :meth:`StackedDeepMLP.compile_activation` compiles each."""


class SGDInBackward:
    """SGD with momentum of the square layers' free matrices ``V``, applied in the backward pass
    (:meth:`StackedDeepMLP.update_in_backward`): ``buffers[l]`` is ``V[l]``'s momentum buffer, and
    after each backward pass ``norms_sq[l]`` holds ``||dE/dV^(l)||_F^2`` of every network, ``(depth, N)``."""

    def __init__(self, buffers: Sequence[torch.Tensor], lr: float, momentum: float):
        self.buffers, self.lr, self.momentum = list(buffers), float(lr), float(momentum)
        first = self.buffers[0]
        self.norms_sq = torch.zeros(len(self.buffers), first.shape[0], dtype=first.dtype, device=first.device)
        self.tangential_share = torch.ones_like(self.norms_sq)
        """How much of ``||A^T X||^2`` each ``||dE/dV^(l)||^2`` of the last step kept (``_radial``):
        near the dtype's epsilon, that norm is rounding."""
        self.inverse_norms = [torch.zeros(first.shape[0], 1, first.shape[1], dtype=first.dtype, device=first.device)
                              for _ in self.buffers]
        """``1 / ||v_i||`` of every layer's ``V`` as the last update left it, read by the next
        forward pass instead of another pass over ``V``; ``versions[l]`` is ``V[l]._version``
        then, so that a ``V`` changed since (``copy_``, ``fill_``, loading) has them computed anew."""
        self.versions: list[int | None] = [None] * len(self.buffers)

    @torch.no_grad()
    def refresh(self, weights: Sequence[torch.Tensor]) -> None:
        """Compute :attr:`inverse_norms` from the square layers' ``weights`` (their ``V``) as they are
        now, for a step that reads them without looking at versions (a captured CUDA graph)."""
        for layer, V in enumerate(weights):
            self.inverse_norms[layer].copy_(_inverse_row_norms(V))
            self.versions[layer] = V._version


class _RowNormalizedProduct(torch.autograd.Function):
    """``(u, s) = (x V^T, 1 / ||v_i||)`` per network, so that ``h = u diag(s)`` is the layer of
    Eq. (55) (:class:`gmp.models.deep.RowNormalizedLinear`'s computation, the scaling left to the
    caller, where it fuses with the activation).

    Backward, from ``A = dE/du`` and ``dE/ds``: ``dE/dx = A V`` and ``dE/dV = A^T X + diag(c) V``
    (:func:`_radial`). With an :class:`SGDInBackward` the gradient of ``V`` is never formed: the
    momentum buffer takes the product directly (``buf = momentum buf + A^T X``, one ``baddbmm``),
    then one pass adds ``diag(c) V`` and updates ``V`` (:func:`_momentum_step`): the same numbers
    as ``buf = momentum buf + dE/dV; V -= lr buf`` to rounding. ``V`` is changed in place after
    ``dE/dx`` has been computed from it; no other layer's backward reads it."""

    @staticmethod
    def forward(ctx, x, V, sgd, layer, fns):
        fresh = sgd is not None and sgd.versions[layer] == V._version
        s = sgd.inverse_norms[layer].detach() if fresh else fns["inverse_row_norms"](V)
        ctx.save_for_backward(x, V, s)
        ctx.sgd, ctx.layer, ctx.fns = sgd, layer, fns
        return x @ V.transpose(-1, -2), s

    @staticmethod
    def backward(ctx, du, ds):
        x, V, s = ctx.saved_tensors
        dx = du @ V if ctx.needs_input_grad[0] else None
        sgd, fns = ctx.sgd, ctx.fns
        if sgd is None:
            dV = None
            if ctx.needs_input_grad[1]:
                c = -ds * s.pow(3)
                dV = (du.transpose(-1, -2) @ x).addcmul_(V, c.transpose(-1, -2))
            return dx, dV, None, None, None
        c, norm_sq, share = fns["radial"](ds, s, du @ du.transpose(-1, -2), x @ x.transpose(-1, -2))
        sgd.norms_sq[ctx.layer].copy_(norm_sq)
        sgd.tangential_share[ctx.layer].copy_(share)
        buf = sgd.buffers[ctx.layer]
        buf.baddbmm_(du.transpose(-1, -2), x, beta=sgd.momentum)
        fns["momentum_step"](V, buf, c, sgd.lr, sgd.inverse_norms[ctx.layer])
        sgd.versions[ctx.layer] = V._version
        return dx, None, None, None, None


class StackedDeepMLP(nn.Module):
    """``N`` networks of :func:`gmp.deep_mlp` of one shape, trained as one (see the module).

    Parameters, each with the network axis first: ``first_weight`` ``(N, n, d)`` and
    ``first_bias`` ``(N, n)``, ``V[l]`` ``(N, n, n)`` (the free matrix of square layer ``l``,
    Eq. (55)), ``bn_weight[l]``/``bn_bias[l]`` ``(N, n)`` when any network has BN, ``last_weight``
    ``(N, k, n)`` and ``last_bias`` ``(N, k)``. ``forward`` takes a batch ``(B, d)`` that every
    network sees, or ``(N, B, d)``, and returns logits ``(N, B, k)``.
    """

    def __init__(self, networks: Sequence[DeepMLP]):
        super().__init__()
        _check_same_shape(networks)
        self.size = len(networks)
        self.depth = networks[0].depth
        self.first_activation = networks[0].first_activation

        def stack(tensors):
            return nn.Parameter(torch.stack([t.detach() for t in tensors]).clone())

        self.first_weight = stack([net.first.weight for net in networks])
        self.first_bias = stack([net.first.bias for net in networks]) if networks[0].first.bias is not None else None
        self.V = nn.ParameterList(stack([net.layers[l].V for net in networks]) for l in range(self.depth))
        self.last_weight = stack([net.last.weight for net in networks])
        self.last_bias = stack([net.last.bias for net in networks]) if networks[0].last.bias is not None else None
        dtype, width = self.first_weight.dtype, networks[0].width
        kinds = [_kind(net.phi) for net in networks]
        self.kinds = sorted({k for k, _, _ in kinds})
        self.register_buffer("kind", torch.tensor([k for k, _, _ in kinds]).view(-1, 1, 1))
        self.register_buffer("a", torch.tensor([a for _, a, _ in kinds], dtype=dtype).view(-1, 1, 1))
        self.register_buffer("b", torch.tensor([b for _, _, b in kinds], dtype=dtype).view(-1, 1, 1))
        self.gpn = any(a != 1.0 or b != 0.0 for _, a, b in kinds)
        self._compiled = None
        self.sgd: SGDInBackward | None = None
        has_bn = [net.norms is not None for net in networks]
        self.any_bn, self.all_bn = any(has_bn), all(has_bn)
        self.register_buffer("bn_mask", torch.tensor(has_bn).view(-1, 1, 1))
        if self.any_bn:
            eps = {net.norms[0].eps for net in networks if net.norms is not None}
            momentum = {net.norms[0].momentum for net in networks if net.norms is not None}
            if len(eps) != 1 or len(momentum) != 1:
                raise ValueError("the BN layers of stacked networks must share eps and momentum")
            self.eps, self.momentum = eps.pop(), momentum.pop()

            def bn_param(name, fill, l):
                return stack([getattr(net.norms[l], name) if net.norms is not None
                              else torch.full((width,), fill, dtype=dtype) for net in networks])

            self.bn_weight = nn.ParameterList(bn_param("weight", 1.0, l) for l in range(self.depth))
            self.bn_bias = nn.ParameterList(bn_param("bias", 0.0, l) for l in range(self.depth))
            self.register_buffer("running_mean", torch.stack([torch.stack([
                net.norms[l].running_mean if net.norms is not None else torch.zeros(width, dtype=dtype)
                for net in networks]) for l in range(self.depth)]).clone())
            self.register_buffer("running_var", torch.stack([torch.stack([
                net.norms[l].running_var if net.norms is not None else torch.ones(width, dtype=dtype)
                for net in networks]) for l in range(self.depth)]).clone())

    def phi(self, h: torch.Tensor) -> torch.Tensor:
        """Each network's activation on its slice of ``h`` ``(N, ...)``: ``a phi(h) + b``; one
        fused kernel each way when :meth:`compile_activation` has been called."""
        return (self._compiled or _EAGER)["phi"](h, self.kind, self.a, self.b, tuple(self.kinds), self.gpn)

    def compile_activation(self) -> None:
        """Fuse the element-wise work of each layer with ``torch.compile``: the row scaling of
        Eq. (55) and the activation (every kind present, chosen per network, and ``a phi + b``)
        (with batch normalisation, when present) as one function forward and backward, and each
        of the other element-wise pieces (the row norms, the radial term of the row
        normalisation's gradient, the momentum step), where the eager form
        launches a few kernels per operation and kind. The matrix products stay ``torch``'s.
        Compilation happens at the first call; a second shape (the last, shorter batch, an
        evaluation chunk, another stack size) recompiles once with that size dynamic. The
        recompilation limit is raised for the shapes and kinds of a run."""
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self._compiled = {name: torch.compile(fn, fullgraph=True) for name, fn in _EAGER.items()}

    def update_in_backward(self, buffers: Sequence[torch.Tensor], lr: float, momentum: float) -> SGDInBackward:
        """From now on each backward pass updates the square layers' ``V`` by SGD with momentum
        (learning rate ``lr``, ``buffers`` their momentum buffers) instead of giving their
        gradients: ``buf = momentum buf + A^T X`` by one ``baddbmm`` (``A = dE/du`` with ``u = x
        V^T``, ``X`` the layer's input), then one pass adds the radial term ``diag(c) V`` of
        Eq. (55)'s row normalisation, updates ``V`` and keeps its inverse row norms for the next
        forward pass; ``torch.optim.SGD``'s numbers to rounding, no ``n x n`` gradient formed.
        Returns the state, whose ``norms_sq`` holds the squared gradient norms of the last
        backward pass, computed from two batch-by-batch Gram matrices."""
        self.sgd = SGDInBackward(buffers, lr, momentum)
        self.sgd.refresh(self.V)
        return self.sgd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.expand(self.size, *x.shape)
        h = x @ self.first_weight.transpose(1, 2)
        if self.first_bias is not None:
            h = h + self.first_bias.unsqueeze(1)
        x = self.phi(h) if self.first_activation else h
        fns = self._compiled or _EAGER
        for l in range(self.depth):
            u, s = _RowNormalizedProduct.apply(x, self.V[l], self.sgd, l, fns)
            if not self.any_bn:
                x = fns["scaled_phi"](u, s, self.kind, self.a, self.b, tuple(self.kinds), self.gpn)
            else:
                bn = (self.running_mean[l], self.running_var[l], self.bn_weight[l], self.bn_bias[l],
                      None if self.all_bn else self.bn_mask, self.training, self.momentum, self.eps)
                x = fns["scaled_batchnorm_phi"](u, s, bn, self.kind, self.a, self.b, tuple(self.kinds), self.gpn)
        out = x @ self.last_weight.transpose(1, 2)
        return out + self.last_bias.unsqueeze(1) if self.last_bias is not None else out

    @torch.no_grad()
    def gradient_norms(self) -> torch.Tensor:
        """``||dE/dV^(l)||_F`` of every square layer and network, ``(depth, N)`` (zeros before a
        backward pass): the terms of the gradient norm ratio of Eq. (56)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.V]
        return torch.stack(torch._foreach_norm([g[i] for g in grads for i in range(self.size)])).view(
            self.depth, self.size)

    @torch.no_grad()
    def orthogonality_drift(self) -> torch.Tensor:
        """``max_ij |W W^T - I|`` of every square layer and network, ``(depth, N)``, computed
        with matrix products in full precision (TF32 off) whatever the global setting."""
        allow = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            out = []
            for V in self.V:
                W = V / torch.linalg.vector_norm(V, dim=-1, keepdim=True)
                gram = W @ W.transpose(1, 2)
                gram.diagonal(dim1=1, dim2=2).sub_(1)
                out.append(gram.abs().amax(dim=(1, 2)))
            return torch.stack(out)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow

    @torch.no_grad()
    def load_into(self, i: int, net: DeepMLP) -> DeepMLP:
        """Copy network ``i`` of the stack into ``net`` (a network of the stacked shape) and return it."""
        net.first.weight.copy_(self.first_weight[i])
        if self.first_bias is not None:
            net.first.bias.copy_(self.first_bias[i])
        for l, layer in enumerate(net.layers):
            layer.V.copy_(self.V[l][i])
            if net.norms is not None:
                net.norms[l].weight.copy_(self.bn_weight[l][i])
                net.norms[l].bias.copy_(self.bn_bias[l][i])
                net.norms[l].running_mean.copy_(self.running_mean[l, i])
                net.norms[l].running_var.copy_(self.running_var[l, i])
        net.last.weight.copy_(self.last_weight[i])
        if self.last_bias is not None:
            net.last.bias.copy_(self.last_bias[i])
        return net
