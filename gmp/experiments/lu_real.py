"""Experiment of the chapter book/part2/lu_real.md (Section 3.2, Table 2 and Figs. 3, 8-13
of Lu et al.): depth-200, width-500 networks trained on MNIST and CIFAR-10 with six
activations, their GPN versions, with and without batch normalisation.

Set-up of Section 3.2: row-normalised square weights ``W = (v_i/||v_i||)_i`` (Eq. (55)),
one unconstrained layer at the bottom and one at the top, SGD with momentum 0.5, batch 64,
learning rate 1e-4, 50 epochs (MNIST) / 100 epochs (CIFAR-10), no augmentation; "-BN"
puts batch normalisation before the activation. What the paper leaves open follows the
first author's code (``protocol="author"``, see :func:`build`): ``V`` starts as a
Haar-random orthogonal matrix (so ``W`` starts exactly orthogonal, the setting of the
theory, Assumption 2); the square layers have no bias, the bottom and top layers have
biases and orthogonal weights, and the activation also follows the bottom layer; the GPN
constants are the author's typed ones; softmax cross-entropy; inputs standardised per
channel (:mod:`gmp.data.classification`); the "Train" accuracy of Table 2 is the author's
running count of correct predictions over the epoch's mini-batches, in training mode
(``train_acc``), with the accuracy on the whole training set after the last epoch, in
evaluation mode, beside it (``train_acc_eval``); one seed, whose initial weights and
shuffled order every network shares. The gradient norm ratio of Figs. 10-13 is
``max_l ||dE/dV^(l)||_F / min_l ||dE/dV^(l)||_F`` over the square layers (Eq. (56)).

MNIST and CIFAR-10 are not available offline and the paper's networks need a GPU, so the
book's default (small) scale runs the same code on stand-in data that ship with the
project (MNIST-1D, scikit-learn's 8x8 digits) at a reduced depth, width and length of
training. Results on stand-in data are reported as such and never as MNIST/CIFAR-10 ones.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gmp import data as _data
from gmp import config as _config
from gmp.config import scaled
from gmp.gpn import make_activation
from gmp.models.deep import DeepMLP, deep_mlp
from gmp.propagation import gradient_norm_ratio, parameter_gradient_norms
from gmp.results import NOT_REPRODUCED, NOT_RUN, PARTLY, REPRODUCED, Claim
from gmp.progress import bar
from gmp.train import accuracy, evaluate, load_checkpoint
from gmp import style

ACTIVATIONS = ["Tanh", "ReLU", "LeakyReLU", "ELU", "SELU", "GELU"]
PAPER_DATASETS = ("mnist", "cifar10")
DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10", "mnist1d": "MNIST-1D", "digits": "sklearn digits"}
UNTRAINABLE = ("ReLU", "LeakyReLU", "GELU")
"""The activations Table 2 of Lu et al. reports as untrainable at depth 200 without GPN."""

CONFIG = scaled(
    common=dict(activations=ACTIVATIONS, weights="row_normalized", init="orthogonal",
                momentum=0.5, batch_size=64, num_classes=10, protocol="author", edge_bias=True,
                first_activation=True, edge_init="orthogonal", gpn_constants="author"),
    smoke=dict(data={"mnist": "digits", "cifar10": "mnist1d"}, width=16, depth=8,
               epochs={"digits": 1, "mnist1d": 1}, lr=2e-2, max_train=256, ratio_every=1,
               activations=["ReLU", "GELU"], cost_probe_depth=2, cost_probe_steps=1),
    small=dict(data={"mnist": "mnist", "cifar10": "mnist"}, width=64, depth=20,
               epochs={"mnist": 3}, lr=2e-2, max_train=2048, ratio_every=1,
               cost_probe_depth=20, cost_probe_steps=3),
    paper=dict(data={"mnist": "mnist", "cifar10": "cifar10"}, width=500, depth=200,
               epochs={"mnist": 50, "cifar10": 100}, lr=1e-4, max_train=None, ratio_every=10,
               cost_probe_depth=20, cost_probe_steps=3),
)

PAPER = {
    # Table 2 of Lu et al.: accuracy (percent) of depth-200 networks, train / test, on MNIST
    # and CIFAR-10; the second number of each pair is the paper's value in parentheses
    # (batch normalisation before the activation).
    "table2": {
        "Tanh": {"mnist": {"train": (99.05, 87.39), "test": (96.57, 89.32)},
                 "cifar10": {"train": (80.84, 27.90), "test": (42.71, 29.32)}},
        "Tanh-GPN": {"mnist": {"train": (99.81, 84.93), "test": (95.54, 87.11)},
                     "cifar10": {"train": (96.39, 25.13), "test": (40.95, 26.58)}},
        "ReLU": {"mnist": {"train": (11.24, 11.24), "test": (11.35, 11.42)},
                 "cifar10": {"train": (10.00, 10.00), "test": (10.00, 10.00)}},
        "ReLU-GPN": {"mnist": {"train": (33.28, 11.42), "test": (28.13, 11.34)},
                     "cifar10": {"train": (46.60, 10.09), "test": (34.96, 9.96)}},
        "LeakyReLU": {"mnist": {"train": (11.24, 11.24), "test": (11.35, 11.63)},
                      "cifar10": {"train": (10.00, 10.21), "test": (10.00, 10.06)}},
        "LeakyReLU-GPN": {"mnist": {"train": (43.17, 11.19), "test": (49.28, 11.66)},
                          "cifar10": {"train": (51.85, 9.89), "test": (39.38, 10.00)}},
        "ELU": {"mnist": {"train": (99.06, 98.24), "test": (95.41, 97.48)},
                "cifar10": {"train": (80.73, 42.39), "test": (45.76, 44.16)}},
        "ELU-GPN": {"mnist": {"train": (100.00, 97.86), "test": (96.56, 96.69)},
                    "cifar10": {"train": (99.37, 43.35), "test": (43.12, 44.36)}},
        "SELU": {"mnist": {"train": (99.86, 97.82), "test": (97.33, 97.38)},
                 "cifar10": {"train": (29.23, 46.47), "test": (29.55, 45.88)}},
        "SELU-GPN": {"mnist": {"train": (99.92, 97.91), "test": (96.97, 97.39)},
                     "cifar10": {"train": (98.24, 47.74), "test": (45.90, 45.52)}},
        "GELU": {"mnist": {"train": (11.24, 12.70), "test": (11.35, 10.28)},
                 "cifar10": {"train": (10.00, 10.43), "test": (10.00, 10.00)}},
        "GELU-GPN": {"mnist": {"train": (97.67, 11.22), "test": (95.82, 9.74)},
                     "cifar10": {"train": (90.51, 10.00), "test": (36.94, 10.00)}},
    },
    # Section 3.2: the set-up of Table 2 and Figs. 3, 8-13.
    "setup": {"width": 500, "depth": 200, "momentum": 0.5, "batch_size": 64, "lr": 1e-4,
              "epochs": {"mnist": 50, "cifar10": 100}},
}

PAPER_COMMAND = ("`python -m gmp.gpu OUT` on a GPU and `python -m gmp.gpu merge OUT` here (the README's "
                 "\"Running on a GPU\")")
"""The command that runs this chapter's paper scale, which its notes name in place of ``gmp.runs``
(that trains one network at a time, days of a GPU at depth 200)."""

FIGURE_FAMILIES = {"10": ["Tanh", "ReLU", "LeakyReLU"], "11": ["ELU", "SELU", "GELU"],
                   "12": ["Tanh", "ReLU", "LeakyReLU"], "13": ["ELU", "SELU", "GELU"]}
"""Activations of each gradient-ratio figure, read from the captions of Figs. 10-13 (the
figures themselves are not in our copy of the paper): Figs. 10 and 12 name ReLU and
LeakyReLU, Figs. 11 and 13 name GELU."""


def variants(activations: list[str]) -> list[str]:
    """``["Tanh", "Tanh-GPN", "ReLU", ...]``: each activation and its GPN version."""
    return [name for act in activations for name in (act, f"{act}-GPN")]


def run_label(variant: str, batchnorm: bool) -> str:
    """The paper's name of a run: "-BN" appended when batch normalisation is used."""
    return f"{variant}-BN" if batchnorm else variant


