"""ResNet-34 of Chen & Ge's ImageNet experiment (Table 3) in three parameterizations.

The network is ``torchvision.models.resnet34(weights=None)``; :func:`resnet34` returns it
as it is ("bn", torchvision's own: every convolution followed by a BatchNorm2d) or turns it
into

- "wn_mbn": every Conv2d weight-normalized (``w = g v / ||v||`` per filter,
  ``torch.nn.utils.parametrizations.weight_norm``) and every BatchNorm2d replaced by a
  :class:`gmp.MeanNorm` in the same place: mean-only normalization before the ReLU, no
  scale and no shift (as the WN+MBN layers of the VGG-6 and MLP experiments);
- "gmp_mn": every convolution a GmP unit (:class:`gmp.GmPConv2d`) with input mean
  normalization, Eq. (11) of Chen & Ge. The stem ``conv -> BN -> ReLU`` becomes one GmP unit
  with ReLU (the images are already centred, so no MN). In each residual block
  (:class:`GmPBasicBlock`) ``conv1 -> BN -> ReLU`` becomes a GmP unit with ReLU;
  ``conv2 -> BN``, which has no ReLU of its own (the ReLU comes after the residual sum),
  becomes a GmP unit without activation, ``r (u . p + lam)``; the ``1x1 conv -> BN``
  shortcut of a down-sampling block likewise. Every one of these units mean-normalizes its
  input (Eq. (11)), which replaces the centring that each BN did, while the scale that BN
  set is carried by the unit's ``r`` and the shift by ``r lam``. The output layer stays a
  standard linear layer (Sec. 3.1).

No public code exists for this experiment (see the chapter), so these placements are ours.
Each conversion folds the freshly initialised BN into its convolution (running statistics
0 and 1), so the GmP units start from torchvision's Kaiming-normal filters.

``width`` scales every stage (64 in ResNet-34; smaller for CPU stand-ins: torchvision's
``ResNet`` class with its ``BasicBlock`` and ``[3, 4, 6, 3]`` blocks, channels
``width, 2 width, 4 width, 8 width``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm
from torchvision.models import resnet34 as _torchvision_resnet34
from torchvision.models.resnet import BasicBlock, ResNet

from gmp.conv import GmPConv2d, fold_batch_norm
from gmp.layers import MeanNorm

__all__ = ["resnet34", "GmPBasicBlock", "RESNET_PARAMS", "RESNET34_LAYERS"]

#: The parameterizations :func:`resnet34` builds, those of Table 3 of Chen & Ge (BN, WN+MBN, GmP+MN).
RESNET_PARAMS: tuple[str, ...] = ("bn", "wn_mbn", "gmp_mn")
#: Residual blocks per stage of ResNet-34.
RESNET34_LAYERS: tuple[int, int, int, int] = (3, 4, 6, 3)


class _NarrowResNet(ResNet):
    """torchvision's ResNet-34 layout with stage widths ``width * (1, 2, 4, 8)``."""

    def __init__(self, width: int, num_classes: int, in_channels: int):
        self._width = width
        super().__init__(BasicBlock, list(RESNET34_LAYERS), num_classes=num_classes)
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.bn1 = nn.BatchNorm2d(width)
        self.fc = nn.Linear(8 * width, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        if planes == 64:  # the first stage follows the narrowed stem
            self.inplanes = self._width
        return super()._make_layer(block, planes * self._width // 64, blocks, stride, dilate)


def _unit(conv: nn.Conv2d, bn: nn.BatchNorm2d, activation: str, mean_norm: bool,
          mn_momentum: float = 0.01) -> GmPConv2d:
    """The GmP unit computing ``act(bn(conv(x)))`` (BN in evaluation form, folded)."""
    weight, bias = fold_batch_norm(conv, bn)
    unit = GmPConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                     conv.dilation, conv.groups, activation=activation, init="glorot", mean_norm=mean_norm,
                     device=weight.device, dtype=weight.dtype)
    unit.set_weight(weight, bias)
    if unit.mean_norm is not None:
        unit.mean_norm.momentum = mn_momentum
    return unit


class GmPBasicBlock(nn.Module):
    """A torchvision ``BasicBlock`` with GmP units and input mean normalization (Eq. (11)).

    ``relu(conv2(conv1(x)) + shortcut(x))`` where ``conv1`` is a GmP unit with ReLU,
    ``conv2`` a GmP unit without activation, and ``shortcut`` the identity or, in a
    down-sampling block, a 1x1 GmP unit without activation. Built from a ``BasicBlock``,
    it computes that block's function in evaluation mode (BNs folded) as long as its
    MeanNorm running means are zero, as they are at construction.
    """

    def __init__(self, block: BasicBlock, mean_norm: bool = True, mn_momentum: float = 0.01):
        super().__init__()
        if not isinstance(block, BasicBlock):
            raise ValueError(f"GmPBasicBlock converts a torchvision BasicBlock, got {type(block).__name__}")
        self.conv1 = _unit(block.conv1, block.bn1, "relu", mean_norm, mn_momentum)
        self.conv2 = _unit(block.conv2, block.bn2, "identity", mean_norm, mn_momentum)
        self.downsample = None
        if block.downsample is not None:
            conv, bn = block.downsample
            self.downsample = _unit(conv, bn, "identity", mean_norm, mn_momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(self.conv2(self.conv1(x)) + shortcut)


def _replace(model: nn.Module, kind: type, make) -> None:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, kind):
                parent._modules[name] = make(child)


def resnet34(param: str = "bn", num_classes: int = 1000, width: int = 64, in_channels: int = 3,
             mn_momentum: float = 0.01) -> nn.Module:
    """ResNet-34 (``torchvision.models.resnet34(weights=None)``) under ``param``.

    Args:
        param: one of :data:`RESNET_PARAMS` (see the module docstring).
        num_classes: outputs of the final linear layer.
        width: channels of the first stage, 64 in ResNet-34 (other values give the same
            layout at a reduced or increased width, for stand-in runs).
        in_channels: channels of the input images.
        mn_momentum: weight of the batch mean in every MeanNorm's running mean (0.01, as the
            official code's Keras momentum 0.99; BatchNorm keeps PyTorch's 0.1).
    """
    if param not in RESNET_PARAMS:
        raise ValueError(f"unknown param {param!r}: expected one of {', '.join(RESNET_PARAMS)}")
    for name, value in (("num_classes", num_classes), ("width", width), ("in_channels", in_channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if width == 64 and in_channels == 3:
        model = _torchvision_resnet34(weights=None, num_classes=num_classes)
    else:
        model = _NarrowResNet(width, num_classes, in_channels)
    if param == "wn_mbn":
        _replace(model, nn.Conv2d, weight_norm)
        _replace(model, nn.BatchNorm2d, lambda bn: MeanNorm(bn.num_features, momentum=mn_momentum))
    elif param == "gmp_mn":
        model.conv1 = _unit(model.conv1, model.bn1, "relu", mean_norm=False)
        model.bn1, model.relu = nn.Identity(), nn.Identity()
        _replace(model, BasicBlock, lambda block: GmPBasicBlock(block, mn_momentum=mn_momentum))
    return model
