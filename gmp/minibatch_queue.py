"""A queue of :func:`gmp.minibatch.fit_stack` fits trained as one stacked fit.

Part III's paper-scale queue is many small fits (Figs. 4 and 6 over four more seeds: 17 stacks
of four networks, each about 1.1 million Adam updates of mini-batches of 32). One at a time,
each update is a few dozen tiny kernel launches; :func:`fit_jobs` trains all of them at once:

* networks whose layers have one shape (widths, initialisation, biases, SIREN layers) form a
  head, and heads whose networks end in layers of one shape form a stack: each head's first
  layers, then the shared last layers (the trunk), are one batched product (``torch.bmm``) per
  layer over all their networks, each network's activation applied to its own slice (the
  networks are ordered by activation: one element-wise call per activation present, fused into
  one kernel by ``torch.compile``). Part III's queue is one stack: Fig. 4's networks (a SIREN
  first layer) and Fig. 6's (encoded inputs) share their six last layers;
* every network keeps what it has in :func:`fit_stack`: its initial weights and its shuffle
  (from its own seed), its Adam moments and learning rate, its plateau schedule, its divergence;
  every fit (a :class:`FitJob`) keeps its number of epochs and its stopping rule
  (``stop_below`` over its own networks). A network whose fit has ended is frozen (rate and
  gradient zero) while the others go on;
* one step of the whole queue (its forward and backward passes, the loss and the Adam update,
  with the update's bias corrections computed on the device) is captured once as a CUDA graph
  and replayed (``graph=True`` on CUDA); eager on failure, or on a CPU.

Each network's curves equal those :func:`fit_stack` gives it alone, to float rounding (only the
batched products' summation order may differ). :func:`planned` and :func:`replayed` read the
fits a chapter's unit makes (its ``fit_stack`` calls) and give the unit the stacked fit's curves
in their place, so the unit's journal entry is built by the unit's own code (:mod:`gmp.gpu`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch import Tensor, nn

from gmp.activations import activation as _activation
from gmp.minibatch import (KERAS_BATCH_SIZE, Dense, EpochCurves, Plateau, _adam_update, _init, check_mse_to_unit,
                           fit_stack)
from gmp.train import check_fit_arguments

__all__ = ["CaptureFailed", "FitJob", "MODES", "NotStackable", "QueueTraining", "fit_jobs", "planned", "probe",
           "queues", "replayed"]

MODES = {"CUDA graph, compiled": (True, True), "CUDA graph": (True, False), "compiled": (False, True),
         "eager": (False, False)}
"""The ways the stacked step can run, each as ``(graph, compile)`` for :class:`QueueTraining`. On CUDA
:func:`probe` tries the two with a graph in this order, then eager; on a CPU eager only (``"compiled"`` is there
for a CPU with a C++ toolchain)."""

RUN_ONLY = ("checkpoint", "checkpoint_every", "device", "progress", "desc", "compile")
"""The arguments of :func:`fit_stack` that say how a fit runs, not what it computes, and are not part of a
:class:`FitJob`."""


class CaptureFailed(RuntimeError):
    """The capture of the stacked step as a CUDA graph failed (:func:`fit_jobs` then starts again eagerly)."""


class NotStackable(Exception):
    """A unit's fit that the stacked fit cannot take (it keeps the trained model, or is not a :func:`fit_stack`)."""


