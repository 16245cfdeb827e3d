"""Run a chapter with papermill and cache its results with provenance.

    python -m gmp.runs CHAPTER --scale paper [--device cuda] [--seed 0] [--jobs 2]

The chapter's paired notebook ``book/<part>/CHAPTER.ipynb`` is executed with its
``parameters`` cell overridden. Everything the chapter saves with
``gmp.results.Store.save`` lands in a private staging folder; when the run succeeds, the
executed notebook and ``provenance.json`` join it and the folder replaces
``book/_results/CHAPTER/<scale>/``. A failed or interrupted run leaves the previous cache
untouched, and the journal of finished units (``Store.memo``) lets the next run resume.

With ``--jobs N`` (chapters whose experiment module has a ``units`` function: the Part III
image-fitting chapters), N worker processes first journal the chapter's independent units,
each with its share of the CPU threads, and the notebook then runs from the journal.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import gmp
from gmp import config as _config
from gmp import results as _results
from gmp.progress import PROGRESS_ENV


def chapter_notebook(chapter: str, root: Path) -> Path:
    """The paired notebook of ``chapter`` under ``root/book``."""
    found = sorted((root / "book").glob(f"*/{chapter}.ipynb"))
    if not found:
        known = sorted(p.stem for p in (root / "book").glob("*/*.ipynb"))
        raise ValueError(f"no chapter notebook book/*/{chapter}.ipynb; chapters: {', '.join(known) or 'none'}")
    return found[0]


def git_commit(root: Path) -> str:
    """``HEAD``'s commit, with ``+dirty`` when tracked files other than ``book/_results`` differ from it.

    The results folder is left out because a resumed run appends to its own committed journal
    there: that is the run's output, not a change to the code that produced it.
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                f":(exclude){_results.RESULTS_PATH}"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


class WorkersFailed(RuntimeError):
    """Some workers of :func:`prefill` failed; the units they finished are journalled."""


def _units_of(chapter: str):
    """The ``units`` function of the chapter's experiment module (see :func:`prefill`)."""
    units = getattr(_config.experiment(chapter), "units", None)
    if units is None:
        splitting = [c for c in _results.experiment_chapters() if hasattr(_config.experiment(c), "units")]
        raise ValueError(f"{chapter} does not split into independent units for --jobs workers; run it "
                         f"without --jobs (these split: {', '.join(splitting)})")
    if _results.fcntl is None:
        raise ValueError("--jobs needs POSIX file locks (fcntl), which this system lacks; run without --jobs")
    return units


