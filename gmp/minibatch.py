"""Fitting an image as the SBSNN author's Keras code does: epochs of shuffled mini-batches.

The author's code (see the book's chapter on his protocol) calls Keras ``model.fit`` on the
pixels with no ``batch_size``: an "iteration" of the paper's figures is one **epoch**, a
shuffled pass over the pixels in mini-batches of 32 (2,048 Adam updates on a 256 x 256
image), and the plotted PSNR is ``10 log10(1 / loss)`` of the epoch's mean mini-batch loss.
This module reproduces that protocol in PyTorch, with every difference from the paper text's
full-batch reading a named setting:

* ``batch_size`` (32 in Keras; the number of training pixels gives one full-batch update per
  epoch, the text's reading of an iteration);
* ``adam``: ``"keras"`` (TF 2 ``Adam``: ``epsilon = 1e-7`` added to ``sqrt(v)`` before the
  bias correction is folded into the step size) or ``"torch"`` (``torch.optim.Adam``'s
  formula, ``epsilon = 1e-8`` added to the bias-corrected ``sqrt(v_hat)``);
* ``plateau``: :class:`Plateau` with Keras's rule (absolute ``min_delta = 1e-4``, reduce at
  the ``patience``-th epoch without improvement) or PyTorch's (relative threshold ``1e-4``,
  reduce at the ``patience + 1``-th);
* the network (:func:`layers`): bias-free orthogonal layers after an encoder or a SIREN
  first layer, or SIREN itself; the target range and the encoder are the caller's data.

Several networks of the same shape train at once (:class:`StackedNetworks`: batched
matrix products, one Adam step for all), each from its own seed, its own shuffling and its
own learning rate schedule, so a network's curve does not depend on which others share its
stack. After every epoch the whole image is evaluated (training pixels, and held-out pixels
when some are held out), beside the epoch-mean loss the author plots.
"""

from __future__ import annotations

import dataclasses
import io
import math
import numbers
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gmp.activations import activation as _activation
from gmp.models.implicit import SIREN_OMEGA_0
from gmp.progress import bar
from gmp.results import atomic_write_bytes
from gmp.train import check_fit_arguments, load_checkpoint, restore_state

CHECKPOINT_KEYS = ("settings", "epoch", "seconds", "lrs", "diverged", "params", "m", "v", "t", "generators",
                   "plateaus", "curves")
"""The entries of a :func:`fit_stack` checkpoint."""

KERAS_BATCH_SIZE = 32
"""Keras ``model.fit``'s mini-batch size when none is given, as in the SBSNN author's code."""


@dataclasses.dataclass(frozen=True)
class Dense:
    """One layer ``h -> f(h W + b)`` of a stacked network.

    ``init``: ``"orthogonal"`` (Haar, gain 1: Keras ``Orthogonal``), ``"siren_first"``
    (``U(-1/in, 1/in)``) or ``"siren"`` (``U(-sqrt(6/in)/omega_0, +sqrt(6/in)/omega_0)``).
    ``bias``: None (no bias), ``"zeros"`` (Keras's default) or ``"torch"``
    (``U(-1/sqrt(in), 1/sqrt(in))``, PyTorch's default, as SIREN's code keeps it).
    ``omega``: a SIREN layer ``sin(omega (h W + b))``; else ``activation`` (a name of
    :func:`gmp.activations.activation`) or, when None, a linear layer.
    """

    fan_in: int
    fan_out: int
    init: str
    bias: str | None = None
    omega: float | None = None
    activation: str | None = None