@dataclasses.dataclass(eq=False)
class FitJob:
    """What one :func:`fit_stack` call computes (its arguments less ``RUN_ONLY``)."""

    spec_layers: list[Dense]
    seeds: list[int]
    inputs: Tensor
    targets: Tensor
    epochs: int
    lr: list[float]
    batch_size: int = KERAS_BATCH_SIZE
    plateau: Mapping[str, Any] | None = None
    adam: str = "keras"
    heldout: Tensor | None = None
    mse_to_unit: float = 1.0
    stop_below: float | None = None
    eval_chunk: int = 8192

    @classmethod
    def of_call(cls, *args: Any, **kwargs: Any) -> FitJob:
        """The job of a call ``fit_stack(*args, **kwargs)``, its arguments checked as :func:`fit_stack` checks them."""
        bound = inspect.signature(fit_stack).bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        if given.pop("keep") is not None:
            raise NotStackable("the fit keeps its trained model (keep=): run it by itself with fit_stack")
        for name in RUN_ONLY:
            given.pop(name)
        seeds = given["seeds"]
        if not isinstance(seeds, Sequence) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            raise TypeError(f"seeds must be a list of integers, one per network, got {seeds!r}")
        spec_layers = list(given["spec_layers"])
        lrs = check_fit_arguments(given["inputs"], given["targets"], lr=given["lr"], networks=len(seeds),
                                  stop_below=given["stop_below"], heldout=given["heldout"],
                                  counts={"epochs": given["epochs"], "batch_size": given["batch_size"],
                                          "eval_chunk": given["eval_chunk"]},
                                  in_features=spec_layers[0].fan_in if spec_layers else None)
        check_mse_to_unit(given["mse_to_unit"])
        return cls(**{**given, "spec_layers": spec_layers, "seeds": list(seeds),
                      "lr": lrs * len(seeds) if len(lrs) == 1 else lrs})

    def same_fit(self, other: FitJob) -> bool:
        """Whether ``other`` computes the same fit (equal settings and equal tensors)."""
        def same(a: Any, b: Any) -> bool:
            if isinstance(a, Tensor) or isinstance(b, Tensor):
                return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and torch.equal(a, b)
            return a == b

        return all(same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self))


def _shape(job: FitJob) -> tuple:
    """What networks must share to be one head: every layer but its activation's name (the input width with it)."""
    return tuple((x.fan_in, x.fan_out, x.init, x.bias, x.omega, x.activation is None) for x in job.spec_layers)


def _common_suffix(a: tuple, b: tuple) -> int:
    """How many last layers two shapes (:func:`_shape`) share."""
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


class _Layers(nn.Module):
    """Layers of several networks with a network axis: ``weight_l`` ``(count, fan_in, fan_out)``, ``bias_l``
    ``(count, 1, fan_out)``, each network's activation on its own slice (the networks come ordered so that those
    with one activation are adjacent: one call per activation present, fused by ``torch.compile``). No layers:
    the identity."""

    def __init__(self, spec_layers: list[list[Dense]], inits: list[list[tuple[Tensor, Tensor | None]]]):
        super().__init__()
        self.count = len(inits)
        self.spec_layers = spec_layers[0]
        self.weights = nn.ParameterList(nn.Parameter(torch.stack([net[i][0] for net in inits]))
                                        for i in range(len(self.spec_layers)))
        self.biases = nn.ParameterList(nn.Parameter(torch.stack([net[i][1] for net in inits]))
                                       for i, layer in enumerate(self.spec_layers) if layer.bias is not None)
        self.slices: list[list[tuple[int, int, nn.Module]]] = []  # per layer: (start, stop, activation) runs
        for i in range(len(self.spec_layers)):
            names = [net[i].activation for net in spec_layers]
            runs, start = [], 0
            for n in range(1, len(names) + 1):
                if n == len(names) or names[n] != names[start]:
                    runs.append((start, n, _activation(names[start]) if names[start] else nn.Identity()))
                    start = n
            self.slices.append(runs)

    def forward(self, h: Tensor) -> Tensor:
        biases = iter(self.biases)
        for layer, weight, runs in zip(self.spec_layers, self.weights, self.slices):
            h = torch.bmm(h, weight)
            if layer.bias is not None:
                h = h + next(biases)
            if layer.omega is not None:
                h = torch.sin(layer.omega * h)
            elif len(runs) == 1:
                h = runs[0][2](h)
            else:
                h = torch.cat([act(h[a:b]) for a, b, act in runs])
        return h


