"""One network of Table 2 (Section 3.2 of Lu et al.), built and trained one epoch at a time.

:func:`build` makes the network of the first author's protocol, :class:`Training` trains it one epoch at a
time with a checkpoint that resumes exactly, and :func:`train_epoch` brings it to an epoch, training again
the epochs a journal holds without their checkpoint and checking that they come out as journalled
(:class:`ReplayMismatch`), on the machine that journalled them (:class:`ForeignJournal`).
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
from gmp.gpn import make_activation
from gmp.models.deep import DeepMLP, deep_mlp
from gmp.progress import bar
from gmp.propagation import gradient_norm_ratio, parameter_gradient_norms
from gmp.runs import device_name, precision
from gmp.train import accuracy, evaluate, load_checkpoint

from .paper import run_label


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


def build_group(labels: list[str], in_features: int, cfg: Mapping[str, Any], seed: int) -> list[DeepMLP]:
    """:func:`build` of each run label (``-BN`` for batch normalisation), with the costly draw done
    once: every network of a run starts from the same weights (one seed, one shape: the paired
    design), so the first is built and its weights copied into the others, which are built
    without their own orthogonal draws (``tests/test_lu_stacked.py`` checks that this equals
    building each)."""
    first = build(labels[0].removesuffix("-BN"), labels[0].endswith("-BN"), in_features, cfg, seed)
    plain = {**cfg, "init": "default", "edge_init": "default"}
    networks = [first]
    for label in labels[1:]:
        net = build(label.removesuffix("-BN"), label.endswith("-BN"), in_features, plain, seed)
        with torch.no_grad():
            for mine, theirs in ((net.first, first.first), (net.last, first.last)):
                mine.weight.copy_(theirs.weight)
                if mine.bias is not None:
                    mine.bias.copy_(theirs.bias)
            for mine, theirs in zip(net.layers, first.layers):
                mine.V.copy_(theirs.V)
        networks.append(net)
    return networks


class ForeignJournal(RuntimeError):
    """A journal written on another device or at another precision, refused for replay."""


def check_same_machine(entry: Mapping[str, Any], device: torch.device | str, name: str) -> None:
    """Refuse to continue a network from a journalled epoch ``entry`` computed on another device
    or at another precision (:func:`~gmp.runs.device_name`, :func:`~gmp.runs.precision`): its numbers cannot be
    reproduced here, so later epochs would continue another run under the journalled one."""
    here = (device_name(device), precision())
    there = (entry.get("device", "an unrecorded device"), entry.get("precision", "an unrecorded precision"))
    if here != there:
        raise ForeignJournal(
            f"{name}: its journalled epochs were computed on {there[0]} at {there[1]}, and this machine is "
            f"{here[0]} at {here[1]}; a journal made on one device or precision is never replayed on another. "
            "Continue it on the machine that wrote it, or give this machine a journal of its own (move the "
            "journal aside, or remove this network's lines from it)")


def finite(value: float) -> float | None:
    """``value`` as a float, or None where it is not finite: how the journal records a number undefined at a step."""
    return float(value) if math.isfinite(value) else None


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
        (:func:`~gmp.runs.device_name`, :func:`~gmp.runs.precision`) say where the epoch was computed.
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
            ratio = finite(gradient_norm_ratio(norms))
            if ratio is None:
                undefined += 1
            else:
                ratio_max = ratio if ratio_max is None else max(ratio_max, ratio)
            if self.step % every == 0:
                out["ratio_steps"].append(self.step)
                out["ratio"].append(ratio)
                out["max_grad"].append(finite(float(np.max(norms))) if np.all(np.isfinite(norms)) else None)
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
                       test_acc=finite(evaluate(model, test, loss="cross_entropy", metrics={"accuracy": accuracy},
                                                 batch_size=1000, device=self.device)["accuracy"]))
            if final:
                out["train_acc"] = finite(evaluate(model, train, loss="cross_entropy",
                                                    metrics={"accuracy": accuracy}, batch_size=1000,
                                                    device=self.device)["accuracy"])
        out["seconds"] = time.perf_counter() - start
        self.metrics = out
        return out


class ReplayMismatch(RuntimeError):
    """A network trained again through its journalled epochs did not give the journalled numbers."""


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
