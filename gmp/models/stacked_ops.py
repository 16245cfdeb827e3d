"""The element-wise work of a stacked square layer (:mod:`gmp.models.stacked`) in three operators,
each one kernel on CUDA (Triton, ``gmp.models._stacked_triton``, which registers them for CUDA
when imported) and the torch reference below elsewhere.

For ``N`` networks, a batch of ``B`` and width ``n``, with ``u = x V^T`` ``(N, B, n)`` and ``s``
``(N, 1, n)`` the inverse row norms of ``V`` (Eq. (55): ``h = u diag(s)``):

* :func:`activation_forward`: ``y = a_k phi_k(z) + b_k`` with ``z = BN(h)`` or ``z = h`` per
  network (``phi_k`` the network's own activation of :data:`gmp.gpn.ACTIVATIONS`, ``(a_k, b_k)``
  its GPN constants, Proposition 3; ``(1, 0)`` when plain), batch normalisation by
  ``nn.BatchNorm1d``'s rule on that network's batch alone (running statistics updated in
  training); returns ``y`` and the batch mean and inverse standard deviation for the backward pass.
* :func:`activation_backward`: from ``dE/dy``, ``dE/du = dE/dh diag(s)``, ``dE/ds_i = sum_b
  dE/dh_bi u_bi``, and BN's ``dE/dgamma``, ``dE/dbeta``.
* :func:`momentum_update_`: from ``P = A^T X`` (``A = dE/du``, ``X`` the layer's input), the
  gradient ``G = dE/dV = P + diag(c) V`` with ``c_i = -s_i^3 dE/ds_i`` (the chain rule through
  ``s_i = 1 / ||v_i||``), formed row by row in registers and never stored; then SGD with momentum
  (``buf = momentum buf + G; V -= lr buf``, ``torch.optim.SGD``'s rule), the new inverse row
  norms, and each row's ``||G_i||^2`` and ``||P_i||^2`` (the gradient norm of Eq. (56) and how much
  of ``||P||`` it keeps, both sums of squares: no difference, no cancellation), in place.

Each network computes its own activation only (never every activation under a mask): the
reference takes the networks of each kind together, the Triton kernels read each network's kind.
"""

from __future__ import annotations

import torch

from gmp.gpn import ACTIVATIONS

__all__ = ["KINDS", "activation_forward", "activation_backward", "momentum_update_", "phi_reference",
           "phi_derivative_reference"]

KINDS = list(ACTIVATIONS)
"""The activation kinds by index, as the kernels read them (``tanh, relu, leaky_relu, elu, selu, gelu``)."""

SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
"""``torch.nn.functional.selu``'s constants."""



def phi_reference(kind: int, z: torch.Tensor) -> torch.Tensor:
    """``phi_kind(z)``: :data:`gmp.gpn.ACTIVATIONS`' own function."""
    return ACTIVATIONS[KINDS[kind]](z)


def phi_derivative_reference(kind: int, z: torch.Tensor) -> torch.Tensor:
    """``phi_kind'(z)``, as torch's backward formulas give it (``relu'(0) = 0``, ``leaky_relu'(0) = 0.01``)."""
    name = KINDS[kind]
    if name == "tanh":
        return 1 - torch.tanh(z).square()
    if name == "relu":
        return (z > 0).to(z.dtype)
    if name == "leaky_relu":
        return torch.where(z > 0, 1.0, torch.full_like(z, 0.01))
    if name == "elu":
        return torch.where(z > 0, 1.0, torch.exp(z))
    if name == "selu":
        return SELU_SCALE * torch.where(z > 0, 1.0, SELU_ALPHA * torch.exp(z))
    if name == "gelu":
        sig = torch.sigmoid(1.702 * z)
        return sig + 1.702 * z * sig * (1 - sig)
    raise ValueError(f"unknown activation kind {kind}")


def _groups(kind: torch.Tensor) -> dict[int, list[int]]:
    """The networks of each kind, ``{kind: [network, ...]}``."""
    out: dict[int, list[int]] = {}
    for i, k in enumerate(kind.tolist()):
        out.setdefault(int(k), []).append(i)
    return out


def _forward_reference(u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, use_bn, training,
                       momentum, eps):
    h = u * s
    size, batch, width = h.shape
    mean = torch.zeros(size, width, dtype=h.dtype, device=h.device)
    rstd = torch.ones_like(mean)
    z = h
    if use_bn:
        if training:
            batch_mean = h.mean(1)
            var = (h - batch_mean.unsqueeze(1)).square().mean(1)
            with torch.no_grad():
                on = (bn_mask != 0).view(-1, 1)
                running_mean.copy_(torch.where(on, (1 - momentum) * running_mean + momentum * batch_mean, running_mean))
                running_var.copy_(torch.where(on, (1 - momentum) * running_var + momentum * var * batch / max(batch - 1, 1),
                                              running_var))
        else:
            batch_mean, var = running_mean, running_var
        on = (bn_mask != 0).view(-1, 1)
        mean = torch.where(on, batch_mean, 0.0)
        rstd = torch.where(on, (var + eps).rsqrt(), 1.0)
        normal = (h - mean.unsqueeze(1)) * rstd.unsqueeze(1) * weight.unsqueeze(1) + bias.unsqueeze(1)
        z = torch.where((bn_mask != 0).view(-1, 1, 1), normal, h)
    y = torch.empty_like(z)
    for k, nets in _groups(kind).items():
        index = torch.tensor(nets, device=z.device)
        y.index_copy_(0, index, phi_reference(k, z.index_select(0, index)))
    return a.view(-1, 1, 1) * y + b.view(-1, 1, 1), mean, rstd


