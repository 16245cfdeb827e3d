"""The book's one prepared GPU command: ``python -m gmp.gpu OUT``.

A GPU is lent to this project for minutes at a time, on a machine with no package registry
and no papermill (torch and Python only, with numpy, scipy, matplotlib, pandas and pytest).
This command is built for one such lease, within one command's limit, and writes what it did
under ``OUT`` even when a step fails:

1. ``OUT/gpu.json``: the GPU, the torch version and the precision flags (TF32 off: the paper's
   GPUs computed in fp32).
2. ``OUT/smoke.jsonl``: every chapter's code executed at smoke scale on the device (its
   notebook's code cells in order, ``SCALE="smoke"`` and ``DEVICE`` set after the parameters
   cell), in parallel worker processes with one time budget, then the tests marked ``cuda``.
3. The paper-scale run of ``lu_real`` continued: the next networks without a journalled run
   (in the chapter's schedule order) trained at once by
   :class:`gmp.experiments.lu_real.StackedTraining` for all their epochs, as many as the time
   left allows by a measured step time. Their journal goes to
   ``OUT/lu_real/_partial/<scale>-<config digest>.jsonl`` (the chapter's journal format, one
   entry per network and epoch, device and precision in each) only once every network of the
   group has finished; epochs of a group cut short by the deadline go to
   ``OUT/lu_real/unfinished-<scale>.jsonl``, labelled, and never into the journal (their
   checkpoints do not come back, so they could not be continued).
4. With the time the group leaves (and ``--units-seconds`` kept for it), a second job: the
   units of Part III's paper-scale runs that neither the repository's journal nor its current
   cache holds (``UNIT_CHAPTERS``; the seeds, masks and ablation arms the CPU cannot
   afford, including those a chapter's ``QUEUED`` settings add: :func:`unit_config`). First all
   of them that fit with ``fit_stack`` as one stacked fit (:func:`compute_units_stacked`, in a
   child process: one queue per image and protocol, trained when its probe predicts that it ends
   in time), each unit journalled whole under ``OUT/<chapter>/_partial/`` once its fits end; then
   the rest (or all of them, when the stacked fit fails or ``--unit-by-unit`` is given), each
   computed whole by the chapter's ``units`` in its order, in a child process stopped at the
   deadline, journalled there too. A unit cut short there leaves its last checkpoint to come
   back (``<scale>-<digest>.<unit>.pt``), and resumes from it in a later lease (:func:`merge`).
5. ``OUT/summary.json``: what ran, in which mode (CUDA graph or eager), the measured step
   times and the minutes per group, the stacked fit's probes and prediction
   (``units_stacked``), and the units computed.

``python -m gmp.gpu merge OUT`` adds the networks of a returned ``lu_real`` journal and the
units of the other returned journals to the repository's journals
(``book/_results/<chapter>/_partial/``), and a returned checkpoint beside them, refusing
another config's. The same command
runs on a CPU at smoke scale (``--device cpu --scale smoke``), which the test suite does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["main", "chapter_code", "next_group", "load_group", "train_group", "unit_config", "missing_units",
           "compute_units", "compute_units_stacked", "stacked_units_job", "merge", "return_problems", "UNIT_CHAPTERS",
           "RETURN_FILES", "RETURN_BYTES", "RETURN_DEPTH"]


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def _append(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(obj, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def environment(device: str) -> dict[str, Any]:
    """The machine, torch and the precision flags, as ``OUT/gpu.json`` records them."""
    info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "device": device,
                            "cuda_available": torch.cuda.is_available(),
                            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                            "float32_matmul_precision": torch.get_float32_matmul_precision(),
                            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2 ** 30, 1), cuda=torch.version.cuda)
    return info


# ---------------------------------------------------------------- chapters at smoke scale

def chapter_code(notebook: Path, scale: str, device: str) -> str:
    """The code cells of a chapter's ``.ipynb`` as one Python program: IPython magics and shell
    lines (the Colab install cell's) become ``pass``, and the parameters cell is followed by
    ``SCALE``/``DEVICE`` set to ``scale``/``device``."""
    cells = json.loads(notebook.read_text())["cells"]
    parts = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines = [line if not line.lstrip().startswith(("!", "%")) else line[:len(line) - len(line.lstrip())] + "pass"
                 for line in source.splitlines()]
        parts.append("\n".join(lines))
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            parts.append(f"SCALE = {scale!r}\nDEVICE = {device!r}")
    return "\n\n".join(parts) + "\n"


class _HTML:
    """``IPython.display.HTML`` where IPython is absent: the markup, shown as such by a notebook."""

    def __init__(self, data: str = "", *args: Any, **kwargs: Any) -> None:
        self.data = data

    def _repr_html_(self) -> str:
        return self.data


def without_ipython() -> None:
    """Give a chapter's code, run by a plain ``python`` (``run_chapter``), what a notebook gives it:
    ``display`` as a builtin (IPython's, or one that shows nothing where IPython is absent, as on the GPU
    machine), and where IPython is absent the one module of it that gmp's notes and tables import,
    ``IPython.display`` (its ``HTML`` and ``display``). The package ``IPython`` itself stays absent, so that
    libraries that look for it (matplotlib's pyplot, tqdm) find it missing, as under a plain ``python``."""
    import builtins
    import types

    try:
        from IPython.display import display
    except ImportError:
        module = types.ModuleType("IPython.display", "IPython's display module where IPython is absent (gmp.gpu)")
        module.HTML, module.display = _HTML, lambda *objects, **kwargs: None
        sys.modules[module.__name__] = module  # its parent package is not needed to import it by this name
        display = module.display
    builtins.display = display


_PRELUDE = """
import matplotlib
matplotlib.use("Agg")
from gmp.gpu import without_ipython
without_ipython()
"""


def run_chapter(notebook: Path, scale: str, device: str, timeout: float) -> dict[str, Any]:
    """Execute one chapter's code (:func:`chapter_code`) in a fresh Python process, at most ``timeout`` s."""
    start = time.perf_counter()
    program = _PRELUDE + chapter_code(notebook, scale, device)
    env = {**os.environ, "GMP_SCALE": scale, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", program], cwd=notebook.parent, env=env, capture_output=True,
                              text=True, timeout=max(timeout, 1))
        ok, tail = done.returncode == 0, (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        ok, tail = False, f"stopped after {timeout:.0f} s (the smoke budget)"
    return {"chapter": notebook.stem, "ok": ok, "seconds": round(time.perf_counter() - start, 1),
            "output_tail": "" if ok else tail}


def smoke(out: Path, device: str, budget: float, workers: int, chapters: Sequence[str] | None = None) -> dict[str, Any]:
    """Every chapter (or those named) at smoke scale on ``device``, then the ``cuda`` tests, all
    within ``budget`` seconds: a chapter is stopped at the budget's end, and one that could not
    start before it is recorded as not run."""
    notebooks = sorted(nb for nb in ROOT.glob("book/part*/*.ipynb") if not chapters or nb.stem in chapters)
    if chapters and len(notebooks) != len(set(chapters)):
        raise ValueError(f"unknown chapter among {', '.join(chapters)}: expected names of book/part*/*.ipynb")
    deadline = time.monotonic() + budget
    tests_share = 20.0  # seconds kept for the cuda tests

    def one(notebook: Path) -> dict[str, Any]:
        left = deadline - tests_share - time.monotonic()
        if left < 5:
            return {"chapter": notebook.stem, "ok": False, "seconds": 0.0, "output_tail": "not run: no time left"}
        return run_chapter(notebook, "smoke", device, left)

    results = []
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        for future in concurrent.futures.as_completed([pool.submit(one, nb) for nb in notebooks]):
            result = future.result()
            results.append(result)
            _append(out / "smoke.jsonl", result)
            print(f"  smoke {result['chapter']}: {'ok' if result['ok'] else 'FAILED'} ({result['seconds']} s)", flush=True)
    left = max(deadline - time.monotonic(), 10)
    start = time.perf_counter()
    try:  # only the file of cuda tests: collecting the others needs packages the GPU machine lacks (papermill, ...)
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                                str(ROOT / "tests" / "test_cuda.py")], cwd=ROOT, capture_output=True, text=True,
                               timeout=left)
        test_result = {"tests": "cuda", "rc": tests.returncode, "output_tail": (tests.stdout + tests.stderr)[-3000:]}
    except subprocess.TimeoutExpired:
        test_result = {"tests": "cuda", "rc": None, "output_tail": f"stopped after {left:.0f} s"}
    test_result["seconds"] = round(time.perf_counter() - start, 1)
    _append(out / "smoke.jsonl", test_result)
    print(f"  cuda tests: rc {test_result['rc']} ({test_result['seconds']} s)", flush=True)
    return {"chapters_ok": sum(r["ok"] for r in results), "chapters": len(results),
            "failed": [r["chapter"] for r in results if not r["ok"]], "cuda_tests_rc": test_result["rc"]}


# ---------------------------------------------------------------- the lu_real paper-scale run

def next_group(cfg: Mapping[str, Any], units: Mapping[str, Any], seed: int = 0) -> tuple[str, list[str]]:
    """``(dataset, run labels)``: the networks of the first group (a data set, without or with
    BN, in the order of :func:`gmp.experiments.lu_real.schedule`) that has networks with no
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
            _append(unfinished_path, {"key": key, "value": m, "note": "not journalled until the group finishes"})
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


UNIT_CHAPTERS: tuple[str, ...] = ("sbsnn_author", "sbsnn_author_figs")
"""The chapters whose missing paper-scale units the second job computes, in this order."""


def unit_config(chapter: str, scale: str):
    """The config whose units the second job computes for ``chapter`` at ``scale``: today's, with the settings
    that the chapter's ``QUEUED`` (a dict by scale, when it has one) queues for a GPU and has not yet put into
    its ``CONFIG``. Those may only add settings, so that the units of today's config are units of this one."""
    from gmp import config

    cfg = config.load(chapter, scale)
    queued = getattr(config.experiment(chapter), "QUEUED", {}).get(scale)
    if not queued:
        return cfg
    if clash := sorted(set(queued) & set(cfg)):
        raise ValueError(f"{chapter}.QUEUED[{scale!r}] sets {clash}, which its CONFIG has already: queued settings "
                         f"may only add to the config; remove them from QUEUED")
    return config.Config(chapter, scale, {**cfg.as_dict(), **queued})


def missing_units(chapter: str, scale: str, seed: int = 0) -> list[str]:
    """The keys of ``chapter``'s units at ``scale`` (its ``units_keys`` under :func:`unit_config`, in order)
    that neither the repository's journal of that config nor the chapter's current cache
    (``units.jsonl.gz``) holds."""
    import gzip
    import importlib

    from gmp import results

    experiment = importlib.import_module(f"gmp.experiments.{chapter}")
    cfg = unit_config(chapter, scale)
    have = set(results.journal_units(results.journal_path(chapter, scale, cfg.digest)))
    root = results.results_root()
    cache = root / chapter / scale / "units.jsonl.gz" if root else None
    if cache is not None and cache.is_file() and results.cached(chapter, results._claims_of(chapter)[0].result,
                                                                  scale).current:
        have |= {json.loads(line)["key"] for line in gzip.decompress(cache.read_bytes()).decode().splitlines() if line}
    return [key for key in experiment.units_keys(cfg, seed) if key not in have]


def compute_units(out: Path, chapter: str, scale: str, device: str, deadline: float, seed: int = 0) -> dict[str, Any]:
    """Compute ``chapter``'s :func:`missing_units` (under :func:`unit_config`) that ``out``'s journal lacks (the
    stacked fit's, :func:`compute_units_stacked`, are there already) one at a time on ``device`` until ``deadline``
    (monotonic s), each journalled whole under ``out/<chapter>/_partial/`` as it finishes, with what was done
    in ``out/<chapter>/units.json`` after each unit. Meant for a child process that the caller stops at the
    deadline: a unit cut short is never journalled in part, but its last checkpoint (the chapter's
    ``store.scratch``, written every few epochs) stays under ``out/<chapter>/_partial/<scale>-<digest>/``
    (the caller moves it to ``<scale>-<digest>.<unit>.pt`` beside the journal, to come back), and a unit whose
    checkpoint the repository holds there (:func:`merge` puts a returned one) resumes from it."""
    import importlib

    from gmp import results

    experiment = importlib.import_module(f"gmp.experiments.{chapter}")
    cfg = unit_config(chapter, scale)
    keys = missing_units(chapter, scale, seed)
    summary: dict[str, Any] = {"scale": scale, "config_digest": cfg.digest, "pending": keys, "done": {}}
    staging = out / chapter / f".staging-{scale}"
    report = out / chapter / "units.json"
    previous = os.environ.get(results.STAGING_ENV)
    os.environ[results.STAGING_ENV] = str(staging)
    root = results.results_root()
    try:
        store = results.Store(chapter, cfg)
        keys = summary["pending"] = [key for key in keys if store.journalled(key) is None]  # not the stacked fit's
        units = experiment.units(cfg, store, seed, device)
        _write_json(report, summary)
        for key in keys:
            if time.monotonic() > deadline:
                summary["stopped"] = f"{key}: not started, the deadline has passed"
                break
            scratch = store.scratch(key)
            saved = root / chapter / scratch.relative_to(out / chapter) if root is not None else None
            if saved is not None and saved.is_file() and not scratch.exists():
                scratch.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(saved, scratch)
                summary.setdefault("resumed", []).append(key)
                print(f"  {chapter} {key}: resumed from {saved}", flush=True)
            summary["started"] = key
            _write_json(report, summary)
            started = time.monotonic()
            store.memo(key, units[key])
            summary["done"][key] = round(time.monotonic() - started, 1)
            _write_json(report, summary)
            print(f"  {chapter} {key}: {summary['done'][key]:.0f} s", flush=True)
    finally:
        if previous is None:
            os.environ.pop(results.STAGING_ENV, None)
        else:
            os.environ[results.STAGING_ENV] = previous
        shutil.rmtree(staging, ignore_errors=True)  # at most 8 files come back from a GPU machine
    _write_json(report, summary)
    return summary


STACKED_REPORT = "units-stacked.json"
"""The file under ``OUT`` where the stacked fit's child process reports (:func:`stacked_units_job` reads it into the
summary and removes it: at most 8 files come back)."""


def _with_staging(staging: Path, make: Any) -> Any:
    """``make()`` with :data:`gmp.results.STAGING_ENV` set to ``staging`` (a :class:`gmp.results.Store` reads it)."""
    from gmp import results

    previous = os.environ.get(results.STAGING_ENV)
    os.environ[results.STAGING_ENV] = str(staging)
    try:
        return make()
    finally:
        if previous is None:
            os.environ.pop(results.STAGING_ENV, None)
        else:
            os.environ[results.STAGING_ENV] = previous


def compute_units_stacked(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int = 0,
                          probe_only: bool = False) -> dict[str, Any]:
    """Train the missing units of chapters as one stacked fit where their fits allow it; what was done.

    The units are ``chapters``' :func:`missing_units`, the stacked fit :mod:`gmp.minibatch_queue`'s, on
    ``device`` until ``deadline`` (monotonic s); the report also goes to ``out/`` :data:`STACKED_REPORT` as it
    goes.

    Each unit is called once with its ``fit_stack`` recorded, not run (:func:`gmp.minibatch_queue.planned`); a
    unit that fits otherwise is left to :func:`compute_units` (``not_stacked``, with why). The planned fits
    split into queues of one image and protocol (:func:`gmp.minibatch_queue.queues`); each queue's step is
    probed on a throw-away stack (a few updates, captured as a CUDA graph on CUDA), and the queue trains only
    when the probe predicts that all its epochs end before the deadline. A unit is journalled whole under
    ``out/<chapter>/_partial/`` as soon as its fits have ended, by its own code given their curves
    (:func:`gmp.minibatch_queue.replayed`), exactly as :func:`compute_units` would journal it; its seconds are
    its networks' share of the stack's time. ``probe_only`` stops after the probes (their prediction reported)."""
    import importlib

    from gmp import minibatch_queue as mq
    from gmp import results

    report = out / STACKED_REPORT
    summary: dict[str, Any] = {"scale": scale, "device": device, "not_stacked": {}, "queues": [], "done": {}}
    planned: list[tuple[str, str, list[Any]]] = []  # (chapter, key, its fits)
    stores, unit_fns, modules = {}, {}, {}
    for chapter in chapters:
        experiment = importlib.import_module(f"gmp.experiments.{chapter}")
        cfg = unit_config(chapter, scale)
        store = _with_staging(out / chapter / f".staging-{scale}", lambda: results.Store(chapter, cfg))
        stores[chapter], modules[chapter] = store, experiment
        unit_fns[chapter] = experiment.units(cfg, store, seed, device)
        for key in missing_units(chapter, scale, seed):
            if store.journalled(key) is not None:
                continue
            try:
                with mq.planned(experiment) as jobs:
                    unit_fns[chapter][key]()
            except mq.NotStackable as err:
                summary["not_stacked"][f"{chapter}/{key}"] = str(err)
                continue
            planned.append((chapter, key, list(jobs)))
    jobs = [job for _, _, fits in planned for job in fits]
    owner = [n for n, (_, _, fits) in enumerate(planned) for _ in fits]  # the unit of each job
    summary["units"] = [f"{chapter}/{key}" for chapter, key, _ in planned]
    summary["networks"] = sum(len(job.seeds) for job in jobs)
    _write_json(report, summary)
    curves: dict[int, list[Any]] = {}

    def journal(n: int) -> None:
        chapter, key, fits = planned[n]
        first = next(i for i, o in enumerate(owner) if o == n)
        own = [curves[first + i] for i in range(len(fits))]
        with mq.replayed(modules[chapter], fits, own):
            value = unit_fns[chapter][key]()
        seconds = sum(float(fit.seconds[-1]) for fits_curves in own for fit in fits_curves if len(fit.seconds))
        _with_staging(out / chapter / f".staging-{scale}", lambda: stores[chapter].record({key: (value, seconds)}))
        summary["done"][f"{chapter}/{key}"] = round(seconds, 1)
        _write_json(report, summary)
        print(f"  stacked {chapter} {key}: journalled", flush=True)

    for queue in mq.queues(jobs):
        units = sorted({owner[i] for i in queue})
        if any(owner[i] in units for i in set(range(len(jobs))) - set(queue)):
            for n in units:  # a unit whose fits fall in two queues: left to the unit-by-unit path
                summary["not_stacked"][summary["units"][n]] = "its fits need more than one queue"
            continue
        entry: dict[str, Any] = {"units": [summary["units"][n] for n in units],
                                 "networks": sum(len(jobs[i].seeds) for i in queue)}
        summary["queues"].append(entry)
        notes: list[str] = []
        try:
            probed = mq.probe([jobs[i] for i in queue], device, notes=notes)
            entry.update(probe_mode=probed["mode"], probe_ms_per_step=round(probed["ms_per_step"], 4),
                         probe_s_per_epoch_besides_updates=round(probed["s_per_epoch_besides_updates"], 3),
                         groups=probed["groups"],
                         predicted_minutes=float(f"{probed['predicted_minutes']:.4g}"))
            left = (deadline - time.monotonic()) / 60
            entry["minutes_left"] = round(left, 2)
            print(f"  stacked queue of {entry['networks']} networks ({len(units)} units, {probed['mode']}): "
                  f"{probed['ms_per_step']:.3f} ms per "
                  f"step, predicted {entry['predicted_minutes']:.1f} min, {left:.1f} min left", flush=True)
            if probe_only:
                entry["status"] = "probed only"
                continue
            if entry["predicted_minutes"] * 1.1 > left:
                entry["status"] = "not run: the probe predicts it ends past the deadline (its units: unit by unit)"
                continue
            started = time.monotonic()
            done = {n: 0 for n in units}
            needed = {n: sum(owner[i] == n for i in queue) for n in units}

            def ended(j: int, fits: list[Any]) -> None:
                curves[queue[j]] = fits
                done[owner[queue[j]]] += 1
                if done[owner[queue[j]]] == needed[owner[queue[j]]]:
                    journal(owner[queue[j]])

            mq.fit_jobs([jobs[i] for i in queue], device, probed["mode"], deadline=deadline, on_end=ended,
                        notes=notes)
            entry.update(status="trained", minutes=round((time.monotonic() - started) / 60, 2))
        except Exception as err:
            entry["status"] = (f"failed (the units it had not journalled go unit by unit): {type(err).__name__}: "
                               f"{err}")[:1500]
            print(f"  stacked queue: {entry['status']}", flush=True)
        finally:
            entry["notes"] = notes
            _write_json(report, summary)
    return summary


def stacked_units_job(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int,
                      probe_only: bool = False) -> dict[str, Any]:
    """:func:`compute_units_stacked` in a child process stopped at ``deadline``; its report (what it did, or how it
    failed), for the summary. What it has not journalled is left to ``units_job`` (the unit-by-unit path)."""
    seconds = deadline - time.monotonic()
    if seconds < 60:
        return {"status": f"{max(seconds, 0):.0f} s left: not started"}
    report = out / STACKED_REPORT
    command = [sys.executable, "-m", "gmp.gpu", "stacked", str(out), *chapters, "--scale", scale, "--device", device,
               "--seconds", str(seconds), "--seed", str(seed), *(["--probe-only"] if probe_only else [])]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 10, cwd=ROOT)
        done: dict[str, Any] = {"returncode": child.returncode, "log": (child.stdout + child.stderr)[-2000:]}
    except subprocess.TimeoutExpired as stopped:
        log = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                      for part in (stopped.stdout or "", stopped.stderr or ""))
        done = {"status": "stopped at the deadline", "log": log[-2000:]}
    if report.is_file():
        done.update(json.loads(report.read_text()))
        report.unlink()
    for chapter in chapters:
        _keep_returned(out / chapter)
    return done