def load_split(dataset: str, train: bool, max_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One split of ``dataset`` (mnist, cifar10, mnist1d or digits) from :mod:`gmp.data`,
    optionally cut to its first ``max_rows`` rows."""
    loaders: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]] = {
        "mnist": lambda: _data.mnist(train=train), "cifar10": lambda: _data.cifar10(train=train),
        "mnist1d": lambda: _data.mnist1d(train=train), "digits": lambda: _data.digits(train=train)}
    if dataset not in loaders:
        raise ValueError(f"unknown dataset {dataset!r}: expected one of {', '.join(loaders)}")
    x, y = loaders[dataset]()
    return (x[:max_rows], y[:max_rows]) if max_rows is not None else (x, y)


@functools.lru_cache(maxsize=None)
def _activation(variant: str, constants: str = "quadrature") -> nn.Module:
    """The activation module of ``variant``, built once (GPN constants from quadrature, or the author's)."""
    return make_activation(variant, constants=constants)


def build(variant: str, batchnorm: bool, in_features: int, cfg: Mapping[str, Any], seed: int) -> DeepMLP:
    """The network of Section 3.2: ``in_features -> width``, ``depth`` square layers with
    ``cfg["weights"]`` (row-normalised, Eq. (55)), activation ``variant``, optional BN
    before each activation, ``width -> num_classes``. With ``cfg["init"] == "orthogonal"``
    each free matrix ``V`` starts Haar-orthogonal (``torch.nn.init.orthogonal_``).

    The first author's protocol (``cfg["protocol"] == "author"``, the author's ``mnist.py``):
    the bottom and top layers have biases (PyTorch's default initialisation) and orthogonal
    weights (``nn.init.orthogonal_``, ``cfg["edge_init"]``), the activation also follows the
    bottom layer, and the GPN constants are the author's typed ones
    (:data:`gmp.gpn.AUTHOR_CONSTANTS`). The author's square layer ``x @ (V / column norms)``
    is our ``x W^T`` with row-normalised ``W`` and ``V`` transposed: the same function, the
    same gradient norms and, both starting Haar-orthogonal, the same distribution."""
    author = cfg.get("protocol") == "author"
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = deep_mlp(cfg["width"], cfg["depth"], _activation(variant, cfg.get("gpn_constants", "quadrature")),
                     weights=cfg["weights"], batchnorm=batchnorm, in_features=in_features,
                     out_features=cfg["num_classes"], generator=generator, fused=cfg["weights"] == "row_normalized",
                     edge_bias=bool(cfg.get("edge_bias", False)), first_activation=bool(cfg.get("first_activation")))
    if cfg["init"] == "orthogonal":
        with torch.no_grad():
            for v in model.free_parameters():
                nn.init.orthogonal_(v, generator=generator)
    elif cfg["init"] != "default":
        raise ValueError(f"init must be 'orthogonal' or 'default' (deep_mlp's), got {cfg['init']!r}")
    if author and cfg.get("edge_init") == "orthogonal":
        with torch.no_grad():
            for layer in (model.first, model.last):
                nn.init.orthogonal_(layer.weight, generator=generator)
    return model


def device_name(device: torch.device | str) -> str:
    """What journal entries record as the device: ``"cpu"`` or ``"cuda (<GPU name>)"``."""
    device = torch.device(device)
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type


def precision(dtype: torch.dtype = torch.float32) -> str:
    """What journal entries record as the precision: the dtype and whether CUDA matrix
    products may use TF32 (``torch.backends.cuda.matmul.allow_tf32``)."""
    return f"{str(dtype).removeprefix('torch.')}, TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}"


class ForeignJournal(RuntimeError):
    """A journal written on another device or at another precision, refused for replay."""


def check_same_machine(entry: Mapping[str, Any], device: torch.device | str, name: str) -> None:
    """Refuse to continue a network from a journalled epoch ``entry`` computed on another device
    or at another precision (:func:`device_name`, :func:`precision`): its numbers cannot be
    reproduced here, so later epochs would continue another run under the journalled one."""
    here = (device_name(device), precision())
    there = (entry.get("device", "an unrecorded device"), entry.get("precision", "an unrecorded precision"))
    if here != there:
        raise ForeignJournal(
            f"{name}: its journalled epochs were computed on {there[0]} at {there[1]}, and this machine is "
            f"{here[0]} at {here[1]}; a journal made on one device or precision is never replayed on another. "
            "Continue it on the machine that wrote it, or give this machine a journal of its own (move the "
            "journal aside, or remove this network's lines from it)")


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def network_key(dataset: str, label: str, seed: int) -> str:
    """The name of one network of Table 2 (its checkpoint is ``store.scratch`` of it)."""
    return f"{dataset}/{label}/seed{seed}"


def epoch_key(dataset: str, label: str, seed: int, epoch: int) -> str:
    """The journal key of epoch ``epoch`` (from 1) of one network."""
    return f"{network_key(dataset, label, seed)}/epoch{epoch}"


CHECKPOINT_KEYS = ("model", "optimizer", "generator", "epoch", "step", "metrics")


class Training:
    """One network of Table 2 under training, one epoch at a time (Section 3.2 of Lu et al.).

    Holds the network (:func:`build`), its SGD optimiser (momentum, ``foreach`` update), the
    generator that shuffles the training set every epoch, and the epochs and mini-batch steps
    done. :meth:`save` and :meth:`resume` write and read all of it, so a network resumed
    from the checkpoint of epoch ``k`` continues exactly as the uninterrupted one would.
    """

    def __init__(self, variant: str, batchnorm: bool, in_features: int, cfg: Mapping[str, Any],
                 device: torch.device | str = "cpu", seed: int = 0):
        self.cfg, self.device, self.name = cfg, torch.device(device), run_label(variant, batchnorm)
        self.model = build(variant, batchnorm, in_features, cfg, seed).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"], foreach=True)
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch = 0
        self.step = 0
        self.metrics: dict[str, Any] | None = None
        """What :meth:`run_epoch` returned for the last epoch done."""

    def save(self, path: Path) -> None:
        """Write the whole training state to ``path`` (atomically)."""
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                 "generator": self.generator.get_state(), "epoch": self.epoch, "step": self.step,
                 "metrics": self.metrics}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def resume(self, path: Path) -> None:
        """Continue from the state :meth:`save` wrote to ``path``."""
        state = load_checkpoint(path, map_location="cpu", keys=CHECKPOINT_KEYS)  # the generator state stays on the CPU
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.epoch, self.step, self.metrics = int(state["epoch"]), int(state["step"]), state["metrics"]

    def run_epoch(self, train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                  final: bool) -> dict[str, Any]:
        """Train one epoch (mini-batches of ``batch_size`` in a fresh random order) and return it.

        ``train_loss`` and ``train_acc_running``: means over the epoch's mini-batches, each
        taken before its update (the author's "train" accuracy, Table 2's "Train"); ``test_acc``:
        accuracy on ``test`` after the epoch, in evaluation mode; ``ratio[k]``: the gradient
        norm ratio of Eq. (56) at step ``ratio_steps[k]`` (every ``ratio_every`` steps, counted
        from 0 over the whole run; None where undefined), ``max_grad[k]`` the largest
        ``||dE/dV^(l)||_F`` then; ``ratio_max``: the largest ratio over every step of the epoch
        (as the author logged it, every step; None if undefined at every step) and
        ``ratio_undefined_steps`` the steps where it was undefined; ``drift``:
        :func:`gmp.orthogonality_drift` of every square weight after the epoch. With
        ``final`` also ``train_acc``, the accuracy on the whole training set after the epoch,
        in evaluation mode. A non-finite loss ends the epoch at once (the one host
        synchronisation per step): ``diverged`` True and ``diverged_step`` the step,
        accuracies and drift None. Accuracies are fractions. ``device`` and ``precision``
        (:func:`device_name`, :func:`precision`) say where the epoch was computed.
        """
        cfg, model = self.cfg, self.model
        every, size = int(cfg["ratio_every"]), int(cfg["batch_size"])
        x, y = (t.to(self.device) for t in train)
        out: dict[str, Any] = {"epoch": self.epoch + 1, "ratio_steps": [], "ratio": [], "max_grad": [],
                               "device": device_name(self.device), "precision": precision()}
        start = time.perf_counter()
        model.train()
        order = torch.randperm(x.shape[0], generator=self.generator).to(self.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        diverged, ratio_max, undefined = False, None, 0
        for begin in bar(range(0, x.shape[0], size), desc=f"{self.name} epoch {self.epoch + 1}", leave=False):
            index = order[begin:begin + size]
            xb, yb = x[index], y[index]
            self.opt.zero_grad(set_to_none=True)
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits, yb)
            if not torch.isfinite(loss).item():
                diverged = True
                break
            loss.backward()
            norms = parameter_gradient_norms(model)
            ratio = _finite(gradient_norm_ratio(norms))
            if ratio is None:
                undefined += 1
            else:
                ratio_max = ratio if ratio_max is None else max(ratio_max, ratio)
            if self.step % every == 0:
                out["ratio_steps"].append(self.step)
                out["ratio"].append(ratio)
                out["max_grad"].append(_finite(float(np.max(norms))) if np.all(np.isfinite(norms)) else None)
            self.opt.step()
            loss_sum += loss.detach().double() * len(index)
            correct += (logits.argmax(dim=1) == yb).sum()
            self.step += 1
        self.epoch += 1
        out.update(diverged=diverged, steps=self.step, ratio_max=ratio_max, ratio_undefined_steps=undefined)
        if diverged:
            out.update(diverged_step=self.step, train_loss=None, train_acc_running=None, test_acc=None, drift=None)
        else:
            out.update(train_loss=float(loss_sum) / x.shape[0], train_acc_running=int(correct) / x.shape[0],
                       drift=model.orthogonality_drift(),
                       test_acc=_finite(evaluate(model, test, loss="cross_entropy", metrics={"accuracy": accuracy},
                                                 batch_size=1000, device=self.device)["accuracy"]))
            if final:
                out["train_acc"] = _finite(evaluate(model, train, loss="cross_entropy",
                                                    metrics={"accuracy": accuracy}, batch_size=1000,
                                                    device=self.device)["accuracy"])
        out["seconds"] = time.perf_counter() - start
        self.metrics = out
        return out


class ReplayMismatch(RuntimeError):
    """A network trained again through its journalled epochs did not give the journalled numbers."""


class StackedTraining:
    """Several networks of Table 2 on one data set trained at once, one epoch at a time.

    The networks ``labels`` (run labels, :func:`run_label`) are built exactly as
    :class:`Training` builds them (:func:`build`, the same seed) and trained as one
    :class:`gmp.models.stacked.StackedDeepMLP`: one batched computation over a network axis,
    the same shuffled mini-batch for every network (as the one-network trainer's shared seed
    gives them anyway: a paired design), SGD with momentum (``torch.optim.SGD``'s rule): the
    square layers' ``V`` updated in the backward pass, their gradients never formed
    (:meth:`gmp.models.stacked.StackedDeepMLP.update_in_backward`), the other parameters by
    ``torch.optim.SGD``'s multi-tensor update. Each step keeps its numbers on the device: the
    losses and correct counts are summed there, a network whose loss is not finite is marked
    diverged at that step (and changes no other network), and the gradient norm ratio of
    Eq. (56) of every network is written to a device buffer; all is read once per epoch.

    On CUDA, ``graph=True`` captures the whole step (forward, backward, update, bookkeeping)
    in a CUDA graph after a warm-up on copies, so that the GPU does not wait for the Python
    loop; the last, shorter mini-batch of an epoch runs eagerly. ``graph=None`` captures when
    on CUDA; the other parameters' update is then one fused pass (``torch._fused_sgd_``, what
    ``SGD(fused=True)`` runs) and ``compile=True`` fuses the activations and the square layers'
    other element-wise work
    (:meth:`gmp.models.stacked.StackedDeepMLP.compile_activation`). Matrix products run in the
    dtype of the networks with TF32 off unless the caller turned it on (recorded in every
    epoch's ``precision``).
    """

    def __init__(self, labels: list[str], in_features: int, cfg: Mapping[str, Any],
                 device: torch.device | str = "cpu", seed: int = 0, graph: bool | None = None,
                 dtype: torch.dtype | None = None, compile: bool = False, networks: list[DeepMLP] | None = None):
        from gmp.models.stacked import StackedDeepMLP

        if not labels:
            raise ValueError("StackedTraining needs at least one network label")
        self.cfg, self.device, self.labels = cfg, torch.device(device), list(labels)
        if networks is None:  # else built already (by build, as here): they are copied, not changed
            networks = [build(label.removesuffix("-BN"), label.endswith("-BN"), in_features, cfg, seed)
                        for label in self.labels]
        elif len(networks) != len(self.labels):
            raise ValueError(f"{len(networks)} networks given for {len(self.labels)} labels")
        if dtype is not None:
            networks = [net.to(dtype) for net in networks]
        self.model = StackedDeepMLP(networks).to(self.device)
        if compile:
            self.model.compile_activation()
        self.fused = self.device.type == "cuda"
        self.params = list(self.model.parameters())
        self.momentum_buffers = [torch.zeros_like(p) for p in self.params]
        square = {id(V) for V in self.model.V}
        self._rest = [j for j, p in enumerate(self.params) if id(p) not in square]
        self._square = self.model.update_in_backward(
            [buf for p, buf in zip(self.params, self.momentum_buffers) if id(p) in square], float(cfg["lr"]),
            float(cfg["momentum"]))
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch, self.step = 0, 0
        size, n = len(self.labels), self.device
        self._step_t = torch.zeros((), dtype=torch.int64, device=n)
        self._slot_t = torch.zeros((), dtype=torch.int64, device=n)
        self._loss_sum = torch.zeros(size, dtype=torch.float64, device=n)
        self._correct = torch.zeros(size, dtype=torch.int64, device=n)
        self.diverged_at = torch.full((size,), -1, dtype=torch.int64, device=n)
        self._ratio = self._max_grad = self._share = None
        self.graph = self.device.type == "cuda" if graph is None else bool(graph)
        if self.graph and self.device.type != "cuda":
            raise ValueError("graph=True needs a CUDA device")
        self._graph: Any = None
        self._static: tuple[torch.Tensor, torch.Tensor] | None = None
        self.mode = "eager" + (", compiled activations" if compile else "")
        """The way the full mini-batches ran, "eager" or, once captured, "CUDA graph" (with
        ", compiled activations" added under ``compile``)."""

    def _sgd(self, grads: list[torch.Tensor]) -> None:
        """``buf = momentum buf + grad; p -= lr buf``: ``torch.optim.SGD`` (no dampening, no
        weight decay) of the parameters other than the square layers' ``V`` (updated in the
        backward pass, :meth:`gmp.models.stacked.StackedDeepMLP.update_in_backward`), ``grads``
        theirs in order; multi-tensor on the CPU, fused (one pass) on CUDA; the buffers start at
        zero, so the first step is ``buf = grad``."""
        momentum, lr = float(self.cfg["momentum"]), float(self.cfg["lr"])
        params = [self.params[j] for j in self._rest]
        buffers = [self.momentum_buffers[j] for j in self._rest]
        with torch.no_grad():
            if self.fused:  # the fused kernel reads a gradient's storage in order: transposed ones are copied
                torch._fused_sgd_(params, [g.contiguous() for g in grads], buffers, weight_decay=0.0, momentum=momentum,
                                  lr=lr, dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
                return
            torch._foreach_mul_(buffers, momentum)
            torch._foreach_add_(buffers, grads)
            torch._foreach_add_(params, buffers, alpha=-lr)

    def allocate(self, steps: int) -> None:
        """Device buffers for ``steps`` steps' bookkeeping: each network's gradient norm ratio, largest
        gradient norm and smallest tangential share (``gmp.models.stacked._radial``: near the
        dtype's epsilon, the step's gradient norms are rounding), read once per epoch."""
        self._ratio = torch.zeros(steps, len(self.labels), dtype=torch.float64, device=self.device)
        self._max_grad = torch.zeros_like(self._ratio)
        self._share = torch.ones_like(self._ratio)

    def _train_step(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of every network on the mini-batch ``(xb, yb)``, with its bookkeeping on the
        device; returns each network's loss ``(N,)`` and gradient norms ``(depth, N)`` before the update."""
        size = len(self.labels)
        logits = self.model(xb)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.repeat(size),
                                           reduction="none").view(size, -1).mean(1)
        finite = torch.isfinite(loss)
        running = self.diverged_at < 0
        self.diverged_at.copy_(torch.where(running & ~finite, self._step_t, self.diverged_at))
        ok = running & finite
        grads = torch.autograd.grad(loss.sum(), [self.params[j] for j in self._rest])  # and the V updated
        norms = self._square.norms_sq.clamp(min=0).sqrt()
        self._ratio.index_copy_(0, self._slot_t, (norms.amax(0).double() / norms.amin(0).double()).unsqueeze(0))
        self._max_grad.index_copy_(0, self._slot_t, norms.amax(0).unsqueeze(0).to(self._ratio.dtype))
        self._share.index_copy_(0, self._slot_t, self._square.tangential_share.amin(0).unsqueeze(0).to(self._ratio.dtype))
        self._sgd(list(grads))
        with torch.no_grad():
            self._loss_sum.add_(torch.where(ok, loss.detach().double() * yb.shape[0], 0.0))
            self._correct.add_(torch.where(ok, (logits.argmax(-1) == yb).sum(1), 0))
            self._step_t.add_(1)
            self._slot_t.add_(1)
        return loss.detach(), norms

    def _state(self) -> list[torch.Tensor]:
        return self.params + self.momentum_buffers + list(self.model.buffers()) + self._square.inverse_norms + [
            self._square.norms_sq, self._square.tangential_share, self._step_t, self._slot_t, self._loss_sum, self._correct,
            self.diverged_at, self._ratio, self._max_grad, self._share]

    def _capture(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        """Capture :meth:`_train_step` on static copies of ``(xb, yb)`` in a CUDA graph. The warm-up
        steps that capture needs run on the real state, which is saved before and restored after."""
        saved = [t.detach().clone() for t in self._state()]
        static_x, static_y = xb.clone(), yb.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._train_step(static_x, static_y)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._train_step(static_x, static_y)
        with torch.no_grad():
            for tensor, value in zip(self._state(), saved):
                tensor.copy_(value)
        self._square.refresh(self.model.V)  # the graph reads the row norms kept, whatever V's version
        self._graph, self._static = graph, (static_x, static_y)
        self.mode = self.mode.replace("eager", "CUDA graph")

    def _full_step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        if self.graph and self._graph is None:
            self._capture(xb, yb)
        if self._graph is not None:
            self._static[0].copy_(xb)
            self._static[1].copy_(yb)
            self._graph.replay()
        else:
            self._train_step(xb, yb)

    def seconds_per_step(self, x: torch.Tensor, y: torch.Tensor, steps: int, warmup: int = 2) -> float:
        """Seconds per full mini-batch step on the first batch of ``(x, y)`` (on the device), the mean
        of ``steps`` after ``warmup`` steps (which capture the graph and compile). It trains the
        networks on that batch, so it is for a stack made to be measured, then thrown away."""
        size = int(self.cfg["batch_size"])
        self.allocate(warmup + steps + 2)
        for i in range(warmup + steps):
            if i == warmup:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                start = time.perf_counter()
            self._full_step(x[:size], y[:size])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return (time.perf_counter() - start) / steps

    @torch.no_grad()
    def _accuracy(self, x: torch.Tensor, y: torch.Tensor, chunk: int = 1000) -> torch.Tensor:
        """Accuracy of every network on ``(x, y)`` in evaluation mode, ``(N,)``, on the device."""
        self.model.eval()
        correct = torch.zeros(len(self.labels), dtype=torch.int64, device=self.device)
        for begin in range(0, x.shape[0], chunk):
            xb, yb = x[begin:begin + chunk], y[begin:begin + chunk]
            correct += (self.model(xb).argmax(-1) == yb).sum(1)
        self.model.train()
        return correct.double() / x.shape[0]

    def run_epoch(self, train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                  final: bool) -> list[dict[str, Any]]:
        """Train every network one epoch; return each network's metrics as :meth:`Training.run_epoch`
        does (a network diverged in an earlier epoch gets ``{"epoch", "diverged": True,
        "after_divergence": True}``), with ``seconds`` the epoch's wall time shared equally."""
        cfg, size = self.cfg, int(self.cfg["batch_size"])
        every, count = int(cfg["ratio_every"]), len(self.labels)
        x, y = (t.to(self.device) for t in train)
        start = time.perf_counter()
        before = self.diverged_at.clone()
        order = torch.randperm(x.shape[0], generator=self.generator).to(self.device)
        steps = math.ceil(x.shape[0] / size)
        if self._ratio is None or self._ratio.shape[0] != steps:
            if self._graph is not None:
                raise RuntimeError("the number of steps per epoch changed after the CUDA graph was captured")
            self.allocate(steps)
        for tensor in (self._loss_sum, self._correct, self._slot_t, self._ratio, self._max_grad):
            tensor.zero_()
        self._share.fill_(1.0)
        self._step_t.fill_(self.step)
        self.model.train()
        for k in bar(range(steps), desc=f"{count} networks, epoch {self.epoch + 1}", leave=False):
            index = order[k * size:(k + 1) * size]
            if index.shape[0] == size:
                self._full_step(x[index], y[index])
            else:
                self._train_step(x[index], y[index])
        test_acc = self._accuracy(*(t.to(self.device) for t in test))
        train_acc = self._accuracy(x, y) if final else None
        drift = self.model.orthogonality_drift().T.cpu().tolist()
        first_step = self.step
        self.step += steps
        self.epoch += 1
        diverged_at, earlier = self.diverged_at.cpu().tolist(), before.cpu().tolist()
        ratio, max_grad, share = self._ratio.cpu().numpy(), self._max_grad.cpu().numpy(), self._share.cpu().numpy()
        loss_sum, correct = self._loss_sum.cpu().tolist(), self._correct.cpu().tolist()
        test_acc = test_acc.cpu().tolist()
        train_acc = train_acc.cpu().tolist() if train_acc is not None else None
        seconds = (time.perf_counter() - start) / count
        where = {"device": device_name(self.device), "precision": precision(self.params[0].dtype)}
        out = []
        for i in range(count):
            if earlier[i] >= 0:
                out.append({"epoch": self.epoch, "diverged": True, "after_divergence": True, **where})
                continue
            done = steps if diverged_at[i] < 0 else diverged_at[i] - first_step
            kept = [k for k in range(done) if (first_step + k) % every == 0]
            values = [_finite(float(r)) for r in ratio[:done, i]]
            defined = [r for r in values if r is not None]
            metrics = {"epoch": self.epoch, "ratio_steps": [first_step + k for k in kept],
                       "ratio": [values[k] for k in kept],
                       "max_grad": [_finite(float(max_grad[k, i])) for k in kept],
                       **where, "diverged": diverged_at[i] >= 0,
                       "steps": first_step + done, "ratio_max": max(defined) if defined else None,
                       "ratio_undefined_steps": len(values) - len(defined), "stacked": count, "mode": self.mode,
                       "tangential_share_min": _finite(float(share[:done, i].min())) if done else None}
            if metrics["diverged"]:
                metrics.update(diverged_step=diverged_at[i], train_loss=None, train_acc_running=None, test_acc=None,
                               drift=None)
            else:
                metrics.update(train_loss=loss_sum[i] / x.shape[0], train_acc_running=correct[i] / x.shape[0],
                               drift=drift[i], test_acc=_finite(test_acc[i]))
                if final:
                    metrics["train_acc"] = _finite(train_acc[i])
            metrics["seconds"] = seconds
            out.append(metrics)
        return out


REPLAYED = ("train_loss", "test_acc", "diverged")
"""The metrics of an epoch that a replay of it must give exactly as the journal holds them."""


def train_epoch(training: Training | None, make: Callable[[], Training], epoch: int, epochs: int,
                train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                checkpoint: Path | None, journalled: Mapping[int, Mapping[str, Any]] | None = None
                ) -> tuple[Training, dict[str, Any]]:
    """Bring a network to the end of epoch ``epoch`` (from 1) of ``epochs`` and return it with that epoch's metrics.

    The network is ``training`` when given (kept in memory), else the one checkpointed at
    ``checkpoint`` when there is one, else a new one from ``make()``. Epochs before
    ``epoch`` that it has not done are trained again; a checkpoint already at ``epoch``
    returns the metrics it holds. With ``checkpoint`` the state is saved after every epoch,
    and deleted once the network has finished or diverged.

    ``journalled[e]`` are the metrics the journal holds for epoch ``e`` of this network. An
    epoch trained again must reproduce them (:data:`REPLAYED`, exactly: the same code, seed
    and machine give the same numbers); otherwise the later epochs would continue another
    trajectory than the journalled one, and :class:`ReplayMismatch` is raised instead (another
    device or library version; the message says how to recompute the network there).
    """
    if training is None:
        training = make()
        if checkpoint is not None and checkpoint.is_file():
            training.resume(checkpoint)
            if training.epoch > epoch:  # ahead of the journal, which cannot happen but by hand: start afresh
                training = make()
    if training.epoch == epoch and training.metrics is not None:
        return training, training.metrics
    if training.epoch > epoch:
        raise ValueError(f"the network has done {training.epoch} epochs, past epoch {epoch}")
    for e in range(training.epoch + 1, epoch):
        if (before := (journalled or {}).get(e)) is not None:
            check_same_machine(before, training.device, training.name)
    while training.epoch < epoch:
        metrics = training.run_epoch(train, test, final=training.epoch + 1 == epochs)
        before = (journalled or {}).get(training.epoch)
        if before is not None and any(before.get(k) != metrics.get(k) for k in REPLAYED):
            raise ReplayMismatch(
                f"{training.name}: epoch {training.epoch} trained again without its checkpoint gives "
                + ", ".join(f"{k} {metrics.get(k)!r}" for k in REPLAYED) + " where the journal holds "
                + ", ".join(f"{k} {before.get(k)!r}" for k in REPLAYED) + "; its later epochs would continue "
                "another run. Bring the network's checkpoint from the machine that journalled it, or remove its "
                "lines from the journal to train it here from the start")
        if metrics["diverged"] or training.epoch == epochs:
            if checkpoint is not None:
                checkpoint.unlink(missing_ok=True)
            break
        if checkpoint is not None:
            training.save(checkpoint)
    return training, metrics


def network_result(entries: list[Mapping[str, Any]], epochs: int) -> dict[str, Any]:
    """One network's result from its journalled epochs ``entries`` (1, 2, ... in order) of ``epochs``.

    ``test_curve[e]``: test accuracy after epoch ``e + 1``; ``train_acc``: the running mean
    over the last epoch's mini-batches, in training mode while the weights change (the first
    author's "train" accuracy, Table 2's "Train"); ``train_acc_eval``: on the whole training
    set in evaluation mode after the last epoch, once all ``epochs`` are done (else None);
    ``ratio``, ``ratio_steps``, ``max_grad``: the per-step records of
    :meth:`Training.run_epoch` of all epochs; ``ratio_peak``: the largest ratio over every
    step where epochs record it (``ratio_max``), else over the recorded steps;
    ``drift[e]``: per-layer drift after epoch ``e + 1`` (None once diverged).
    ``diverged_epoch`` counts from 0, as in :class:`gmp.train.History`; ``devices`` and
    ``precisions``: those its epochs were computed with ("None" where not recorded).
    """
    diverged = bool(entries) and entries[-1]["diverged"]
    done = len(entries) == epochs and not diverged
    last = entries[-1] if entries else {}
    ratios = [r for e in entries for r in e["ratio"]]
    peaks = [g for e in entries for g in e["max_grad"]]
    defined = [r for r in ratios if r is not None]
    every_step = [e["ratio_max"] for e in entries if e.get("ratio_max") is not None]
    if entries and all("ratio_max" in e for e in entries if not e["diverged"]):
        defined_peak = max(every_step) if every_step else None
        undefined = sum(e.get("ratio_undefined_steps", 0) for e in entries)
    else:
        defined_peak, undefined = (max(defined) if defined else None), len(ratios) - len(defined)
    grads = [g for g in peaks if g is not None]
    return {"epochs_run": len(entries), "epochs": epochs, "finished": done,
            "train_acc": None if diverged else last.get("train_acc_running"),
            "train_acc_eval": None if diverged or not done else last.get("train_acc"),
            "devices": sorted({str(e.get("device")) for e in entries}),
            "precisions": sorted({str(e.get("precision")) for e in entries}),
            "test_acc": None if diverged else last.get("test_acc"),
            "test_curve": [e["test_acc"] for e in entries],
            "train_loss": [e["train_loss"] for e in entries],
            "diverged": diverged, "diverged_epoch": len(entries) - 1 if diverged else None,
            "steps": last.get("steps", 0), "wall_time_s": sum(e["seconds"] for e in entries),
            "ratio_peak": defined_peak,
            "ratio_median": float(np.median(defined)) if defined else None,
            "ratio_undefined": undefined,
            "max_grad_median": float(np.median(grads)) if grads else None,
            "drift_max": [None if e["drift"] is None else max(e["drift"]) for e in entries],
            "drift": [e["drift"] for e in entries],
            "ratio_steps": [s for e in entries for s in e["ratio_steps"]], "ratio": ratios, "max_grad": peaks}


CURVES = ("ratio_steps", "ratio", "max_grad", "drift")
"""Per-step and per-epoch records of :func:`network_result`, kept in the npz beside a saved result
(``drift`` as an epochs x layers array)."""


def _array(curve: str, values: list[Any], depth: int) -> np.ndarray:
    if curve == "drift":
        values = [[np.nan] * depth if row is None else row for row in values]
        return np.asarray(values, dtype=np.float64).reshape(len(values), depth)
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _list(curve: str, array: np.ndarray) -> list[Any]:
    if curve == "ratio_steps":
        return [int(v) for v in array.tolist()]
    if curve == "drift":
        return [None if np.all(np.isnan(row)) else row.tolist() for row in array]
    return [None if math.isnan(v) else v for v in array.tolist()]


def split_curves(payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(payload without the per-step curves, arrays)`` for ``Store.save``: the curves of run
    ``label`` on ``dataset`` become arrays ``"<dataset>__<label>__<curve>"`` (None -> NaN)."""
    light = {k: v for k, v in payload.items() if k != "runs"}
    light["runs"] = {}
    arrays: dict[str, np.ndarray] = {}
    for dataset, runs in payload["runs"].items():
        light["runs"][dataset] = {}
        for label, result in runs.items():
            light["runs"][dataset][label] = {k: v for k, v in result.items() if k not in CURVES}
            for curve in CURVES:
                arrays[f"{dataset}__{label}__{curve}"] = _array(curve, result[curve], payload["depth"])
    return light, arrays


def join_curves(payload: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Inverse of :func:`split_curves` (NaN -> None)."""
    out = {k: v for k, v in payload.items() if k != "runs"}
    out["runs"] = {}
    for dataset, runs in payload["runs"].items():
        out["runs"][dataset] = {}
        for label, result in runs.items():
            joined = dict(result)
            for curve in CURVES:
                joined[curve] = _list(curve, arrays[f"{dataset}__{label}__{curve}"])
            out["runs"][dataset][label] = joined
    return out


def figure_source(dataset: str, live: Mapping[str, Any], paper_run: Mapping[str, Any] | None,
                  scale: str) -> tuple[dict[str, Any], str]:
    """The runs a figure of ``dataset`` (mnist or cifar10) shows, and a title saying what
    they are: the paper-scale run when it has ``dataset`` (the cache, or an unfinished run:
    :func:`unfinished`), else this build's runs on the data that stood in for ``dataset``."""
    if paper_run is not None and dataset in paper_run["runs"]:
        return paper_run["runs"][dataset], (f"{epoch_text(paper_run, dataset)} (unfinished paper-scale run)"
                                            if paper_run.get("unfinished") else
                                            f"{DATASET_LABELS[dataset]}, depth {paper_run['depth']}, width "
                                            f"{paper_run['width']} (paper-scale run, from the cache)")
    used = live["data"][dataset]
    stand_in = "" if used == dataset else f" standing in for {DATASET_LABELS[dataset]}"
    return live["runs"][used], (f"{DATASET_LABELS[used]}{stand_in}: depth {live['depth']}, width "
                                f"{live['width']}, {live['epochs'][used]} epoch(s), lr {live['lr']:g} "
                                f"({scale} scale; paper-scale run not cached)")


def unfinished(units: Mapping[str, Any], seed: int = 0) -> dict[str, Any] | None:
    """The paper-scale payload of an unfinished run from the epochs its journal holds
    (``units``: key to value, as :attr:`gmp.results.Cached.units`), marked ``"unfinished": True``.

    Every group of networks (per data set, without BN, with BN) is cut to the epoch that all
    its networks have reached, so that the table and figures compare them at the same epoch
    (a diverged network ends where it diverged); a group in which some network has no epoch
    yet is left out. None when no group has one.
    """
    cfg = _config.load("lu_real", "paper")
    reached = assemble(cfg, units, seed)["epochs_reached"]
    kept = {}
    for dataset, groups in reached.items():
        for group, epoch in groups.items():
            for variant in variants(cfg["activations"]):
                label = run_label(variant, group == "BN")
                for e in range(1, epoch + 1):
                    key = epoch_key(dataset, label, seed, e)
                    if key in units:
                        kept[key] = units[key]
    payload = assemble(cfg, kept, seed)
    if not payload["runs"]:
        return None
    payload["unfinished"] = True
    return payload


EARLIER_READING = "9022225089f51a10"
"""Config digest of the book's earlier reading of Section 3.2 (no biases, no activation after
the bottom layer, GPN constants from quadrature, Train on the whole training set), before the
first author's code was found. Its CPU journal, epochs 1-5 of the twelve MNIST networks
without BN, is kept under that name in ``_partial/`` and never mixes with the author's run."""


def earlier_reading(seed: int = 0) -> dict[str, Any] | None:
    """The payload (:func:`assemble`, marked unfinished) of the retired journal of the earlier
    reading (:data:`EARLIER_READING`), or None where it is not at hand."""
    from gmp.results import journal_path, journal_units

    path = journal_path("lu_real", "paper", EARLIER_READING)
    if path is None or not path.is_file():
        return None
    payload = assemble(_config.load("lu_real", "paper"), journal_units(path), seed)
    payload["unfinished"] = True
    return payload if payload["runs"] else None


def earlier_text(payload: Mapping[str, Any] | None) -> str:
    """What the earlier reading's retired CPU run showed, in one sentence (from its journal)."""
    if payload is None:
        return "Its journal is not at hand in this copy of the book."
    runs = payload["runs"]["mnist"]
    stuck = {label: r["test_acc"] for label, r in runs.items() if label in UNTRAINABLE}
    gpn = {f"{a}-GPN": runs[f"{a}-GPN"]["test_acc"] for a in UNTRAINABLE if f"{a}-GPN" in runs}
    best = max(runs, key=lambda label: runs[label]["test_acc"] or 0)
    return (f"After {payload['epochs_reached']['mnist']['no BN']} of {payload['epochs']['mnist']} epochs its "
            f"{len(runs)} MNIST networks without BN had test accuracies from "
            f"{_pct(min(r['test_acc'] for r in runs.values()))}% to {_pct(runs[best]['test_acc'])}% ({best}); "
            + ", ".join(f"{label} {_pct(v)}%" for label, v in stuck.items())
            + " (about chance: without an output bias nothing pulls them to the majority class), and their GPN "
              "versions " + ", ".join(f"{_pct(v)}%" for v in gpn.values()) + ".")


def progress(units: Mapping[str, Any], seed: int = 0) -> str:
    """A sentence on how far an unfinished paper-scale run has got, from its journalled epochs ``units``."""
    cfg = _config.load("lu_real", "paper")
    if not units:
        return "its journal holds no finished epoch yet."
    payload = assemble(cfg, units, seed)
    hours = sum(v.get("seconds", 0.0) for v in units.values()) / 3600  # an epoch after divergence has none
    parts = []
    for dataset, reached in payload["epochs_reached"].items():
        runs = payload["runs"].get(dataset, {})
        if not runs:
            continue
        name, epochs = DATASET_LABELS[dataset], payload["epochs"][dataset]
        for group in ("no BN", "BN"):
            done = [r["epochs_run"] for label, r in runs.items() if label.endswith("-BN") == (group == "BN")]
            if not done:
                parts.append(f"the {name} networks with BN have not started")
                continue
            ahead = max(done) > reached[group]
            diverged = sum(r["diverged"] for label, r in runs.items() if label.endswith("-BN") == (group == "BN"))
            count, total = payload["networks_started"][dataset][group], payload["networks_per_group"]
            who = "every" if count == total else f"{count} of the {total}"
            parts.append(f"{who} {name} network{'s' if count < total else ''} {'with' if group == 'BN' else 'without'} "
                         f"BN {'has' if count == total else 'have'} finished "
                         f"{reached[group]} of {epochs} epochs" + (f", {sum(d > reached[group] for d in done)} of "
                                                                   f"them {max(done)}" if ahead else "")
                         + (f", {diverged} diverged" if diverged else ""))
    return f"its journal holds {len(units)} epochs of training ({hours:.1f} hours of computing): " + "; ".join(parts) + "."


def epoch_text(payload: Mapping[str, Any], dataset: str) -> str:
    """Where the networks of ``dataset`` stand: "MNIST, depth 200, epoch k of 50" (for an
    unfinished run, the epoch of the networks without BN, and of those with BN when they differ)."""
    reached, epochs = payload["epochs_reached"][dataset], payload["epochs"][dataset]
    started, total = payload.get("networks_started", {}).get(dataset, {}), payload.get("networks_per_group", 12)
    text = f"{DATASET_LABELS[dataset]}, depth {payload['depth']}, epoch {reached['no BN']} of {epochs}"
    if started.get("no BN", total) < total:
        text += f" ({started['no BN']} of {total} networks without BN)"
    if reached["BN"] != reached["no BN"] or started.get("BN", total) < total:
        text += (f" ({reached['BN']} with BN" + (f", {started['BN']} of {total} networks" if started.get(
            "BN", total) < total else "") + ")") if reached["BN"] else " (BN networks not started)"
    return text


def schedule(cfg: Mapping[str, Any], seed: int) -> list[tuple[str, str, int]]:
    """``(dataset, run label, epoch)`` of every epoch of every network, in the order :func:`run`
    trains them: per data set, the networks without BN epoch by epoch (epoch 1 of all twelve,
    then epoch 2, ...), then those with BN the same way, so that an unfinished run has taken
    every network of a group to the same epoch."""
    out = []
    for dataset in dict.fromkeys(cfg["data"].values()):
        for batchnorm in (False, True):
            labels = [run_label(v, batchnorm) for v in variants(cfg["activations"])]
            out += [(dataset, label, epoch) for epoch in range(1, int(cfg["epochs"][dataset]) + 1) for label in labels]
    return out


def assemble(cfg: Mapping[str, Any], units: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The payload of the chapter from journalled epochs ``units`` (key :func:`epoch_key` to
    the metrics of :meth:`Training.run_epoch`): per data set used, per run label, the
    :func:`network_result` of the epochs journalled from the first on. Networks with none
    are left out; ``epochs_reached`` gives, per data set, the fewest epochs any started
    network of each group (without / with BN) has reached (a diverged one counts as done; 0
    if none has started) and ``networks_started`` how many of the group's networks have
    an epoch (the stacked GPU worker journals a few networks' 50 epochs at a time)."""
    runs: dict[str, dict[str, Any]] = {}
    reached: dict[str, dict[str, int]] = {}
    started: dict[str, dict[str, int]] = {}
    for dataset in dict.fromkeys(cfg["data"].values()):
        epochs = int(cfg["epochs"][dataset])
        runs[dataset], reached[dataset], started[dataset] = {}, {}, {}
        for batchnorm in (False, True):
            least, count = epochs, 0
            for variant in variants(cfg["activations"]):
                label = run_label(variant, batchnorm)
                entries = []
                for epoch in range(1, epochs + 1):
                    entry = units.get(epoch_key(dataset, label, seed, epoch))
                    if entry is None:
                        break
                    entries.append(entry)
                    if entry["diverged"]:
                        break
                if entries:
                    runs[dataset][label] = network_result(entries, epochs)
                    count += 1
                    least = min(least, epochs if entries[-1]["diverged"] else len(entries))
            group = "BN" if batchnorm else "no BN"
            reached[dataset][group], started[dataset][group] = (least if count else 0), count
    return {"data": dict(cfg["data"]), "width": cfg["width"], "depth": cfg["depth"],
            "epochs": dict(cfg["epochs"]), "lr": cfg["lr"], "seed": seed, "epochs_reached": reached,
            "networks_started": started, "networks_per_group": len(variants(cfg["activations"])),
            "runs": {d: r for d, r in runs.items() if r}}


def _train_to(cfg: Mapping[str, Any], store: Any, data: dict, live: dict[str, Training], dataset: str, label: str,
              epoch: int, seed: int, device: torch.device | str,
              earlier: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Epoch ``epoch`` of the network ``label`` on ``dataset`` (:func:`train_epoch`), from the
    network kept in ``live`` when it stands at the epoch before, else its checkpoint;
    ``earlier``: its journalled earlier epochs; ``data`` caches the data sets. An unfinished
    network stays in ``live`` (under ``gmp.runs`` it is also checkpointed after every epoch),
    so a process that trains it from epoch to epoch does not rebuild it from its checkpoint."""
    if dataset not in data:
        data[dataset] = (load_split(dataset, True, cfg["max_train"]), load_split(dataset, False))
    train, test = data[dataset]
    variant, batchnorm = label.removesuffix("-BN"), label.endswith("-BN")
    name = network_key(dataset, label, seed)
    checkpoint = store.scratch(name)
    kept = live.pop(name, None)
    epochs = int(cfg["epochs"][dataset])
    training, metrics = train_epoch(
        kept if kept is not None and kept.epoch == epoch - 1 else None,
        lambda: Training(variant, batchnorm, train[0].shape[1], cfg, device, seed),
        epoch, epochs, train, test, checkpoint, earlier)
    if not metrics["diverged"] and training.epoch < epochs:
        live[name] = training
    return metrics


def run(cfg: Mapping[str, Any], store: Any, device: torch.device | str = "cpu", seed: int = 0) -> dict[str, Any]:
    """Train every network of the chapter epoch by epoch in the order of :func:`schedule`.

    Each epoch of each network is one unit of ``store.memo`` (a :class:`gmp.results.Store`),
    journalled with its metrics (:meth:`Training.run_epoch`) under :func:`epoch_key`. Under
    ``gmp.runs`` every network is checkpointed after each epoch at ``store.scratch`` of its
    :func:`network_key` (not committed: a depth-200 network and its momentum take 0.4 GB),
    so an interrupted run resumes at the next epoch and gives the same numbers; a machine
    without the checkpoint trains the network again from its first epoch and checks that the
    journalled epochs come out as journalled (:func:`train_epoch`). The networks stay in
    memory from epoch to epoch. A diverged network is not trained further.
    Data sets are loaded when first needed. Returns :func:`assemble` of the journalled epochs.
    """
    data: dict = {}
    live: dict[str, Training] = {}
    done: dict[str, Any] = {}
    stopped: set[str] = set()
    for dataset, label, epoch in schedule(cfg, seed):
        name = network_key(dataset, label, seed)
        if name in stopped:
            continue
        earlier = {e: done[k] for e in range(1, epoch) if (k := epoch_key(dataset, label, seed, e)) in done}
        key = epoch_key(dataset, label, seed, epoch)
        done[key] = store.memo(key, lambda: _train_to(cfg, store, data, live, dataset, label, epoch, seed, device,
                                                      earlier))
        if done[key]["diverged"]:
            stopped.add(name)
            live.pop(name, None)
    return assemble(cfg, done, seed)


def units(cfg, store, seed: int, device) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every epoch of every network as a unit of ``python -m gmp.runs lu_real --jobs N``, by
    journal key, in the order of :func:`schedule`.

    Worker ``i`` of ``N`` takes every ``N``-th unit (:func:`gmp.runs.prefill`); as each group
    holds twelve networks, with ``N`` dividing 12 a worker keeps the same networks from one
    epoch to the next and trains each from its own checkpoint. A unit reads the network's
    journalled earlier epochs (another worker may have written them); after a diverged epoch
    it trains nothing and journals ``after_divergence`` (:func:`assemble` reads a network's
    epochs only up to its divergence). The notebook then runs :func:`run` from the journal.
    """
    data: dict = {}
    live: dict[str, Training] = {}

    def unit(dataset: str, label: str, epoch: int) -> Callable[[], dict[str, Any]]:
        def compute() -> dict[str, Any]:
            earlier = {e: v for e in range(1, epoch)
                       if (v := store.journalled(epoch_key(dataset, label, seed, e))) is not None}
            if any(v["diverged"] for v in earlier.values()):
                return {"epoch": epoch, "diverged": True, "after_divergence": True}
            return _train_to(cfg, store, data, live, dataset, label, epoch, seed, device, earlier)
        return compute

    return {epoch_key(d, label, seed, e): unit(d, label, e) for d, label, e in schedule(cfg, seed)}


# ---------------------------------------------------------------- cost of the paper's run

def step_seconds(width: int, depth: int, in_features: int, batch_size: int, device: torch.device | str = "cpu",
                 steps: int = 3) -> float:
    """Measured seconds per training step (forward, backward, SGD update) of a ReLU-GPN
    network of Section 3.2 (row-normalised weights) after one warm-up step."""
    cfg = {"width": width, "depth": depth, "weights": "row_normalized", "init": "default", "num_classes": 10}
    model = build("ReLU-GPN", False, in_features, cfg, 0).to(device)
    x = torch.randn(batch_size, in_features, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.5, foreach=True)
    elapsed = 0.0
    for i in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        if i:
            elapsed += time.perf_counter() - start
    return elapsed / steps


PAPER_TRAIN_ROWS = {"mnist": 60_000, "cifar10": 50_000}
"""Training-set sizes of MNIST and CIFAR-10."""


def paper_updates() -> dict[str, int]:
    """Mini-batch updates of one paper-scale network per data set: ``ceil(rows / batch) * epochs``."""
    setup = PAPER["setup"]
    return {d: math.ceil(n / setup["batch_size"]) * setup["epochs"][d] for d, n in PAPER_TRAIN_ROWS.items()}


def paper_cost(layer_step_s: float, overhead_layer_step_s: float, gpu_tflops: float = 20.0,
               activations: int = 6) -> dict[str, float]:
    """An estimate of the cost of the paper-scale run of Table 2 (not a measurement of it).

    Steps: training sets of 60,000 (MNIST) and 50,000 (CIFAR-10) images, batch 64
    (``ceil`` steps per epoch), 50 / 100 epochs, 2 x ``activations`` variants x (with,
    without BN) per data set. FLOPs: about ``6 * batch * width^2`` per square layer and step
    (forward 2, backward 4). ``layer_step_s``: measured seconds per square layer and step
    at width 500 on this CPU, giving the CPU time. On a GPU the time is at least the larger
    of the FLOPs at ``gpu_tflops`` (an assumed sustained rate) and the host-side cost of
    launching the layer's operations, taken as ``overhead_layer_step_s``, the measured
    seconds per layer and step of a network so narrow that its arithmetic is negligible.
    Per-epoch evaluation of the test set is not counted.
    """
    setup = PAPER["setup"]
    runs_per_dataset = 2 * activations * 2
    steps = sum(paper_updates().values()) * runs_per_dataset
    layer_steps = steps * setup["depth"]
    step_flops = 6 * setup["batch_size"] * setup["width"] ** 2 * setup["depth"]
    flop_hours = steps * step_flops / (gpu_tflops * 1e12) / 3600
    overhead_hours = layer_steps * overhead_layer_step_s / 3600
    return {"steps": float(steps), "step_gflop": step_flops / 1e9, "total_pflop": steps * step_flops / 1e15,
            "cpu_hours": layer_steps * layer_step_s / 3600, "gpu_flop_hours": flop_hours,
            "gpu_overhead_hours": overhead_hours, "gpu_hours": max(flop_hours, overhead_hours),
            "gpu_tflops": gpu_tflops}


# ---------------------------------------------------------------- Table 2

def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def _cell(plain: Mapping[str, Any] | None, bn: Mapping[str, Any] | None, key: str) -> str:
    def one(result):
        if result is None:
            return "—"
        if result["diverged"]:
            return f"diverged (ep. {result['diverged_epoch'] + 1})"
        return _pct(result[key])
    return f"{one(plain)} ({one(bn)})"


SPLITS = (("Train", "train_acc"), ("Train, whole set", "train_acc_eval"), ("Test", "test_acc"))
"""The columns of Table 2 for each data set, with the result key each shows. They are the author's
running training accuracy (Table 2's "Train"), the whole training set in evaluation mode after
the last epoch (ours, beside it) and the test set."""


def table2(live: Mapping[str, Any], paper_run: Mapping[str, Any] | None, scale: str):
    """Table 2 of Lu et al. side by side: the paper's accuracies, ours at this build's scale
    (on the data the build used) and ours at paper scale (the cache, or an unfinished run at
    the epoch it reached, :func:`unfinished`; else "not yet run"). Cells read "without BN
    (with BN)", in percent, as in the paper; ours add the whole training set in evaluation
    mode (:data:`SPLITS`)."""
    import pandas as pd

    rows = {}
    for variant in variants(ACTIVATIONS):
        row = {}
        for dataset in PAPER_DATASETS:
            paper = PAPER["table2"][variant][dataset]
            name = DATASET_LABELS[dataset]
            for split in ("train", "test"):
                row[("Paper", name, split.capitalize())] = f"{paper[split][0]:.2f} ({paper[split][1]:.2f})"
        for used in dict.fromkeys(live["data"].values()):
            runs = live["runs"].get(used, {})
            stands_for = [DATASET_LABELS[d] for d, u in live["data"].items() if u == used and d != used]
            name = DATASET_LABELS[used] + (f" (stand-in for {' and '.join(stands_for)})" if stands_for else "")
            for split, key in SPLITS:
                row[(f"Ours, {scale} scale", name, split)] = _cell(
                    runs.get(variant), runs.get(run_label(variant, True)), key)
        top = "Ours, paper scale (unfinished run)" if paper_run and paper_run.get("unfinished") else \
            "Ours, paper scale (cache)"
        for dataset in PAPER_DATASETS:
            ran = paper_run is not None and dataset in paper_run["runs"]
            name = epoch_text(paper_run, dataset) if ran and paper_run.get("unfinished") else DATASET_LABELS[dataset]
            for split, key in SPLITS:
                runs = paper_run["runs"][dataset] if ran else {}
                text = _cell(runs.get(variant), runs.get(run_label(variant, True)), key) if ran else NOT_RUN
                row[(top, name, split)] = text
        rows[variant] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return frame


# ---------------------------------------------------------------- figures

def _family_runs(runs: Mapping[str, Any], activation: str) -> list[tuple[str, Mapping[str, Any]]]:
    return [(label, runs[label]) for label in (activation, f"{activation}-GPN", f"{activation}-BN",
                                               f"{activation}-GPN-BN") if label in runs]


_STYLES = {"": ("C0", "-"), "-GPN": ("C1", "-"), "-BN": ("C0", ":"), "-GPN-BN": ("C1", ":")}


def _style(label: str, activation: str) -> tuple[str, str]:
    return _STYLES[label[len(activation):]]


def plot_test_accuracy(runs: Mapping[str, Any], title: str, activations: list[str] | None = None):
    """Test accuracy (percent) after each epoch, one panel per activation with its GPN and
    BN variants (Figs. 3, 8 and 9 of Lu et al.); a diverged run ends with a cross."""
    from matplotlib.ticker import MaxNLocator

    activations = [a for a in (activations or ACTIVATIONS) if a in runs]
    cols = min(3, len(activations))
    rows = math.ceil(len(activations) / cols)
    fig, axes = style.subplots(rows, cols, figsize=(10, 3.0 * rows), sharey=True, squeeze=False)
    for ax, activation in zip(axes.flat, activations):
        for label, result in _family_runs(runs, activation):
            color, line = _style(label, activation)
            curve = np.array([np.nan if v is None else 100 * v for v in result["test_curve"]])
            epochs = np.arange(1, len(curve) + 1)
            ax.plot(epochs, curve, color=color, linestyle=line, marker="o", markersize=3, label=label)
            if result["diverged"]:
                ax.plot(epochs[-1], 10, marker="x", color=color, markersize=8)
        ax.set_title(activation)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 100)
        ax.legend()
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy (%)")
    for ax in list(axes.flat)[len(activations):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_gradient_ratio(runs: Mapping[str, Any], activations: list[str], title: str):
    """Gradient norm ratio ``max_l ||dE/dV^(l)|| / min_l ||dE/dV^(l)||`` (Eq. (56)) against
    the mini-batch update, one panel per activation (Figs. 10-13 of Lu et al.). Steps where
    the ratio is undefined (a gradient norm of exactly 0, or not finite) leave gaps, as
    the paper's empty plots do."""
    activations = [a for a in activations if a in runs]
    fig, axes = style.subplots(1, len(activations), figsize=(10, 3.4), squeeze=False)
    for ax, activation in zip(axes[0], activations):
        for label, result in _family_runs(runs, activation):
            color, line = _style(label, activation)
            ratio = np.array([np.nan if v is None else v for v in result["ratio"]], dtype=float)
            ax.plot(result["ratio_steps"], ratio, color=color, linestyle=line, linewidth=1, label=label)
        ax.set_yscale("log")
        ax.set_title(activation)
        ax.set_xlabel("mini-batch update")
        ax.legend()
    axes[0, 0].set_ylabel("gradient norm ratio")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_drift(runs: Mapping[str, Any], title: str):
    """How far the row-normalised weights (Eq. (55)) drift from orthogonal during training:
    left, ``max_l max_ij |W^(l) W^(l)T - I|_ij`` (:func:`gmp.orthogonality_drift`) after each
    epoch, per network without BN; right, the drift of every layer after the last epoch.
    At initialisation every ``W`` is exactly orthogonal (drift 0)."""
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = style.subplots(1, 2, figsize=(10, 3.4))
    for i, activation in enumerate(ACTIVATIONS):
        for label, line in ((activation, "-"), (f"{activation}-GPN", "--")):
            result = runs.get(label)
            if result is None or not any(d is not None for d in result["drift_max"]):
                continue
            drift = np.array([np.nan if d is None else d for d in result["drift_max"]])
            left.plot(np.arange(1, len(drift) + 1), drift, color=f"C{i}", linestyle=line, marker="o", markersize=3,
                      label=label)
            last = next(d for d in reversed(result["drift"]) if d is not None)
            right.plot(np.arange(1, len(last) + 1), last, color=f"C{i}", linestyle=line, linewidth=1)
    left.set_xlabel("epoch")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_ylabel(r"largest $|W W^T - I|$ over layers")
    right.set_xlabel("layer $l$")
    right.set_ylabel(r"largest $|W W^T - I|$, last epoch")
    for ax in (left, right):
        ax.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    style.legend_below(fig)
    return fig


# ---------------------------------------------------------------- claims

def _datasets(payload: Mapping[str, Any]) -> list[str]:
    """The data sets the payload has runs on (an unfinished run may lack some)."""
    return [d for d in dict.fromkeys(payload["data"].values()) if d in payload["runs"]]


def _on_paper_data(payload: Mapping[str, Any]) -> bool:
    setup = PAPER["setup"]
    return (set(payload["runs"]) >= set(PAPER_DATASETS) and payload["depth"] == setup["depth"]
            and payload["width"] == setup["width"])


def _cap(verdict: str, payload: Mapping[str, Any]) -> str:
    """A verdict from stand-in data or a reduced depth is at most "partly"."""
    return PARTLY if verdict == REPRODUCED and not _on_paper_data(payload) else verdict


def _where(payload: Mapping[str, Any]) -> str:
    if payload.get("unfinished"):
        return "; ".join(epoch_text(payload, d) for d in payload["runs"]) + " (unfinished paper-scale run)"
    names = ", ".join(DATASET_LABELS[d] for d in _datasets(payload))
    return f"{names}, depth {payload['depth']}, width {payload['width']}"


CHANCE = 1 / 10
"""Accuracy of guessing one of the 10 classes, what a diverged run counts as in every claim."""


def _acc(result: Mapping[str, Any], key: str = "train_acc") -> float:
    """The run's accuracy, or :data:`CHANCE` if it diverged (or recorded none)."""
    value = result.get(key)
    return CHANCE if value is None or result["diverged"] else value


def _diverged_text(payload: Mapping[str, Any], labels: list[str]) -> str:
    runs = [f"{DATASET_LABELS[d]} {label} at epoch {payload['runs'][d][label]['diverged_epoch']}"
            for d in _datasets(payload) for label in labels
            if label in payload["runs"][d] and payload["runs"][d][label]["diverged"]]
    return f"; diverged, counted as chance (10%): {', '.join(runs)}" if runs else ""


CHANCE_MARGIN = 0.05
TRAINABLE_MARGIN = 0.10
BETTER_MARGIN = 0.01
"""A GPN network trains better than its plain twin if its training accuracy is higher by more
than this (one point); within it, the two are even (one seed: no noise estimate)."""


def _untrainable(payload):
    cases = [(d, a) for d in _datasets(payload) for a in UNTRAINABLE if a in payload["runs"][d]]
    accs = {(d, a): _acc(payload["runs"][d][a]) for d, a in cases}
    stuck = [k for k, v in accs.items() if v <= CHANCE + CHANCE_MARGIN]
    text = (f"{len(stuck)}/{len(cases)} of (ReLU, LeakyReLU, GELU) x data at <= 15% train accuracy; "
            + "; ".join(f"{DATASET_LABELS[d]} {a}: {_pct(v)}%" for (d, a), v in accs.items())
            + _diverged_text(payload, list(UNTRAINABLE)) + f" ({_where(payload)})")
    verdict = REPRODUCED if cases and len(stuck) == len(cases) else PARTLY if stuck else NOT_REPRODUCED
    return text, _cap(verdict, payload)


def _gpn_trainable(payload):
    cases = [(d, a) for d in _datasets(payload) for a in UNTRAINABLE
             if a in payload["runs"][d] and f"{a}-GPN" in payload["runs"][d]]
    gains = {(d, a): _acc(payload["runs"][d][f"{a}-GPN"]) - _acc(payload["runs"][d][a]) for d, a in cases}
    trained = [k for k, g in gains.items() if g >= TRAINABLE_MARGIN]
    text = (f"{len(trained)}/{len(cases)} GPN versions beat the plain one by >= 10 points of train accuracy; "
            + "; ".join(f"{DATASET_LABELS[d]} {a}-GPN {100 * g:+.1f}" for (d, a), g in gains.items())
            + _diverged_text(payload, variants(list(UNTRAINABLE))) + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and len(trained) == len(cases)
               else PARTLY if 2 * len(trained) >= len(cases) and trained else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


def _gpn_train_acc(payload):
    cases = [(d, a) for d in _datasets(payload) for a in ACTIVATIONS
             if a in payload["runs"][d] and f"{a}-GPN" in payload["runs"][d]]
    gains = {(d, a): _acc(payload["runs"][d][f"{a}-GPN"]) - _acc(payload["runs"][d][a]) for d, a in cases}
    better = [k for k, g in gains.items() if g > BETTER_MARGIN]
    worse = [k for k, g in gains.items() if g < -BETTER_MARGIN]
    even = [k for k in cases if k not in better and k not in worse]

    def name(keys):
        return ", ".join(f"{DATASET_LABELS[d]} {a}" for d, a in keys) or "none"

    text = (f"GPN train accuracy higher by > {100 * BETTER_MARGIN:g} point in {len(better)}/{len(cases)} "
            f"comparisons; within {100 * BETTER_MARGIN:g} point: {name(even)}; lower: {name(worse)}"
            + _diverged_text(payload, variants(ACTIVATIONS)) + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and not worse and 4 * len(better) >= 3 * len(cases)
               else PARTLY if 4 * (len(better) + len(even)) >= 3 * len(cases) else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


EXPLOSION_FACTOR = 10.0


def _peak(result: Mapping[str, Any]) -> float:
    """Largest gradient norm ratio over the run; inf if the run diverged or the ratio was
    undefined (a gradient norm of 0 or not finite) at some step."""
    if result["diverged"] or result["ratio_undefined"]:
        return math.inf
    return result["ratio_peak"] if result["ratio_peak"] is not None else math.nan


def _bn_explodes(payload):
    cases = [(d, v) for d in _datasets(payload) for v in variants(ACTIVATIONS)
             if v in payload["runs"][d] and f"{v}-BN" in payload["runs"][d]]
    plain = {k: _peak(payload["runs"][k[0]][k[1]]) for k in cases}
    with_bn = {k: _peak(payload["runs"][k[0]][f"{k[1]}-BN"]) for k in cases}
    comparable = [k for k in cases if math.isfinite(plain[k]) and not math.isnan(with_bn[k])]
    worse = [k for k in comparable if with_bn[k] >= EXPLOSION_FACTOR * plain[k]]
    text = (f"peak ratio with BN >= {EXPLOSION_FACTOR:g} x the peak without BN in {len(worse)}/{len(comparable)} "
            f"variants with a defined ratio without BN (median peak with BN "
            f"{np.median([with_bn[k] for k in comparable]) if comparable else math.nan:.3g})"
            + _diverged_text(payload, [f"{v}-BN" for v in variants(ACTIVATIONS)]).replace(
                "counted as chance (10%)", "counted as an explosion") + f" ({_where(payload)})")
    verdict = (REPRODUCED if comparable and len(worse) == len(comparable)
               else PARTLY if worse and 2 * len(worse) >= len(comparable) else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


def _gpn_stable(payload):
    """Figs. 10-13's contrast: each GPN network without BN against the same GPN network with BN."""
    runs = payload["runs"]
    cases = [(d, v) for d in _datasets(payload) for v in variants(ACTIVATIONS)
             if v.endswith("-GPN") and v in runs[d] and f"{v}-BN" in runs[d]]
    plain = {k: _peak(runs[k[0]][k[1]]) for k in cases}
    with_bn = {k: _peak(runs[k[0]][f"{k[1]}-BN"]) for k in cases}
    stable = [k for k in cases if math.isfinite(plain[k]) and EXPLOSION_FACTOR * plain[k] <= with_bn[k]]
    text = (f"{len(stable)}/{len(cases)} GPN networks without BN have a peak gradient norm ratio at least "
            f"{EXPLOSION_FACTOR:g} x below the same network's with BN; peaks without / with BN: "
            + ", ".join(f"{DATASET_LABELS[d]} {v} {plain[d, v]:.3g} / {with_bn[d, v]:.3g}" for d, v in cases)
            + " (inf: diverged, or a gradient norm of 0 at some step)" + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and len(stable) == len(cases)
               else PARTLY if 2 * len(stable) >= len(cases) and stable else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


_STAND_IN = (" Runs on stand-in data or at a reduced depth count at most as partly; only MNIST and "
             "CIFAR-10 at depth 200 can reproduce it.")
_UNFINISHED = (" Before the paper-scale run has finished, it is judged on the networks its journal holds, each "
               "group cut to the epoch that all its journalled networks have reached (the GPU command journals "
               "a few networks' 50 epochs at a time, so some may be missing); the networks still to come may "
               "change the verdict, and without CIFAR-10 it is at most partly.")
def _judged_unfinished(groups: tuple[str, ...]) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    """The payload an unfinished run's journal gives a claim that needs the networks ``groups``
    ("no BN", "BN") on MNIST to have reached an epoch; None until they have."""
    def payload(units: Mapping[str, Any]) -> dict[str, Any] | None:
        out = unfinished(units)
        if out is None or "mnist" not in out["runs"]:
            return None
        return out if all(out["epochs_reached"]["mnist"][g] > 0 for g in groups) else None
    return payload

CLAIMS = [
    Claim(key="lu-real-untrainable", paper="lu", source="paper", result="runs",
          text="Table 2: depth-200 networks with ReLU, LeakyReLU or GELU (no GPN, no BN) are not "
               "trainable on MNIST and CIFAR-10 (accuracy at chance).",
          rule="reproduced if every such run ends with a training accuracy <= 15% (chance is 10%; a diverged "
               "run counts as chance); partly if some do; else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_untrainable, unfinished=_judged_unfinished(("no BN",))),
    Claim(key="lu-real-gpn-trainable", paper="lu", source="paper", result="runs",
          text="Table 2: once ReLU, LeakyReLU and GELU are GPN, the depth-200 networks can be trained.",
          rule="reproduced if each GPN version's training accuracy exceeds its plain version's by >= 10 "
               "points on every data set (a diverged run counts as chance, 10%); partly if at least half do; "
               "else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_gpn_trainable, unfinished=_judged_unfinished(("no BN",))),
    Claim(key="lu-real-gpn-train-accuracy", paper="lu", source="paper", result="runs",
          text="Table 2: GPN activations consistently outperform their unnormalised counterparts in "
               "training accuracy (without BN).",
          rule="a diverged run counts as chance (10%). A GPN version trains better if its training accuracy "
               "exceeds the plain one's by more than 1 point, worse if it falls short by more than 1 point, "
               "even otherwise (one seed per run, so no noise estimate; 1 point is the margin). Reproduced if "
               "no GPN version is worse and at least 3/4 of the comparisons (six activations x data sets) are "
               "better (the rest even: near 100% both train to the ceiling); partly if at least 3/4 are "
               "better or even; else not reproduced." + _STAND_IN,
          check=_gpn_train_acc),
    Claim(key="lu-real-bn-explodes", paper="lu", source="paper", result="runs",
          text="Figs. 10-13: batch normalisation leads to gradient explosion with every activation.",
          rule="reproduced if, for every activation and GPN version whose ratio without BN is defined "
               "throughout training (no gradient norm of exactly 0), the peak gradient norm ratio (Eq. (56)) "
               "with BN is >= 10 x the peak without BN (a diverged BN run counts as an explosion); partly "
               "if for at least half; else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_bn_explodes, unfinished=_judged_unfinished(("no BN", "BN"))),
    Claim(key="lu-real-gpn-stable", paper="lu", source="paper", result="runs",
          text="Figs. 10-13: without BN, every GPN network keeps a stable gradient magnitude throughout "
               "training.",
          rule="judged as the paper states it, against batch normalisation (the paper gives no bound of its "
               "own): a GPN network without BN is stable if its peak gradient norm ratio (Eq. (56)) over "
               "training is at most 1/10 of the peak of the same GPN network with BN (a diverged run, or one "
               "with a gradient norm of 0 at some step, has an unbounded peak: unstable without BN, an "
               "explosion with it). Reproduced if every GPN network is; partly if at least half are; else not "
               "reproduced. One network per cell, as in the paper: no test over seeds, the factor 10 is the "
               "margin." + _STAND_IN + _UNFINISHED,
          check=_gpn_stable, unfinished=_judged_unfinished(("no BN", "BN"))),
]