def layers(spec: Mapping[str, Any]) -> list[Dense]:
    """The layers of a network spec.

    ``{"model": "sbsnn", "sizes": [2, 192, ..., 192, 1], "activation": "sin",
    "first_layer": "encoder" | "siren", "bias": False}`` is the author's
    ``build_orthogonal_model_with_*``: ``sizes`` is his ``dimensions`` list. With an encoder,
    ``sizes[1]`` is the encoder's width (its features are the caller's input); with a SIREN
    first layer, the first layer maps ``sizes[0] -> sizes[1]`` (Keras bias, zeros). Every
    later layer is orthogonal with the activation, the last one linear; ``bias`` adds zero
    biases to them (the author's figures have none).
    ``{"model": "siren", "hidden_features": 256, "hidden_layers": 3}`` is SIREN as in its code.
    """
    kind = spec.get("model")
    if kind == "siren":
        width, depth = spec.get("hidden_features", 256), spec.get("hidden_layers", 3)
        omega = spec.get("omega_0", SIREN_OMEGA_0)
        out = [Dense(2, width, "siren_first", "torch", omega)]
        out += [Dense(width, width, "siren", "torch", omega) for _ in range(depth)]
        return out + [Dense(width, 1, "siren", "torch")]
    if kind != "sbsnn":
        raise ValueError(f"spec['model'] must be 'sbsnn' or 'siren', got {kind!r}")
    sizes = list(spec["sizes"])
    if len(sizes) < 3 or any(not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"spec['sizes'] must list at least three positive layer widths, got {sizes!r}")
    first = spec.get("first_layer", "encoder")
    if first not in ("encoder", "siren"):
        raise ValueError(f"spec['first_layer'] must be 'encoder' or 'siren', got {first!r}")
    bias = "zeros" if spec.get("bias", False) else None
    act = spec["activation"]
    _activation(act)  # a clear error for an unknown name, before any training
    out = [Dense(sizes[0], sizes[1], "siren_first", "zeros", spec.get("omega_0", SIREN_OMEGA_0))] \
        if first == "siren" else []
    pairs = list(zip(sizes[1:-1], sizes[2:]))
    out += [Dense(a, b, "orthogonal", bias, None, act if i < len(pairs) - 1 else None)
            for i, (a, b) in enumerate(pairs)]
    return out


def _init(layer: Dense, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
    weight = torch.empty(layer.fan_out, layer.fan_in)
    if layer.init == "orthogonal":
        nn.init.orthogonal_(weight, generator=generator)
    elif layer.init in ("siren_first", "siren"):
        bound = 1.0 / layer.fan_in if layer.init == "siren_first" else \
            math.sqrt(6.0 / layer.fan_in) / SIREN_OMEGA_0
        nn.init.uniform_(weight, -bound, bound, generator=generator)
    else:
        raise ValueError(f"unknown init {layer.init!r}")
    bias = None
    if layer.bias == "zeros":
        bias = torch.zeros(1, layer.fan_out)
    elif layer.bias == "torch":
        bias = torch.empty(1, layer.fan_out)
        nn.init.uniform_(bias, -1 / math.sqrt(layer.fan_in), 1 / math.sqrt(layer.fan_in), generator=generator)
    return weight.T.contiguous(), bias


class StackedNetworks(nn.Module):
    """``count`` networks with the same :class:`Dense` layers, evaluated together.

    Network ``k`` is initialised from ``torch.Generator().manual_seed(seeds[k])``, the same
    weights whatever else shares the stack. Input ``(count, batch, fan_in)``, output
    ``(count, batch, fan_out)``; layer ``l`` holds ``weight_l`` of shape
    ``(count, fan_in, fan_out)`` and, with a bias, ``bias_l`` of shape ``(count, 1, fan_out)``.
    """

    def __init__(self, spec_layers: Sequence[Dense], seeds: Sequence[int]):
        super().__init__()
        if not seeds:
            raise ValueError("need at least one seed")
        self.spec_layers = list(spec_layers)
        self.seeds = [int(s) for s in seeds]
        per_network = []
        for seed in self.seeds:
            generator = torch.Generator().manual_seed(seed)
            per_network.append([_init(layer, generator) for layer in self.spec_layers])
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([net[i][0] for net in per_network])) for i in range(len(self.spec_layers)))
        self.biases = nn.ParameterList(
            nn.Parameter(torch.stack([net[i][1] for net in per_network]))
            for i, layer in enumerate(self.spec_layers) if layer.bias is not None)
        self.activations = nn.ModuleList(_activation(layer.activation) if layer.activation else nn.Identity()
                                         for layer in self.spec_layers)

    def forward(self, h: Tensor) -> Tensor:
        biases = iter(self.biases)
        for layer, weight, act in zip(self.spec_layers, self.weights, self.activations):
            h = torch.bmm(h, weight)
            if layer.bias is not None:
                h = h + next(biases)
            h = torch.sin(layer.omega * h) if layer.omega is not None else act(h)
        return h


