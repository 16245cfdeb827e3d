"""Several networks of Table 2 trained at once, as one batched computation (the GPU command's trainer)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gmp.models.deep import DeepMLP
from gmp.models.stacked import StackedDeepMLP
from gmp.progress import bar
from gmp.runs import device_name, precision

from .training import build, finite


class StackedTraining:
    """Several networks of Table 2 on one data set trained at once, one epoch at a time.

    The networks ``labels`` (run labels, :func:`~gmp.experiments.lu_real.paper.run_label`) are built exactly as
    :class:`~gmp.experiments.lu_real.training.Training` builds them
    (:func:`~gmp.experiments.lu_real.training.build`, the same seed) and trained as one
    :class:`gmp.models.stacked.StackedDeepMLP`: one batched computation over a network axis, the same shuffled
    mini-batch for every network (as the one-network trainer's shared seed gives them anyway: a paired design),
    SGD with momentum (``torch.optim.SGD``'s rule): the square layers' ``V`` updated in the backward pass, their
    gradients never formed (:meth:`gmp.models.stacked.StackedDeepMLP.update_in_backward`), the other parameters
    by ``torch.optim.SGD``'s multi-tensor update. Each step keeps its numbers on the device: the losses and
    correct counts are summed there, a network whose loss is not finite is marked diverged at that step (and
    changes no other network), and the gradient norm ratio of Eq. (56) of every network is written to a device
    buffer; all is read once per epoch.

    On CUDA, ``graph=True`` captures the whole step (forward, backward, update, bookkeeping)
    in a CUDA graph after a warm-up on copies, so that the GPU does not wait for the Python
    loop; the last, shorter mini-batch of an epoch runs eagerly. ``graph=None`` captures when
    on CUDA; the other parameters' update is then one fused pass (``torch._fused_sgd_``, what
    ``SGD(fused=True)`` runs). Each square layer's element-wise work runs as the operators of
    :mod:`gmp.models.stacked_ops` (one Triton kernel each on CUDA); ``kernels=False`` runs their
    torch reference instead (the fallback where Triton fails). Nothing is compiled by
    ``torch.compile``: the step's kernels are the products and those operators by construction.
    Matrix products run in the dtype of the networks with TF32 off unless the caller turned it
    on (recorded in every epoch's ``precision``).
    """

    def __init__(self, labels: list[str], in_features: int, cfg: Mapping[str, Any],
                 device: torch.device | str = "cpu", seed: int = 0, graph: bool | None = None,
                 dtype: torch.dtype | None = None, kernels: bool = True, networks: list[DeepMLP] | None = None):
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
        self.model.kernels = bool(kernels)
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
        self.mode = "eager" + (", stacked kernels" if kernels else ", torch reference")
        """How the full mini-batches ran, "eager" or, once captured, "CUDA graph", with the
        square layers' element-wise work as "stacked kernels" (:mod:`gmp.models.stacked_ops`) or
        their "torch reference"."""

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
        gradient norm and smallest tangential share (:attr:`gmp.models.stacked.SGDInBackward.tangential_share`:
        how much of ``A^T X`` the row normalisation's projection keeps), read once per epoch."""
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
            self._square.rows_g, self._square.rows_p, self._step_t, self._slot_t, self._loss_sum, self._correct,
            self.diverged_at, self._ratio, self._max_grad, self._share]

    def save(self, path: Path, extra: Mapping[str, Any] | None = None) -> None:
        """Write the whole state of the stack to ``path`` (atomically): every parameter, momentum
        buffer, BN statistic, the inverse row norms kept, the bookkeeping, the shuffling generator
        and the step and epoch counters, with ``extra`` (JSON-able) beside them, so that
        :meth:`load` continues the run as if it had never stopped."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save({"labels": self.labels, "epoch": self.epoch, "step": self.step, "mode": self.mode,
                    "generator": self.generator.get_state(), "versions": list(self._square.versions),
                    "state": [t.detach().cpu() for t in self._state()], "extra": dict(extra or {})}, tmp)
        os.replace(tmp, path)

    def load(self, path: Path) -> dict[str, Any]:
        """Continue from the state :meth:`save` wrote to ``path`` (for the same labels, shapes and
        dtype; anything else is refused, naming the file); returns the ``extra`` saved with it."""
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved.get("labels") != self.labels:
            raise ValueError(f"{path}: the saved stack is of {saved.get('labels')}, not {self.labels}: remove it to "
                             "start the group afresh")
        rows = saved["state"][-3].shape[0]  # the bookkeeping of one epoch's steps (allocate)
        if self._ratio is None or self._ratio.shape[0] != rows:
            self.allocate(rows)
        state = self._state()
        if len(state) != len(saved["state"]) or any(a.shape != b.shape or a.dtype != b.dtype
                                                    for a, b in zip(state, saved["state"])):
            raise ValueError(f"{path}: the saved state does not match this stack's shapes or dtype: remove it to "
                             "start the group afresh")
        with torch.no_grad():
            for tensor, value in zip(state, saved["state"]):
                tensor.copy_(value)
        self.generator.set_state(saved["generator"])
        self.epoch, self.step = int(saved["epoch"]), int(saved["step"])
        self._square.refresh(self.model.V)
        return saved["extra"]

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
        """Train every network one epoch; return each network's metrics as
        :meth:`~gmp.experiments.lu_real.training.Training.run_epoch` does (a network diverged in an
        earlier epoch gets ``{"epoch", "diverged": True, "after_divergence": True}``), with
        ``seconds`` the epoch's wall time shared equally."""
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
            values = [finite(float(r)) for r in ratio[:done, i]]
            defined = [r for r in values if r is not None]
            metrics = {"epoch": self.epoch, "ratio_steps": [first_step + k for k in kept],
                       "ratio": [values[k] for k in kept],
                       "max_grad": [finite(float(max_grad[k, i])) for k in kept],
                       **where, "diverged": diverged_at[i] >= 0,
                       "steps": first_step + done, "ratio_max": max(defined) if defined else None,
                       "ratio_undefined_steps": len(values) - len(defined), "stacked": count, "mode": self.mode,
                       "tangential_share_min": finite(float(share[:done, i].min())) if done else None}
            if metrics["diverged"]:
                metrics.update(diverged_step=diverged_at[i], train_loss=None, train_acc_running=None, test_acc=None,
                               drift=None)
            else:
                metrics.update(train_loss=loss_sum[i] / x.shape[0], train_acc_running=correct[i] / x.shape[0],
                               drift=drift[i], test_acc=finite(test_acc[i]))
                if final:
                    metrics["train_acc"] = finite(train_acc[i])
            metrics["seconds"] = seconds
            out.append(metrics)
        return out
