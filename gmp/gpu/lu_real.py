"""The paper-scale run of ``lu_real`` continued on the GPU: the next group of networks, stacked and trained
for all their epochs as far as the lease allows, and journalled whole (step 3 of the command)."""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .files import append_line


def next_group(cfg: Mapping[str, Any], units: Mapping[str, Any], seed: int = 0) -> tuple[str, list[str]]:
    """``(dataset, run labels)``: the networks of the first group (a data set, without or with
    BN, in the order of :func:`gmp.experiments.lu_real.runs.schedule`) that has networks with no
    journalled epoch; a network with some epochs but not all is an error (its run cannot be
    continued without its checkpoint). ``("", [])`` when every network has run."""
    from gmp.experiments import lu_real

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
                return dataset, todo
    return "", []


MODES = ("CUDA graph, compiled activations", "CUDA graph", "eager")
"""The ways :func:`train_group` may run the stacked step, fastest first; on CUDA each is tried until one works."""


def _probe(labels: list[str], networks: list[Any], cfg: Any, device: str, x: torch.Tensor, y: torch.Tensor,
           notes: list[str], modes: Sequence[str], steps: int = 10) -> tuple[str, float]:
    """``(mode, seconds per full mini-batch step)`` of a throw-away stack of ``labels`` (built
    from ``networks``): the first of ``modes`` that works, timed after a warm-up; ``notes``
    says why any other failed."""
    from gmp.experiments import lu_real

    size = int(cfg["batch_size"])
    for mode in modes:
        training = None
        try:
            training = lu_real.StackedTraining(labels, x.shape[1], cfg, device, graph=mode.startswith("CUDA graph"),
                                               compile="compiled" in mode, networks=networks)
            seconds = training.seconds_per_step(x, y, steps)
            if x.shape[0] % size:  # the shorter last batch and the evaluation's chunks: compiled here, not in the run
                training._train_step(x[:x.shape[0] % size], y[:x.shape[0] % size])
            training._accuracy(x[:1000], y[:1000])
            return mode, seconds
        except Exception as err:
            notes.append(f"{mode} failed, trying the next mode: {type(err).__name__}: {err}"[:600])
            print(f"  {notes[-1]}", flush=True)
        finally:
            del training
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    raise RuntimeError(f"every mode failed ({', '.join(modes)}): " + " | ".join(notes[-len(modes):]))


def predicted_networks(cfg: Any, labels: Sequence[str], device_name: str, steps: int, seconds: float) -> int | None:
    """How many of ``labels`` (a group, without or with BN) the count model says finish ``steps``
    steps in ``seconds`` on the GPU named ``device_name``: :func:`gmp.bench.lease_prediction` of
    the compiled step's counted bytes (:data:`gmp.bench.COMPILED_COUNT`, scaled by ``cfg``'s
    width squared) at the card's bandwidth (:data:`gmp.bench.CARDS`); ``None`` for a card the
    model does not know (the probes alone decide there)."""
    from gmp import bench

    card = next((card for card in bench.CARDS if card in device_name), None)
    if card is None or not labels:
        return None
    kernels, per_network = bench.COMPILED_COUNT[labels[0].endswith("-BN")]
    scale = (int(cfg["width"]) / bench.COUNT_WIDTH) ** 2
    return max(1, bench.lease_prediction(per_network * scale, kernels, bench.CARDS[card], depth=int(cfg["depth"]),
                                         steps=steps, seconds=seconds, most=len(labels))["networks"])


def load_group(cfg: Any, seed: int = 0) -> tuple[str, list[str], Any]:
    """``(dataset, labels, (train, test))`` of the next group (:func:`next_group`) of ``cfg``'s run,
    its data loaded (so that missing data stops the command before anything else runs)."""
    from gmp import results
    from gmp.experiments import lu_real

    journal = results.journal_path("lu_real", cfg.scale, cfg.digest)
    dataset, labels = next_group(cfg, results.journal_units(journal) if journal is not None else {}, seed)
    if not labels:
        return dataset, labels, None
    return dataset, labels, (lu_real.load_split(dataset, True, cfg["max_train"]), lu_real.load_split(dataset, False))