class _Stack(nn.Module):
    """Networks that share their last layers' shapes (a trunk of ``trunk`` layers) as one batched computation.

    ``heads`` lists the networks by the shape of their first layers (before the trunk; none for some): each head
    is one :class:`_Layers` over its networks, fed from its own inputs (``features[source]``); their outputs,
    side by side on the network axis, go through the trunk, one :class:`_Layers` over all of them. A member is
    ``(job, network of the job, input)``; every network is initialised from its seed in its own layer order, as
    :class:`gmp.minibatch.StackedNetworks` does."""

    def __init__(self, heads: list[list[tuple[FitJob, int, Tensor]]], trunk: int):
        super().__init__()
        heads = [sorted(members, key=lambda m: tuple(str(x.activation) for x in m[0].spec_layers)) for members in heads]
        self.members = [m for members in heads for m in members]
        inits = []
        for job, k, _ in self.members:
            generator = torch.Generator().manual_seed(job.seeds[k])
            inits.append([_init(layer, generator) for layer in job.spec_layers])
        self.heads = nn.ModuleList()
        start = 0
        for members in heads:
            cut = len(members[0][0].spec_layers) - trunk
            head = _Layers([job.spec_layers[:cut] for job, _, _ in members], [x[:cut] for x in
                                                                                 inits[start:start + len(members)]])
            sources: list[Tensor] = []
            index = []
            for _, _, x in members:  # each distinct input once
                found = next((i for i, y in enumerate(sources) if y.shape == x.shape and torch.equal(y, x)), None)
                if found is None:
                    sources.append(x)
                    found = len(sources) - 1
                index.append(found)
            head.register_buffer("source", torch.tensor(index))
            head.register_buffer("features", torch.stack(sources))
            self.heads.append(head)
            start += len(members)
        self.trunk = _Layers([job.spec_layers[-trunk:] for job, _, _ in self.members], [x[-trunk:] for x in inits])

    def forward(self, rows: Tensor) -> Tensor:
        """The outputs ``(count, size, 1)`` of every network at its pixels ``rows`` (``(count, size)`` indices)."""
        hs, start = [], 0
        for head in self.heads:
            hs.append(head(head.features[head.source[:, None], rows[start:start + head.count]]))
            start += head.count
        return self.trunk(torch.cat(hs) if len(hs) > 1 else hs[0])


def _stack_losses(stack: _Stack, rows: Tensor, targets: Tensor) -> Tensor:
    """The mean squared error of each network of ``stack`` on its mini-batch (pixel indices ``rows``, one row per
    network): what ``compile`` fuses (each layer's activations, forward and backward, around its product)."""
    return ((stack(rows) - targets[rows]) ** 2).mean(dim=(1, 2))


def _stacks(jobs: Sequence[FitJob]) -> list[_Stack]:
    """The networks of ``jobs`` as stacks: networks of one shape (:func:`_shape`) form a head, and heads whose
    networks share their last layers' shapes one stack, whose trunk is those layers."""
    by_shape: dict[tuple, list[tuple[FitJob, int, Tensor]]] = {}
    for job in jobs:
        inputs = job.inputs if job.inputs.dim() == 3 else job.inputs.unsqueeze(0).expand(len(job.seeds), -1, -1)
        by_shape.setdefault(_shape(job), []).extend((job, k, inputs[k]) for k in range(len(job.seeds)))
    merged: list[tuple[list[tuple], int]] = []  # (shapes, trunk length)
    for shape in by_shape:
        for i, (shapes, trunk) in enumerate(merged):
            common = _common_suffix(shapes[0], shape)
            if common:
                merged[i] = (shapes + [shape], min(trunk, common))
                break
        else:
            merged.append(([shape], len(shape)))
    return [_Stack([by_shape[shape] for shape in shapes], trunk) for shapes, trunk in merged]


