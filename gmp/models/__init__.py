"""Network builders used by the chapters."""

from gmp.models.mlp import PARAMS, mlp
from gmp.models.deep import DeepMLP, deep_mlp
from gmp.models.stacked import StackedDeepMLP
from gmp.models.implicit import ImplicitMLP, SineLayer, Siren
from gmp.models.vgg import VGG6_WIDTHS, VGG_PARAMS, vgg6
from gmp.models.resnet import RESNET_PARAMS, GmPBasicBlock, resnet34
