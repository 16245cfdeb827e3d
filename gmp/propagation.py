"""Forward and backward signal norms of deep networks (Lu et al., Section 2 and Section 3.1).

For a network of Definition 1 (``h^(l) = W^(l) x^(l)``, ``x^(l+1) = phi(h^(l))``) and an
objective whose error signal at the output is ``dE/dx^(L+1) = g``, one pass computes

* the forward norms ``||x^(l)||_2`` (Eq. (4)),
* the backward norms ``||d^(l)||_2`` of ``d^(l) = D^(l) (W^(l+1))^T d^(l+1)`` (Eqs. (2), (5)),
* the weight-gradient norms ``||dE/dW^(l)||_F`` with ``dE/dW^(l) = d^(l) (x^(l))^T``
  (Eq. (3)), summed over the samples of the batch,
* per-layer histograms of ``phi'(h_i^(l))`` (Figures 2 and 6).

The backward recursion is written out (Eq. (2)) rather than left to autograd: the forward
pass keeps ``x^(l)`` and the diagonal of ``D^(l)`` of every layer (``phi'`` itself comes
from autograd), nothing else.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from gmp.models.deep import DeepMLP

__all__ = ["Propagation", "propagate", "parameter_gradient_norms", "gradient_norm_ratio"]


@dataclasses.dataclass(frozen=True)
class Propagation:
    """Per-layer measurements of one deep network on one batch (numpy arrays).

    ``x_norm[l-1]``: mean over samples of ``||x^(l)||_2`` for ``l = 1, ..., L+1``;
    ``x_norm_std``: their standard deviation over samples;
    ``d_norm[l-1]``: mean over samples of ``||d^(l)||_2`` for ``l = 1, ..., L``;
    ``grad_norm[l-1]``: ``||dE/dW^(l)||_F`` of the batch objective for ``l = 1, ..., L``;
    ``hist[l-1]``: counts of ``phi'(h_i^(l))`` over units and samples in the bins
    ``bin_edges``; ``below``/``above``: counts outside the binned range.
    """

    x_norm: np.ndarray
    x_norm_std: np.ndarray
    d_norm: np.ndarray
    grad_norm: np.ndarray
    hist: np.ndarray
    bin_edges: np.ndarray
    below: int
    above: int

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """The measurements as a flat dict of arrays (for ``Store.save(..., arrays=...)``)."""
        return {f"{prefix}{f.name}": np.asarray(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _phi_and_derivative(phi: torch.nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.enable_grad():
        h = h.detach().requires_grad_(True)
        y = phi(h)
        (dy,) = torch.autograd.grad(y.sum(), h)
    return y.detach(), dy


def _histogram(values: torch.Tensor, bins: int, lo: float, hi: float) -> tuple[np.ndarray, int, int]:
    """Counts of ``values`` in ``bins`` equal bins on [lo, hi), and the counts below and
    above, in one pass (torch.histc is slow on the CPU)."""
    idx = torch.floor((values.flatten() - lo) * (bins / (hi - lo))).clamp_(-1, bins).long() + 1
    counts = torch.bincount(idx, minlength=bins + 2).cpu().numpy().astype(np.int64)
    return counts[1:-1], int(counts[0]), int(counts[-1])


@torch.no_grad()
def propagate(model: DeepMLP, x: torch.Tensor, output_grad: torch.Tensor, bins: int = 250,
              hist_range: tuple[float, float] = (-0.5, 2.0)) -> Propagation:
    """Measure forward/backward norms of the square layers of ``model`` (Eqs. (1)-(5)).

    ``x`` (batch x n) is ``x^(1)``, the input of the first square layer (an unconstrained
    ``model.first`` is not applied); ``output_grad`` (batch x n) is ``dE/dx^(L+1)``, so the
    objective is ``E = sum_s <output_grad_s, x_s^(L+1)>`` (``model.last`` is not applied).
    ``bins = 0`` skips the histograms. Networks with batch normalisation are rejected:
    Eq. (2) has no BN term.
    """
    if not isinstance(model, DeepMLP):
        raise ValueError(f"expected a gmp DeepMLP, got {type(model).__name__}")
    if model.norms is not None:
        raise ValueError("propagate() follows Eq. (2), which has no batch normalisation; for a "
                         "BN network use parameter_gradient_norms() after loss.backward()")
    n = model.width
    if x.ndim != 2 or x.shape[1] != n or output_grad.shape != x.shape:
        raise ValueError(f"x and output_grad must both have shape (batch, {n}), "
                         f"got {tuple(x.shape)} and {tuple(output_grad.shape)}")
    lo, hi = hist_range
    if not (bins >= 0 and hi > lo):
        raise ValueError(f"need bins >= 0 and hist_range (lo, hi) with hi > lo, got {bins}, {hist_range}")
    weights = [w.detach() for w in model.square_weights()]
    if any(layer.bias is not None for layer in model.layers):
        raise ValueError("propagate() follows Eq. (1), which has no bias")
    L = len(weights)
    xs: list[torch.Tensor | None] = []
    Ds: list[torch.Tensor | None] = []
    x_norms = [x.norm(dim=1)]
    cur = x
    for l in range(L):
        xs.append(cur)
        cur, D = _phi_and_derivative(model.phi, cur @ weights[l].T)
        Ds.append(D)
        x_norms.append(cur.norm(dim=1))
    d_norm = np.empty(L)
    grad_norm = np.empty(L)
    hist = np.zeros((L, bins), dtype=np.int64)
    below = above = 0
    d = output_grad
    for l in range(L - 1, -1, -1):
        D = Ds[l]
        if bins:
            hist[l], low, high = _histogram(D, bins, lo, hi)
            below, above = below + low, above + high
        d = D * d                                     # d^(l) = D^(l) (W^(l+1))^T d^(l+1)
        d_norm[l] = float(d.norm(dim=1).mean())
        grad_norm[l] = float((d.T @ xs[l]).norm())    # Eq. (3) summed over the batch
        d = d @ weights[l]
        xs[l] = Ds[l] = None
    xn = torch.stack(x_norms)
    return Propagation(x_norm=xn.mean(dim=1).cpu().numpy(), x_norm_std=xn.std(dim=1, correction=0).cpu().numpy(),
                       d_norm=d_norm, grad_norm=grad_norm, hist=hist,
                       bin_edges=np.linspace(lo, hi, bins + 1), below=below, above=above)


def parameter_gradient_norms(model: DeepMLP) -> np.ndarray:
    """``||dE/dV^(l)||_F`` of the free tensor of every square layer after ``backward()``
    (Eq. (56) of Lu et al. for row-normalised weights); NaN where no gradient exists."""
    out = []
    for p in model.free_parameters():
        out.append(float(p.grad.norm()) if p.grad is not None else float("nan"))
    return np.asarray(out)


def gradient_norm_ratio(norms: np.ndarray) -> float:
    """``max_l ||dE/dW^(l)||_F / min_l ||dE/dW^(l)||_F`` (Figure 7, Eq. (56) of Lu et al.);
    ``inf`` when a gradient vanished to 0, NaN when any norm is not finite."""
    norms = np.asarray(norms, dtype=np.float64)
    if norms.size == 0:
        raise ValueError("need at least one gradient norm")
    if not np.all(np.isfinite(norms)):
        return float("nan")
    low = norms.min()
    return float("inf") if low == 0 else float(norms.max() / low)