class QueueTraining:
    """The training state of a queue of :class:`FitJob` s (see the module); :func:`fit_jobs` runs it.

    Every job must share the targets, the held-out pixels, the mini-batch size and the Adam flavour
    (one step for all); ``graph`` captures the step as a CUDA graph (CUDA only; a failed capture raises
    :class:`CaptureFailed`); ``compile`` runs each stack's loss and the Adam update through ``torch.compile``.
    :data:`MODES`
    names the combinations, fastest first.
    """

    def __init__(self, jobs: Sequence[FitJob], device: torch.device | str = "cpu", graph: bool = False,
                 compile: bool = False):
        if not jobs:
            raise ValueError("need at least one fit")
        first = jobs[0]
        for i, job in enumerate(jobs):
            if not torch.equal(job.targets, first.targets) or job.targets.shape != first.targets.shape:
                raise NotStackable(f"fit {i}: its targets differ from fit 0's; stack only fits of one image")
            if (job.heldout is None) != (first.heldout is None) or (
                    job.heldout is not None and not torch.equal(job.heldout, first.heldout)):
                raise NotStackable(f"fit {i}: its held-out pixels differ from fit 0's")
            if (job.batch_size, job.adam) != (first.batch_size, first.adam):
                raise NotStackable(f"fit {i}: batch size and Adam flavour {(job.batch_size, job.adam)} differ from "
                                   f"fit 0's {(first.batch_size, first.adam)}")
        self.jobs, self.device = list(jobs), torch.device(device)
        self.batch_size, self.flavour = first.batch_size, first.adam
        pixels = first.targets.shape[0]
        mask = torch.ones(pixels, dtype=torch.bool)
        if first.heldout is not None:
            mask[first.heldout] = False
        self.train_idx = mask.nonzero().flatten()
        self.heldout = first.heldout
        self.updates = math.ceil(self.train_idx.numel() / self.batch_size)
        self.targets = first.targets.to(self.device)
        self.stacks = [stack.to(self.device) for stack in _stacks(self.jobs)]
        # the networks in the stacks' order, and where each job's networks are in it
        self.order = [(job, k) for stack in self.stacks for job, k, _ in stack.members]
        self.count = len(self.order)
        self.job_index = [next(j for j, other in enumerate(self.jobs) if other is job) for job, _ in self.order]
        self.where = {(id(job), k): n for n, (job, k) in enumerate(self.order)}
        self.params, spans, start = [], [], 0
        for stack in self.stacks:  # each parameter with the networks it holds (Adam's rates)
            stack_start = start
            for head in stack.heads:
                self.params += list(head.parameters())
                spans += [(start, start + head.count)] * len(list(head.parameters()))
                start += head.count
            self.params += list(stack.trunk.parameters())
            spans += [(stack_start, start)] * len(list(stack.trunk.parameters()))
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.eps = 1e-7 if self.flavour == "keras" else 1e-8
        self.betas = (0.9, 0.999)
        self.spans = spans
        self.generators = [torch.Generator().manual_seed(10_000 + job.seeds[k]) for job, k in self.order]
        self.lrs = [job.lr[k] for job, k in self.order]
        self.plateaus = [Plateau(job.plateau["factor"], job.plateau["patience"], job.plateau.get("rule", "keras"))
                         if job.plateau else None for job, _ in self.order]
        self.diverged: list[int | None] = [None] * self.count
        self.ended: dict[int, int] = {}  # job index -> epochs it ran
        self.curves = {id(job): {name: np.full((len(job.seeds), job.epochs), np.nan) for name in
                                 ("epoch_loss", "train_mse", "heldout_mse", "lr", "seconds")} for job in self.jobs}
        self.epoch, self.spent = 0, 0.0
        # the step's state on the device, updated in place (what a captured step reads)
        self.t = torch.zeros((), dtype=torch.float64, device=self.device)
        self.offset = torch.zeros((), dtype=torch.long, device=self.device)
        self.alive = torch.ones(self.count, dtype=torch.bool, device=self.device)
        self.rates = torch.zeros(self.count, device=self.device)
        self.running = torch.zeros(self.count, dtype=torch.float64, device=self.device)
        self.batches = torch.zeros(self.count, self.train_idx.numel(), dtype=torch.long, device=self.device)
        self.steps = torch.arange(self.batch_size, device=self.device)
        self.graph = None
        self.want_graph = graph and self.device.type == "cuda"
        self.stack_losses = [torch.compile(_stack_losses, dynamic=False) if compile else _stack_losses
                             for _ in self.stacks]
        self.update = torch.compile(_adam_update, dynamic=False) if compile else _adam_update
        self.mode = next(name for name, flags in MODES.items() if flags == (self.want_graph, compile))

    def _losses(self, batch: Tensor) -> Tensor:
        """Each network's mean squared error on its mini-batch (``batch``: pixel indices ``(count, size)``)."""
        out, start = [], 0
        for stack, losses in zip(self.stacks, self.stack_losses):
            out.append(losses(stack, batch[start:start + len(stack.members)], self.targets))
            start += len(stack.members)
        return torch.cat(out) if len(out) > 1 else out[0]

    def _step(self, size: int) -> None:
        """One Adam update of every network on its next mini-batch of ``size`` pixels (what the graph captures)."""
        batch = self.batches.index_select(1, self.offset + self.steps[:size])
        losses = self._losses(batch)
        self.running.add_(losses.detach().double() * size)
        grads = torch.autograd.grad(torch.where(self.alive, losses, 0.0).sum(), self.params)
        with torch.no_grad():
            b1, b2 = self.betas
            self.t.add_(1)
            c1, c2 = 1 - torch.pow(b1, self.t), 1 - torch.pow(b2, self.t)
            keras = self.flavour == "keras"
            factor = (torch.sqrt(c2) / c1 if keras else 1 / c1).float()
            root_c2 = torch.ones_like(factor) if keras else torch.sqrt(c2).float()
            scale = self.rates * factor
            scales = [scale[a:b].view(-1, *([1] * (p.dim() - 1))) for (a, b), p in zip(self.spans, self.params)]
            self.update(self.params, list(grads), self.m, self.v, scales, root_c2, self.betas, self.eps)
            self.offset.add_(size)

    def _capture(self) -> None:
        """Warm up on a side stream (real steps of this epoch), then capture one full-batch step."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self._step(self.batch_size)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step(self.batch_size)
        self.graph = graph

    def _active(self, n: int) -> bool:
        """Whether network ``n``'s fit is still running."""
        return self.job_index[n] not in self.ended

    def run_epoch(self, steps: int | None = None) -> None:
        """One epoch of every fit still running (or only its first ``steps`` updates, for a probe: no curves)."""
        epoch = self.epoch
        began = time.perf_counter()
        self.batches.copy_(torch.stack([self.train_idx[torch.randperm(self.train_idx.numel(), generator=g)]
                                        if self._active(n) else self.train_idx
                                        for n, g in enumerate(self.generators)]).to(self.device))
        alive = [self._active(n) and self.diverged[n] is None for n in range(self.count)]
        self.alive.copy_(torch.tensor(alive))
        self.rates.copy_(torch.tensor(self.lrs, dtype=torch.float32) * torch.tensor(alive))
        self.running.zero_()
        self.offset.zero_()
        self._synchronize()
        looped = time.perf_counter()
        self.setup_seconds = looped - began
        sizes = [min(self.batch_size, self.train_idx.numel() - i * self.batch_size) for i in range(self.updates)]
        sizes = sizes[:steps]
        i = 0
        while i < len(sizes):
            if self.graph is not None and sizes[i] == self.batch_size:
                self.graph.replay()
                i += 1
                continue
            self._step(sizes[i])
            i += 1
            if self.want_graph and self.graph is None and sizes[i:i + 4] == [self.batch_size] * 4:
                try:
                    self._capture()  # three more real steps of this epoch, then one captured (not run)
                except Exception as err:
                    raise CaptureFailed(f"the CUDA graph capture failed ({type(err).__name__}: {err}); its warm-up "
                                        "steps may have run in part: start the queue again in eager mode") from err
                i += 3
        self._synchronize()
        self.steps_seconds = time.perf_counter() - looped
        if steps is not None:
            return
        epoch_loss = (self.running / self.train_idx.numel()).cpu().numpy()
        train_mse = self._evaluate(self.train_idx)
        heldout_mse = self._evaluate(self.heldout) if self.heldout is not None else None
        self.spent += time.perf_counter() - began
        for n, (job, k) in enumerate(self.order):
            if not self._active(n) or self.diverged[n] is not None:
                continue
            if not (math.isfinite(epoch_loss[n]) and math.isfinite(train_mse[n])):
                self.diverged[n] = epoch + 1
                continue
            curves = self.curves[id(job)]
            curves["epoch_loss"][k, epoch] = epoch_loss[n]
            curves["train_mse"][k, epoch] = train_mse[n]
            if heldout_mse is not None:
                curves["heldout_mse"][k, epoch] = heldout_mse[n]
            curves["lr"][k, epoch] = self.lrs[n]
            curves["seconds"][k, epoch] = self.spent / self.count
            if self.plateaus[n] is not None:
                self.lrs[n] = self.plateaus[n].step(float(epoch_loss[n]), self.lrs[n])
        for j, job in enumerate(self.jobs):
            if j in self.ended:
                continue
            nets = [self.where[(id(job), k)] for k in range(len(job.seeds))]
            reached = job.stop_below is not None and all(
                self.diverged[n] is not None or self.curves[id(job)]["train_mse"][k, epoch] <= job.stop_below
                for k, n in enumerate(nets))
            if reached or epoch + 1 == job.epochs:
                self.ended[j] = epoch + 1
        self.epoch += 1

    @torch.no_grad()
    def _evaluate(self, idx: Tensor) -> np.ndarray:
        out = []
        for stack in self.stacks:
            total = torch.zeros(len(stack.members), dtype=torch.float64, device=self.device)
            for chunk in idx.split(stack.members[0][0].eval_chunk):
                chunk = chunk.to(self.device)
                error = stack(chunk.expand(len(stack.members), -1)) - self.targets[chunk]
                total += (error.double() ** 2).sum(dim=(1, 2))
            out.append(total / idx.numel())
        return torch.cat(out).cpu().numpy()

    @property
    def finished(self) -> bool:
        return len(self.ended) == len(self.jobs)

    def result(self, j: int) -> list[EpochCurves]:
        """The curves of job ``j`` (once it has ended), as :func:`fit_stack` returns them."""
        job, end = self.jobs[j], self.ended[j]
        curves = {name: values[:, :end] for name, values in self.curves[id(job)].items()}
        nets = [self.where[(id(job), k)] for k in range(len(job.seeds))]
        return [EpochCurves(curves["epoch_loss"][k], curves["train_mse"][k],
                            curves["heldout_mse"][k] if job.heldout is not None else None, curves["lr"][k],
                            curves["seconds"][k], self.updates, job.mse_to_unit, self.diverged[n])
                for k, n in enumerate(nets)]

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def seconds_per_step(self, steps: int = 20) -> float:
        """Seconds per update of the whole stack, timed over ``steps`` updates (not the epoch's shuffles) after a
        warm-up (and the capture) of one epoch's first ones; the state is changed by them (a probe's stack is
        thrown away)."""
        self.run_epoch(steps=min(self.updates, 8 if self.want_graph else 2))
        self.run_epoch(steps=min(steps, self.updates))
        return self.steps_seconds / min(steps, self.updates)

    def seconds_per_epoch_besides_updates(self) -> float:
        """Seconds an epoch spends besides its updates: its shuffles and their copy to the device (as the last
        epoch measured them) and the evaluation of every network (training and held-out pixels), timed now."""
        began = time.perf_counter()
        self._evaluate(self.train_idx)
        if self.heldout is not None:
            self._evaluate(self.heldout)
        return self.setup_seconds + time.perf_counter() - began

    def predicted_seconds(self, step_seconds: float, epoch_seconds: float = 0.0) -> float:
        """The queue's time at ``step_seconds`` per update and ``epoch_seconds`` per epoch besides its updates
        (:meth:`seconds_per_epoch_besides_updates`): every epoch of the longest fit, all its updates (an upper
        bound: fits that end earlier make the stack no cheaper)."""
        return max(job.epochs for job in self.jobs) * (self.updates * step_seconds + epoch_seconds)


