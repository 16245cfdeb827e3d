"""Network builders used by the chapters."""

from gmp.models.mlp import PARAMS, mlp
from gmp.models.deep import DeepMLP, deep_mlp
from gmp.models.stacked import StackedDeepMLP
from gmp.models.implicit import ImplicitMLP, SineLayer, Siren
from gmp.models.vgg import VGG6_WIDTHS, VGG_PARAMS, vgg6


def __getattr__(name: str):
    """The ResNet-34 names of :mod:`gmp.models.resnet`, imported when first asked for: torchvision's models import
    ``torch._dynamo``, seconds that the other networks need not pay."""
    if name in ("RESNET_PARAMS", "GmPBasicBlock", "resnet34"):
        from gmp.models.resnet import RESNET_PARAMS, GmPBasicBlock, resnet34
        return {"RESNET_PARAMS": RESNET_PARAMS, "GmPBasicBlock": GmPBasicBlock, "resnet34": resnet34}[name]
    raise AttributeError(f"module 'gmp.models' has no attribute {name!r}")
