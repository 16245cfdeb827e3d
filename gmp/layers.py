"""Geometric parameterization (GmP) layers and input mean normalization (Chen & Ge, Sec. 3).

- :class:`GmPLinear`: ``z = r * act(u(theta) . (x - E[x]) + lam)``, Eqs. (10)-(11).
- :class:`MeanNorm`: subtract the batch mean (running mean in evaluation), Sec. 3.2.

:func:`gmp.convert` (in :mod:`gmp.conversion`) turns the ReLU layers of a network into these units.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gmp.hyperspherical import angles_to_unit, scaled_directions, unit_to_angles, uniform_directions

__all__ = ["GmPLinear", "MeanNorm", "INITS"]

INITS: tuple[str, ...] = ("uniform", "glorot")
"""The GmP initialisations, "uniform" (paper text, Sec. 3.3) and "glorot" (official code)."""

LINEAR_INITS: tuple[str, ...] = INITS + ("glorot_half",)
"""The initialisations of :class:`GmPLinear`, those of :data:`INITS` and "glorot_half" (the official
conversion with the official inverse map's half-sphere quirk, every ``u_n >= 0``)."""


def identity(s: torch.Tensor) -> torch.Tensor:
    """The activation of a GmP unit without a nonlinearity: ``s`` itself (a named function,
    so that layers using it can be pickled)."""
    return s


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "identity": identity,
}
"""The named activations of GmP layers; the fast paths are chosen by the function object."""


