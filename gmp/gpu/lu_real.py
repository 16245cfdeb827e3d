"""The paper-scale run of ``lu_real`` continued on the GPU: the next group of networks, stacked and trained
for all their epochs as far as the lease allows, and journalled whole (step 3 of the command)."""

from __future__ import annotations

import math
import os
import shutil
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .files import append_line


def pending_groups(cfg: Mapping[str, Any], units: Mapping[str, Any], seed: int = 0) -> list[tuple[str, list[str]]]:
    """``[(dataset, run labels), ...]``: every group of networks (a data set, without or with BN, in the
    order of :func:`gmp.experiments.lu_real.runs.schedule`) with its networks that have no journalled
    epoch in ``units`` (key to value), groups with none left out; a network with some epochs but not all
    is an error (its run cannot be continued without its checkpoint)."""
    from gmp.experiments import lu_real

    out = []
    for dataset in dict.fromkeys(cfg["data"].values()):
        epochs = int(cfg["epochs"][dataset])
        for batchnorm in (False, True):
            todo = []
            for variant in lu_real.variants(cfg["activations"]):
                label = lu_real.run_label(variant, batchnorm)
                done = [units.get(lu_real.epoch_key(dataset, label, seed, e)) for e in range(1, epochs + 1)]
                run = [d for d in done if d is not None]
                if not run:
                    todo.append(label)
                elif len(run) < epochs and not any(d["diverged"] for d in run):
                    raise RuntimeError(f"{dataset} {label}: the journal holds {len(run)} of {epochs} epochs; a network "
                                       "is journalled whole by this command, so this journal came from elsewhere "
                                       "(continue it there, with its checkpoint)")
            if todo:
                out.append((dataset, todo))
    return out


def next_group(cfg: Mapping[str, Any], units: Mapping[str, Any], seed: int = 0) -> tuple[str, list[str]]:
    """``(dataset, run labels)``: the first of :func:`pending_groups` (the networks of the first group
    that has networks with no journalled epoch; a network partly journalled is an error), ``("", [])``
    when every network has run."""
    groups = pending_groups(cfg, units, seed)
    return groups[0] if groups else ("", [])


MODES = ("CUDA graph, stacked kernels", "stacked kernels", "CUDA graph, torch reference", "torch reference")
"""The ways :func:`train_group` may run the stacked step, fastest first; on CUDA each is tried until one
works, and each failure is kept whole in the summary's ``notes``. Every mode applies each network's own
activation only (:mod:`gmp.models.stacked_ops`); the stacked kernels are six kernels per square
layer-step, the torch reference many more."""


def mode_options(mode: str) -> dict[str, bool]:
    """The :class:`~gmp.experiments.lu_real.stacked.StackedTraining` options of a mode of :data:`MODES`."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    return {"graph": mode.startswith("CUDA graph"), "kernels": "stacked kernels" in mode}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def probe(labels: list[str], networks: list[Any], cfg: Any, device: str, train: Any, test: Any, notes: list[str],
          modes: Sequence[str], steps: int = 10) -> dict[str, Any]:
    """The measured cost of training ``labels`` (built as ``networks``) stacked, in the first of
    ``modes`` that works: ``seconds_per_step`` (a full mini-batch, after the warm-up that captures
    and compiles), ``epoch_eval_seconds`` (what each epoch adds: test accuracy and drift) and
    ``final_seconds`` (the last epoch's training accuracy). The stack is thrown away (its probe
    trained it). ``notes`` gets each failed mode's whole traceback."""
    from gmp.experiments import lu_real

    size = int(cfg["batch_size"])
    x, y = train[0].to(device), train[1].to(device)
    tx, ty = test[0].to(device), test[1].to(device)
    for mode in modes:
        training = None
        try:
            training = lu_real.StackedTraining(labels, x.shape[1], cfg, device, networks=networks, **mode_options(mode))
            seconds = training.seconds_per_step(x, y, steps)
            if x.shape[0] % size:  # the shorter last batch, eager: its kernels compiled here, not in the run
                training._train_step(x[:x.shape[0] % size], y[:x.shape[0] % size])
            training._accuracy(tx[:1000], ty[:1000])
            _sync(device)
            start = time.perf_counter()
            training._accuracy(tx, ty)
            training.model.orthogonality_drift()
            _sync(device)
            middle = time.perf_counter()
            training._accuracy(x, y)
            _sync(device)
            return {"mode": mode, "networks": len(labels), "seconds_per_step": seconds,
                    "epoch_eval_seconds": middle - start, "final_seconds": time.perf_counter() - middle}
        except Exception:
            notes.append(f"{mode}, {len(labels)} networks, failed (trying the next mode):\n{traceback.format_exc()}")
            print(f"  {notes[-1]}", flush=True)
        finally:
            del training
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    raise RuntimeError(f"every mode failed ({', '.join(modes)}); the summary's notes hold each traceback")


def group_seconds(measured: Mapping[str, Any], epochs: int, steps: int, epochs_done: int = 0) -> float:
    """The seconds a probed group (:func:`probe`) needs for its epochs after ``epochs_done``."""
    left = epochs - epochs_done
    return left * (steps * measured["seconds_per_step"] + measured["epoch_eval_seconds"]) + measured["final_seconds"]


