"""The training loop shared by every chapter, with Keras-compatible schedules.

The official code of Chen & Ge is TensorFlow 2 / Keras: ``model.fit`` with
``ReduceLROnPlateau`` and ``EarlyStopping(restore_best_weights=True)``. :func:`fit`
reproduces those semantics in PyTorch so that "lr x0.1 after 500 epochs without
improvement" or "stop after 100 epochs, restoring the best weights" mean what they meant
there:

* the epoch's training loss is the batch-size weighted mean of the losses of its
  mini-batches, each computed before that batch's update (as Keras logs ``loss``);
* validation loss and metrics are computed on the whole validation data at the end of
  the epoch, in evaluation mode (``val_loss``, ``val_<metric>``);
* :class:`ReduceLROnPlateau` and :class:`EarlyStopping` compare the monitored value with
  the best so far exactly as ``keras.callbacks`` does (``min_delta``, ``patience``,
  ``cooldown``, ``min_lr``, and ``restore_best_weights`` acting when the run is stopped).

A run whose training loss becomes NaN or infinite stops at once, never raises, and is
recorded in :class:`History` as diverged at that epoch and step.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import torch
from torch import Tensor, nn

from gmp.progress import bar

Batches = Iterable[tuple[Tensor, Tensor]]
Data = Union[tuple[Tensor, Tensor], Batches]
LossFn = Callable[[Tensor, Tensor], Tensor]
Metric = Callable[[Tensor, Tensor], Union[float, Tensor]]
EpochCallback = Callable[[int, nn.Module], None]
StepCallback = Callable[[int, nn.Module], None]

OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")
MODES: tuple[str, ...] = ("auto", "min", "max")


def _bce_logits(pred: Tensor, target: Tensor) -> Tensor:
    return nn.functional.binary_cross_entropy_with_logits(pred, target.reshape(pred.shape).to(pred.dtype))


def _cross_entropy(pred: Tensor, target: Tensor) -> Tensor:
    return nn.functional.cross_entropy(pred, target.long())


def _mse(pred: Tensor, target: Tensor) -> Tensor:
    return nn.functional.mse_loss(pred, target.reshape(pred.shape).to(pred.dtype))


def _mae(pred: Tensor, target: Tensor) -> Tensor:
    return nn.functional.l1_loss(pred, target.reshape(pred.shape).to(pred.dtype))


LOSSES: dict[str, LossFn] = {"mse": _mse, "mae": _mae, "bce_logits": _bce_logits,
                             "cross_entropy": _cross_entropy}
"""Losses by name. ``bce_logits`` is a sigmoid output with binary cross-entropy, computed
from the logit; ``cross_entropy`` is a softmax output with categorical cross-entropy."""


def accuracy(logits: Tensor, target: Tensor) -> float:
    """Classification accuracy from logits.

    One output column (or a 1-D output): binary, the predicted class is ``logit > 0``
    (probability above 1/2). Several columns: the predicted class is the arg-max.
    """
    if logits.ndim == 1 or logits.shape[-1] == 1:
        predicted = (logits.reshape(-1) > 0).long()
    else:
        predicted = logits.argmax(dim=-1)
    return (predicted == target.reshape(-1).long()).double().mean().item()


def top_k_accuracy(k: int) -> Metric:
    """The metric "the target is among the ``k`` largest logits" (top-5 accuracy for k=5)."""
    if k < 1:
        raise ValueError(f"top_k_accuracy needs k >= 1, got {k}")

    def metric(logits: Tensor, target: Tensor) -> float:
        top = logits.topk(k, dim=-1).indices
        return (top == target.reshape(-1, 1).long()).any(dim=-1).double().mean().item()

    metric.__name__ = f"top{k}_accuracy"
    return metric


def rmse(pred: Tensor, target: Tensor) -> float:
    """Root mean squared error."""
    return (pred.reshape(-1) - target.reshape(-1).to(pred.dtype)).pow(2).mean().sqrt().item()


def _resolve_mode(mode: str, monitor: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "auto":  # Keras: quantities named like accuracies are maximised
        return "max" if "acc" in monitor or monitor.endswith("auc") else "min"
    return mode


@dataclasses.dataclass
class _Monitored:
    monitor: str
    mode: str
    min_delta: float
    patience: int

    def __post_init__(self) -> None:
        if not isinstance(self.monitor, str) or not self.monitor:
            raise ValueError(f"monitor must be a quantity name such as 'loss', 'val_loss' or "
                             f"'val_accuracy', got {self.monitor!r}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 0:
            raise ValueError(f"patience must be an integer >= 0, got {self.patience!r}")
        if not self.min_delta >= 0:
            raise ValueError(f"min_delta must be >= 0, got {self.min_delta!r}")
        self.mode = _resolve_mode(self.mode, self.monitor)

    def improved(self, current: float, best: float) -> bool:
        """Keras' test: ``current < best - min_delta`` (min) or ``current > best + min_delta`` (max)."""
        if self.mode == "min":
            return current < best - self.min_delta
        return current > best + self.min_delta

    def initial_best(self) -> float:
        return math.inf if self.mode == "min" else -math.inf