@torch.no_grad()
def polar(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w / ||w||, ||w||, b / ||w||)`` per row of ``weight`` (m, n): Eq. (5) of Chen & Ge.

    The norms are computed as ``max|w| * ||w / max|w|| ||``, so weights near the largest or
    smallest floats of their dtype neither overflow nor underflow. Non-finite weights or
    biases, zero rows and norms or ``lam`` that the dtype cannot hold are refused.
    """
    if not bool(torch.isfinite(weight).all()) or (bias is not None and not bool(torch.isfinite(bias).all())):
        raise ValueError("weight and bias must be finite; got NaN or infinite entries")
    peak = weight.abs().amax(dim=1)
    if bool((peak == 0).any()):
        raise ValueError("every unit needs a nonzero weight vector to define its direction; "
                         f"rows {torch.nonzero(peak == 0).flatten().tolist()} are zero")
    direction = weight / peak[:, None]
    norms = peak * direction.norm(dim=1)
    direction = direction / (norms / peak)[:, None]
    lam = bias / norms if bias is not None else torch.zeros_like(norms)
    if not bool(torch.isfinite(norms).all() and torch.isfinite(lam).all()):
        raise ValueError(f"the norms ||w|| or lam = b / ||w|| of these weights overflow {weight.dtype}")
    return direction, norms, lam


class MeanNorm(nn.Module):
    """Input mean normalization, Sec. 3.2 of Chen & Ge: ``x - E[x]``, no affine parameters.

    In training the mean is taken over the batch (and, for inputs of shape
    ``(N, C, *spatial)``, over the spatial axes; like ``nn.BatchNorm`` it refuses an input
    with only one value or none per feature) and the running mean is updated as
    ``running = (1 - momentum) * running + momentum * batch_mean``; in evaluation the
    running mean (initialised to zero) is subtracted. Gradients flow through the batch
    mean, as in batch normalization.
    """

    def __init__(self, num_features: int, momentum: float = 0.01,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        if not isinstance(num_features, int) or num_features < 1:
            raise ValueError(f"num_features must be an int >= 1, got {num_features!r}")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must lie in [0, 1], got {momentum!r}")
        self.num_features = num_features
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(num_features, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"MeanNorm({self.num_features}) expects input of shape (N, {self.num_features}, *), "
                             f"got {tuple(x.shape)}")
        shape = (1, self.num_features) + (1,) * (x.dim() - 2)
        if self.training:
            self._need_values(x.numel(), tuple(x.shape))
            axes = [0] + list(range(2, x.dim()))
            mean = x.mean(dim=axes)
            with torch.no_grad():
                self.running_mean.mul_(1.0 - self.momentum).add_(mean.detach(), alpha=self.momentum)
            return x - mean.view(shape)
        return x - self.running_mean.view(shape)

    def _need_values(self, numel: int, shape: tuple[int, ...]) -> None:
        """Refuse, in training, an input of ``numel`` values (of the caller's ``shape``) with at most one per feature."""
        if numel <= self.num_features:  # as nn.BatchNorm: the mean of one value is that value
            raise ValueError(f"MeanNorm in training needs more than 1 value per feature, got input of "
                             f"shape {shape} (an empty batch, or a batch of one without spatial "
                             "axes, would give a NaN running mean or an output of zeros)")

    def extra_repr(self) -> str:
        return f"{self.num_features}, momentum={self.momentum}"


class GmPLinear(nn.Module):
    """A layer of geometrically parameterized units, Eqs. (10)-(11) of Chen & Ge.

    ``z = r * act(u(theta) . (x - E[x]) + lam)`` with ``u(theta)`` the unit vector of
    Eq. (6) (computed by :func:`gmp.angles_to_unit`), one characteristic radius ``lam``
    and one scale ``r`` per unit. The boundary of unit ``i`` is
    ``{x : u_i . x + lam_i = 0}`` (Eq. (7)), with spatial location ``phi_i = -lam_i u_i``.

    Args:
        in_features: input size ``n`` (>= 1). With ``n = 1`` the direction is a fixed
            sign per unit (a buffer, no gradient); only ``lam`` and ``r`` learn.
        out_features: number of units.
        activation: "relu", "identity" or a callable applied elementwise (a callable is
            always applied as given, whatever its name).
        init: "uniform" (paper text, Sec. 3.3: directions uniform on the sphere,
            ``lam = 0``, ``r = 1``) or "glorot" (official code: a Glorot-uniform weight
            ``w`` with zero bias converted, so ``r = ||w||``, ``lam = 0``), or "glorot_half"
            (the same Glorot draw converted as the official code's inverse map does, which
            replaces ``u_n`` by ``|u_n|``: a quirk kept only to measure its effect; with one
            input there is no angle and the sign is kept, as in the official 1-D code).
        mean_norm: put a :class:`MeanNorm` on the input (Eq. (11)); its mean is taken over
            every leading axis of an input ``(..., in)``, as ``nn.Linear`` accepts any.

    Parameters: ``theta`` of shape (out, in - 1) (None when ``in_features == 1``),
    ``lam`` (out,), ``r`` (out,). ``r`` is not constrained to be positive.
    """

    def __init__(self, in_features: int, out_features: int,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
                 init: str = "uniform", mean_norm: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        if not isinstance(in_features, int) or in_features < 1:
            raise ValueError(f"in_features must be an int >= 1, got {in_features!r}")
        if not isinstance(out_features, int) or out_features < 1:
            raise ValueError(f"out_features must be an int >= 1, got {out_features!r}")
        if init not in LINEAR_INITS:
            raise ValueError(f"unknown init {init!r}: expected one of {', '.join(LINEAR_INITS)}")
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(f"unknown activation {activation!r}: expected one of "
                                 f"{', '.join(ACTIVATIONS)} or a callable")
            self._act = ACTIVATIONS[activation]
        elif callable(activation):
            self._act = activation
        else:
            raise ValueError(f"activation must be a name or a callable, got {activation!r}")
        self.activation = activation if isinstance(activation, str) else getattr(activation, "__name__", "callable")
        self.in_features = in_features
        self.out_features = out_features
        self.init = init
        kw = dict(device=device, dtype=dtype)
        if in_features > 1:
            self.theta = nn.Parameter(torch.empty(out_features, in_features - 1, **kw))
        else:
            self.register_parameter("theta", None)
            self.register_buffer("sign", torch.ones(out_features, 1, **kw))
        self.lam = nn.Parameter(torch.zeros(out_features, **kw))
        self.r = nn.Parameter(torch.ones(out_features, **kw))
        self.mean_norm = MeanNorm(in_features, **kw) if mean_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise by ``self.init`` (Sec. 3.3 of Chen & Ge, or the official Glorot variant)."""
        p = self.lam
        with torch.no_grad():
            if self.init == "uniform":
                w = uniform_directions(self.out_features, self.in_features, dtype=p.dtype, device=p.device)
            else:
                bound = math.sqrt(6.0 / (self.in_features + self.out_features))
                w = torch.empty(self.out_features, self.in_features, dtype=p.dtype, device=p.device)
                nn.init.uniform_(w, -bound, bound)
            self.set_weight(w, torch.zeros(self.out_features, dtype=p.dtype, device=p.device),
                            half_sphere=self.init == "glorot_half")
            if self.init == "uniform":
                self.r.fill_(1.0)

    @torch.no_grad()
    def set_weight(self, weight: torch.Tensor, bias: torch.Tensor | None = None, half_sphere: bool = False) -> None:
        """Set ``r = ||w||``, ``lam = b / ||w||`` and ``theta`` from ``w / ||w||`` (Eq. (5)).

        Afterwards ``r * act(u . x + lam) == act(w . x + b)`` for a positively homogeneous
        ``act`` such as ReLU. Every row of ``weight`` must be nonzero and finite
        (see ``polar``). ``half_sphere`` converts the angles as the official code does
        (``unit_to_angles(..., half_sphere=True)``), so the identity then holds only for
        rows whose last weight is >= 0; with one input it changes nothing.
        """
        if weight.shape != (self.out_features, self.in_features):
            raise ValueError(f"weight must have shape ({self.out_features}, {self.in_features}), "
                             f"got {tuple(weight.shape)}")
        if bias is not None and bias.shape != (self.out_features,):
            raise ValueError(f"bias must have shape ({self.out_features},), got {tuple(bias.shape)}")
        direction, norms, lam = polar(weight, bias)
        if self.theta is None:
            self.sign.copy_(direction)
        else:
            self.theta.copy_(unit_to_angles(direction, half_sphere=half_sphere))
        self.r.copy_(norms)
        self.lam.copy_(lam)

    @property
    def direction(self) -> torch.Tensor:
        """The unit vectors ``u(theta)`` of Eq. (6), shape (out, in)."""
        if self.theta is None:
            return self.sign
        return angles_to_unit(self.theta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"GmPLinear expects inputs of shape (..., {self.in_features}), got {tuple(x.shape)}")
        if self.mean_norm is not None:
            if self.mean_norm.training:  # checked here so that the error shows the caller's shape, not (N, in)
                self.mean_norm._need_values(x.numel(), tuple(x.shape))
            x = self.mean_norm(x.reshape(-1, self.in_features)).reshape(x.shape)
        if self.theta is not None and (self._act is identity or self._act is F.relu and self._r_positive()):
            # r * relu(u . x + lam) = relu((r u) . x + r lam) for r > 0 (and any r without
            # activation): one matrix product, with r u(theta) built at the cost of u(theta).
            return self._act(F.linear(x, scaled_directions(self.theta, self.r), self.r * self.lam))
        return self._act(F.linear(x, self.direction, self.lam)) * self.r

    def _r_positive(self) -> bool:
        """Whether every ``r > 0``, asked only on the CPU, where reading it costs no
        synchronisation; False under ``torch.compile``, whose graph cannot branch on the data,
        and on other devices, where the step would wait for the host (the general formula then
        serves: one more product over the output, which a GPU or the compiler makes cheap)."""
        return (not torch.compiler.is_compiling() and self.r.device.type == "cpu"
                and bool((self.r > 0).all()))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"activation={self.activation}, init={self.init}")


def check_exact(modules: list[nn.Module], kinds: tuple[type[nn.Module], ...]) -> None:
    """Refuse (ValueError) to convert a block whose modules do not compute exactly what their
    classes ``kinds`` compute: a subclass that overrides ``forward``, or a module with hooks.
    Replacing such a block by a GmP unit would silently change the network's function."""
    for module, kind in zip(modules, kinds):
        hooks = [name for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                   "_backward_pre_hooks") if getattr(module, name, None)]
        if type(module).forward is not kind.forward or hooks:
            why = (f"hooks ({', '.join(hooks)})" if hooks
                   else f"{type(module).__name__}.forward overriding {kind.__name__}.forward")
            raise ValueError(f"convert cannot convert {module!r} exactly: it is an nn.{kind.__name__} with "
                             f"{why}. Use a plain nn.{kind.__name__} without hooks, or build the GmP unit by hand.")
