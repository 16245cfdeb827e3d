"""gmp: geometric parameterization, bidirectional and strong self-normalization in PyTorch.

The package behind the replication book of Chen & Ge (GmP), Lu et al. (BSNN) and SBSNN.
Public names are exported here; each module's docstring says which paper it implements.
"""

from importlib.metadata import PackageNotFoundError, version

from gmp import config, data, results, style
from gmp.config import load as load_config
from gmp.config import resolve_device, seed_everything
from gmp import train
from gmp.train import EarlyStopping, History, ReduceLROnPlateau, fit
from gmp.classify import ClassifierHistory, fit_classifier
from gmp.hyperspherical import angles_to_unit, fourth_moment_test, unit_to_angles, uniform_directions
from gmp.layers import GmPLinear, MeanNorm
from gmp.conversion import convert
from gmp.conv import GmPConv2d
from gmp.characteristic import (BoundaryPerturbation, CharacteristicTracker, boundary_angle,
                                characteristic_points, perturb_boundary)
from gmp.models.mlp import mlp
from gmp.models.vgg import vgg6
from gmp import gpn, propagation
from gmp.gpn import GPN, gaussian_moments, gpn_constants, hermite_coefficients, make_activation
from gmp.models.deep import DeepMLP, RowNormalizedLinear, deep_mlp, orthogonality_drift
from gmp.models.stacked import StackedDeepMLP
from gmp.propagation import Propagation, gradient_norm_ratio, parameter_gradient_norms, propagate
from gmp import activations, encoders, implicit, minibatch
from gmp.activations import (SBSNNAbsSin, SBSNNSin, SBSNNTriangle, SqrtSigmoid, StrongCondition, sbsnn_abs_sin,
                             sbsnn_sin, sbsnn_triangle, sqrt_sigmoid, strong_condition, triangle_wave)
from gmp.encoders import AuthorEncoding, PositionalEncoding
from gmp.models.implicit import ImplicitMLP, SineLayer, Siren
from gmp.implicit import FitResult, fit_image, psnr
from gmp.minibatch import EpochCurves, Plateau, fit_stack


def __getattr__(name: str):
    """:func:`gmp.models.resnet34`, imported when first asked for: torchvision's models import ``torch._dynamo``,
    seconds that every other use of ``gmp`` (each chapter's kernel) need not pay."""
    if name == "resnet34":
        from gmp.models.resnet import resnet34
        return resnet34
    raise AttributeError(f"module 'gmp' has no attribute {name!r}")


try:
    __version__ = version("gmp")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