@dataclasses.dataclass
class ReduceLROnPlateau(_Monitored):
    """Multiply the learning rate by ``factor`` when ``monitor`` stops improving.

    Same rule and defaults as ``keras.callbacks.ReduceLROnPlateau``: after each epoch,
    an improvement is ``current < best - min_delta`` (mode "min"; ``>`` ``best + min_delta``
    in mode "max"); ``patience`` epochs in a row without one reduce the rate to
    ``max(lr * factor, min_lr)`` and start a ``cooldown`` during which epochs are not counted.
    """

    monitor: str = "val_loss"
    factor: float = 0.1
    patience: int = 10
    mode: str = "auto"
    min_delta: float = 1e-4
    cooldown: int = 0
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.factor < 1:
            raise ValueError(f"ReduceLROnPlateau factor must be in (0, 1), got {self.factor!r}")
        if isinstance(self.cooldown, bool) or not isinstance(self.cooldown, int) or self.cooldown < 0:
            raise ValueError(f"cooldown must be an integer >= 0, got {self.cooldown!r}")
        if not self.min_lr >= 0:
            raise ValueError(f"min_lr must be >= 0, got {self.min_lr!r}")


@dataclasses.dataclass
class EarlyStopping(_Monitored):
    """Stop when ``monitor`` has not improved for ``patience`` epochs.

    Same rule and defaults as ``keras.callbacks.EarlyStopping``: each epoch increments a
    wait counter, an improvement (``current < best - min_delta`` in mode "min") resets it
    and, with ``restore_best_weights``, snapshots the weights; the run stops when the
    counter reaches ``patience`` (never after the first epoch), and the best weights are
    then restored. As in Keras, a run that reaches its last epoch without being stopped
    keeps its final weights.
    """

    monitor: str = "val_loss"
    patience: int = 0
    mode: str = "auto"
    min_delta: float = 0.0
    restore_best_weights: bool = False


@dataclasses.dataclass
class History:
    """What happened during :func:`fit`, epoch by epoch (epochs are counted from 0).

    ``train_loss[e]``, ``val_loss[e]``, ``metrics[name][e]`` and ``lr[e]`` belong to epoch
    ``e``; ``lr[e]`` is the rate used during that epoch. ``val_loss`` and ``metrics`` are
    empty without validation data. ``best_epoch`` and ``best_value`` are those of the early
    stopping monitor (None without early stopping). A diverged run (non-finite training
    loss) has ``diverged`` True, ``diverged_epoch`` and ``diverged_step`` (the global step,
    from 0) where it happened; its lists end with that epoch, whose values are NaN.
    """

    train_loss: list[float] = dataclasses.field(default_factory=list)
    val_loss: list[float] = dataclasses.field(default_factory=list)
    metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    lr: list[float] = dataclasses.field(default_factory=list)
    steps: int = 0
    best_epoch: int | None = None
    best_value: float | None = None
    stopped_early: bool = False
    stopped_epoch: int | None = None
    restored_best: bool = False
    diverged: bool = False
    diverged_epoch: int | None = None
    diverged_step: int | None = None
    wall_time_s: float = 0.0

    @property
    def epochs(self) -> int:
        """Number of epochs run (the diverged one included)."""
        return len(self.train_loss)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite numbers become None)."""
        def clean(value: Any) -> Any:
            if isinstance(value, float):
                return value if math.isfinite(value) else None
            if isinstance(value, list):
                return [clean(v) for v in value]
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            return value

        return {f.name: clean(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> History:
        """Inverse of :meth:`to_dict` (None in the per-epoch lists comes back as NaN)."""
        def nan(values: Sequence[Any]) -> list[float]:
            return [math.nan if v is None else float(v) for v in values]

        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"History.from_dict got unknown fields {sorted(unknown)}")
        values = dict(data)
        for key in ("train_loss", "val_loss", "lr"):
            if key in values:
                values[key] = nan(values[key])
        if "metrics" in values:
            values["metrics"] = {k: nan(v) for k, v in values["metrics"].items()}
        return cls(**values)


def _as_tensor_pair(data: Any, what: str) -> tuple[Tensor, Tensor] | None:
    """``(x, y)`` when ``data`` is a pair of tensors (checked), None for an iterable of batches."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, Tensor) for t in data):
        x, y = data
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{what}: inputs have {x.shape[0]} rows but targets have {y.shape[0]}")
        if x.shape[0] == 0:
            raise ValueError(f"{what}: no examples")
        _refuse_non_finite(x, y, what)
        return x, y
    if isinstance(data, Tensor) or not isinstance(data, Iterable):
        raise ValueError(f"{what} must be a pair (inputs, targets) of tensors or an iterable of "
                         f"(inputs, targets) batches such as a DataLoader, got {type(data).__name__}")
    return None


