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
gradients are never stored: the fewest passes over each ``n x n`` weight. A square layer's step
is six kernels on CUDA whatever the number of networks and with or without BN (three products
and the three operators of :mod:`gmp.models.stacked_ops`, each network's own activation read by
the kernel): what keeps a captured step's time the products', not the launches'.

All networks see the same mini-batch at each step (a paired design). A network whose
numbers become infinite or NaN stays so within its own slice of every tensor and changes no
other network. :meth:`StackedDeepMLP.load_into` gives back network ``i`` as a :class:`DeepMLP`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from gmp.gpn import ACTIVATIONS, GPN, _Named
from gmp.models import stacked_ops
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


def _inverse_row_norms(V: torch.Tensor) -> torch.Tensor:
    """``s_i = 1 / ||v_i||_2`` of every row of every network, ``(N, 1, n)``."""
    return torch.linalg.vector_norm(V, dim=-1).reciprocal().unsqueeze(-2)


class SGDInBackward:
    """SGD with momentum of the square layers' free matrices ``V``, applied in the backward pass
    (:meth:`StackedDeepMLP.update_in_backward`): ``buffers[l]`` is ``V[l]``'s momentum buffer;
    ``product`` the one ``(N, n, n)`` buffer that takes each layer's ``A^T X`` in turn."""

    def __init__(self, buffers: Sequence[torch.Tensor], lr: float, momentum: float):
        self.buffers, self.lr, self.momentum = list(buffers), float(lr), float(momentum)
        first = self.buffers[0]
        size, width = first.shape[0], first.shape[1]
        self.product = torch.empty_like(first)
        self.rows_g = torch.zeros(len(self.buffers), size, width, dtype=first.dtype, device=first.device)
        """``||G_i||^2`` of every row of every layer's gradient ``G = dE/dV`` in the last backward pass."""
        self.rows_p = torch.ones_like(self.rows_g)
        """``||P_i||^2`` of the same rows of ``P = A^T X``, the part of ``G`` the product gives."""
        self.inverse_norms = [torch.zeros(size, 1, width, dtype=first.dtype, device=first.device) for _ in self.buffers]
        """``1 / ||v_i||`` of every layer's ``V`` as the last update left it, read by the next
        forward pass instead of another pass over ``V``; ``versions[l]`` is ``V[l]._version``
        then, so that a ``V`` changed since (``copy_``, ``fill_``, loading) has them computed anew."""
        self.versions: list[int | None] = [None] * len(self.buffers)

    @property
    def norms_sq(self) -> torch.Tensor:
        """``||dE/dV^(l)||_F^2`` of every layer and network in the last backward pass, ``(depth, N)``:
        a sum of the squares of the gradient's own entries (no difference of larger terms)."""
        return self.rows_g.sum(-1)

    @property
    def tangential_share(self) -> torch.Tensor:
        """``||dE/dV||^2 / ||A^T X||^2`` of every layer and network (1 where ``A^T X = 0``): how much
        of the product the row normalisation's projection keeps, ``(depth, N)``."""
        full = self.rows_p.sum(-1)
        return torch.where(full > 0, self.norms_sq / full, torch.ones_like(full))

    @torch.no_grad()
    def refresh(self, weights: Sequence[torch.Tensor]) -> None:
        """Compute :attr:`inverse_norms` from the square layers' ``weights`` (their ``V``) as they are
        now, for a step that reads them without looking at versions (a captured CUDA graph)."""
        for layer, V in enumerate(weights):
            self.inverse_norms[layer].copy_(_inverse_row_norms(V))
            self.versions[layer] = V._version


def _bn_arguments(model: "StackedDeepMLP", layer: int | None) -> tuple:
    """The batch-normalisation arguments of :func:`gmp.models.stacked_ops.activation_forward` for
    square layer ``layer`` (``None``: the bottom layer's activation, which has none)."""
    if layer is None or not model.any_bn:
        none = model.no_bn
        return none[0], none[1], none[2], none[3], False
    return (model.bn_weight[layer], model.bn_bias[layer], model.running_mean[layer], model.running_var[layer], True)


class _Activation(torch.autograd.Function):
    """The bottom layer's activation ``a phi(h) + b`` per network (no row scaling, no BN): one
    operator each way (:mod:`gmp.models.stacked_ops`)."""

    @staticmethod
    def forward(ctx, h, model):
        weight, bias, mean, var, _ = _bn_arguments(model, None)
        y = stacked_ops.activation_forward(h, model.ones, model.kind, model.a, model.b, weight, bias, mean, var,
                                           model.bn_on, False, model.training, 0.0, 0.0, kernels=model.kernels)[0]
        ctx.save_for_backward(h)
        ctx.model = model
        return y

    @staticmethod
    def backward(ctx, dy):
        (h,) = ctx.saved_tensors
        model = ctx.model
        weight, bias, mean, var, _ = _bn_arguments(model, None)
        dh = stacked_ops.activation_backward(dy, h, model.ones, model.kind, model.a, weight, bias, mean, var,
                                             model.bn_on, False, kernels=model.kernels)[0]
        return dh, None