class Plateau:
    """Halve (``factor``) a learning rate when a monitored loss stops improving.

    ``rule="keras"`` is ``keras.callbacks.ReduceLROnPlateau(monitor="loss", mode="min")``
    with its defaults (``min_delta = 1e-4`` **absolute**, no cooldown, no minimum rate): an
    epoch improves when ``loss < best - min_delta``; at the ``patience``-th epoch in a row
    without improvement the rate is multiplied by ``factor`` and the count restarts. Once the
    loss is below ``min_delta`` no epoch can improve any more, so from then on the rate is
    halved every ``patience`` epochs whatever the loss does.
    ``rule="torch"`` is ``torch.optim.lr_scheduler.ReduceLROnPlateau``'s default: relative
    threshold (``loss < best (1 - 1e-4)``), reduce at the ``patience + 1``-th bad epoch,
    and not by less than ``1e-8``.
    """

    def __init__(self, factor: float, patience: int, rule: str = "keras", min_delta: float = 1e-4):
        if not 0 < factor < 1 or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"need 0 < factor < 1 and an integer patience >= 0, got {factor!r}, {patience!r}")
        if rule not in ("keras", "torch"):
            raise ValueError(f"rule must be 'keras' or 'torch', got {rule!r}")
        self.factor, self.patience, self.rule, self.min_delta = factor, patience, rule, min_delta
        self.best, self.wait = math.inf, 0

    def step(self, loss: float, lr: float) -> float:
        """The learning rate for the next epoch, after an epoch with ``loss`` at rate ``lr``."""
        better = loss < self.best - self.min_delta if self.rule == "keras" else loss < self.best * (1 - self.min_delta)
        if better:
            self.best, self.wait = loss, 0
            return lr
        self.wait += 1
        if self.wait >= self.patience + (self.rule == "torch"):
            self.wait = 0
            new = lr * self.factor
            if self.rule == "keras" or lr - new > 1e-8:
                return new
        return lr

    def state(self) -> list[float]:
        return [self.best, float(self.wait)]

    def load(self, state: Sequence[float]) -> None:
        self.best, self.wait = float(state[0]), int(state[1])


