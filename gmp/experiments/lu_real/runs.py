"""The chapter's run: every epoch of every network a journalled unit, and the payload assembled from them.

:func:`run` trains the networks epoch by epoch in the order of :func:`schedule`, :func:`units` gives the
same epochs to ``python -m gmp.runs lu_real --jobs N`` workers, and :func:`assemble` reads the journalled
epochs into the chapter's payload (one :func:`network_result` per network); :func:`unfinished` does so for a
paper-scale run still under way, and :func:`epoch_text` and :func:`progress` say where it stands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from gmp import config as _config

from .paper import DATASET_LABELS, UNTRAINABLE, epoch_key, network_key, percent, run_label, variants
from .training import Training, load_split, train_epoch


def network_result(entries: list[Mapping[str, Any]], epochs: int) -> dict[str, Any]:
    """One network's result from its journalled epochs ``entries`` (1, 2, ... in order) of ``epochs``.

    ``test_curve[e]``: test accuracy after epoch ``e + 1``; ``train_acc``: the running mean over the last
    epoch's mini-batches, in training mode while the weights change (the first author's "train" accuracy, Table
    2's "Train"); ``train_acc_eval``: on the whole training set in evaluation mode after the last epoch, once
    all ``epochs`` are done (else None); ``ratio``, ``ratio_steps``, ``max_grad``: the per-step records of
    :meth:`~gmp.experiments.lu_real.training.Training.run_epoch` of all epochs; ``ratio_peak``: the largest
    ratio over every step where epochs record it (``ratio_max``), else over the recorded steps; ``drift[e]``:
    per-layer drift after epoch ``e + 1`` (None once diverged). ``diverged_epoch`` counts from 0, as in
    :class:`gmp.train.History`; ``devices`` and ``precisions``: those its epochs were computed with ("None"
    where not recorded).
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
            f"{percent(min(r['test_acc'] for r in runs.values()))}% to {percent(runs[best]['test_acc'])}% ({best}); "
            + ", ".join(f"{label} {percent(v)}%" for label, v in stuck.items())
            + " (about chance: without an output bias nothing pulls them to the majority class), and their GPN "
              "versions " + ", ".join(f"{percent(v)}%" for v in gpn.values()) + ".")


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
    """The payload of the chapter from journalled epochs ``units`` (key
    :func:`~gmp.experiments.lu_real.paper.epoch_key` to the metrics of
    :meth:`~gmp.experiments.lu_real.training.Training.run_epoch`): per data set used, per run label,
    the :func:`network_result` of the epochs journalled from the first on. Networks with none
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
    """Epoch ``epoch`` of the network ``label`` on ``dataset``
    (:func:`~gmp.experiments.lu_real.training.train_epoch`), from the network kept in ``live`` when
    it stands at the epoch before, else its checkpoint; ``earlier``: its journalled earlier epochs; ``data`` caches the data sets. An unfinished
    network stays in ``live`` (under ``gmp.runs`` it is also checkpointed after every epoch),
    so a process that trains it from epoch to epoch does not rebuild it from its checkpoint."""
    if dataset not in data:
        data[dataset] = (load_split(dataset, True, cfg["max_train"]),
                         load_split(dataset, False, cfg.get("max_test")))  # no max_test: the whole test split
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

    Each epoch of each network is one unit of ``store.memo`` (a :class:`gmp.results.Store`), journalled with its
    metrics (:meth:`~gmp.experiments.lu_real.training.Training.run_epoch`) under
    :func:`~gmp.experiments.lu_real.paper.epoch_key`. Under ``gmp.runs`` every network is checkpointed after
    each epoch at ``store.scratch`` of its :func:`~gmp.experiments.lu_real.paper.network_key` (not committed: a
    depth-200 network and its momentum take 0.4 GB), so an interrupted run resumes at the next epoch and gives
    the same numbers; a machine without the checkpoint trains the network again from its first epoch and checks
    that the journalled epochs come out as journalled (:func:`~gmp.experiments.lu_real.training.train_epoch`).
    The networks stay in memory from epoch to epoch. A diverged network is not trained further. Data sets are
    loaded when first needed. Returns :func:`assemble` of the journalled epochs.
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