class _SquareLayer(torch.autograd.Function):
    """A square layer of Eq. (55) and its activation, per network: ``u = x V^T`` (one ``bmm``), then
    ``y = a phi(BN(u diag(s))) + b`` with ``s_i = 1 / ||v_i||`` (one operator,
    :func:`gmp.models.stacked_ops.activation_forward`).

    Backward, from ``dE/dy``: one operator gives ``A = dE/du``, ``dE/ds`` and BN's parameter
    gradients; ``dE/dx = A V`` (one ``bmm``). Without an :class:`SGDInBackward`, ``dE/dV = A^T X +
    diag(c) V`` is returned (``c_i = -s_i^3 dE/ds_i``). With one, ``V``'s gradient is never
    returned: ``P = A^T X`` goes into the shared product buffer (one ``bmm``) and one operator
    (:func:`gmp.models.stacked_ops.momentum_update_`) forms each row of the gradient, updates the
    momentum buffer and ``V`` in place, and keeps the new inverse row norms for the next forward
    pass and the rows' squared norms for the bookkeeping: ``torch.optim.SGD``'s numbers to
    rounding. ``V`` is changed after ``dE/dx`` has been computed from it; no other layer reads it.
    Six kernels per layer and step on CUDA, with or without BN, whatever the number of networks."""

    @staticmethod
    def forward(ctx, x, V, weight, bias, model, layer):
        sgd = model.sgd
        fresh = sgd is not None and sgd.versions[layer] == V._version
        s = sgd.inverse_norms[layer] if fresh else _inverse_row_norms(V)
        u = torch.bmm(x, V.transpose(-1, -2))
        weight, bias, mean, var, use_bn = _bn_arguments(model, layer)
        y, mean, rstd = stacked_ops.activation_forward(u, s, model.kind, model.a, model.b, weight, bias, mean, var,
                                                       model.bn_on, use_bn, model.training, model.momentum, model.eps,
                                                       kernels=model.kernels)
        ctx.save_for_backward(x, V, u, s, weight, bias, mean, rstd)
        ctx.model, ctx.layer, ctx.use_bn = model, layer, use_bn
        return y

    @staticmethod
    def backward(ctx, dy):
        x, V, u, s, weight, bias, mean, rstd = ctx.saved_tensors
        model, layer = ctx.model, ctx.layer
        du, ds, dweight, dbias = stacked_ops.activation_backward(dy, u, s, model.kind, model.a, weight, bias, mean, rstd,
                                                                 model.bn_on, ctx.use_bn, kernels=model.kernels)
        dx = torch.bmm(du, V) if ctx.needs_input_grad[0] else None
        bn_grads = (dweight, dbias) if ctx.use_bn else (None, None)
        sgd = model.sgd
        if sgd is None:
            dV = None
            if ctx.needs_input_grad[1]:
                dV = torch.bmm(du.transpose(-1, -2), x).addcmul_(V, (-ds * s.pow(3)).transpose(-1, -2))
            return dx, dV, *bn_grads, None, None
        P = torch.bmm(du.transpose(-1, -2), x, out=sgd.product)
        stacked_ops.momentum_update_(P, V, sgd.buffers[layer], ds, sgd.inverse_norms[layer], sgd.rows_g[layer],
                                     sgd.rows_p[layer], sgd.lr, sgd.momentum, kernels=model.kernels)
        sgd.versions[layer] = V._version
        return dx, None, *bn_grads, None, None


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
        self.register_buffer("kind", torch.tensor([k for k, _, _ in kinds], dtype=torch.int32), persistent=False)
        self.register_buffer("a", torch.tensor([a for _, a, _ in kinds], dtype=dtype), persistent=False)
        self.register_buffer("b", torch.tensor([b for _, _, b in kinds], dtype=dtype), persistent=False)
        self.register_buffer("ones", torch.ones(self.size, 1, width, dtype=dtype), persistent=False)
        self.kernels = True
        """Whether the element-wise work runs as :mod:`gmp.models.stacked_ops`' operators (one kernel
        each on CUDA), else as their torch reference (several kernels each; the same numbers)."""
        self.sgd: SGDInBackward | None = None
        has_bn = [net.norms is not None for net in networks]
        self.any_bn = any(has_bn)
        self.register_buffer("bn_on", torch.tensor(has_bn, dtype=torch.int32), persistent=False)
        self.eps, self.momentum = 0.0, 0.0
        self.no_bn = [torch.zeros(self.size, width, dtype=dtype) for _ in range(4)]
        """Stand-ins for the BN arguments of a layer without BN (weight, bias, running mean and
        variance: four tensors, so that the operators' marking the last two as written leaves the
        first two, which the backward pass reads, unchanged)."""
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

    def _apply(self, fn, *args, **kwargs):
        self.no_bn = [fn(t) for t in self.no_bn]
        return super()._apply(fn, *args, **kwargs)

    def update_in_backward(self, buffers: Sequence[torch.Tensor], lr: float, momentum: float) -> SGDInBackward:
        """From now on each backward pass updates the square layers' ``V`` by SGD with momentum
        (learning rate ``lr``, ``buffers`` their momentum buffers) instead of giving their
        gradients (``_SquareLayer``): ``torch.optim.SGD``'s numbers to rounding, no ``n x n``
        gradient stored. Returns the state, whose ``norms_sq`` and ``tangential_share`` give the
        squared gradient norms of the last backward pass and how much of ``A^T X`` they keep.
        """
        self.sgd = SGDInBackward(buffers, lr, momentum)
        self.sgd.refresh(self.V)
        return self.sgd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels and x.is_cuda:
            from gmp.models import _stacked_triton  # noqa: F401  (registers the operators' Triton kernels for CUDA)
        if x.dim() == 2:
            x = x.expand(self.size, *x.shape)
        h = x @ self.first_weight.transpose(1, 2)
        if self.first_bias is not None:
            h = h + self.first_bias.unsqueeze(1)
        x = _Activation.apply(h.contiguous(), self) if self.first_activation else h
        for l in range(self.depth):
            weight, bias = (self.bn_weight[l], self.bn_bias[l]) if self.any_bn else (None, None)
            x = _SquareLayer.apply(x, self.V[l], weight, bias, self, l)
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