def fit_jobs(jobs: Sequence[FitJob], device: torch.device | str = "cpu", mode: str = "eager",
             deadline: float | None = None, on_end: Callable[[int, list[EpochCurves]], None] | None = None,
             notes: list[str] | None = None) -> list[list[EpochCurves]]:
    """Train ``jobs`` as one stacked fit (:class:`QueueTraining`); each job's curves, as :func:`fit_stack` gives them.

    ``mode`` is one of :data:`MODES` (:func:`probe` finds the fastest that works); when its CUDA graph capture
    fails, the fit starts again eagerly. ``on_end(j, curves)`` is called as soon as job ``j`` has ended (its
    epochs, or its ``stop_below``). ``deadline`` (``time.monotonic()`` seconds): from the third epoch on, a
    ``TimeoutError`` when the epochs left would end past it at the pace so far. ``notes`` receives the mode
    it ran in and why another failed.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    notes = notes if notes is not None else []
    try:
        return _fit(QueueTraining(jobs, device, *MODES[mode]), deadline, on_end, notes)
    except CaptureFailed as err:
        notes.append(str(err)[:600])
        return _fit(QueueTraining(jobs, device), deadline, on_end, notes)


def probe(jobs: Sequence[FitJob], device: torch.device | str = "cpu", modes: Sequence[str] | None = None,
          steps: int = 20, notes: list[str] | None = None) -> dict[str, Any]:
    """Time a throw-away stack of ``jobs`` in the first of ``modes`` that works (default: on CUDA those of
    :data:`MODES` with a graph, then eager; on a CPU eager). Returns ``mode``, ``ms_per_step``,
    ``s_per_epoch_besides_updates``, ``groups`` (networks per head, per stack) and ``predicted_minutes``
    (:meth:`QueueTraining.predicted_seconds`) in a dict. ``notes`` receives why a mode failed."""
    cuda = torch.device(device).type == "cuda"
    modes = list(modes) if modes is not None else (["CUDA graph, compiled", "CUDA graph", "eager"] if cuda
                                                   else ["eager"])
    notes = notes if notes is not None else []
    for mode in modes:
        training = None
        try:
            training = QueueTraining(jobs, device, *MODES[mode])
            step = training.seconds_per_step(steps)
            besides = training.seconds_per_epoch_besides_updates()
            return {"mode": mode, "ms_per_step": 1e3 * step, "s_per_epoch_besides_updates": besides,
                    "groups": [[head.count for head in stack.heads] for stack in training.stacks],
                    "predicted_minutes": training.predicted_seconds(step, besides) / 60}
        except Exception as err:
            notes.append(f"{mode} failed: {type(err).__name__}: {err}"[:600])
        finally:
            del training
            if cuda:
                torch.cuda.empty_cache()
    raise RuntimeError(f"every mode failed ({', '.join(modes)}): " + " | ".join(notes[-len(modes):]))


def _fit(training: QueueTraining, deadline: float | None, on_end: Callable[[int, list[EpochCurves]], None] | None,
         notes: list[str]) -> list[list[EpochCurves]]:
    reported: set[int] = set()
    first_done = None
    while not training.finished:
        if deadline is not None and first_done is not None and training.epoch >= 2:
            per_epoch = (time.perf_counter() - first_done) / (training.epoch - 1)
            left = max(job.epochs for j, job in enumerate(training.jobs) if j not in training.ended) - training.epoch
            if time.monotonic() + per_epoch * left > deadline:
                raise TimeoutError(f"stopped after epoch {training.epoch}: at {per_epoch:.1f} s per epoch the "
                                   f"{left} epochs left would end past the deadline")
        training.run_epoch()
        if training.epoch == 1:
            first_done = time.perf_counter()
        for j in sorted(set(training.ended) - reported):
            reported.add(j)
            if on_end is not None:
                on_end(j, training.result(j))
    notes.append(f"mode: {training.mode}")
    return [training.result(j) for j in range(len(training.jobs))]


@contextlib.contextmanager
def planned(module: types.ModuleType) -> Iterator[list[FitJob]]:
    """Within it, the ``fit_stack`` of ``module`` (a chapter's experiment) trains nothing: each call is recorded as
    a :class:`FitJob` in the list yielded and returns NaN curves, so that calling a unit lists its fits. A unit
    that fits otherwise (``fit_spec``) or keeps a model raises :class:`NotStackable`."""
    jobs: list[FitJob] = []

    def record(*args: Any, **kwargs: Any) -> list[EpochCurves]:
        job = FitJob.of_call(*args, **kwargs)
        jobs.append(job)
        nan = np.full(job.epochs, np.nan)
        return [EpochCurves(nan, nan, nan if job.heldout is not None else None, nan, nan, 1, job.mse_to_unit, None)
                for _ in job.seeds]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotStackable("the unit fits with fit_spec (full-batch), not fit_stack")

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(module, "fit_stack", record))
        if hasattr(module, "fit_spec"):
            stack.enter_context(mock.patch.object(module, "fit_spec", refuse))
        yield jobs


@contextlib.contextmanager
def replayed(module: types.ModuleType, jobs: Sequence[FitJob], curves: Sequence[list[EpochCurves]]) -> Iterator[None]:
    """Within it, the ``fit_stack`` of ``module`` returns ``curves[i]`` for its ``i``-th call, which must compute
    ``jobs[i]`` (:meth:`FitJob.same_fit`, else a ``RuntimeError``): a unit called here builds its value from the
    stacked fit's curves with its own code."""
    calls = iter(range(len(jobs)))

    def replay(*args: Any, **kwargs: Any) -> list[EpochCurves]:
        i = next(calls, None)
        if i is None or not jobs[i].same_fit(FitJob.of_call(*args, **kwargs)):
            raise RuntimeError("the unit's fits differ from those it was planned with; compute it with fit_stack")
        return curves[i]

    with mock.patch.object(module, "fit_stack", replay):
        yield
    if next(calls, None) is not None:
        raise RuntimeError("the unit made fewer fits than it was planned with; compute it with fit_stack")


def queues(jobs: Sequence[FitJob]) -> list[list[int]]:
    """The jobs (by index, in order) split into the queues that can train as one stacked fit: those of one image
    (equal targets), one set of held-out pixels, one mini-batch size and one Adam flavour (:class:`QueueTraining`)."""
    out: list[list[int]] = []
    for i, job in enumerate(jobs):
        for queue in out:
            first = jobs[queue[0]]
            if (job.batch_size, job.adam) == (first.batch_size, first.adam) and job.targets.shape == \
                    first.targets.shape and torch.equal(job.targets, first.targets) and (
                    (job.heldout is None and first.heldout is None) or (
                        job.heldout is not None and first.heldout is not None and
                        job.heldout.shape == first.heldout.shape and torch.equal(job.heldout, first.heldout))):
                queue.append(i)
                break
        else:
            out.append([i])
    return out