def units_job(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int) -> dict[str, Any]:
    """:func:`compute_units` of each chapter in a child process stopped at ``deadline``; what each did."""
    done: dict[str, Any] = {}
    for chapter in chapters:
        seconds = deadline - time.monotonic()
        if seconds < 60:
            done[chapter] = {"status": f"{max(seconds, 0):.0f} s left: not started"}
            continue
        report = out / chapter / "units.json"
        command = [sys.executable, "-m", "gmp.gpu", "units", str(out), chapter, "--scale", scale, "--device", device,
                   "--seconds", str(seconds), "--seed", str(seed)]
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 10, cwd=ROOT)
            done[chapter] = {"returncode": child.returncode, "log": (child.stdout + child.stderr)[-2000:]}
        except subprocess.TimeoutExpired as stopped:
            log = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                          for part in (stopped.stdout or "", stopped.stderr or ""))
            done[chapter] = {"status": "stopped at the deadline", "log": log[-2000:]}
        if report.is_file():
            done[chapter].update(json.loads(report.read_text()))
        _keep_returned(out / chapter)
    return done


RETURN_FILES = 8
"""The most files that come back from a GPU machine's ``OUT`` (:func:`return_problems`)."""
RETURN_BYTES = 16 * 2 ** 20
"""The largest file that comes back from a GPU machine's ``OUT``, in bytes (16 MiB)."""
RETURN_DEPTH = 2
"""The most folders below ``OUT`` that a file coming back from a GPU machine may lie in; every name on its
path is made of letters, digits, ``.``, ``_`` and ``-`` only."""


