"""Characteristic activation boundaries of ReLU units (Chen & Ge, Sec. 2).

A ReLU unit ``relu(w . x + b)`` is active on one side of its characteristic boundary
``B = {x : w . x + b = 0}`` (Eq. (3)). The boundary is fixed by its spatial location
``phi = -b w / ||w||^2 = -lam u`` (Eqs. (4)-(5), (7)): the point of ``B`` closest to the
origin, whose vector is orthogonal to ``B``.

- :func:`characteristic_points`: ``phi`` of every unit of a layer under standard (SP),
  weight-normalized (WN), batch-normalized (BN) or geometric (GmP) parameterization.
- :func:`perturb_boundary`: the perturbation analysis of Sec. 2.4 (Eqs. (8)-(9)).
- :class:`CharacteristicTracker`: records ``phi`` of a layer during training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from gmp.hyperspherical import angles_to_unit, unit_to_angles
from gmp.layers import GmPLinear

__all__ = ["characteristic_points", "boundary_angle", "perturb_boundary", "BoundaryPerturbation",
           "CharacteristicTracker", "PERTURBED_PARAMS"]

PERTURBED_PARAMS: tuple[str, ...] = ("sp", "wn", "gmp")


def _points(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``phi = -b w / ||w||^2`` (Eq. (4)); NaN rows for units whose weight is zero."""
    sq = (weight * weight).sum(dim=1, keepdim=True)
    return torch.where(sq > 0, -bias[:, None] * weight / sq, torch.full_like(weight, float("nan")))


@torch.no_grad()
def characteristic_points(layer: nn.Module, bn: nn.Module | None = None) -> torch.Tensor:
    """Spatial locations ``phi`` of the characteristic boundaries of a layer's units, (out, in).

    - ``nn.Linear`` (standard, or weight-normalized through
      ``torch.nn.utils.parametrizations.weight_norm``, whose ``weight`` is the effective
      weight): ``phi = -b w / ||w||^2`` (Eq. (4)).
    - ``nn.Linear`` followed by a batch norm ``bn`` (pass it): with the running statistics
      the pre-activation is ``gamma (w . x + b - mu) / sqrt(var + eps) + beta``, zero on
      ``w . x + b' = 0`` with ``b' = b - mu + beta sqrt(var + eps) / gamma``.
    - :class:`gmp.GmPLinear`: ``phi = -lam u(theta)`` (Eqs. (5), (7)); with input mean
      normalization the boundary is ``u . (x - m) + lam = 0`` with ``m`` the running mean.

    Units with a zero weight (or ``gamma = 0``) have no boundary; their rows are NaN.
    """
    if isinstance(layer, GmPLinear):
        if bn is not None:
            raise ValueError("a batch norm after a GmPLinear is not supported: GmPLinear includes its activation")
        u = layer.direction.detach()
        lam = layer.lam.detach()
        if layer.mean_norm is not None:
            lam = lam - u @ layer.mean_norm.running_mean
        return -lam[:, None] * u
    if not isinstance(layer, nn.Linear):
        raise ValueError(f"characteristic_points expects an nn.Linear (SP, WN, or with bn=BatchNorm1d) "
                         f"or a GmPLinear, got {type(layer).__name__}")
    weight = layer.weight.detach()
    bias = layer.bias.detach() if layer.bias is not None else torch.zeros_like(weight[:, 0])
    if bn is not None:
        if not isinstance(bn, nn.modules.batchnorm._BatchNorm):
            raise ValueError(f"bn must be a batch-norm module, got {type(bn).__name__}")
        if bn.running_mean is None or bn.running_var is None:
            raise ValueError("bn needs running statistics (track_running_stats=True) to define a boundary")
        if bn.num_features != layer.out_features:
            raise ValueError(f"bn has {bn.num_features} features, the layer has {layer.out_features} units")
        std = torch.sqrt(bn.running_var + bn.eps)
        gamma = bn.weight.detach() if bn.weight is not None else torch.ones_like(std)
        beta = bn.bias.detach() if bn.bias is not None else torch.zeros_like(std)
        bias = bias - bn.running_mean + beta * std / gamma
        weight = torch.where((gamma != 0)[:, None], weight, torch.zeros_like(weight))
    return _points(weight, bias)


def boundary_angle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angle in [0, pi] between the rows of ``a`` and ``b`` (Eq. (8)), computed stably.

    ``2 atan2(||a^ - b^||, ||a^ + b^||)`` for the normalised rows, which equals
    ``arccos(a . b / (||a|| ||b||))`` but keeps full precision for tiny angles.
    """
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a_hat = a / a.norm(dim=-1, keepdim=True)
    b_hat = b / b.norm(dim=-1, keepdim=True)
    return 2.0 * torch.atan2((a_hat - b_hat).norm(dim=-1), (a_hat + b_hat).norm(dim=-1))


@dataclasses.dataclass(frozen=True)
class BoundaryPerturbation:
    """Result of :func:`perturb_boundary`: per unit, how far the boundary moved."""

    angle: torch.Tensor
    """Angle between the old and the new boundary normals (Eqs. (8)-(9)), (units,)."""
    shift: torch.Tensor
    """Distance ``||phi' - phi||`` moved by the spatial location, (units,)."""
    phi: torch.Tensor
    """Spatial locations before the perturbation, (units, n)."""
    phi_perturbed: torch.Tensor
    """Spatial locations after the perturbation, (units, n)."""
    normal: torch.Tensor
    """Unit normals before, (units, n)."""
    normal_perturbed: torch.Tensor
    """Unit normals after, (units, n)."""


