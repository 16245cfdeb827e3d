"""Image classification at scale: the training loop of Chen & Ge's VGG-6 and ResNet-34 runs.

:func:`fit_classifier` trains a classifier with SGD (momentum 0.9 in the paper), cross-entropy,
a learning rate divided by 10 when the validation top-5 accuracy has not improved for 5
epochs and a stop after 10 (Sec. 5 of Chen & Ge), reusing the Keras-compatible
:class:`gmp.ReduceLROnPlateau` and :class:`gmp.EarlyStopping` rules of :mod:`gmp.train`.
It logs the loss and top-1/top-5 accuracies of training (running over the epoch's batches,
each measured before its update, as Keras logs them) and of validation, every epoch.

What :func:`gmp.fit` does not do, and this loop does:

* **Checkpoint and resume.** With ``checkpoint=path`` the complete state (model,
  optimiser, schedule counters, history) is written atomically after every epoch; calling
  again with the same path resumes after the last finished epoch and ends in exactly the
  state an uninterrupted run reaches (the batch order and the flips of epoch ``e`` depend
  only on ``(seed, e)``). A finished run is returned at once. Checkpoints hold tensors and
  plain values only and are read with ``weights_only=True`` (:func:`gmp.train.load_checkpoint`).
* **Mixed precision and channels-last** on CUDA (bfloat16 autocast; no loss scaling is
  needed for bfloat16). GmP angles and the hyperspherical map stay in float32.
* **Data parallelism.** Started by ``torchrun`` (or inside an initialised
  ``torch.distributed`` process group) the same call trains a
  ``DistributedDataParallel`` model: :class:`GlobalBatchSampler` cuts each global batch
  of ``batch_size`` examples into one slice per process, and the loss of a slice is its
  summed cross-entropy divided by the global batch's size (times the number of processes,
  which DDP's gradient averaging divides out), so the update is the same as that of one
  process on the whole batch. Batch statistics (BatchNorm, :class:`gmp.MeanNorm`) are per
  device, as in PyTorch's BatchNorm without ``SyncBatchNorm``; ``sync_batch_norm=True``
  converts BatchNorm layers to ``SyncBatchNorm`` (MeanNorm keeps per-device means).
* ``DataLoader`` workers sized to the machine on CUDA (:func:`default_workers`).

Run one configuration from the command line, on one GPU or data-parallel::

    torchrun --nproc_per_node=8 -m gmp.classify chen_vgg --scale paper --variant GmP+MN --batch-size 1024

which trains exactly the run that the chapter's experiment module would start (same
config, seed and checkpoint path), so the chapter then finds it finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from gmp.progress import bar
from gmp.train import EarlyStopping, ReduceLROnPlateau, load_checkpoint

__all__ = ["fit_classifier", "ClassifierHistory", "GlobalBatchSampler", "default_workers",
           "checkpoint_dir", "init_distributed"]

CHECKPOINT_KEYS = ("identity", "model", "optimizer", "state", "history")
"""The entries of a :func:`fit_classifier` checkpoint."""


def default_workers(world_size: int = 1) -> int:
    """DataLoader workers per process: the CPU cores this process may use, shared between
    the processes of the machine, at most 8, leaving one core to the training process."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(0, min(8, cores // max(1, world_size) - 1))


def checkpoint_dir() -> Path:
    """``$GMP_CHECKPOINTS``, else ``~/.cache/gmp/checkpoints``."""
    return Path(os.environ.get("GMP_CHECKPOINTS", Path.home() / ".cache" / "gmp" / "checkpoints"))


def init_distributed(device: torch.device) -> tuple[int, int]:
    """``(rank, world_size)``; initialises the process group when started by ``torchrun``."""
    if not dist.is_available():
        return 0, 1
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class GlobalBatchSampler(torch.utils.data.Sampler):
    """This process's share of every global batch of an epoch.

    The epoch's order is a permutation drawn from ``seed + epoch`` (or ``0..n-1`` without
    ``shuffle``); it is cut into global batches of ``batch_size`` and process ``rank`` of
    ``world_size`` takes positions ``rank, rank + world_size, ...`` of each. A last global
    batch smaller than ``world_size`` is dropped (every process needs an example); with
    ``drop_last`` every incomplete one is. Call :meth:`set_epoch` before each epoch.
    """

    def __init__(self, n: int, batch_size: int, world_size: int = 1, rank: int = 0, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        if n < 1 or batch_size < 1:
            raise ValueError(f"need n >= 1 examples and batch_size >= 1, got n={n}, batch_size={batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in [0, world_size), got rank={rank}, world_size={world_size}")
        if batch_size < world_size:
            raise ValueError(f"the global batch ({batch_size}) must hold at least one example per process "
                             f"({world_size} processes)")
        self.n, self.batch_size, self.world_size, self.rank = n, batch_size, world_size, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of epoch ``epoch`` (drawn from ``seed + epoch``)."""
        self.epoch = int(epoch)

    def global_batches(self) -> list[torch.Tensor]:
        """The epoch's global batches (index tensors), before the split between processes."""
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.n)
        batches = list(order.split(self.batch_size))
        if batches and (len(batches[-1]) < self.world_size or self.drop_last and len(batches[-1]) < self.batch_size):
            batches.pop()
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches():
            yield batch[self.rank::self.world_size].tolist()

    def __len__(self) -> int:
        return len(self.global_batches())