def return_problems(out: Path) -> list[str]:
    """What under ``out`` would not come back from a GPU machine (:data:`RETURN_FILES`), one line each;
    empty when everything would."""
    paths = sorted(path for path in out.rglob("*") if path.is_file() or path.is_symlink())
    problems = [f"{len(paths)} files, more than {RETURN_FILES}"] if len(paths) > RETURN_FILES else []
    for path in paths:
        name = path.relative_to(out).as_posix()
        if path.is_symlink():
            problems.append(f"{name}: a link, not a plain file")
        elif path.stat().st_size > RETURN_BYTES:
            problems.append(f"{name}: {path.stat().st_size:,} bytes, more than {RETURN_BYTES // 2 ** 20} MiB")
        if name.count("/") > RETURN_DEPTH:
            problems.append(f"{name}: {name.count('/')} folders below OUT, more than {RETURN_DEPTH}")
        if not all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in name.split("/")):
            problems.append(f"{name}: a name with characters other than letters, digits, '.', '_' and '-'")
    return problems


def _within_return_limits(out: Path) -> list[str]:
    """Remove the returned checkpoints (``*/_partial/*.pt``) that would not come back (over
    :data:`RETURN_BYTES`), then, while ``out`` holds more than :data:`RETURN_FILES` files, the others, last
    by name first (their units start again from the start); what was removed, and why."""
    removed = []
    checkpoints = sorted(out.glob("*/_partial/*.pt"))
    for path in list(checkpoints):
        if path.stat().st_size > RETURN_BYTES:
            checkpoints.remove(path)
            path.unlink()
            removed.append(f"{path.relative_to(out)}: over {RETURN_BYTES // 2 ** 20} MiB")
    while checkpoints and sum(p.is_file() for p in out.rglob("*")) > RETURN_FILES:
        path = checkpoints.pop()
        path.unlink()
        removed.append(f"{path.relative_to(out)}: more than {RETURN_FILES} files")
    for note in removed:
        print(f"  removed {note} (it would not come back)", flush=True)
    return removed


