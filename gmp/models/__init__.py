"""Network builders used by the chapters."""

from gmp.models.deep import DeepMLP, deep_mlp
