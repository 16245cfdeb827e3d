"""Implicit-representation networks: SIREN (Sitzmann et al.) and the SBSNN paper's MLPs.

SIREN, as in its public code: every hidden layer is ``sin(omega_0 (W x + b))`` with
``omega_0 = 30``; first-layer weights ``U(-1/in, 1/in)``, later weights (and the linear
output layer's) ``U(-sqrt(6/in)/omega_0, sqrt(6/in)/omega_0)``; biases keep PyTorch's
default ``U(-1/sqrt(in), 1/sqrt(in))``.

The SBSNN paper's networks (Sections 5-6): five hidden layers of width 192 with an
activation of the SBSNN family (or a GPN activation), orthogonal initialization, fed
either by an initial SIREN layer (Fig. 4) or by a positional encoder (Figs. 5-7). We count
layers as SIREN's code does (``hidden_layers`` layers after the first one) and initialise
every linear layer, including the output, with ``torch.nn.init.orthogonal_`` (Haar
distributed) and zero biases; the paper does not state the biases.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from gmp.activations import activation as _activation
from gmp.encoders import PositionalEncoding

SIREN_OMEGA_0 = 30.0
"""SIREN's frequency scale ``omega_0``, the default of every sine layer here."""


class SineLayer(nn.Module):
    """``scale * sin(omega_0 (W x + b))`` with SIREN's initialization (first or later layer).

    SIREN itself has ``scale = 1``; ``scale = sqrt(2)`` gives outputs of mean square 1, the
    input magnitude that a self-normalizing layer expects.
    """

    def __init__(self, in_features: int, out_features: int, is_first: bool = False, omega_0: float = SIREN_OMEGA_0,
                 scale: float = 1.0):
        super().__init__()
        if omega_0 <= 0:
            raise ValueError(f"omega_0 must be positive, got {omega_0!r}")
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale!r}")
        self.omega_0 = float(omega_0)
        self.is_first = bool(is_first)
        self.scale = float(scale)
        self.linear = nn.Linear(in_features, out_features)
        bound = 1.0 / in_features if is_first else math.sqrt(6.0 / in_features) / self.omega_0
        with torch.no_grad():
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        out = torch.sin(self.omega_0 * self.linear(x))
        return out if self.scale == 1.0 else self.scale * out

    def extra_repr(self) -> str:
        return f"omega_0={self.omega_0}, is_first={self.is_first}, scale={self.scale}"


class Siren(nn.Module):
    """SIREN: a first :class:`SineLayer`, ``hidden_layers`` more, and a linear output layer."""

    def __init__(self, in_features: int = 2, out_features: int = 1, hidden_features: int = 256,
                 hidden_layers: int = 3, omega_0: float = SIREN_OMEGA_0):
        super().__init__()
        if hidden_layers < 0 or hidden_features < 1:
            raise ValueError(f"need hidden_layers >= 0 and hidden_features >= 1, got {hidden_layers!r}, "
                             f"{hidden_features!r}")
        layers: list[nn.Module] = [SineLayer(in_features, hidden_features, is_first=True, omega_0=omega_0)]
        layers += [SineLayer(hidden_features, hidden_features, omega_0=omega_0) for _ in range(hidden_layers)]
        output = nn.Linear(hidden_features, out_features)
        bound = math.sqrt(6.0 / hidden_features) / omega_0
        with torch.no_grad():
            output.weight.uniform_(-bound, bound)
        layers.append(output)
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def orthogonal_linear(in_features: int, out_features: int, gain: float = 1.0) -> nn.Linear:
    """A linear layer with ``gain`` times a Haar-orthogonal (semi-orthogonal if not square) weight, zero bias."""
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class ImplicitMLP(nn.Module):
    """The SBSNN paper's implicit-representation MLP.

    ``encoder`` (optional) -> first layer -> ``hidden_layers`` orthogonal layers with
    ``activation`` -> orthogonal linear output. The first layer is a SIREN first layer
    (``first_layer="siren"``, Fig. 4) or an orthogonal layer followed by ``activation``
    (``first_layer="orthogonal"``, used after a positional encoder, Figs. 5-7).
    ``activation`` is a name accepted by :func:`gmp.activations.activation` or a module.

    Two knobs the paper leaves open (both off by default, as in the paper's figures as we
    read them): ``first_gain`` multiplies the orthogonal first layer's initial weight (a
    semi-orthogonal ``d -> width`` layer keeps the encoding's squared norm ``d``, so its
    pre-activations have mean square ``d / width``; ``sqrt(width / d)`` makes it 1), and
    ``siren_scale`` multiplies the SIREN first layer's output (``sqrt(2)`` gives it mean
    square 1 instead of 1/2).
    """

    def __init__(self, activation: str | nn.Module, in_features: int = 2, out_features: int = 1,
                 hidden_features: int = 192, hidden_layers: int = 5, first_layer: str = "siren",
                 encoder: PositionalEncoding | None = None, omega_0: float = SIREN_OMEGA_0, first_gain: float = 1.0,
                 siren_scale: float = 1.0):
        super().__init__()
        if first_layer not in ("siren", "orthogonal"):
            raise ValueError(f"first_layer must be 'siren' or 'orthogonal', got {first_layer!r}")
        if first_gain <= 0:
            raise ValueError(f"first_gain must be positive, got {first_gain!r}")
        if hidden_layers < 0 or hidden_features < 1:
            raise ValueError(f"need hidden_layers >= 0 and hidden_features >= 1, got {hidden_layers!r}, "
                             f"{hidden_features!r}")
        self.encoder = encoder if encoder is not None else nn.Identity()
        width_in = encoder.out_features(in_features) if encoder is not None else in_features

        act = _activation(activation) if isinstance(activation, str) else activation
        if first_layer == "siren":
            layers: list[nn.Module] = [SineLayer(width_in, hidden_features, is_first=True, omega_0=omega_0,
                                                 scale=siren_scale)]
        else:
            layers = [orthogonal_linear(width_in, hidden_features, gain=first_gain), act]
        for _ in range(hidden_layers):
            layers += [orthogonal_linear(hidden_features, hidden_features), act]
        layers.append(orthogonal_linear(hidden_features, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(self.encoder(x))