def prefill(chapter: str, scale: str, jobs: int, device: str = "auto", seed: int = 0) -> None:
    """Journal the chapter's independent units with ``jobs`` worker processes.

    The experiment module's ``units(cfg, store, seed, device)`` gives each unit's journal key
    and computation. Worker ``i`` takes every ``jobs``-th unit from the ``i``-th, then the
    others' units from the last backwards, skipping those another worker is computing, and
    at the end waits for those and takes any that are left. Each worker gets an equal share
    of the CPU cores as its ``OMP_NUM_THREADS`` unless that is set already (then every worker
    gets that many). Stopping the caller (Ctrl-C, or SIGTERM as from ``kill``) stops the
    workers; each fit checkpoints itself, so a rerun resumes. Call it with
    ``GMP_RESULTS_STAGING`` set, as :func:`run` does.
    """
    _units_of(chapter)
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, not {jobs}")
    if not os.environ.get(_results.STAGING_ENV):
        raise ValueError(f"prefill journals units only under gmp.runs: set {_results.STAGING_ENV}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, cores // jobs))
    command = [sys.executable, "-m", "gmp.runs", chapter, "--scale", scale, "--device", device, "--seed", str(seed)]
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workers = []
    try:
        for i in range(jobs):
            workers.append(subprocess.Popen(command + ["--worker", f"{i}/{jobs}"],
                                            env={**os.environ, "OMP_NUM_THREADS": threads}))
        failed = sum(worker.wait() != 0 for worker in workers)
    except BaseException:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failed:
        raise WorkersFailed(f"{failed} of {jobs} workers of {chapter} failed (their errors are above); "
                           f"the units they finished are journalled and a rerun resumes from them")


def _work(chapter: str, scale: str, device: str, seed: int, index: int, jobs: int) -> None:
    """Worker ``index`` of :func:`prefill`: journal its share of the units, then help with the rest."""
    cfg = _config.load(chapter, scale)
    store = _results.Store(chapter, cfg)
    todo = _units_of(chapter)(cfg, store, seed, _config.resolve_device(device))
    keys = list(todo)
    mine = keys[index::jobs]
    busy = [key for key in mine + [k for k in reversed(keys) if k not in mine]
            if store.memo(key, todo[key], wait=False) is _results.BUSY]
    for key in busy:
        store.memo(key, todo[key])


def _announce_resume(chapter: str, journal: Path, code: dict) -> None:
    """Say on stderr when a run resumes units that today's code did not compute (see :func:`gmp.results.resumed_code`)."""
    if code["other_code_units"]:
        print(f"gmp.runs: NOTE: resuming {code['other_code_units']} units of {chapter} journalled by code that "
              f"differs from today's in {', '.join(code['changed_modules'])}. They are kept, not recomputed; "
              f"provenance.json records it and the book says so. Delete {journal} to recompute everything.",
              file=sys.stderr)
    if code["code_not_recorded_units"]:
        print(f"gmp.runs: NOTE: resuming {code['code_not_recorded_units']} units of {chapter} journalled with no "
              f"code fingerprint, so whether gmp has changed since is unknown. Delete {journal} to recompute them.",
              file=sys.stderr)


def run(chapter: str, scale: str, device: str = "auto", seed: int = 0, root: Path | None = None,
        kernel: str = "python3", jobs: int = 1) -> Path:
    """Execute ``chapter`` at ``scale`` and return the folder its results were cached in.

    ``jobs`` > 1 first journals the chapter's units with that many workers (:func:`gmp.runs.prefill`).
    """
    import papermill

    root = root or _results.repository_root()
    if root is None:
        raise ValueError("run gmp.runs from inside the book's repository (the folder with _toc.yml)")
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, not {jobs}")
    notebook = chapter_notebook(chapter, root)
    if jobs > 1:
        _units_of(chapter)
    cfg = _config.load(chapter, scale)
    resolved = _config.resolve_device(device)
    results_dir = (_results.results_root() or root / _results.RESULTS_PATH) / chapter
    staging = results_dir / f".staging-{scale}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    journal = results_dir / "_partial" / f"{scale}-{cfg.digest}.jsonl"
    resumed = _results.journal_entries(journal)
    resumed_code = _results.resumed_code(resumed)
    _announce_resume(chapter, journal, resumed_code)
    started = time.time()
    env = {_results.STAGING_ENV: str(staging), PROGRESS_ENV: "1", "GMP_SCALE": scale,
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        if jobs > 1:
            prefill(chapter, scale, jobs, device, seed)
        papermill.execute_notebook(
            str(notebook), str(staging / notebook.name),
            parameters={"SCALE": scale, "DEVICE": device, "SEED": seed},
            cwd=str(notebook.parent), kernel_name=kernel, progress_bar=True,
        )
    except BaseException:
        failed = results_dir / "_partial" / f"failed-{scale}-{notebook.name}"
        failed.parent.mkdir(parents=True, exist_ok=True)
        if (staging / notebook.name).is_file():
            shutil.move(staging / notebook.name, failed)
            print(f"gmp.runs: {chapter} failed; the executed notebook is at {failed}. Finished units "
                  f"are journalled and a rerun resumes from them.", file=sys.stderr)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    provenance = {
        "chapter": chapter, "scale": scale, "seed": seed, "device": describe_device(resolved),
        "commit": git_commit(root), "gmp_version": gmp.__version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": round(time.time() - started, 1), "jobs": jobs, "config": cfg.as_dict(), "config_digest": cfg.digest,
        "resumed_units": len({e["key"] for e in resumed}),
        "resumed_seconds": round(sum(e.get("seconds", 0.0) for e in resumed), 1),
        "resumed_code": resumed_code, "code": _results.code_fingerprint(),
        "command": f"python -m gmp.runs {chapter} --scale {scale} --device {device} --seed {seed}"
                   + (f" --jobs {jobs}" if jobs > 1 else ""),
        "payload_sha256": _results.payload_hashes(staging),
    }
    _results.atomic_write_json(staging / "provenance.json", provenance)
    final = results_dir / scale
    old = results_dir / f".old-{scale}-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)
    journal.unlink(missing_ok=True)
    for folder in (journal.with_suffix(""), results_dir / "_partial"):  # the units' scratch folder, then _partial
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help="chapter name, e.g. chen_uci (the stem of book/<part>/<chapter>.md)")
    parser.add_argument("--scale", default="paper", choices=_config.SCALES)
    parser.add_argument("--device", default="auto", help="'auto' (default), 'cpu' or 'cuda'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes that journal the chapter's units first (Part III chapters)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        index, jobs = (int(n) for n in args.worker.split("/"))
        _work(args.chapter, args.scale, args.device, args.seed, index, jobs)
        return 0
    try:
        final = run(args.chapter, args.scale, args.device, args.seed, jobs=args.jobs)
    except ValueError as err:
        parser.error(str(err))
    except WorkersFailed as err:
        print(f"gmp.runs: {err}", file=sys.stderr)
        return 1
    print(f"gmp.runs: cached {args.chapter} at {args.scale} scale in {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