def _returned_checkpoint(journal_stem: str, scratch_name: str) -> str:
    """The name under ``OUT/<chapter>/_partial/`` of the checkpoint ``<journal_stem>/<scratch_name>`` (where
    the unit checkpoints, ``Store.scratch``): ``<journal_stem>.<scratch_name>``, one folder less deep, so that
    it comes back (:data:`RETURN_DEPTH`)."""
    return f"{journal_stem}.{scratch_name}"


def _unfinished(scratch_stem: str, journalled: Mapping[str, Any]) -> bool:
    """Whether a unit's checkpoint (``Store.scratch`` of its key, or of ``<key>-<part>`` for a unit of
    several fits) belongs to no unit of ``journalled``."""
    return not any(scratch_stem == key or scratch_stem.startswith(f"{key}-") for key in journalled)


def _keep_returned(folder: Path) -> None:
    """Remove from ``folder`` all but its journals (``_partial/*.jsonl``) and the checkpoints of a unit cut
    short (``_partial/<scale>-<digest>/<unit>.pt``, whose unit the journal beside it lacks), which move to
    ``_partial/<scale>-<digest>.<unit>.pt`` (:data:`RETURN_DEPTH`): a child stopped at the deadline leaves
    its bookkeeping, locks and the checkpoints of finished units behind, and at most 8 files come back from
    a GPU machine (one unit at a time runs per chapter)."""
    from gmp import results

    if not folder.is_dir():
        return
    partial = folder / "_partial"
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
            continue
        if path.parent == partial and path.suffix in (".jsonl", ".pt") and not path.name.startswith("."):
            continue  # a journal, or a checkpoint moved here already
        if path.parent.parent == partial and path.suffix == ".pt" and not path.name.startswith(".") and \
                _unfinished(path.stem, results.journal_units(partial / f"{path.parent.name}.jsonl")):
            os.replace(path, partial / _returned_checkpoint(path.parent.name, path.name))
        else:
            path.unlink()