def _refuse_non_finite(x: Tensor, y: Tensor, what: str) -> None:
    """Raise where the floating-point inputs ``x`` or targets ``y`` of ``what`` hold NaN or an infinity: a fit
    on them only yields NaN losses, which would read as a diverged run rather than as bad data."""
    for name, t in (("inputs", x), ("targets", y)):
        if t.is_floating_point() or t.is_complex():
            bad = int((~torch.isfinite(t)).sum().item())
            if bad:
                raise ValueError(f"{what}: its {name} hold {bad} NaN or infinite values; a fit on them would only "
                                 f"produce NaN, read as divergence. Clean or drop those rows first")


def _cast(t: Tensor, device: torch.device | None, dtype: torch.dtype | None) -> Tensor:
    if t.is_floating_point() and dtype is not None:
        return t.to(device=device, dtype=dtype)
    return t.to(device=device)


def load_checkpoint(path: Path, map_location: torch.device | str = "cpu",
                    keys: Iterable[str] = ()) -> dict[str, Any]:
    """Load a training checkpoint with ``torch.load(weights_only=True)``: tensors and plain values only.

    Raises ValueError, saying to delete the file to start afresh, when the file

    * is damaged or not a checkpoint: not a zip archive as ``torch.save`` writes (a truncated
      or junk file), a zip without a pickle, a record whose CRC-32 fails (a flipped byte in a
      tensor would otherwise load as a wrong weight), or a pickle that cannot be read;
    * holds objects other than tensors and plain values (an old format with NumPy arrays, or a
      crafted file): unpickling them could run code from the file, so it is not loaded;
    * holds another structure than a dict with every one of ``keys`` (:func:`checkpoint_state`).

    A missing or unreadable file (``FileNotFoundError``, ``PermissionError``) raises as such.
    """
    path = Path(path)

    def damaged(why: str) -> ValueError:
        return ValueError(f"checkpoint {path} is damaged or not a checkpoint ({why}); delete it to start afresh")

    try:
        with zipfile.ZipFile(path) as archive:
            names, bad = archive.namelist(), archive.testzip()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as err:  # BadZipFile, OSError (EINVAL), EOFError, zlib.error: truncated, junk or damaged
        raise damaged(f"not a readable zip archive as torch.save writes: {type(err).__name__}: {err}") from None
    if bad is not None:
        raise damaged(f"its record {bad} fails its CRC-32 check")
    if not any(name.endswith("/data.pkl") or name == "data.pkl" for name in names):
        raise damaged("a zip archive without the data.pkl of torch.save")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        text = str(err)
        if "GLOBAL" in text or "allowlist" in text:  # torch's weights-only unpickler refused an object
            what = text.rpartition("WeightsUnpickler error:")[2].strip().split(". ")[0].split("\n")[0].rstrip(".")
            raise ValueError(f"checkpoint {path} holds objects other than tensors and plain values, so it is not "
                             f"loaded, since unpickling them could run code from the file; delete it to start "
                             f"afresh (torch: {what})") from None
        raise damaged(f"its pickle cannot be read: {' '.join(text.split())[-200:]}") from None
    except (EOFError, KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
        raise damaged(f"its pickle cannot be read: {type(err).__name__}: {err}") from None
    return checkpoint_state(state, path, keys)


def checkpoint_state(state: Any, path: Path, keys: Iterable[str]) -> dict[str, Any]:
    """``state`` (loaded from checkpoint ``path``) if it is a dict with every one of ``keys``, else ValueError.

    The fits that checkpoint (``gmp.implicit.fit_image``, ``gmp.classify.fit_classifier``,
    ``gmp.minibatch.fit_stack``) read their state through it, so a file of another structure
    (another program's checkpoint, a list) is refused by name rather than failing on an index.
    """
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {path} holds a {type(state).__name__}, not a dict of a training state; "
                         f"delete it to start afresh")
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(f"checkpoint {path} lacks the entries {', '.join(map(repr, missing))}, so it was not "
                         f"written by this fit; delete it to start afresh")
    return state