@dataclasses.dataclass
class ClassifierHistory:
    """Per-epoch record of :func:`fit_classifier` (epochs from 0; accuracies in [0, 1]).

    ``best_epoch``/``best_value``: the epoch with the best early-stopping monitor (validation
    top-5 by default) and its value. A diverged run (non-finite training loss) has
    ``diverged`` True and ``diverged_epoch``; its lists end with that epoch (NaN values).
    """

    train_loss: list[float] = dataclasses.field(default_factory=list)
    train_top1: list[float] = dataclasses.field(default_factory=list)
    train_top5: list[float] = dataclasses.field(default_factory=list)
    val_loss: list[float] = dataclasses.field(default_factory=list)
    val_top1: list[float] = dataclasses.field(default_factory=list)
    val_top5: list[float] = dataclasses.field(default_factory=list)
    lr: list[float] = dataclasses.field(default_factory=list)
    epoch_time_s: list[float] = dataclasses.field(default_factory=list)
    best_epoch: int | None = None
    best_value: float | None = None
    stopped_early: bool = False
    finished: bool = False
    diverged: bool = False
    diverged_epoch: int | None = None
    steps: int = 0

    @property
    def epochs(self) -> int:
        return len(self.train_loss)

    def at_best(self, name: str) -> float | None:
        """``name`` (e.g. "val_top1") at ``best_epoch`` (the last epoch when there is none)."""
        values = getattr(self, name)
        if not values:
            return None
        value = values[self.best_epoch if self.best_epoch is not None else -1]
        return None if value is None or not math.isfinite(value) else float(value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite numbers become None)."""
        def clean(value):
            if isinstance(value, float):
                return value if math.isfinite(value) else None
            if isinstance(value, list):
                return [clean(v) for v in value]
            return value

        return {f.name: clean(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClassifierHistory:
        values = {k: ([math.nan if x is None else x for x in v] if isinstance(v, list) else v)
                  for k, v in data.items()}
        return cls(**values)


def _loader(dataset, sampler, workers: int, pin: bool):
    from gmp.data.imagenet import batch_collate

    collate = batch_collate if hasattr(dataset, "__getitems__") else None
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers, pin_memory=pin,
                                       collate_fn=collate, persistent_workers=False)


def _topk_correct(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k = min(5, logits.shape[1])
    top = logits.topk(k, dim=1).indices
    hits = top == target[:, None]
    return hits[:, 0].sum(), hits.any(dim=1).sum()


def _reduce(values: list[torch.Tensor | float], device: torch.device, distributed: bool) -> list[float]:
    tensor = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device) for v in values])
    if distributed:
        dist.all_reduce(tensor)
    return tensor.tolist()


def _atomic_save(state: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def fit_classifier(model: nn.Module, train, validation, *, epochs: int, batch_size: int, lr: float,
                   momentum: float = 0.9, seed: int = 0, eval_batch_size: int | None = None,
                   plateau: ReduceLROnPlateau | None = None, early_stopping: EarlyStopping | None = None,
                   device: torch.device | str = "cpu", amp: bool | None = None, channels_last: bool | None = None,
                   workers: int | None = None, checkpoint: str | Path | None = None,
                   fingerprint: Mapping[str, Any] | None = None, sync_batch_norm: bool = False,
                   progress: bool | None = None, description: str | None = None) -> ClassifierHistory:
    """Train ``model`` (in place) on ``train``, validating on ``validation`` after every epoch.

    Args:
        model: a classifier producing logits (N, classes).
        train, validation: map-style datasets of ``(image, label)``; datasets with
            ``__getitems__`` (:class:`gmp.data.imagenet.ImageArrays`) serve whole batches,
            and their ``set_epoch`` is called every epoch (seeded flips).
        epochs: the most epochs to run (500 in the paper).
        batch_size: the global batch size (all processes together).
        lr, momentum: SGD's learning rate and momentum (no weight decay, as in the paper).
        seed: seeds the batch order (``seed + epoch``).
        plateau, early_stopping: monitors "val_top5", "val_top1", "val_loss", "loss",
            "top1" or "top5" (the training quantities), with Keras' rules (accuracies need
            ``mode="max"``); default: lr x0.1 after 5 epochs without improvement of
            "val_top5", stop after 10 (Chen & Ge).
        device: where to train (under ``torchrun`` on CUDA: ``cuda:LOCAL_RANK``).
        amp, channels_last: bfloat16 autocast and channels-last memory layout; None means
            "on CUDA only".
        workers: DataLoader workers per process (None: :func:`default_workers` on CUDA, none
            on the CPU).
        checkpoint: a file to write after every epoch and to resume from.
        fingerprint: JSON values identifying the run; a checkpoint written with another
            fingerprint (or other ``epochs``/``batch_size``/``lr``/``momentum``/``seed``) is
            refused with ValueError instead of being resumed.

    Returns:
        The :class:`ClassifierHistory` (on every process).
    """
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not lr > 0 or not momentum >= 0:
        raise ValueError(f"need lr > 0 and momentum >= 0, got lr={lr!r}, momentum={momentum!r}")
    if plateau is None:
        plateau = ReduceLROnPlateau(monitor="val_top5", mode="max", patience=5, factor=0.1)
    if early_stopping is None:
        early_stopping = EarlyStopping(monitor="val_top5", mode="max", patience=10)
    known = ("loss", "top1", "top5", "val_loss", "val_top1", "val_top5")
    for schedule in (plateau, early_stopping):
        if schedule.monitor not in known:
            raise ValueError(f"cannot monitor {schedule.monitor!r}: expected one of {', '.join(known)}")
        if "top" in schedule.monitor and schedule.mode != "max":
            raise ValueError(f"{schedule.monitor!r} is an accuracy: give {type(schedule).__name__} mode='max' "
                             f"(Keras' 'auto' would minimise a name without 'acc')")
    device = torch.device(device)
    amp = device.type == "cuda" if amp is None else amp
    channels_last = device.type == "cuda" if channels_last is None else channels_last
    rank, world = init_distributed(device)
    distributed = world > 1
    if distributed and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if workers is None:  # in-memory arrays on the CPU: loading in this process is fastest
        workers = default_workers(world) if device.type == "cuda" else 0

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick its fastest kernels
    identity = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "momentum": momentum, "seed": seed,
                **dict(fingerprint or {})}
    model.to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    history = ClassifierHistory()
    state = {"plateau_best": plateau.initial_best(), "plateau_wait": 0, "plateau_cooldown": 0,
             "stop_best": early_stopping.initial_best(), "stop_wait": 0, "lr": float(lr)}
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.is_file():
        saved = load_checkpoint(path, map_location=device, keys=CHECKPOINT_KEYS)
        if saved["identity"] != identity:
            raise ValueError(f"checkpoint {path} belongs to another run: {saved['identity']} != {identity}; "
                             f"delete it or choose another path")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        history = ClassifierHistory.from_dict(saved["history"])
    if history.finished:
        return history

    net = model
    if distributed:
        if sync_batch_norm:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        net = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_sampler = GlobalBatchSampler(len(train), batch_size, world, rank, shuffle=True, seed=seed)
    val_sampler = GlobalBatchSampler(len(validation), eval_batch_size or batch_size, world, rank, shuffle=False)
    pin = device.type == "cuda"
    memory = torch.channels_last if channels_last else torch.contiguous_format

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp)

    epochs_bar = bar(range(history.epochs, epochs), desc=description, leave=False,
                     disable=(None if progress is None else not progress) if rank == 0 else True)
    for epoch in epochs_bar:
        started = time.perf_counter()
        train_sampler.set_epoch(epoch)
        if hasattr(train, "set_epoch"):
            train.set_epoch(epoch)
        net.train()
        sums = [torch.zeros((), dtype=torch.float64, device=device) for _ in range(4)]  # loss, top1, top5, n
        global_sizes = [len(batch) for batch in train_sampler.global_batches()]
        steps = 0
        for x, y in _loader(train, train_sampler, workers, pin):
            x = x.to(device, non_blocking=True, memory_format=memory)
            y = y.to(device, non_blocking=True)
            with autocast():
                logits = net(x)
                summed = F.cross_entropy(logits.float(), y, reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            (summed * world / global_sizes[steps]).backward()
            optimizer.step()
            top1, top5 = _topk_correct(logits.detach(), y)
            for total, value in zip(sums, (summed.detach(), top1, top5, y.shape[0])):
                total += value
            steps += 1
        loss_sum, top1_sum, top5_sum, count = _reduce(sums, device, distributed)
        logs = {"loss": loss_sum / count, "top1": top1_sum / count, "top5": top5_sum / count}
        history.steps += steps
        history.lr.append(state["lr"])
        if not math.isfinite(logs["loss"]):
            history.diverged, history.diverged_epoch = True, epoch
            for name in ("train_loss", "train_top1", "train_top5", "val_loss", "val_top1", "val_top5"):
                getattr(history, name).append(math.nan)
            history.epoch_time_s.append(time.perf_counter() - started)
            history.finished = True
            _save(path, rank, model, optimizer, state, history, identity)
            break
        logs.update(_evaluate(net, validation, val_sampler, device, memory, autocast, workers, pin, distributed))
        for key, name in (("loss", "train_loss"), ("top1", "train_top1"), ("top5", "train_top5"),
                          ("val_loss", "val_loss"), ("val_top1", "val_top1"), ("val_top5", "val_top5")):
            getattr(history, name).append(logs[key])

        current = logs[plateau.monitor]
        if state["plateau_cooldown"] > 0:
            state["plateau_cooldown"] -= 1
            state["plateau_wait"] = 0
        if plateau.improved(current, state["plateau_best"]):
            state["plateau_best"], state["plateau_wait"] = current, 0
        elif state["plateau_cooldown"] == 0:
            state["plateau_wait"] += 1
            if state["plateau_wait"] >= plateau.patience and state["lr"] > plateau.min_lr:
                state["lr"] = max(state["lr"] * plateau.factor, plateau.min_lr)
                for group in optimizer.param_groups:
                    group["lr"] = state["lr"]
                state["plateau_cooldown"], state["plateau_wait"] = plateau.cooldown, 0
        current = logs[early_stopping.monitor]
        state["stop_wait"] += 1
        if early_stopping.improved(current, state["stop_best"]):
            state["stop_best"], state["stop_wait"] = current, 0
            history.best_epoch, history.best_value = epoch, float(current)
        elif state["stop_wait"] >= early_stopping.patience and epoch > 0:
            history.stopped_early = True
        history.epoch_time_s.append(time.perf_counter() - started)
        history.finished = history.stopped_early or epoch + 1 == epochs
        _save(path, rank, model, optimizer, state, history, identity)
        epochs_bar.set_postfix(loss=f"{logs['loss']:.4g}", val_top5=f"{logs['val_top5']:.3f}", refresh=False)
        if history.stopped_early:
            break
    epochs_bar.close()
    if distributed:
        dist.barrier()
    return history


def _save(path: Path | None, rank: int, model: nn.Module, optimizer, state, history, identity) -> None:
    if path is None or rank != 0:
        return
    _atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": dict(state),
                  "history": history.to_dict(), "identity": identity}, path)


@torch.no_grad()
def _evaluate(net: nn.Module, dataset, sampler, device, memory, autocast, workers, pin, distributed) -> dict[str, float]:
    net.eval()
    sums = [torch.zeros((), dtype=torch.float64, device=device) for _ in range(4)]
    for x, y in _loader(dataset, sampler, workers, pin):
        x = x.to(device, non_blocking=True, memory_format=memory)
        y = y.to(device, non_blocking=True)
        with autocast():
            logits = net.module(x) if distributed else net(x)
        top1, top5 = _topk_correct(logits, y)
        for total, value in zip(sums, (F.cross_entropy(logits.float(), y, reduction="sum"), top1, top5, y.shape[0])):
            total += value
    net.train()
    loss_sum, top1_sum, top5_sum, count = _reduce(sums, device, distributed)
    return {"val_loss": loss_sum / count, "val_top1": top1_sum / count, "val_top5": top5_sum / count}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gmp.classify CHAPTER --scale S --variant V --batch-size B [--seed K]`` (also under torchrun)."""
    from gmp.config import experiment, load

    parser = argparse.ArgumentParser(prog="python -m gmp.classify", description=main.__doc__)
    parser.add_argument("chapter", help="chen_vgg or chen_resnet")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--variant", required=True, help="a method name of the chapter's table, e.g. GmP+MN")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    cfg = load(args.chapter, args.scale)
    module = experiment(args.chapter)
    result = module.run_one(cfg, args.variant, args.batch_size or cfg.batch_sizes[0], args.seed, device=args.device)
    if int(os.environ.get("RANK", "0")) == 0:
        print({k: v for k, v in result.items() if k != "history"})
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
