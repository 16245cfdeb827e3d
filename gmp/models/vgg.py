"""VGG-6 of Chen & Ge's ImageNet32 experiment (Table 2, Fig. 4) in six parameterizations.

The network of the official code: three stages ``[conv3x3-c, conv3x3-c, maxpool 2x2]`` with
``c = 128, 256, 512``, "same" padding, then global average pooling and a linear layer to
the classes; no dropout, no weight decay. :func:`vgg6` builds it with every convolution
in one of :data:`VGG_PARAMS`:

- "sp": Conv2d (Glorot-uniform kernel, zero bias) -> ReLU.
- "bn": Conv2d -> BatchNorm2d (PyTorch defaults) -> ReLU.
- "wn": weight-normalized Conv2d (``w = g v / ||v||`` per filter, ``g`` initialised to
  ``||v||``) -> ReLU; the output layer is weight-normalized too.
- "wn_mbn": weight-normalized Conv2d -> :class:`gmp.MeanNorm` -> ReLU (MN before the ReLU);
  weight-normalized output layer.
- "gmp": :class:`gmp.GmPConv2d` (ReLU included), Eq. (10) of Chen & Ge.
- "gmp_mn": GmPConv2d -> MeanNorm after every conv unit, as in the official code, so every
  unit after the first sees mean-normalized inputs (Eq. (11)).

Standard layers start from Glorot-uniform weights and zero biases (the Keras defaults of the
official code); GmP units from a converted Glorot kernel (``init="glorot"``) unless
``init="uniform"`` (Sec. 3.3).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from gmp.conv import GmPConv2d
from gmp.layers import INITS, MeanNorm

__all__ = ["vgg6", "VGG_PARAMS", "VGG6_WIDTHS"]

#: The parameterizations :func:`vgg6` builds, those of Table 2 of Chen & Ge (SP, BN, WN, WN+MBN, GmP, GmP+MN).
VGG_PARAMS: tuple[str, ...] = ("sp", "bn", "wn", "wn_mbn", "gmp", "gmp_mn")
#: Channels of the three stages of VGG-6 in the official code.
VGG6_WIDTHS: tuple[int, int, int] = (128, 256, 512)


def _glorot(layer: nn.Module) -> nn.Module:
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def vgg6(param: str = "sp", num_classes: int = 1000, in_channels: int = 3,
         widths: Sequence[int] = VGG6_WIDTHS, init: str = "glorot", mn_momentum: float = 0.01,
         dtype: torch.dtype | None = None) -> nn.Sequential:
    """VGG-6 under parameterization ``param`` (see the module docstring).

    Args:
        param: one of :data:`VGG_PARAMS`.
        num_classes: outputs of the linear layer (1,000 for ImageNet32).
        in_channels: input channels (3 for RGB images, 1 for grey-scale stand-ins).
        widths: channels of the three stages (:data:`VGG6_WIDTHS` in the paper; smaller for
            CPU stand-ins). Any input of at least 8x8 pixels works: the three poolings
            halve it, and the global average pool removes what is left.
        init: GmP units' initialisation, "glorot" (official code) or "uniform" (Sec. 3.3).
        mn_momentum: weight of the batch mean in the running mean of every MeanNorm (0.01:
            Keras' momentum 0.99 of the official code; BatchNorm keeps PyTorch's 0.1).
        dtype: parameter dtype.

    Returns:
        ``nn.Sequential`` of the stages, ``AdaptiveAvgPool2d(1)``, ``Flatten`` and the output layer.
    """
    if param not in VGG_PARAMS:
        raise ValueError(f"unknown param {param!r}: expected one of {', '.join(VGG_PARAMS)}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}: expected one of {', '.join(INITS)}")
    widths = list(widths)
    if len(widths) != 3 or not all(isinstance(w, int) and w >= 1 for w in widths):
        raise ValueError(f"widths must be three ints >= 1 (channels of the three stages), got {widths!r}")
    for name, value in (("num_classes", num_classes), ("in_channels", in_channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    wn = param in ("wn", "wn_mbn")
    layers: list[nn.Module] = []
    previous = in_channels
    for width in widths:
        for _ in range(2):
            if param in ("gmp", "gmp_mn"):
                layers.append(GmPConv2d(previous, width, 3, padding=1, init=init, dtype=dtype))
                if param == "gmp_mn":
                    layers.append(MeanNorm(width, momentum=mn_momentum, dtype=dtype))
            else:
                conv = _glorot(nn.Conv2d(previous, width, 3, padding=1, dtype=dtype))
                layers.append(weight_norm(conv) if wn else conv)
                if param == "bn":
                    layers.append(nn.BatchNorm2d(width, dtype=dtype))
                elif param == "wn_mbn":
                    layers.append(MeanNorm(width, momentum=mn_momentum, dtype=dtype))
                layers.append(nn.ReLU())
            previous = width
        layers.append(nn.MaxPool2d(2))
    output = _glorot(nn.Linear(previous, num_classes, dtype=dtype))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), weight_norm(output) if wn else output]
    return nn.Sequential(*layers)