def restore_state(path: Path, what: str, load: Callable[[], Any]) -> None:
    """Run ``load()`` (e.g. ``model.load_state_dict(state["model"])``) on ``what`` read from checkpoint
    ``path``; a state that does not fit (wrong keys, shapes or types) is refused as damage, with the
    file named and "delete it to start afresh", rather than as torch's own error."""
    try:
        load()
    except (RuntimeError, KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        text = " ".join(str(err).split())
        raise ValueError(f"checkpoint {path}: its {what} does not fit this fit ({type(err).__name__}: "
                         f"{text[:300]}); delete it to start afresh") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_fit_arguments(inputs: Tensor, targets: Tensor, *, lr: Any, names: tuple[str, str] = ("inputs", "targets"),
                        counts: Mapping[str, Any] | None = None, at_least_zero: Mapping[str, Any] | None = None,
                        networks: int | None = None, stop_below: Any = None, heldout: Any = None,
                        in_features: int | None = None) -> list[float]:
    """Check the arguments of a fit before any training; return its learning rates as floats.

    The one validation of :func:`gmp.implicit.fit_image` and :func:`gmp.minibatch.fit_stack`, so
    that bad input raises a ``TypeError`` or ``ValueError`` naming the argument instead of training
    into NaN curves that read as "diverged at epoch 1":

    * ``inputs`` (``names[0]``): a floating-point tensor ``(pixels, features)``, or
      ``(networks, pixels, features)``, with at least one pixel, all finite, and ``in_features``
      features when given; ``targets`` (``names[1]``): floating point ``(pixels, 1)``, all finite;
    * ``lr``: a finite number > 0, or (with ``networks``) one such number per network;
    * ``counts``: integers >= 1 by name (``epochs``, ``batch_size``, ...); ``at_least_zero``:
      integers >= 0; ``bool`` is not an integer here;
    * ``stop_below``: None or a finite number >= 0 (NaN would never stop a fit and could not
      match its own checkpoint's settings);
    * ``heldout``: None or distinct integer indices of pixels, leaving at least one to train on.
    """
    for least, named in ((1, counts or {}), (0, at_least_zero or {})):
        for name, value in named.items():
            if not _is_int(value):
                raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
            if value < least:
                raise ValueError(f"{name} must be at least {least}, got {value!r}")
    if networks is not None and (not _is_int(networks) or networks < 1):
        raise ValueError(f"need at least one seed (one network per seed), got {networks!r} networks")
    if networks is not None and not _is_number(lr):
        if not isinstance(lr, Sequence) or isinstance(lr, str):
            raise TypeError(f"lr must be a number or one number per seed, got {lr!r}")
        if len(lr) != networks:
            raise ValueError(f"lr gives {len(lr)} rates for {networks} seeds; give one per seed or a single number")
    rates = [lr] if _is_number(lr) or networks is None else list(lr)
    for rate in rates:
        if not _is_number(rate):
            raise TypeError(f"lr must be a number (one per seed), got {rate!r}")
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"lr must be a finite number > 0, got {rate!r}" + (f" (in lr={lr!r})" if lr is not rate else ""))
    if stop_below is not None and not (_is_number(stop_below) and math.isfinite(stop_below) and stop_below >= 0):
        raise ValueError(f"stop_below must be None or a finite number >= 0, got {stop_below!r}")
    x_name, y_name = names
    for name, tensor in ((x_name, inputs), (y_name, targets)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {tensor.dtype}; convert it, e.g. {name}.float()")
    allowed = (2, 3) if networks is not None else (2,)
    if inputs.dim() not in allowed or (inputs.dim() == 3 and inputs.shape[0] != networks):
        shapes = "(pixels, features)" + (f" or ({networks}, pixels, features)" if networks is not None else "")
        raise ValueError(f"{x_name} must be {shapes}, got shape {tuple(inputs.shape)}")
    pixels = inputs.shape[-2]
    if targets.shape != (pixels, 1):
        raise ValueError(f"{y_name} must be (pixels, 1) = ({pixels}, 1) to match {x_name} of shape "
                         f"{tuple(inputs.shape)}, got shape {tuple(targets.shape)}")
    if pixels == 0:
        raise ValueError(f"{x_name} and {y_name} hold no pixels (an empty image)")
    if in_features is not None and inputs.shape[-1] != in_features:
        raise ValueError(f"{x_name} has {inputs.shape[-1]} features but the first layer takes {in_features}")
    for name, tensor in ((x_name, inputs), (y_name, targets)):
        bad = (~torch.isfinite(tensor)).sum().item()
        if bad:
            raise ValueError(f"{name} holds {bad} NaN or infinite values; a fit on them would only produce NaN")
    if heldout is not None:
        if not isinstance(heldout, Tensor) or heldout.is_floating_point() or heldout.dim() != 1:
            raise TypeError(f"heldout must be a 1-D tensor of integer pixel indices (see heldout_pixels), got {heldout!r}")
        if heldout.numel() and not (0 <= heldout.min().item() and heldout.max().item() < pixels):
            raise ValueError(f"heldout indices must lie in [0, {pixels}), got {heldout.min().item()} to "
                             f"{heldout.max().item()}")
        if heldout.unique().numel() != heldout.numel():
            raise ValueError("heldout lists a pixel twice")
        if heldout.numel() >= pixels:
            raise ValueError(f"heldout covers all {pixels} pixels, so none is left to train on")
    return [float(rate) for rate in rates]


def predict(model: nn.Module, x: Tensor, *, batch_size: int | None = None) -> Tensor:
    """The model's outputs on ``x`` in evaluation mode without gradients, in batches.

    The model's training/evaluation mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if batch_size is None:
                return model(x)
            return torch.cat([model(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])
    finally:
        model.train(was_training)


def evaluate(model: nn.Module, data: Data, *, loss: str | LossFn = "mse",
             metrics: Mapping[str, Metric] | None = None, batch_size: int | None = None,
             device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> dict[str, float]:
    """Loss and metrics of ``model`` on ``data`` in evaluation mode: ``{"loss": ..., name: ...}``.

    All predictions are gathered first, so every metric (also non-decomposable ones such as
    RMSE) is computed on the whole data.
    """
    loss_fn = _loss(loss)
    device = torch.device(device) if device is not None else None
    pair = _as_tensor_pair(data, "evaluation data")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if pair is not None:
                x, y = (_cast(t, device, dtype) for t in pair)
                pred = predict(model, x, batch_size=batch_size)
            else:
                preds, targets = [], []
                for xb, yb in data:
                    preds.append(model(_cast(xb, device, dtype)))
                    targets.append(_cast(yb, device, dtype))
                pred, y = torch.cat(preds), torch.cat(targets)
            out = {"loss": float(loss_fn(pred, y).item())}
            for name, fn in (metrics or {}).items():
                value = fn(pred, y)
                out[name] = float(value.item() if isinstance(value, Tensor) else value)
    finally:
        model.train(was_training)
    return out


def _loss(loss: str | LossFn) -> LossFn:
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}: expected one of {', '.join(LOSSES)} or a callable")
        return LOSSES[loss]
    if not callable(loss):
        raise ValueError(f"loss must be a name ({', '.join(LOSSES)}) or a callable, got {loss!r}")
    return loss


def _optimizer(name: str, params: Iterable[Tensor], lr: float, momentum: float,
               options: Mapping[str, Any] | None) -> torch.optim.Optimizer:
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"learning rate must be > 0, got {lr!r}")
    if not momentum >= 0:
        raise ValueError(f"momentum must be >= 0, got {momentum!r}")
    if name == "adam":
        if momentum:
            raise ValueError("momentum applies to optimizer='sgd'; Adam's are betas in optimizer_options")
        return torch.optim.Adam(params, lr=lr, **dict(options or {}))
    return torch.optim.SGD(params, lr=lr, momentum=momentum, **dict(options or {}))


def _batches(x: Tensor, y: Tensor, batch_size: int | None, generator: torch.Generator | None):
    n = x.shape[0]
    if batch_size is None or batch_size >= n:
        yield x, y
        return
    order = torch.randperm(n, generator=generator).to(x.device) if generator is not None else torch.arange(n, device=x.device)
    for start in range(0, n, batch_size):
        index = order[start:start + batch_size]
        yield x[index], y[index]


def _snapshot(model: nn.Module) -> dict[str, Tensor]:
    """A copy of the model's parameters and buffers (what Keras' ``get_weights`` returns)."""
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class _PlateauState:
    """A :class:`ReduceLROnPlateau` during one fit: Keras' ``on_epoch_end``.

    While a cooldown runs, epochs count down and the wait stays 0. An epoch whose monitored value
    improves on the best (:meth:`_Monitored.improved`) becomes the best and resets the wait;
    otherwise, out of cooldown, the wait grows, and at ``patience`` the rate becomes
    ``max(lr * factor, min_lr)`` (if above ``min_lr``) and a cooldown starts.
    """

    def __init__(self, schedule: ReduceLROnPlateau, lr: float):
        self.schedule, self.lr = schedule, lr
        self.best, self.wait, self.cooldown = schedule.initial_best(), 0, 0

    def update(self, logs: Mapping[str, float]) -> bool:
        """Take the epoch's ``logs``; whether the learning rate :attr:`lr` was reduced."""
        schedule, current = self.schedule, logs[self.schedule.monitor]
        if self.cooldown > 0:
            self.cooldown -= 1
            self.wait = 0
        if schedule.improved(current, self.best):
            self.best, self.wait = current, 0
        elif self.cooldown == 0:
            self.wait += 1
            if self.wait >= schedule.patience and self.lr > schedule.min_lr:
                self.lr = max(self.lr * schedule.factor, schedule.min_lr)
                self.cooldown, self.wait = schedule.cooldown, 0
                return True
        return False