def load_group(cfg: Any, seed: int = 0) -> tuple[str, list[str], Any]:
    """``(dataset, labels, (train, test))`` of the next group (:func:`next_group`) of ``cfg``'s run,
    its data loaded (so that missing data stops the command before anything else runs)."""
    from gmp import results

    journal = results.journal_path("lu_real", cfg.scale, cfg.digest)
    dataset, labels = next_group(cfg, results.journal_units(journal) if journal is not None else {}, seed)
    if not labels:
        return dataset, labels, None
    return dataset, labels, group_data(cfg, dataset)


def group_data(cfg: Any, dataset: str) -> tuple[Any, Any]:
    """``(train, test)`` of ``dataset`` as the networks of ``cfg``'s run train on it."""
    from gmp.experiments import lu_real

    return lu_real.load_split(dataset, True, cfg["max_train"]), lu_real.load_split(dataset, False)


def state_path(state: Path, cfg: Any, dataset: str) -> Path:
    """Where a group of ``cfg``'s run on ``dataset`` keeps its whole state between two commands of one lease."""
    return state / f"lu_real-{cfg.scale}-{cfg.digest}-{dataset}.pt"


def train_group(out: Path, cfg: Any, device: str, deadline: float, seed: int, networks: int | None,
                group: tuple[str, list[str], Any] | None = None, state: Path | None = None,
                lease_deadline: float | None = None) -> dict[str, Any]:
    """Train the next group (:func:`load_group`, or ``group``) of the ``lu_real`` run: this command
    until ``deadline`` (monotonic s), the lease until ``lease_deadline`` (default ``deadline``).

    The networks are built once (:func:`~gmp.experiments.lu_real.build_group`). The whole group
    (or ``networks`` of it) is probed on the device (:func:`probe`: step, evaluation); a group whose
    measured time does not fit in the lease is cut to as many networks as the measured time per
    network allows and probed again, never started unless the measurement says it finishes. With
    ``state`` (an ignored folder that survives between two commands of one lease), a group this
    command cannot finish saves its whole state there at ``deadline`` and the next command
    continues it bit for bit; without it, or once the measured epochs show that the lease cannot
    finish it, the group stops and journals nothing (its epochs go to
    ``OUT/lu_real/unfinished-<scale>.jsonl``, labelled). A finished group is journalled whole."""
    from gmp import results
    from gmp.experiments import lu_real

    lease_deadline = deadline if lease_deadline is None else lease_deadline
    dataset, labels, data = group if group is not None else load_group(cfg, seed)
    summary: dict[str, Any] = {"scale": cfg.scale, "config_digest": cfg.digest, "dataset": dataset,
                               "pending": labels, "notes": [], "probes": []}
    if not labels:
        summary["status"] = "every network of the run is journalled"
        return summary
    train, test = data
    epochs = int(cfg["epochs"][dataset])
    steps = math.ceil(train[0].shape[0] / int(cfg["batch_size"]))
    width = train[0].shape[1]
    saved = state_path(state, cfg, dataset) if state is not None else None
    modes = list(MODES if device.startswith("cuda") else ("stacked kernels",))
    kept: dict[str, dict[str, Any]] = {}
    resumed = saved is not None and saved.exists()
    if resumed:
        head = torch.load(saved, map_location="cpu", weights_only=False)
        chosen, measured = head["labels"], head["extra"]["measured"]
        del head
        built = lu_real.build_group(chosen, width, cfg, seed)
        summary["resumed_from"] = str(saved)
    else:
        count = min(networks or len(labels), len(labels))
        built = lu_real.build_group(labels[:count], width, cfg, seed)
        while True:
            measured = probe(labels[:count], built[:count], cfg, device, train, test, summary["notes"], modes)
            modes = modes[modes.index(measured["mode"]):]
            need = group_seconds(measured, epochs, steps)
            summary["probes"].append({**measured, "group_minutes": need / 60})
            left = lease_deadline - time.monotonic()
            print(f"  {count} networks ({measured['mode']}): {1e3 * measured['seconds_per_step']:.2f} ms per step, "
                  f"{need / 60:.1f} min for {epochs} epochs" + (f"; {left / 60:.1f} min left" if left < 1e8 else ""),
                  flush=True)
            if need <= 0.95 * left:
                break
            fewer = min(count - 1, int(count * 0.95 * left / need))
            if fewer < 1:
                summary["status"] = (f"not even one network finishes its {epochs} epochs in the {left / 60:.1f} min "
                                     "left at the measured step (probes): nothing trained")
                return summary
            count = fewer
        chosen = labels[:count]
    training = lu_real.StackedTraining(chosen, width, cfg, device, seed, networks=built[:len(chosen)],
                                       **mode_options(measured["mode"]))
    del built
    if resumed:
        kept = training.load(saved)["kept"]
    summary.update(networks=chosen, epochs=epochs, steps_per_epoch=steps, mode=measured["mode"])
    print(f"  training {len(chosen)} of {len(labels)} networks from epoch {training.epoch + 1}: {', '.join(chosen)}",
          flush=True)
    unfinished_path = out / "lu_real" / f"unfinished-{cfg.scale}.jsonl"
    started = time.perf_counter()
    first_epoch = training.epoch
    per_epoch = steps * measured["seconds_per_step"] + measured["epoch_eval_seconds"]
    while training.epoch < epochs:
        epoch = training.epoch + 1
        if time.monotonic() + per_epoch + 20 > deadline:  # 20 s: the state written, the journal and the summary
            break
        if time.monotonic() + (epochs - epoch + 1) * per_epoch > lease_deadline:
            summary["notes"].append(f"stopped before epoch {epoch}: at {per_epoch:.1f} s per epoch the group would end "
                                    "after the lease")
            saved = None  # the next command could not finish it either
            break
        begin = time.perf_counter()
        metrics = training.run_epoch(train, test, final=epoch == epochs)
        if epoch > first_epoch + 1:  # the first epoch of a command captures the step: not a measure of the rest
            per_epoch = time.perf_counter() - begin
        for label, m in zip(chosen, metrics):
            key = lu_real.epoch_key(dataset, label, seed, epoch)
            kept[key] = m
            append_line(unfinished_path, {"key": key, "value": m, "note": "not journalled until the group finishes"})
        print(f"  epoch {epoch}/{epochs}: {(time.perf_counter() - started) / 60:.1f} min, test accuracy "
              + ", ".join(f"{label} {m.get('test_acc')}" for label, m in zip(chosen, metrics)), flush=True)
        if all(m["diverged"] for m in metrics):
            break
    finished = training.epoch == epochs or all(any(kept.get(lu_real.epoch_key(dataset, label, seed, e), {}).get(
        "diverged") for e in range(1, epochs + 1)) for label in chosen)
    elapsed = time.perf_counter() - started
    done = training.epoch - first_epoch
    summary.update(epochs_done=training.epoch, minutes=elapsed / 60, finished=finished,
                   ms_per_step=1e3 * elapsed / (done * steps) if done else None)
    if finished:
        by_network = sorted(kept, key=lambda key: (chosen.index(key.split("/")[1]), int(key.rsplit("epoch", 1)[1])))
        previous = os.environ.get(results.STAGING_ENV)
        os.environ[results.STAGING_ENV] = str(out / "lu_real" / f".staging-{cfg.scale}")  # the journal goes under OUT
        try:
            results.Store("lu_real", cfg).record({key: (kept[key], kept[key].get("seconds", 0.0)) for key in by_network})
        finally:
            if previous is None:
                os.environ.pop(results.STAGING_ENV, None)
            else:
                os.environ[results.STAGING_ENV] = previous
            # The Store's bookkeeping files go: at most 8 files come back from a GPU machine.
            shutil.rmtree(out / "lu_real" / f".staging-{cfg.scale}", ignore_errors=True)
        unfinished_path.unlink(missing_ok=True)
        if saved is not None:
            saved.unlink(missing_ok=True)
        summary["journal"] = f"lu_real/_partial/{cfg.scale}-{cfg.digest}.jsonl"
        summary["status"] = f"{len(chosen)} networks journalled whole"
    elif saved is not None and training.epoch > 0:
        training.save(saved, {"kept": kept, "measured": measured})
        summary["state"] = str(saved)
        summary["status"] = (f"stopped at this command's deadline after epoch {training.epoch} of {epochs}; the whole "
                             f"state is in {saved}: the next command of this lease continues it")
    else:
        summary["status"] = (f"stopped at epoch {training.epoch} of {epochs}: nothing journalled; the epochs done are "
                             f"in {unfinished_path.relative_to(out)}")
    return summary