def train_group(out: Path, cfg: Any, device: str, deadline: float, seed: int, networks: int | None,
                group: tuple[str, list[str], Any] | None = None) -> dict[str, Any]:
    """Train the next group (:func:`load_group`, or ``group``) of the ``lu_real`` run until
    ``deadline`` (monotonic s): as many of its networks as finish all their epochs by then. On a
    card the count model knows, the number it predicts (``predicted_networks``) is probed and
    corrected by the measured step time (more if it leaves room, fewer if it does not); elsewhere
    by the step time measured for one network, for all of them and for the number chosen."""
    from gmp import results
    from gmp.experiments import lu_real

    dataset, labels, data = group if group is not None else load_group(cfg, seed)
    summary: dict[str, Any] = {"scale": cfg.scale, "config_digest": cfg.digest, "dataset": dataset,
                               "pending": labels, "notes": [], "probe_ms_per_step": {}}
    if not labels:
        summary["status"] = "every network of the run is journalled"
        return summary
    train, test = data
    epochs = int(cfg["epochs"][dataset])
    steps = math.ceil(train[0].shape[0] / int(cfg["batch_size"]))
    x, y = train[0].to(device), train[1].to(device)
    width = train[0].shape[1]
    modes = list(MODES if device.startswith("cuda") else ("eager",))
    built: dict[str, Any] = {}

    def minutes(step_seconds: float) -> float:
        return epochs * steps * step_seconds * 1.3 / 60  # 30% for each epoch's evaluation and drift, and slack

    def left() -> float:
        return (deadline - time.monotonic()) / 60

    def measure(count: int) -> float:
        """Seconds per step of the first ``count`` networks, in the fastest mode that works."""
        for label in labels[:count]:
            if label not in built:
                built[label] = lu_real.build(label.removesuffix("-BN"), label.endswith("-BN"), width, cfg, seed)
        mode, seconds = _probe(labels[:count], [built[k] for k in labels[:count]], cfg, device, x, y,
                               summary["notes"], modes)
        del modes[:modes.index(mode)]
        summary["mode"] = mode
        summary["probe_ms_per_step"][count] = 1e3 * seconds
        print(f"  step of {count} network{'s' if count > 1 else ''} ({mode}): {1e3 * seconds:.2f} ms, "
              f"{minutes(seconds):.1f} min for {epochs} epochs; {left():.1f} min left", flush=True)
        return seconds

    if left() <= 0:
        summary["status"] = "no time left: nothing trained"
        return summary
    predicted = predicted_networks(cfg, labels, torch.cuda.get_device_name(device) if device.startswith("cuda") else "",
                                   epochs * steps, 0.9 * left() * 60 / 1.3)
    summary["predicted_networks"] = predicted
    if networks is not None:
        count = min(networks, len(labels))
        measure(count)
    elif predicted is not None:  # the count model's number, then corrected by its probe
        count = predicted
        chosen = measure(count)
        if minutes(chosen) <= 0.9 * left() and count < len(labels):
            count = min(len(labels), int(count * 0.9 * left() / minutes(chosen)))
            if count > predicted:
                chosen = measure(count)
        if minutes(chosen) > 0.9 * left():  # fewer, at the measured time per network
            count = int(count * 0.9 * left() / minutes(chosen))
            if count < 1:
                summary["status"] = (f"not even one network finishes its {epochs} epochs in the {left():.1f} min "
                                     "left at the measured step time (probe_ms_per_step): nothing trained")
                return summary
    else:
        one = measure(1)
        first_mode = summary["mode"]
        every = measure(len(labels)) if len(labels) > 1 and minutes(one) <= 0.9 * left() else one
        if summary["mode"] != first_mode:  # all of them fell back to a slower mode: one again, in that mode
            one = measure(1)
        if minutes(one) > 0.9 * left():
            summary["status"] = (f"not even one network finishes its {epochs} epochs in the {left():.1f} min "
                                 "left at the measured step time (probe_ms_per_step): nothing trained")
            return summary
        fits = [k for k in range(1, len(labels) + 1)
                if minutes(one + (every - one) * (k - 1) / max(len(labels) - 1, 1)) <= 0.9 * left()]
        count = max(fits) if fits else 1
        if 1 < count < len(labels):  # measure (and compile for) the number chosen; fewer if it is slower
            chosen = measure(count)
            if minutes(chosen) > 0.9 * left():
                count = max(1, int(count * 0.9 * left() / minutes(chosen)))
    chosen_labels = labels[:count]
    training = lu_real.StackedTraining(chosen_labels, width, cfg, device, seed,
                                       graph=summary["mode"].startswith("CUDA graph"),
                                       compile="compiled" in summary["mode"],
                                       networks=[built[k] for k in chosen_labels])
    built.clear()
    summary.update(networks=chosen_labels, epochs=epochs, steps_per_epoch=steps)
    print(f"  training {count} of {len(labels)} networks: {', '.join(chosen_labels)}", flush=True)
    unfinished_path = out / "lu_real" / f"unfinished-{cfg.scale}.jsonl"
    kept: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    first_done = None
    for epoch in range(1, epochs + 1):
        if first_done is not None and epoch > 2:  # from the end of epoch 1: its capture and compilation are one-off
            per_epoch = (time.perf_counter() - first_done) / (epoch - 2)
            if time.monotonic() + per_epoch * (epochs - epoch + 1) > deadline:
                summary["notes"].append(f"stopped after epoch {epoch - 1}: at {per_epoch:.1f} s per epoch the group "
                                        "would end past the deadline")
                break  # the group cannot finish: end now and leave the rest of the lease unspent
        metrics = training.run_epoch(train, test, final=epoch == epochs)
        if epoch == 1:
            first_done = time.perf_counter()
        for label, m in zip(chosen_labels, metrics):
            key = lu_real.epoch_key(dataset, label, seed, epoch)
            kept[key] = m
            append_line(unfinished_path, {"key": key, "value": m, "note": "not journalled until the group finishes"})
        print(f"  epoch {epoch}/{epochs}: {(time.perf_counter() - started) / 60:.1f} min, test accuracy "
              + ", ".join(f"{label} {m.get('test_acc')}" for label, m in zip(chosen_labels, metrics)), flush=True)
        if all(m["diverged"] for m in metrics):
            break
    finished = training.epoch == epochs or all(any(kept.get(lu_real.epoch_key(dataset, label, seed, e), {}).get(
        "diverged") for e in range(1, epochs + 1)) for label in chosen_labels)
    elapsed = time.perf_counter() - started
    summary.update(mode=training.mode, epochs_done=training.epoch, minutes=elapsed / 60, finished=finished,
                   ms_per_step=1e3 * elapsed / max(training.step, 1) if training.epoch else None)
    if finished:
        by_network = sorted(kept, key=lambda key: (chosen_labels.index(key.split("/")[1]), int(key.rsplit("epoch", 1)[1])))
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
        summary["journal"] = f"lu_real/_partial/{cfg.scale}-{cfg.digest}.jsonl"
        summary["status"] = f"{len(chosen_labels)} networks journalled whole"
    else:
        summary["status"] = (f"stopped by the deadline at epoch {training.epoch} of {epochs}: nothing journalled; "
                             f"the epochs done are in {unfinished_path.relative_to(out)}")
    return summary