def _backward_reference(dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, use_bn):
    h = u * s
    batch = h.shape[1]
    z, xhat = h, h
    if use_bn:
        xhat = (h - mean.unsqueeze(1)) * rstd.unsqueeze(1)
        z = torch.where((bn_mask != 0).view(-1, 1, 1), xhat * weight.unsqueeze(1) + bias.unsqueeze(1), h)
    dphi = torch.empty_like(z)
    for k, nets in _groups(kind).items():
        index = torch.tensor(nets, device=z.device)
        dphi.index_copy_(0, index, phi_derivative_reference(k, z.index_select(0, index)))
    dz = dy * a.view(-1, 1, 1) * dphi
    dweight = torch.zeros_like(mean)
    dbias = torch.zeros_like(mean)
    dh = dz
    if use_bn:
        on = (bn_mask != 0).view(-1, 1)
        dweight = torch.where(on, (dz * xhat).sum(1), 0.0)
        dbias = torch.where(on, dz.sum(1), 0.0)
        normal = (weight * rstd).unsqueeze(1) * (dz - (dbias.unsqueeze(1) + xhat * dweight.unsqueeze(1)) / batch)
        dh = torch.where((bn_mask != 0).view(-1, 1, 1), normal, dz)
    return dh * s, (dh * u).sum(1, keepdim=True), dweight, dbias


def _update_reference(P, V, buf, ds, s, rows_g, rows_p, lr, momentum):
    c = (-ds * s.pow(3)).transpose(-1, -2)
    G = P + c * V
    rows_g.copy_(G.square().sum(-1))
    rows_p.copy_(P.square().sum(-1))
    buf.mul_(momentum).add_(G)
    V.sub_(buf, alpha=lr)
    s.copy_(torch.linalg.vector_norm(V, dim=-1).reciprocal().unsqueeze(-2))


@torch.library.custom_op("gmp::stacked_activation_forward", mutates_args=("running_mean", "running_var"))
def _forward_op(u: torch.Tensor, s: torch.Tensor, kind: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                bn_mask: torch.Tensor, use_bn: bool, training: bool, momentum: float, eps: float
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, rstd = _forward_reference(u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, use_bn,
                                       training, momentum, eps)
    return y.contiguous(), mean.contiguous(), rstd.contiguous()


@torch.library.custom_op("gmp::stacked_activation_backward", mutates_args=())
def _backward_op(dy: torch.Tensor, u: torch.Tensor, s: torch.Tensor, kind: torch.Tensor, a: torch.Tensor,
                 weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, bn_mask: torch.Tensor,
                 use_bn: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    du, ds, dweight, dbias = _backward_reference(dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, use_bn)
    return du.contiguous(), ds.contiguous(), dweight.contiguous(), dbias.contiguous()


@torch.library.custom_op("gmp::stacked_momentum_update", mutates_args=("V", "buf", "s", "rows_g", "rows_p"))
def _update_op(P: torch.Tensor, V: torch.Tensor, buf: torch.Tensor, ds: torch.Tensor, s: torch.Tensor,
               rows_g: torch.Tensor, rows_p: torch.Tensor, lr: float, momentum: float) -> None:
    _update_reference(P, V, buf, ds, s, rows_g, rows_p, lr, momentum)


def activation_forward(u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, use_bn, training, momentum,
                       eps, kernels: bool = True):
    """``(y, mean, rstd)`` (see the module); ``kernels=False`` runs the torch reference on any device."""
    fn = _forward_op if kernels else _forward_reference
    return fn(u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, use_bn, training, momentum, eps)


def activation_backward(dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, use_bn, kernels: bool = True):
    """``(dE/du, dE/ds, dE/dgamma, dE/dbeta)`` (see the module)."""
    fn = _backward_op if kernels else _backward_reference
    return fn(dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, use_bn)


def momentum_update_(P, V, buf, ds, s, rows_g, rows_p, lr, momentum, kernels: bool = True) -> None:
    """The square layer's SGD with momentum in place (see the module)."""
    (_update_op if kernels else _update_reference)(P, V, buf, ds, s, rows_g, rows_p, float(lr), float(momentum))
