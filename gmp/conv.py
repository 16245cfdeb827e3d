"""Convolutional units under geometric parameterization (Chen & Ge, Secs. 3 and 5).

:class:`GmPConv2d` applies Eq. (10) of Chen & Ge to every output filter of a 2-D
convolution, as the official code does: the ``in_channels / groups * kh * kw`` weights of
a filter form one vector ``w = r u(theta)`` with ``u(theta)`` the unit vector of Eq. (6),
and the unit computes ``r * act(conv(x, u) + lam)``. For a 3x3 filter over 512 channels
that is 4,607 angles per unit.

:func:`convert_conv_block` is the rule by which :func:`gmp.convert` turns a
``Conv2d [-> BatchNorm2d] -> ReLU`` block of an ``nn.Sequential`` into one GmP unit
computing the same function (the batch normalization, in its evaluation form, is folded
into the filter's weight and bias first).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair

from gmp.hyperspherical import angles_to_unit, scaled_directions, unit_to_angles, uniform_directions
from gmp.layers import ACTIVATIONS, INITS, MeanNorm, check_exact, polar

__all__ = ["GmPConv2d", "convert_conv_block", "fold_batch_norm"]

class GmPConv2d(nn.Module):
    """A 2-D convolution whose filters are GmP units, Eq. (10) of Chen & Ge.

    Filter ``i`` has weight ``r_i u(theta_i)`` reshaped to ``(in_channels / groups, kh, kw)``
    and bias ``r_i lam_i``; the layer outputs ``r * act(conv2d(x, U) + lam)`` where ``U``
    stacks the unit directions as a kernel. Its characteristic boundary is the set of input
    patches ``p`` with ``u_i . p + lam_i = 0`` (Eq. (7)).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups: as in
            ``torch.nn.Conv2d`` (``padding`` may be "same" or "valid").
        activation: "relu" or "identity" (the GmP unit without a nonlinearity, for a
            convolution followed by something other than a ReLU, e.g. a residual sum).
        init: "uniform" (paper text, Sec. 3.3: directions uniform on the sphere,
            ``lam = 0``, ``r = 1``) or "glorot" (official code: a Glorot-uniform kernel,
            fans ``in_channels / groups * kh * kw`` and ``out_channels * kh * kw``, with zero
            bias, converted, so ``r = ||w||`` and ``lam = 0``).
        mean_norm: put a :class:`gmp.MeanNorm` on the input (Eq. (11)).

    Parameters: ``theta`` (out, fan_in - 1) (None when ``fan_in == 1``: the direction is a
    fixed sign, a buffer), ``lam`` (out,), ``r`` (out,); ``r`` is not constrained to be
    positive.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] | str = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, activation: str = "relu",
                 init: str = "uniform", mean_norm: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}: expected one of {', '.join(INITS)}")
        self.kernel_size = _pair(kernel_size)
        if not all(isinstance(k, int) and k >= 1 for k in self.kernel_size):
            raise ValueError(f"kernel_size must be ints >= 1, got {kernel_size!r}")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.stride, self.dilation = _pair(stride), _pair(dilation)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.activation, self.init = activation, init
        self._act = ACTIVATIONS[activation]
        self.fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        kw = dict(device=device, dtype=dtype)
        if self.fan_in > 1:
            self.theta = nn.Parameter(torch.empty(out_channels, self.fan_in - 1, **kw))
        else:
            self.register_parameter("theta", None)
            self.register_buffer("sign", torch.ones(out_channels, 1, **kw))
        self.lam = nn.Parameter(torch.zeros(out_channels, **kw))
        self.r = nn.Parameter(torch.ones(out_channels, **kw))
        self.mean_norm = MeanNorm(in_channels, **kw) if mean_norm else None
        self.reset_parameters()

    @property
    def kernel_shape(self) -> tuple[int, int, int, int]:
        """``(out_channels, in_channels / groups, kh, kw)``, the shape of a Conv2d weight."""
        return (self.out_channels, self.in_channels // self.groups, *self.kernel_size)

    def reset_parameters(self) -> None:
        """Initialise by ``self.init`` (Sec. 3.3 of Chen & Ge, or the official Glorot variant)."""
        p = self.lam
        with torch.no_grad():
            if self.init == "uniform":
                w = uniform_directions(self.out_channels, self.fan_in, dtype=p.dtype, device=p.device)
            else:
                receptive = self.kernel_size[0] * self.kernel_size[1]
                bound = math.sqrt(6.0 / (self.fan_in + self.out_channels // self.groups * receptive))
                w = torch.empty(self.out_channels, self.fan_in, dtype=p.dtype, device=p.device).uniform_(-bound, bound)
            self.set_weight(w.view(self.kernel_shape))
            if self.init == "uniform":
                self.r.fill_(1.0)

    @torch.no_grad()
    def set_weight(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Set ``r = ||w||``, ``lam = b / ||w||`` and ``theta`` from ``w / ||w||`` per filter (Eq. (5)).

        ``weight`` has the shape of a ``Conv2d`` weight (:attr:`kernel_shape`). Afterwards the
        layer with ReLU equals ``relu(conv2d(x, weight, bias))``. Every filter must be nonzero
        and finite (see ``gmp.layers.polar``).
        """
        if tuple(weight.shape) != self.kernel_shape:
            raise ValueError(f"weight must have shape {self.kernel_shape}, got {tuple(weight.shape)}")
        if bias is not None and tuple(bias.shape) != (self.out_channels,):
            raise ValueError(f"bias must have shape ({self.out_channels},), got {tuple(bias.shape)}")
        direction, norms, lam = polar(weight.reshape(self.out_channels, self.fan_in), bias)
        if self.theta is None:
            self.sign.copy_(direction)
        else:
            self.theta.copy_(unit_to_angles(direction))
        self.r.copy_(norms)
        self.lam.copy_(lam)

    @property
    def direction(self) -> torch.Tensor:
        """The unit vectors ``u(theta)`` of Eq. (6) as a kernel of shape :attr:`kernel_shape`."""
        unit = self.sign if self.theta is None else angles_to_unit(self.theta)
        return unit.view(self.kernel_shape)

    def _conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            weight = weight.contiguous(memory_format=torch.channels_last)  # keep cuDNN in NHWC
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"GmPConv2d expects inputs of shape (N, {self.in_channels}, H, W), got {tuple(x.shape)}")
        if self.mean_norm is not None:
            x = self.mean_norm(x)
        if self.theta is not None and self.activation == "relu" and x.device.type != "cpu":
            return self._relu_without_sync(x)
        if self.theta is not None and (self.activation == "identity" or bool((self.r > 0).all())):
            # r * relu(conv(x, u) + lam) = relu(conv(x, r u) + r lam) for r > 0: one convolution,
            # with the kernel r u(theta) built at the cost of u(theta).
            kernel = scaled_directions(self.theta, self.r).view(self.kernel_shape)
            return self._act(self._conv(x, kernel, self.r * self.lam))
        return self._act(self._conv(x, self.direction, self.lam)) * self.r.view(1, -1, 1, 1)

    def _relu_without_sync(self, x: torch.Tensor) -> torch.Tensor:
        """``r * relu(conv(x, u) + lam)`` as ``s * relu(s * (conv(x, r u) + r lam))``, ``s = sign(r)``.

        Equal for every sign of ``r`` (``r relu(z) = min(r z, 0)`` for ``r < 0``), with one
        convolution and no host-device synchronisation to test the signs (used on GPUs).
        """
        kernel = scaled_directions(self.theta, self.r).view(self.kernel_shape)
        y = self._conv(x, kernel, self.r * self.lam)
        s = torch.sign(self.r).to(y.dtype).view(1, -1, 1, 1)
        return s * F.relu(s * y)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}, activation={self.activation}, init={self.init}")


@torch.no_grad()
def fold_batch_norm(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of one convolution equal to ``bn(conv(x))`` in evaluation mode.

    ``w' = w gamma / sqrt(var + eps)`` per output channel and
    ``b' = (b - mean) gamma / sqrt(var + eps) + beta`` with the running statistics.
    """
    if bn.num_features != conv.out_channels:
        raise ValueError(f"BatchNorm2d({bn.num_features}) does not follow Conv2d with {conv.out_channels} outputs")
    mean = bn.running_mean if bn.track_running_stats else torch.zeros_like(bn.running_mean)
    var = bn.running_var if bn.track_running_stats else torch.ones_like(bn.running_var)
    scale = torch.rsqrt(var + bn.eps)
    if bn.affine:
        scale = scale * bn.weight
    bias = conv.bias if conv.bias is not None else torch.zeros_like(mean)
    shift = (bias - mean) * scale + (bn.bias if bn.affine else 0.0)
    return conv.weight * scale.view(-1, 1, 1, 1), shift


def convert_conv_block(modules: list[nn.Module], mean_norm: bool) -> tuple[nn.Module, int] | None:
    """The :func:`gmp.convert` rule for convolutions: ``Conv2d [-> BatchNorm2d] -> ReLU``.

    ``modules`` are consecutive modules of an ``nn.Sequential``. When they start with such a
    block, returns ``(unit, length)``: a :class:`GmPConv2d` with ReLU computing the block's
    function (in evaluation mode: a batch normalization is folded in with its running
    statistics, :func:`fold_batch_norm`), with a :class:`gmp.MeanNorm` on its input when
    ``mean_norm``, and the number of modules it replaces. Otherwise None.
    """
    if not modules or not isinstance(modules[0], nn.Conv2d) or modules[0].padding_mode != "zeros":
        return None
    conv = modules[0]
    length = 2 if len(modules) > 1 and isinstance(modules[1], nn.BatchNorm2d) else 1
    if len(modules) <= length or not isinstance(modules[length], nn.ReLU):
        return None
    check_exact(modules[:length + 1], (nn.Conv2d, nn.BatchNorm2d, nn.ReLU) if length == 2 else (nn.Conv2d, nn.ReLU))
    if length == 2:
        weight, bias = fold_batch_norm(conv, modules[1])
    else:
        weight = conv.weight.detach()
        bias = None if conv.bias is None else conv.bias.detach()
    unit = GmPConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                     conv.dilation, conv.groups, activation="relu", init="glorot", mean_norm=mean_norm,
                     device=weight.device, dtype=weight.dtype)
    unit.set_weight(weight, bias)
    return unit, length + 1