class _StoppingState:
    """An :class:`EarlyStopping` during one fit: Keras' ``on_epoch_end`` and ``on_train_end``.

    Every epoch adds one to the wait; an epoch whose monitored value improves on the best resets
    it, is recorded in the history as the best and (with ``restore_best_weights``) snapshots the
    weights, which are also snapshotted at the first epoch. A wait of ``patience`` stops the run,
    never after the first epoch.
    """

    def __init__(self, schedule: EarlyStopping):
        self.schedule, self.best, self.wait = schedule, schedule.initial_best(), 0
        self.best_state: dict[str, Tensor] | None = None

    def update(self, epoch: int, logs: Mapping[str, float], model: nn.Module, history: History) -> bool:
        """Take the ``logs`` of ``epoch``; whether the run stops here."""
        schedule, current = self.schedule, logs[self.schedule.monitor]
        if schedule.restore_best_weights and self.best_state is None:
            self.best_state = _snapshot(model)
        self.wait += 1
        if schedule.improved(current, self.best):
            self.best, self.wait = current, 0
            history.best_epoch, history.best_value = epoch, float(current)
            if schedule.restore_best_weights:
                self.best_state = _snapshot(model)
            return False
        return self.wait >= schedule.patience and epoch > 0

    def restore(self, model: nn.Module, history: History) -> None:
        """Put back the best weights, where they are kept (``restore_best_weights``) and one epoch has been seen."""
        if self.schedule.restore_best_weights and self.best_state is not None:
            model.load_state_dict(self.best_state)
            history.restored_best = True


