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
4. ``OUT/summary.json``: what ran, in which mode (CUDA graph or eager), the measured step
   times and the minutes per group.

``python -m gmp.gpu merge OUT`` adds the networks of a returned journal to the repository's
journal (``book/_results/lu_real/_partial/``), refusing another config's. The same command
runs on a CPU at smoke scale (``--device cpu --scale smoke``), which the test suite does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["main", "chapter_code", "next_group", "train_group", "merge"]


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


_PRELUDE = """
import sys, types
import matplotlib
matplotlib.use("Agg")
try:
    import IPython.display
except ImportError:
    display_module = types.ModuleType("IPython.display")
    class _Shown(str):
        def __new__(cls, data="", *args, **kwargs):
            return str.__new__(cls, data)
    for _name in ("HTML", "Markdown", "Image", "Math"):
        setattr(display_module, _name, _Shown)
    display_module.display = lambda *args, **kwargs: None
    package = types.ModuleType("IPython")
    package.display = display_module
    sys.modules["IPython"], sys.modules["IPython.display"] = package, display_module
import builtins
builtins.display = sys.modules["IPython.display"].display
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
    """Every chapter (or those named) at smoke scale on ``device`` within ``budget`` seconds, then
    the ``cuda`` tests."""
    notebooks = sorted(nb for nb in ROOT.glob("book/part*/*.ipynb") if not chapters or nb.stem in chapters)
    if chapters and len(notebooks) != len(set(chapters)):
        raise ValueError(f"unknown chapter among {', '.join(chapters)}: expected names of book/part*/*.ipynb")
    deadline = time.monotonic() + budget
    results = []
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        futures = [pool.submit(run_chapter, nb, "smoke", device, budget * 0.75) for nb in notebooks]
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            results.append(result)
            _append(out / "smoke.jsonl", result)
            print(f"  smoke {result['chapter']}: {'ok' if result['ok'] else 'FAILED'} ({result['seconds']} s)", flush=True)
    left = max(deadline - time.monotonic(), 20)
    start = time.perf_counter()
    try:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                                str(ROOT / "tests")], cwd=ROOT, capture_output=True, text=True, timeout=left)
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
            training._ratio = torch.zeros(steps + 4, len(labels), dtype=torch.float64, device=training.device)
            training._max_grad = torch.zeros_like(training._ratio)
            for _ in range(2):
                training._full_step(x[:size], y[:size])
            if x.shape[0] % size:  # the shorter last batch and the evaluation's chunks: compiled here, not in the run
                training._train_step(x[:x.shape[0] % size], y[:x.shape[0] % size])
            training._accuracy(x[:1000], y[:1000])
            if training.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(steps):
                training._full_step(x[:size], y[:size])
            if training.device.type == "cuda":
                torch.cuda.synchronize()
            return mode, (time.perf_counter() - start) / steps
        except Exception as err:
            notes.append(f"{mode} failed, trying the next mode: {type(err).__name__}: {err}"[:600])
            print(f"  {notes[-1]}", flush=True)
        finally:
            del training
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    raise RuntimeError(f"every mode failed ({', '.join(modes)}): " + " | ".join(notes[-len(modes):]))


def train_group(out: Path, cfg: Any, device: str, deadline: float, seed: int, networks: int | None) -> dict[str, Any]:
    """Train the next group (:func:`next_group`) of the ``lu_real`` run until ``deadline`` (monotonic s)."""
    from gmp import results
    from gmp.experiments import lu_real

    journal = results.journal_path("lu_real", cfg.scale, cfg.digest)
    units = results.journal_units(journal) if journal is not None else {}
    dataset, labels = next_group(cfg, units, seed)
    summary: dict[str, Any] = {"scale": cfg.scale, "config_digest": cfg.digest, "dataset": dataset,
                               "pending": labels, "notes": []}
    if not labels:
        summary["status"] = "every network of the run is journalled"
        return summary
    train = lu_real.load_split(dataset, True, cfg["max_train"])
    test = lu_real.load_split(dataset, False)
    epochs = int(cfg["epochs"][dataset])
    steps = math.ceil(train[0].shape[0] / int(cfg["batch_size"]))
    x, y = train[0].to(device), train[1].to(device)
    width = train[0].shape[1]

    def minutes(step_seconds: float) -> float:
        return epochs * steps * step_seconds * 1.3 / 60  # 30% for each epoch's evaluation and drift, and slack

    built = {label: lu_real.build(label.removesuffix("-BN"), label.endswith("-BN"), width, cfg, seed)
             for label in labels}
    modes = MODES if device.startswith("cuda") else ("eager",)
    mode, step = _probe(labels, list(built.values()), cfg, device, x, y, summary["notes"], modes)
    modes = modes[modes.index(mode):]
    summary["probe_ms_per_step"] = {len(labels): 1e3 * step}
    count = len(labels) if networks is None else min(networks, len(labels))
    left = (deadline - time.monotonic()) / 60
    if networks is None and minutes(step) > left:
        count = max(1, int(len(labels) * left / minutes(step)))
        mode, small = _probe(labels[:count], [built[k] for k in labels[:count]], cfg, device, x, y, summary["notes"],
                             modes)
        summary["probe_ms_per_step"][count] = 1e3 * small
        probed, total = count, len(labels)

        def estimate(k: int) -> float:  # seconds per step of k networks: between the two measured sizes, linear
            if k <= probed:
                return small * k / probed
            return small + (step - small) * (k - probed) / (total - probed)

        left = (deadline - time.monotonic()) / 60
        fits = [k for k in range(1, total + 1) if minutes(estimate(k)) <= 0.9 * left]
        count = max(fits) if fits else 0
        if count and count not in summary["probe_ms_per_step"]:  # measure (and compile for) the size to be run
            mode, chosen = _probe(labels[:count], [built[k] for k in labels[:count]], cfg, device, x, y,
                                  summary["notes"], modes)
            summary["probe_ms_per_step"][count] = 1e3 * chosen
            left = (deadline - time.monotonic()) / 60
            if minutes(chosen) > 0.9 * left:
                count -= 1  # measured slower than interpolated: one fewer (not measured again)
    print(f"  step of {len(labels)} networks ({mode}): {1e3 * step:.2f} ms, {minutes(step):.1f} min for {epochs} "
          f"epochs; {left:.1f} min left: training {count}", flush=True)
    if count == 0:
        summary["status"] = (f"not even one network finishes its {epochs} epochs in the {left:.1f} min left at the "
                             "measured step times (probe_ms_per_step): nothing trained")
        return summary
    chosen = labels[:count]
    training = lu_real.StackedTraining(chosen, width, cfg, device, seed, graph=mode.startswith("CUDA graph"),
                                       compile="compiled" in mode, networks=[built[k] for k in chosen])
    del built
    summary.update(networks=chosen, epochs=epochs, steps_per_epoch=steps, mode=mode)
    unfinished_path = out / "lu_real" / f"unfinished-{cfg.scale}.jsonl"
    kept: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for epoch in range(1, epochs + 1):
        per_epoch = (time.perf_counter() - started) / max(epoch - 1, 1)
        if epoch > 1 and time.monotonic() + per_epoch * (epochs - epoch + 1) > deadline:
            summary["notes"].append(f"stopped after epoch {epoch - 1}: at {per_epoch:.1f} s per epoch the group would "
                                    "end past the deadline")
            break  # the group cannot finish: end now and leave the rest of the lease unspent
        metrics = training.run_epoch(train, test, final=epoch == epochs)
        for label, m in zip(chosen, metrics):
            key = lu_real.epoch_key(dataset, label, seed, epoch)
            kept[key] = m
            _append(unfinished_path, {"key": key, "value": m, "note": "not journalled until the group finishes"})
        seconds = time.perf_counter() - started
        print(f"  epoch {epoch}/{epochs}: {seconds / 60:.1f} min, test accuracy "
              + ", ".join(f"{label} {m.get('test_acc')}" for label, m in zip(chosen, metrics)), flush=True)
        if all(m["diverged"] for m in metrics):
            break
    finished = training.epoch == epochs or all(
        any(kept.get(lu_real.epoch_key(dataset, label, seed, e), {}).get("diverged") for e in range(1, epochs + 1))
        for label in chosen)
    elapsed = time.perf_counter() - started
    summary.update(mode=training.mode, epochs_done=training.epoch, minutes=elapsed / 60, finished=finished,
                   ms_per_step=1e3 * elapsed / max(training.step, 1) if training.epoch else None)
    if finished:
        os.environ[results.STAGING_ENV] = str(out / "lu_real" / f".staging-{cfg.scale}")
        store = results.Store("lu_real", cfg)
        for key, value in kept.items():
            store.memo(key, lambda value=value: value)
        unfinished_path.unlink(missing_ok=True)
        summary["journal"] = str(store._journal_path.relative_to(out))
        summary["status"] = f"{len(chosen)} networks journalled whole"
    else:
        summary["status"] = (f"stopped by the deadline at epoch {training.epoch} of {epochs}: nothing journalled; "
                             f"the epochs done are in {unfinished_path.relative_to(out)}")
    return summary


def merge(out: Path, results_root: Path | None = None) -> list[str]:
    """Add the journal entries under ``out/lu_real/_partial/`` to the journal of the same name in
    ``results_root`` (default: the repository's ``book/_results``) under ``lu_real/_partial/``;
    keys already there are kept. Returns the keys added."""
    from gmp import config, results

    root = results_root if results_root is not None else results.results_root()
    if root is None:
        raise ValueError("no results folder: run from a clone of the book's repository or set GMP_RESULTS")
    added = []
    for path in sorted((out / "lu_real" / "_partial").glob("*.jsonl")):
        scale, digest = path.stem.split("-", 1)
        current = config.load("lu_real", scale).digest
        if digest != current:
            raise ValueError(f"{path} was written for config {digest}, but lu_real's {scale} config is now {current}: "
                             "its networks were trained under other settings and cannot join this run")
        target = root / "lu_real" / "_partial" / path.name
        have = results.journal_units(target)
        lines = [e for e in results.journal_entries(path) if e["key"] not in have]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as handle:
            for entry in lines:
                handle.write(json.dumps(entry) + "\n")
        added += [e["key"] for e in lines]
    return added


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["merge"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu merge", description=merge.__doc__.split("\n")[0])
        parser.add_argument("out", type=Path)
        args = parser.parse_args(argv[1:])
        added = merge(args.out)
        print(f"added {len(added)} journal entries ({len({k.rsplit('/', 1)[0] for k in added})} networks)")
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
    args = parser.parse_args(argv)
    begin = time.monotonic()
    deadline = begin + args.seconds - 45  # room to write the journal (an fsync per network-epoch) and summary
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
    if not args.skip_smoke:
        try:
            summary["smoke"] = smoke(out, args.device, args.smoke_seconds, workers=min(8, os.cpu_count() or 1),
                                     chapters=args.chapters)
        except Exception:
            summary["smoke"] = {"error": traceback.format_exc()[-2000:]}
        _write_json(out / "summary.json", summary)
    try:
        from gmp import config

        cfg = config.load("lu_real", args.scale)
        summary["lu_real"] = train_group(out, cfg, args.device, deadline, args.seed, args.networks)
    except Exception:
        summary["lu_real"] = {"error": traceback.format_exc()[-3000:]}
    summary["seconds"] = round(time.monotonic() - begin, 1)
    _write_json(out / "summary.json", summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "environment"}, indent=1, default=str), flush=True)
    return 0 if "error" not in summary["lu_real"] else 1


if __name__ == "__main__":
    sys.exit(main())