def _whole(entries: Sequence[Mapping[str, Any]], epochs: int) -> bool:
    """Whether a network's journal entries (epochs 1, 2, ... in order) are a whole run: all
    ``epochs`` epochs, or every epoch up to one that diverged and only after-divergence ones after it."""
    values = [e["value"] for e in entries]
    if [v.get("epoch") for v in values] != list(range(1, len(values) + 1)):
        return False
    diverged = next((i for i, v in enumerate(values) if v.get("diverged")), None)
    return len(values) == epochs and (diverged is None or all(v.get("after_divergence") for v in values[diverged + 1:]))


def _journal_config(path: Path, chapter: str) -> Any:
    """The config of ``chapter`` that the returned journal ``path`` (``<scale>-<digest>.jsonl``), or
    checkpoint (``<scale>-<digest>.<unit>.pt``), was written for, today's or :func:`unit_config`; a
    ValueError when it is neither."""
    from gmp import config

    scale, _, digest = path.name.split(".", 1)[0].partition("-")
    if scale not in config.SCALES or not digest:
        raise ValueError(f"{path}: not a name that gmp.gpu writes (<scale>-<config digest>.jsonl or "
                         f"<scale>-<config digest>.<unit>.pt, scale one of {', '.join(config.SCALES)}); nothing "
                         "was merged: remove it from the returned folder and merge again")
    today, queued = config.load(chapter, scale), unit_config(chapter, scale)
    if digest not in (today.digest, queued.digest):
        raise ValueError(f"{path} was written for config {digest}, but {chapter}'s {scale} config is now "
                         f"{today.digest}{f' ({queued.digest} with its queued settings)' if queued.digest != today.digest else ''}"
                         f": its units were computed under other settings and cannot join this run")
    return queued if digest == queued.digest else today