def _check_fit(epochs: Any, batch_size: Any, loss: str | LossFn, metrics: Mapping[str, Metric] | None, train: Data,
               validation: Data | None, schedules: Iterable[_Monitored | None]
               ) -> tuple[LossFn, dict[str, Metric], tuple[Tensor, Tensor] | None]:
    """The checks of :func:`fit`'s arguments before anything runs; its loss function, its metrics and the
    training pair ``(x, y)`` (None for an iterable of batches)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None (full batch) or an integer >= 1, got {batch_size!r}")
    loss_fn = _loss(loss)
    metrics = dict(metrics or {})
    for name, fn in metrics.items():
        if not callable(fn):
            raise ValueError(f"metric {name!r} must be a callable fn(pred, target), got {fn!r}")
    pair = _as_tensor_pair(train, "training data")
    if pair is None and batch_size is not None:
        raise ValueError("batch_size applies to tensor data; an iterable of batches is used as it is")
    if validation is not None:
        _as_tensor_pair(validation, "validation data")
    known = ["loss"] + (["val_loss"] + [f"val_{name}" for name in metrics] if validation is not None else [])
    for schedule in schedules:
        if schedule is not None and schedule.monitor not in known:
            raise ValueError(f"cannot monitor {schedule.monitor!r}: the quantities logged in this run are "
                             f"{', '.join(known)} (val_* need validation data, val_<name> a metric <name>)")
    return loss_fn, metrics, pair


def _train_epoch(model: nn.Module, batches: Batches, loss_fn: LossFn, opt: torch.optim.Optimizer,
                 augment: Callable[[Tensor], Tensor] | None, step_callbacks: Sequence[StepCallback],
                 step: int) -> tuple[float | None, int]:
    """One epoch of updates from global step ``step``: ``(loss, step)`` after it, where ``loss`` is the
    batch-size weighted mean of the batches' losses, each computed before its update (Keras' ``loss``), or
    None where a loss was not finite (the epoch stops there, before that batch's update).

    Per batch: ``augment`` the inputs, zero the gradients, compute the loss, backpropagate, call each
    ``step_callback(step, model)`` with the gradients in place, update.
    """
    total, count = 0.0, 0
    for xb, yb in batches:
        if augment is not None:
            xb = augment(xb)
        opt.zero_grad(set_to_none=True)
        value = loss_fn(model(xb), yb)
        if not torch.isfinite(value).item():
            _refuse_non_finite(xb, yb, f"the training batch of step {step}")
            return None, step
        value.backward()
        for hook in step_callbacks:
            hook(step, model)
        opt.step()
        total += value.item() * xb.shape[0]
        count += xb.shape[0]
        step += 1
    if count == 0:
        raise ValueError("the training data yielded no batch in an epoch")
    return total / count, step


def _diverged(history: History, epoch: int, step: int, validated: bool) -> None:
    """Record in ``history`` that the training loss of ``epoch`` was not finite at global ``step``: NaN in
    every per-epoch list of that epoch (the validation's too where the fit is ``validated``)."""
    history.train_loss.append(math.nan)
    if validated:
        history.val_loss.append(math.nan)
        for values in history.metrics.values():
            values.append(math.nan)
    history.diverged, history.diverged_epoch, history.diverged_step = True, epoch, step


def _validate(model: nn.Module, validation: Data, loss_fn: LossFn, metrics: Mapping[str, Metric],
              batch_size: int | None, device: torch.device | None, dtype: torch.dtype | None,
              history: History) -> dict[str, float]:
    """The loss and ``metrics`` of ``model`` on the whole ``validation`` data at the end of an epoch, in evaluation
    mode (:func:`evaluate`), appended to ``history`` and returned as Keras logs them: ``val_loss``,
    ``val_<metric>``."""
    val = evaluate(model, validation, loss=loss_fn, metrics=metrics, batch_size=batch_size, device=device,
                   dtype=dtype)
    history.val_loss.append(val["loss"])
    for name in metrics:
        history.metrics[name].append(val[name])
    return {"val_loss": val["loss"], **{f"val_{name}": val[name] for name in metrics}}


def fit(model: nn.Module, train: Data, *, epochs: int, lr: float, loss: str | LossFn = "mse",
        optimizer: str = "adam", momentum: float = 0.0, optimizer_options: Mapping[str, Any] | None = None,
        batch_size: int | None = None, shuffle: bool = True, seed: int = 0,
        augment: Callable[[Tensor], Tensor] | None = None,
        validation: Data | None = None, metrics: Mapping[str, Metric] | None = None,
        eval_batch_size: int | None = None,
        plateau: ReduceLROnPlateau | None = None, early_stopping: EarlyStopping | None = None,
        callbacks: Sequence[EpochCallback] = (), step_callbacks: Sequence[StepCallback] = (),
        dtype: torch.dtype | None = None, device: torch.device | str | None = None,
        progress: bool | None = None, description: str | None = None) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Data. ``train`` is a pair ``(x, y)`` of tensors, cut into mini-batches of ``batch_size``
    rows (``None``: the full batch, one step per epoch), reshuffled every epoch by a
    generator seeded with ``seed`` when ``shuffle``; or any iterable of ``(x, y)`` batches
    (a ``DataLoader``), iterated once per epoch. ``augment`` maps each training input batch
    (e.g. random flips). ``validation`` has the same forms; its loss and ``metrics``
    (``name -> fn(pred, target)``, e.g. ``{"accuracy": gmp.train.accuracy}``) are logged
    as ``val_loss`` and ``val_<name>`` after every epoch.

    Optimisation. ``optimizer`` is "adam" or "sgd" (with ``momentum``); further keyword
    arguments of the torch optimiser go in ``optimizer_options`` (e.g. ``{"eps": 1e-7}``,
    Keras' Adam epsilon). ``loss`` is a name in :data:`LOSSES` or ``fn(pred, target)``.

    Schedules. ``plateau`` (:class:`ReduceLROnPlateau`) and ``early_stopping``
    (:class:`EarlyStopping`) monitor "loss" (the epoch's training loss), "val_loss" or
    "val_<metric>", with Keras' semantics (see the module docstring). The learning rate is
    reduced before the early-stopping check of the same epoch, as when Keras' callbacks
    are listed in that order.

    Hooks. After every epoch ``callback(epoch, model)`` is called for each of ``callbacks``
    (epochs from 0; the model is in training mode, after the epoch's last update).
    ``step_callback(step, model)`` is called for each of ``step_callbacks`` after every
    backward pass and before the optimiser's update, so gradients are visible
    (steps counted from 0 over the whole run).

    Precision and place. ``dtype`` (e.g. ``torch.float64``) converts the model and the
    floating-point data; ``device`` moves both; None leaves them as they are.

    ``progress``: None shows a bar only in a terminal (quiet in book builds), False never,
    True always.
    """
    loss_fn, metrics, pair = _check_fit(epochs, batch_size, loss, metrics, train, validation,
                                        (plateau, early_stopping))
    device = torch.device(device) if device is not None else None
    if dtype is not None or device is not None:
        model.to(device=device, dtype=dtype)
    if pair is not None:
        x, y = (_cast(t, device, dtype) for t in pair)
    opt = _optimizer(optimizer, model.parameters(), lr, momentum, optimizer_options)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    has_val = validation is not None
    history = History(metrics={name: [] for name in metrics} if has_val else {})
    reduce = _PlateauState(plateau, float(lr)) if plateau is not None else None
    stopping = _StoppingState(early_stopping) if early_stopping is not None else None
    current_lr, step, start = float(lr), 0, time.perf_counter()
    model.train()
    epochs_bar = bar(range(epochs), desc=description, leave=False, disable=None if progress is None else not progress)
    for epoch in epochs_bar:
        batches = _batches(x, y, batch_size, generator) if pair is not None else (
            (_cast(xb, device, dtype), _cast(yb, device, dtype)) for xb, yb in train)
        train_loss, step = _train_epoch(model, batches, loss_fn, opt, augment, step_callbacks, step)
        history.lr.append(current_lr)
        if train_loss is None:
            _diverged(history, epoch, step, has_val)
            if stopping is not None:
                stopping.restore(model, history)
            break
        logs = {"loss": train_loss}
        history.train_loss.append(train_loss)
        if has_val:
            logs |= _validate(model, validation, loss_fn, metrics, eval_batch_size, device, dtype, history)
        history.steps = step
        if reduce is not None and reduce.update(logs):
            current_lr = reduce.lr
            _set_lr(opt, current_lr)
        stop = stopping is not None and stopping.update(epoch, logs, model, history)
        for callback in callbacks:
            callback(epoch, model)
        epochs_bar.set_postfix(loss=f"{logs['loss']:.4g}", lr=f"{current_lr:.2g}", refresh=False)
        if stop:
            history.stopped_early, history.stopped_epoch = True, epoch
            stopping.restore(model, history)
            break
    epochs_bar.close()
    history.steps = step
    history.wall_time_s = time.perf_counter() - start
    return history