def train_stack(work: Path, cfg: Any, device: str, seed: int, dataset: str, labels: Sequence[str],
                seconds: float | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train the networks ``labels`` of ``dataset`` of ``cfg``'s run whole, stacked, for all their epochs, within
    ``seconds`` (None: no limit); ``(entries, summary)``: the journal entries of every epoch of every network
    trained (in the format of ``Store.memo``, the stack's order) and :func:`train_group`'s summary. What a task of
    ``python -m gmp.runs lu_real --executor ...`` (``gmp.cluster.StackTask``) writes to its unit file.

    It is :func:`train_group` with ``work`` as its ``OUT`` (emptied of an earlier attempt first) and ``seconds`` as
    both its deadlines: the stack is probed for its mode as on a lease, and where the measured time does not fit
    in ``seconds`` it is cut to the networks that do (``summary["networks"]``, the first of ``labels``), or, where
    not even one does, nothing is trained (``entries`` empty, ``summary["status"]`` says why)."""
    from gmp import results

    shutil.rmtree(work / "lu_real", ignore_errors=True)
    deadline = time.monotonic() + (1e9 if seconds is None else seconds)
    group = (dataset, list(labels), group_data(cfg, dataset))
    summary = train_group(work, cfg, device, deadline, seed, None, group=group, lease_deadline=deadline)
    if not summary.get("finished"):
        return [], summary
    return results.journal_entries(work / summary["journal"]), summary