def heldout_pixels(count: int, fraction: float, seed: int) -> Tensor:
    """Sorted indices of a fixed random ``fraction`` of ``count`` pixels, drawn from ``seed``."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    chosen = torch.randperm(count, generator=torch.Generator().manual_seed(seed))[:round(count * fraction)]
    return chosen.sort().values


def epoch_order(train_idx: Tensor, generators: Sequence[torch.Generator]) -> Tensor:
    """One epoch's pixel order per network, ``(len(generators), len(train_idx))``: a fresh shuffle of ``train_idx`` each.

    Keras shuffles the whole training set at the start of every epoch; the epoch's mini-batches
    are consecutive slices of this order, so every training pixel is visited exactly once.
    """
    return torch.stack([train_idx[torch.randperm(train_idx.numel(), generator=g)] for g in generators])


@dataclasses.dataclass
class EpochCurves:
    """Per-epoch curves of one network; entry ``e`` is measured over / after epoch ``e + 1``.

    ``epoch_loss`` is the mean of the epoch's mini-batch losses (what Keras logs and the
    SBSNN author plots); ``train_mse`` and ``heldout_mse`` evaluate the whole image after
    the epoch on the training and held-out pixels (``heldout_mse`` is None without a
    held-out set). All MSEs are on the target's own range; ``mse_to_unit`` converts them to
    the ``[0, 1]`` pixel scale (1 for ``[0, 1]`` targets, 1/4 for ``[-1, 1]``).
    ``seconds`` is the cumulative wall time per network (the stack's time divided by its size).
    """

    epoch_loss: np.ndarray
    train_mse: np.ndarray
    heldout_mse: np.ndarray | None
    lr: np.ndarray
    seconds: np.ndarray
    updates_per_epoch: int
    mse_to_unit: float
    diverged_at: int | None

    def psnr(self, which: str = "train") -> np.ndarray:
        """PSNR in dB on the ``[0, 1]`` pixel scale of ``"epoch"`` (the author's), ``"train"`` or ``"heldout"``."""
        mse = {"epoch": self.epoch_loss, "train": self.train_mse, "heldout": self.heldout_mse}[which]
        if mse is None:
            raise ValueError("this fit held out no pixels")
        with np.errstate(divide="ignore", invalid="ignore"):
            return -10 * np.log10(mse * self.mse_to_unit)

    def first_epoch_at(self, psnr_db: float, which: str = "train") -> int | None:
        """The first epoch (counted from 1) whose PSNR (:meth:`psnr`) reaches ``psnr_db``, or None."""
        hits = np.flatnonzero(self.psnr(which) >= psnr_db)
        return int(hits[0]) + 1 if hits.size else None

    def to_json(self) -> dict[str, Any]:
        def clean(a: np.ndarray | None) -> list[float | None] | None:
            return None if a is None else [float(v) if math.isfinite(v) else None for v in a]

        return {"epoch_loss": clean(self.epoch_loss), "train_mse": clean(self.train_mse),
                "heldout_mse": clean(self.heldout_mse), "lr": clean(self.lr), "seconds": clean(self.seconds),
                "updates_per_epoch": self.updates_per_epoch, "mse_to_unit": self.mse_to_unit,
                "diverged_at": self.diverged_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpochCurves:
        def arr(values: list[float | None] | None) -> np.ndarray | None:
            return None if values is None else np.array([np.nan if v is None else v for v in values], dtype=float)

        return cls(arr(data["epoch_loss"]), arr(data["train_mse"]), arr(data["heldout_mse"]), arr(data["lr"]),
                   arr(data["seconds"]), int(data["updates_per_epoch"]), float(data["mse_to_unit"]),
                   data["diverged_at"])


def _adam_update(params: list[Tensor], grads: list[Tensor], m: list[Tensor], v: list[Tensor], scales: list[Tensor],
                 root_c2: Tensor, betas: tuple[float, float], eps: float) -> None:
    """One Adam update in place: ``p -= scale m / (sqrt(v) / root_c2 + eps)`` after the moment updates."""
    b1, b2 = betas
    torch._foreach_lerp_(m, grads, 1 - b1)
    torch._foreach_mul_(v, b2)
    torch._foreach_addcmul_(v, grads, grads, 1 - b2)
    denom = torch._foreach_div(torch._foreach_sqrt(v), root_c2)
    torch._foreach_add_(denom, eps)
    steps = torch._foreach_div(m, denom)
    torch._foreach_mul_(steps, scales)
    torch._foreach_sub_(params, steps)


class _Adam:
    """Adam on stacked parameters with one learning rate per network (``lrs``, shape ``(count,)``).

    ``"keras"``: TF 2's update ``p -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + 1e-7)``;
    ``"torch"``: ``torch.optim.Adam``'s ``p -= lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + 1e-8)``.
    With ``compile`` the update runs through ``torch.compile`` (one fused loop per tensor).
    """

    def __init__(self, params: list[Tensor], flavour: str, compile: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999)):
        if flavour not in ("keras", "torch"):
            raise ValueError(f"adam must be 'keras' or 'torch', got {flavour!r}")
        self.params, self.flavour, self.betas = params, flavour, betas
        self.eps = 1e-7 if flavour == "keras" else 1e-8
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0
        self._root_c2 = torch.ones((), device=params[0].device) if params else torch.ones(())
        self.update = torch.compile(_adam_update, dynamic=False) if compile else _adam_update

    @torch.no_grad()
    def step(self, grads: Sequence[Tensor], lrs: Tensor) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        keras = self.flavour == "keras"
        scale = lrs * (math.sqrt(c2) / c1 if keras else 1 / c1)
        root_c2 = self._root_c2.fill_(1.0 if keras else math.sqrt(c2))  # in place: no copy from the host, no sync
        scales = [scale.view(-1, *([1] * (p.dim() - 1))) for p in self.params]
        try:
            self.update(self.params, list(grads), self.m, self.v, scales, root_c2, self.betas, self.eps)
        except Exception as err:  # torch.compile needs a working C++ toolchain
            if self.update is _adam_update:
                raise
            warnings.warn(f"torch.compile failed ({type(err).__name__}: {err}); Adam runs eagerly", stacklevel=2)
            self.update = _adam_update
            self.update(self.params, list(grads), self.m, self.v, scales, root_c2, self.betas, self.eps)


def _check_epoch(epoch: Any, curves: Mapping[str, np.ndarray], diverged: Sequence[int | None], t: int,
                 updates: int, shape: tuple[int, int]) -> None:
    """ValueError unless a :func:`fit_stack` checkpoint's ``epoch`` agrees with what it holds: curves of
    ``shape`` (networks, epochs) with exactly ``epoch`` entries per live network (one less than the
    epoch it diverged at for a diverged one), and ``t == epoch * updates`` Adam updates; a changed
    epoch would otherwise resume with curves padded with NaN or shifted."""
    if not (isinstance(epoch, int) and not isinstance(epoch, bool) and 0 < epoch <= shape[1]):
        raise ValueError(f"its epoch {epoch!r} is not one of 1 to {shape[1]}")
    for name, curve in curves.items():
        if curve.shape != shape:
            raise ValueError(f"its {name} curves have shape {curve.shape}, not (networks, epochs) = {shape}")
    if t != epoch * updates:
        raise ValueError(f"its epoch {epoch} disagrees with its {t} Adam updates ({updates} per epoch)")
    measured = np.isfinite(curves["seconds"]).sum(axis=1)
    for k, (held, at) in enumerate(zip(measured, diverged)):
        expected = epoch if at is None else at - 1
        if held != expected or (at is not None and not (isinstance(at, int) and 0 < at <= epoch)):
            raise ValueError(f"its epoch {epoch} disagrees with its curves: network {k} has {held} epochs "
                             f"measured, not {expected}" + ("" if at is None else f" (diverged at epoch {at!r})"))


def _check_rates(lrs: Sequence[float], diverged: Sequence[Any], curves: Mapping[str, np.ndarray], count: int) -> None:
    """ValueError unless a :func:`fit_stack` checkpoint holds one learning rate (finite, > 0) and one divergence
    mark per network, and finite losses, MSEs and rates in every epoch it measured: a rate cut to one entry would
    train every network at network 0's, a NaN or negative one would train on garbage, and a NaN in a measured
    epoch would be read as a result."""
    for name, values in (("lrs", lrs), ("diverged", diverged)):
        if len(values) != count:
            raise ValueError(f"its {name!r} holds {len(values)} entries, not one per network ({count})")
    bad = [k for k, rate in enumerate(lrs) if not (math.isfinite(rate) and rate > 0)]
    if bad:
        raise ValueError(f"its learning rates must be finite and > 0; network {bad[0]}'s is {lrs[bad[0]]!r}")
    measured = np.isfinite(curves["seconds"])
    for name in ("epoch_loss", "train_mse", "lr"):
        bad_at = np.argwhere(measured & ~np.isfinite(curves[name]))
        if bad_at.size:
            k, epoch = (int(v) for v in bad_at[0])
            raise ValueError(f"its {name} of network {k} at measured epoch {epoch + 1} is "
                             f"{float(curves[name][k, epoch])!r}, not a finite number")


def check_mse_to_unit(mse_to_unit: Any) -> None:
    """Raise unless ``mse_to_unit`` (of :func:`fit_stack`) is a finite number > 0."""
    if not isinstance(mse_to_unit, numbers.Real) or isinstance(mse_to_unit, bool):
        raise TypeError(f"mse_to_unit must be a number, got {mse_to_unit!r} ({type(mse_to_unit).__name__})")
    if not (math.isfinite(mse_to_unit) and mse_to_unit > 0):
        raise ValueError(f"mse_to_unit must be a finite number > 0 (1 for targets in [0, 1], 1/4 for [-1, 1]), "
                         f"got {mse_to_unit!r}: it scales every MSE into the PSNR, which 0 would make infinite "
                         f"and NaN or a negative number undefined")


def fit_stack(spec_layers: Sequence[Dense], seeds: Sequence[int], inputs: Tensor, targets: Tensor, *,
              epochs: int, lr: float | Sequence[float], batch_size: int = KERAS_BATCH_SIZE,
              plateau: Mapping[str, Any] | None = None, adam: str = "keras", heldout: Tensor | None = None,
              mse_to_unit: float = 1.0, stop_below: float | None = None, compile: bool = False,
              eval_chunk: int = 8192,
              checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 10,
              device: torch.device | str = "cpu", progress: bool | None = None, desc: str | None = None,
              keep: dict[str, Any] | None = None) -> list[EpochCurves]:
    """Train one network per seed for ``epochs`` epochs of shuffled mini-batches; their curves.

    ``inputs`` is ``(pixels, features)`` shared by all networks or ``(count, pixels,
    features)`` one per network (different encoders); ``targets`` is ``(pixels, 1)``; both of
    torch's default dtype, the networks' weights'. ``mse_to_unit`` (a finite number > 0) converts
    MSEs to the ``[0, 1]`` pixel scale of the PSNRs (:class:`EpochCurves`).
    ``heldout`` (indices from :func:`heldout_pixels`) are never trained on and are evaluated
    after every epoch. Each epoch draws a new permutation of the training pixels per network
    and makes ``ceil(training pixels / batch_size)`` Adam updates (a last, smaller batch
    when they do not divide). ``plateau`` is ``{"factor", "patience", "rule"}`` of
    :class:`Plateau` (monitoring the epoch-mean loss, as Keras does) or None for a constant
    rate. A network whose epoch loss is not finite is recorded as diverged at that epoch
    (counted from 1) and frozen; the others go on. With ``stop_below``, the fit ends after the
    first epoch at which every network that has not diverged has a training MSE (on the
    targets' own scale, as SIREN's code measures it) at or below it; the curves then end there.

    ``checkpoint`` is a file that makes the fit resumable: every ``checkpoint_every`` epochs
    and at the end, weights, optimiser, schedules, random generators and curves are written
    (tensors and plain numbers only, read back with ``weights_only=True``). A later call
    with the same file and settings continues from there and gives the same curves.
    ``compile`` runs the loss and the Adam update through ``torch.compile`` (eager on failure).
    ``keep``, a dict, receives the trained :class:`StackedNetworks` under ``"model"``.
    """
    if not isinstance(seeds, Sequence) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise TypeError(f"seeds must be a list of integers, one per network, got {seeds!r}")
    count = len(seeds)
    spec_layers = list(spec_layers)
    lrs0 = check_fit_arguments(inputs, targets, lr=lr, networks=count, stop_below=stop_below, heldout=heldout,
                               counts={"epochs": epochs, "batch_size": batch_size, "eval_chunk": eval_chunk,
                                       "checkpoint_every": checkpoint_every},
                               in_features=spec_layers[0].fan_in if spec_layers else None)
    lrs0 = lrs0 * count if len(lrs0) == 1 else lrs0
    check_mse_to_unit(mse_to_unit)
    dtype = torch.get_default_dtype()  # the networks' weights (StackedNetworks)
    for name, tensor in (("inputs", inputs), ("targets", targets)):
        if tensor.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, as the networks' weights are, got {tensor.dtype}; convert it, "
                            f"e.g. {name}.to({dtype})")
    if inputs.dim() == 2:
        inputs = inputs.unsqueeze(0).expand(count, -1, -1)
    pixels = targets.shape[0]
    device = torch.device(device)
    mask = torch.ones(pixels, dtype=torch.bool)
    if heldout is not None:
        mask[heldout] = False
    train_idx = mask.nonzero().flatten()
    updates = math.ceil(train_idx.numel() / batch_size)
    model = StackedNetworks(spec_layers, seeds).to(device)
    params = list(model.parameters())
    optimizer = _Adam(params, adam, compile=compile)
    plateaus = [Plateau(plateau["factor"], plateau["patience"], plateau.get("rule", "keras"))
                for _ in range(count)] if plateau else None
    generators = [torch.Generator().manual_seed(10_000 + s) for s in seeds]
    inputs, targets = inputs.to(device), targets.to(device)
    rows = torch.arange(count, device=device)[:, None]
    curves = {k: np.full((count, epochs), np.nan) for k in ("epoch_loss", "train_mse", "heldout_mse", "lr", "seconds")}
    lrs = list(lrs0)
    diverged: list[int | None] = [None] * count
    start, spent = 0, 0.0
    settings = {"layers": [dataclasses.asdict(x) for x in model.spec_layers], "seeds": list(model.seeds),
                "epochs": epochs, "lr": lrs0, "batch_size": batch_size, "plateau": dict(plateau) if plateau else None,
                "adam": adam, "pixels": pixels, "heldout": None if heldout is None else int(heldout.numel())}
    if stop_below is not None:
        settings["stop_below"] = float(stop_below)
    checkpoint = Path(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and checkpoint.exists() and not checkpoint.is_file():
        raise ValueError(f"checkpoint {checkpoint} is a folder, not a file: name a file (such as {checkpoint / 'fit.pt'})")
    if checkpoint is not None and checkpoint.is_file():
        state = load_checkpoint(checkpoint, map_location="cpu", keys=CHECKPOINT_KEYS)  # the generators are CPU ones
        if state["settings"] != settings:
            raise ValueError(f"checkpoint {checkpoint} was written by a fit with other settings; delete it or "
                             f"pass another checkpoint file")
        def resume() -> None:
            nonlocal curves, lrs, diverged, start, spent
            for name, saved in (("params", state["params"]), ("m", state["m"]), ("v", state["v"])):
                if [tuple(t.shape) for t in saved] != [tuple(p.shape) for p in params]:
                    raise ValueError(f"its {name!r} holds tensors of shapes {[tuple(t.shape) for t in saved]}, "
                                     f"not {[tuple(p.shape) for p in params]}")
            if len(state["generators"]) != count or (plateaus and len(state["plateaus"]) != count):
                raise ValueError(f"its random generators or schedules are not one per network ({count})")
            with torch.no_grad():
                for p, saved in zip(params, state["params"]):
                    p.copy_(saved)
            optimizer.m = [t.to(p.device) for t, p in zip(state["m"], params)]
            optimizer.v = [t.to(p.device) for t, p in zip(state["v"], params)]
            optimizer.t = int(state["t"])
            for g, saved in zip(generators, state["generators"]):
                g.set_state(saved)
            for p, saved in zip(plateaus or [], state["plateaus"] or []):
                p.load(saved)
            curves = {k: state["curves"][k].numpy() for k in curves}
            lrs, diverged = [float(v) for v in state["lrs"]], list(state["diverged"])
            start, spent = int(state["epoch"]), float(state["seconds"])
            _check_rates(lrs, diverged, curves, count)
            _check_epoch(state["epoch"], curves, diverged, optimizer.t, updates, (count, epochs))

        restore_state(checkpoint, "training state", resume)

    def batch_losses(x: Tensor, y: Tensor) -> Tensor:
        return ((model(x) - y) ** 2).mean(dim=(1, 2))

    losses_of = batch_losses
    if compile:
        losses_of = torch.compile(batch_losses, dynamic=False)

    def save(epoch: int, seconds: float) -> None:
        state = {"settings": settings, "epoch": epoch, "seconds": seconds, "lrs": lrs, "diverged": diverged,
                 "params": [p.detach().cpu() for p in params], "m": [t.cpu() for t in optimizer.m],
                 "v": [t.cpu() for t in optimizer.v], "t": optimizer.t,
                 "generators": [g.get_state() for g in generators],
                 "plateaus": [p.state() for p in plateaus] if plateaus else None,
                 "curves": {k: torch.from_numpy(v) for k, v in curves.items()}}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(checkpoint, buffer.getvalue())

    @torch.no_grad()
    def evaluate(idx: Tensor) -> Tensor:
        total = torch.zeros(count, dtype=torch.float64, device=device)
        for chunk in idx.split(eval_chunk):
            chunk = chunk.to(device)
            error = model(inputs[:, chunk]) - targets[chunk]
            total += (error.double() ** 2).sum(dim=(1, 2))
        return total / idx.numel()

    def reached(epoch: int) -> bool:
        """Whether every network that has not diverged is at or below ``stop_below`` after ``epoch`` (from 0)."""
        return stop_below is not None and all(d is not None or curves["train_mse"][k, epoch] <= stop_below
                                              for k, d in enumerate(diverged))

    end = start if start and reached(start - 1) else epochs  # a resumed fit may have stopped already
    began = time.perf_counter()
    for epoch in bar(range(start, end), desc=desc, disable=None if progress is None else not progress,
                     leave=False, initial=start, total=epochs):
        alive = torch.tensor([d is None for d in diverged], device=device)
        rates = torch.tensor(lrs, dtype=torch.float32, device=device) * alive
        order = epoch_order(train_idx, generators).to(device)
        running = torch.zeros(count, dtype=torch.float64, device=device)
        for batch in order.split(batch_size, dim=1):
            try:
                losses = losses_of(inputs[rows, batch], targets[batch])
            except Exception as err:  # torch.compile needs a working C++ toolchain; fall back to eager mode
                if losses_of is batch_losses:
                    raise
                warnings.warn(f"torch.compile failed ({type(err).__name__}: {err}); fitting in eager mode",
                              stacklevel=2)
                losses_of = batch_losses
                losses = losses_of(inputs[rows, batch], targets[batch])
            running += losses.detach().double() * batch.shape[1]
            grads = torch.autograd.grad(torch.where(alive, losses, 0.0).sum(), params)
            optimizer.step(grads, rates)
        epoch_loss = (running / train_idx.numel()).cpu().numpy()
        train_mse = evaluate(train_idx).cpu().numpy()
        heldout_mse = evaluate(heldout).cpu().numpy() if heldout is not None else None
        now = spent + time.perf_counter() - began
        for k in range(count):
            if diverged[k] is not None:
                continue
            if not (math.isfinite(epoch_loss[k]) and math.isfinite(train_mse[k])):
                diverged[k] = epoch + 1
                continue
            curves["epoch_loss"][k, epoch] = epoch_loss[k]
            curves["train_mse"][k, epoch] = train_mse[k]
            if heldout_mse is not None:
                curves["heldout_mse"][k, epoch] = heldout_mse[k]
            curves["lr"][k, epoch] = lrs[k]
            curves["seconds"][k, epoch] = now / count
            if plateaus:
                lrs[k] = plateaus[k].step(float(epoch_loss[k]), lrs[k])
        done = reached(epoch)
        if checkpoint is not None and ((epoch + 1) % checkpoint_every == 0 or epoch + 1 == epochs or done):
            save(epoch + 1, now)
        if done:
            end = epoch + 1
            break
    curves = {k: v[:, :end] for k, v in curves.items()}
    if keep is not None:
        keep["model"] = model
    return [EpochCurves(curves["epoch_loss"][k], curves["train_mse"][k],
                        curves["heldout_mse"][k] if heldout is not None else None, curves["lr"][k],
                        curves["seconds"][k], updates, mse_to_unit, diverged[k]) for k in range(count)]
