"""Network builders used by the chapters."""

from gmp.models.mlp import PARAMS, mlp
from gmp.models.deep import DeepMLP, deep_mlp
from gmp.models.implicit import ImplicitMLP, SineLayer, Siren