def perturb_boundary(weight: torch.Tensor, bias: torch.Tensor, eps: float, param: str) -> BoundaryPerturbation:
    """Perturbation analysis of Sec. 2.4 of Chen & Ge: add ``eps`` to every parameter.

    The units ``relu(w . x + b)`` (``weight`` of shape (units, n), ``bias`` (units,)) are
    written in parameterization ``param`` and each of its parameters is moved by ``eps``
    (the vector ``eps * 1``):

    - "sp": ``w' = w + eps 1``, ``b' = b + eps``; the normal turns by Eq. (8).
    - "wn": ``v = w``, ``g = ||w||``: ``v' = v + eps 1``, ``g' = g + eps``, ``b' = b + eps``;
      the normal ``v / ||v||`` turns exactly as under SP.
    - "gmp": ``theta`` from ``w / ||w||``, ``lam = b / ||w||``: ``theta' = theta + eps 1``,
      ``lam' = lam + eps`` (``r`` does not move the boundary). In 2-D the normal turns by
      exactly ``|eps|`` (Eq. (9)).
    """
    if param not in PERTURBED_PARAMS:
        raise ValueError(f"unknown parameterization {param!r}: expected one of {', '.join(PERTURBED_PARAMS)}")
    if weight.dim() != 2 or bias.shape != weight.shape[:1]:
        raise ValueError(f"expected weight (units, n) and bias (units,), got {tuple(weight.shape)} "
                         f"and {tuple(bias.shape)}")
    norms = weight.norm(dim=1)
    if bool((norms == 0).any()):
        raise ValueError("every unit needs a nonzero weight vector to define its boundary")
    normal = weight / norms[:, None]
    phi = _points(weight, bias)
    if param == "sp":
        w_new = weight + eps
        normal_new = w_new / w_new.norm(dim=1, keepdim=True)
        phi_new = _points(w_new, bias + eps)
    elif param == "wn":
        v_new = weight + eps
        normal_new = v_new / v_new.norm(dim=1, keepdim=True)
        phi_new = -((bias + eps) / (norms + eps))[:, None] * normal_new
    else:
        if weight.shape[1] == 1:
            normal_new = normal
        else:
            normal_new = angles_to_unit(unit_to_angles(weight) + eps)
        phi_new = -(bias / norms + eps)[:, None] * normal_new
    return BoundaryPerturbation(angle=boundary_angle(normal, normal_new), shift=(phi_new - phi).norm(dim=1),
                                phi=phi, phi_perturbed=phi_new, normal=normal, normal_perturbed=normal_new)


class CharacteristicTracker:
    """A training callback recording the spatial locations ``phi`` of one layer's units.

    Call it as ``tracker(epoch, model)`` (for instance once per epoch from a training
    loop); it records :func:`characteristic_points` of ``layer`` every ``every``-th epoch.
    ``layer`` is the module itself, or a function ``model -> module`` that selects it
    (use that when the loop may replace the model object, e.g. restoring a copy).

    Attributes:
        epochs: the epochs recorded.
        history: ``phi`` as an array of shape (recorded epochs, out, in).
    """

    def __init__(self, layer: nn.Module | Callable[[nn.Module], nn.Module],
                 bn: nn.Module | Callable[[nn.Module], nn.Module] | None = None, every: int = 1):
        if not callable(layer):
            raise ValueError(f"layer must be a module or a function model -> module, got {layer!r}")
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        self.layer = layer
        self.bn = bn
        self.every = every
        self.epochs: list[int] = []
        self._points: list[np.ndarray] = []

    @staticmethod
    def _select(selector, model):
        if selector is None or isinstance(selector, nn.Module):
            return selector
        return selector(model)

    def __call__(self, epoch: int, model: nn.Module | None = None) -> None:
        if epoch % self.every:
            return
        layer = self._select(self.layer, model)
        bn = self._select(self.bn, model)
        self.epochs.append(int(epoch))
        self._points.append(characteristic_points(layer, bn).cpu().numpy())

    @property
    def history(self) -> np.ndarray:
        """Recorded ``phi``, shape (recorded epochs, out, in)."""
        if not self._points:
            return np.zeros((0, 0, 0))
        return np.stack(self._points)

    def max_change(self) -> np.ndarray:
        """``max_i ||phi_{i,t+1} - phi_{i,t}||`` between consecutive records (Fig. 2c of Chen & Ge)."""
        h = self.history
        if len(h) < 2:
            return np.zeros(0)
        return np.nanmax(np.linalg.norm(np.diff(h, axis=0), axis=-1), axis=-1)