def _checkpoint_epoch(path: Path) -> int:
    """The epochs a unit's checkpoint (:func:`gmp.minibatch.fit_stack`'s) has trained."""
    from gmp.train import load_checkpoint

    return int(load_checkpoint(path, keys=("epoch",))["epoch"])


def merge(out: Path, results_root: Path | None = None) -> list[str]:
    """Add the units journalled under ``out/<chapter>/_partial/`` to the journal of the same name in
    ``results_root`` (default: the repository's ``book/_results``) under ``<chapter>/_partial/``.

    For ``lu_real`` only whole networks are added (``_whole``), and a network that already has an
    entry there is left out whole, so that two runs are never spliced into one trajectory; for the
    other chapters each unit is whole by itself and is added unless its key is there already.
    A returned checkpoint of a unit cut short (``out/<chapter>/_partial/<scale>-<digest>.<unit>.pt``) goes to
    where the unit checkpoints in ``results_root`` (``<chapter>/_partial/<scale>-<digest>/<unit>.pt``), where
    the next GPU command (which carries it) or a CPU run resumes the unit, unless the unit is journalled there
    or the checkpoint there has reached a later epoch.

    Everything that came back is checked before anything in ``results_root`` changes: a journal or
    checkpoint of another config, a damaged checkpoint or a name gmp.gpu does not write raises a
    ValueError and nothing is merged. Returns the journal keys added."""
    from gmp import results

    root = results_root if results_root is not None else results.results_root()
    if root is None:
        raise ValueError("no results folder: run from a clone of the book's repository or set GMP_RESULTS")
    appends: list[tuple[Path, list[dict[str, Any]]]] = []  # (journal in root, entries to add)
    copies: list[tuple[Path, Path, int]] = []  # (returned checkpoint, where it goes, its epoch)
    for path in sorted(out.glob("*/_partial/*.jsonl")):
        chapter = path.parent.parent.name
        if chapter == "lu_real":
            continue
        _journal_config(path, chapter)
        target = root / chapter / "_partial" / path.name
        present = set(results.journal_units(target))
        entries = results.journal_entries(path)
        for entry in entries:
            if entry["key"] in present:
                print(f"  {chapter} {entry['key']}: already in {target.name}, left out", flush=True)
        lines = [e for e in entries if e["key"] not in present]
        if lines:
            appends.append((target, results.with_code(lines, entries)))
    for path in sorted(out.glob("*/_partial/*.pt")):
        chapter = path.parents[1].name
        if chapter == "lu_real" or path.name.startswith("."):
            continue
        _journal_config(path, chapter)
        stem, unit = path.name.split(".", 1)
        try:
            epoch = _checkpoint_epoch(path)
        except ValueError as err:
            raise ValueError(f"{err}. Nothing was merged: remove {path} from the returned folder (its unit then "
                             "starts afresh, or from the repository's checkpoint) and merge again") from None
        target = root / chapter / "_partial" / stem / unit
        journalled = {**results.journal_units(target.parent.with_suffix(".jsonl")),
                      **results.journal_units(path.with_name(f"{stem}.jsonl"))}
        if not _unfinished(target.stem, journalled):
            print(f"  {chapter} {target.stem}: journalled already, its checkpoint left out", flush=True)
        elif target.is_file() and _checkpoint_epoch(target) >= epoch:
            print(f"  {chapter} {target.stem}: the repository's checkpoint is at epoch {_checkpoint_epoch(target)}, "
                  f"the returned one at {epoch}: kept the repository's", flush=True)
        else:
            copies.append((path, target, epoch))
    for path in sorted((out / "lu_real" / "_partial").glob("*.jsonl")):
        cfg = _journal_config(path, "lu_real")
        target = root / "lu_real" / "_partial" / path.name
        present = {key.rsplit("/", 1)[0] for key in results.journal_units(target)}
        networks: dict[str, list[dict[str, Any]]] = {}
        for entry in results.journal_entries(path):
            networks.setdefault(entry["key"].rsplit("/", 1)[0], []).append(entry)
        lines = []
        for network, entries in networks.items():
            epochs = int(cfg["epochs"][network.split("/")[0]])
            if network in present:
                print(f"  {network}: already in {target.name}, left out", flush=True)
            elif not _whole(entries, epochs):
                print(f"  {network}: not a whole run ({len(entries)} entries), left out", flush=True)
            else:
                lines += entries
        if lines:
            appends.append((target, lines))
    for source, target, epoch in copies:
        results.atomic_write_bytes(target, source.read_bytes())
        print(f"  {target.parents[2].name} {target.stem}: checkpoint at epoch {epoch} put in {target}", flush=True)
    added = []
    for target, lines in appends:
        results.append_journal(target, [json.dumps(e) for e in lines])
        added += [e["key"] for e in lines]
    return added


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["units"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu units", description=compute_units.__doc__.split("\n")[0])
        parser.add_argument("out", type=Path)
        parser.add_argument("chapter", choices=UNIT_CHAPTERS)
        parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
        parser.add_argument("--device", default="cuda")
        parser.add_argument("--seconds", type=float, required=True, help="time until the deadline")
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args(argv[1:])
        compute_units(args.out, args.chapter, args.scale, args.device, time.monotonic() + args.seconds, args.seed)
        return 0
    if argv[:1] == ["stacked"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu stacked",
                                         description=compute_units_stacked.__doc__.split("\n")[0])
        parser.add_argument("out", type=Path)
        parser.add_argument("chapters", nargs="+", choices=UNIT_CHAPTERS)
        parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
        parser.add_argument("--device", default="cuda")
        parser.add_argument("--seconds", type=float, required=True, help="time until the deadline")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--probe-only", action="store_true", help="predict each queue's time; train nothing")
        args = parser.parse_args(argv[1:])
        compute_units_stacked(args.out, args.chapters, args.scale, args.device, time.monotonic() + args.seconds,
                              args.seed, args.probe_only)
        return 0
    if argv[:1] == ["merge"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu merge", description=merge.__doc__.split("\n")[0])
        parser.add_argument("out", type=Path)
        args = parser.parse_args(argv[1:])
        added = merge(args.out)
        print(f"added {len(added)} journal entries")
        return 0
    parser = argparse.ArgumentParser(prog="python -m gmp.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder whose contents come back (e.g. $OUT)")
    parser.add_argument("--seconds", type=float, default=530, help="the whole command's deadline (default 530)")
    parser.add_argument("--smoke-seconds", type=float, default=110, help="budget of the chapters' smoke run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
    parser.add_argument("--networks", type=int, default=None, help="networks per group (default: what fits)")
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--chapters", nargs="+", default=None, help="smoke only these chapters (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--units-seconds", type=float, default=0.0,
                        help="seconds kept from the lu_real group for the Part III units (default 0: what it leaves)")
    parser.add_argument("--units", nargs="*", default=list(UNIT_CHAPTERS), choices=UNIT_CHAPTERS,
                        help="chapters of the second job (default: all of UNIT_CHAPTERS; none to skip it)")
    parser.add_argument("--unit-by-unit", action="store_true",
                        help="the second job without the stacked fit (each unit by itself, resumable)")
    args = parser.parse_args(argv)
    begin = time.monotonic()
    deadline = begin + args.seconds - 30  # room to write the journal (one write) and the summary
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    summary: dict[str, Any] = {"environment": environment(args.device)}
    print(json.dumps(summary["environment"], indent=1), flush=True)
    _write_json(out / "gpu.json", summary["environment"])
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        summary["error"] = "no CUDA device: nothing run"
        _write_json(out / "summary.json", summary)
        print(summary["error"], flush=True)
        return 2
    group = None
    try:  # the run's next group and its data first: missing data stops the command before the smoke run
        from gmp import config

        cfg = config.load("lu_real", args.scale)
        group = load_group(cfg, args.seed)
    except Exception:
        summary["lu_real"] = {"error": traceback.format_exc()[-3000:]}
    if not args.skip_smoke:
        try:
            summary["smoke"] = smoke(out, args.device, args.smoke_seconds, workers=min(8, os.cpu_count() or 1),
                                     chapters=args.chapters)
        except Exception:
            summary["smoke"] = {"error": traceback.format_exc()[-2000:]}
        _write_json(out / "summary.json", summary)
    if group is not None:
        try:
            summary["lu_real"] = train_group(out, cfg, args.device, deadline - args.units_seconds, args.seed,
                                             args.networks, group)
        except Exception:
            summary["lu_real"] = {"error": traceback.format_exc()[-3000:]}
        _write_json(out / "summary.json", summary)
    if args.units and not args.unit_by_unit:
        try:
            summary["units_stacked"] = stacked_units_job(out, args.units, args.scale, args.device, deadline, args.seed)
        except Exception:
            summary["units_stacked"] = {"error": traceback.format_exc()[-3000:]}
        _write_json(out / "summary.json", summary)
    if args.units:
        try:
            summary["units"] = units_job(out, args.units, args.scale, args.device, deadline, args.seed)
        except Exception:
            summary["units"] = {"error": traceback.format_exc()[-3000:]}
    summary["seconds"] = round(time.monotonic() - begin, 1)
    _write_json(out / "summary.json", summary)
    summary["left_out"] = _within_return_limits(out)
    summary["return_problems"] = return_problems(out)
    _write_json(out / "summary.json", summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "environment"}, indent=1, default=str), flush=True)
    return 0 if "error" not in summary["lu_real"] else 1


if __name__ == "__main__":
    sys.exit(main())
