"""Run a chapter with papermill and cache its results with provenance.

    python -m gmp.runs CHAPTER --scale paper [--device cuda] [--seed 0] [--jobs 2]
    python -m gmp.runs CHAPTER --scale paper --verify [--unit KEY]
    python -m gmp.runs CHAPTER --scale paper --restamp [--sample N [--sample-seed S]]

The chapter's paired notebook ``book/<part>/CHAPTER.ipynb`` is executed with its
``parameters`` cell overridden. Everything the chapter saves with
``gmp.results.Store.save`` lands in a private staging folder; when the run succeeds, the
executed notebook and ``provenance.json`` join it and the folder replaces
``book/_results/CHAPTER/<scale>/``. A failed or interrupted run leaves the previous cache
untouched, and the journal of finished units (``Store.memo``) lets the next run resume.

With ``--jobs N`` (chapters whose experiment module has a ``units`` function: Part I's training
chapters, the Part III image-fitting chapters and lu_real), N worker processes first journal the chapter's independent units,
each with its share of the CPU threads, and the notebook then runs from the journal; the
cache keeps those units (``units.jsonl.gz``). ``--verify`` recomputes one of them with
today's code and compares it with the journalled or cached value (``verify``); ``--restamp``
recomputes all of them (or a sample that covers every arm) and, when each equals its cached value,
records today's code as having re-verified the cache (``restamp``), so that a refactor need not cost
a rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gzip
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def device_name(device: torch.device | str) -> str:
    """The device: ``"cpu"`` or ``"cuda (<GPU name>)"``, as a journal entry records it (its ``device``)."""
    device = torch.device(device)
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type


def precision(dtype: torch.dtype = torch.float32) -> str:
    """The arithmetic: the dtype and whether CUDA's matrix products may use TF32
    (``torch.backends.cuda.matmul.allow_tf32``), ``"float32, TF32 off"``, as a journal entry records it
    (its ``precision``)."""
    return f"{str(dtype).removeprefix('torch.')}, TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}"


def processor() -> str:
    """The processor's model name (Linux's ``/proc/cpuinfo``, else :func:`platform.processor`), or ``""``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor()


def describe_device(device: torch.device) -> str:
    """The device as a run's provenance records it: :func:`device_name` with, on a CPU, the processor, the
    machine, its cores and the vector instructions torch's kernels use (two processors can round the same
    sums differently, so a recomputation on another one need not give the same bits), and on CUDA the
    :func:`precision` of float32, naming cuDNN's TF32 where it differs from the matrix products'
    (:func:`gmp.config.resolve_device` turns both off)."""
    if device.type != "cuda":
        named = ", ".join(part for part in (processor(), platform.machine(), f"{os.cpu_count()} cores",
                                            torch.backends.cpu.get_cpu_capability()) if part)
        return f"{device_name(device)} ({named})"
    cudnn = torch.backends.cudnn.allow_tf32
    text = f"{device_name(device)}, {precision()}"
    return text if cudnn == torch.backends.cuda.matmul.allow_tf32 else f"{text}, cuDNN TF32 {'on' if cudnn else 'off'}"


UNITS_FILE = "units.jsonl.gz"
"""The journal of a finished run of a chapter with ``units``, kept in its cache for :func:`verify`."""


class WorkersFailed(RuntimeError):
    """Some workers of :func:`prefill` failed; the units they finished are journalled."""


def _units_of(chapter: str, purpose: str = "for --jobs workers; run it without --jobs"):
    """The ``units`` function of the chapter's experiment module (see :func:`prefill`)."""
    units = getattr(_config.experiment(chapter), "units", None)
    if units is None:
        splitting = [c for c in _results.experiment_chapters() if hasattr(_config.experiment(c), "units")]
        raise ValueError(f"{chapter} does not split into independent units {purpose} "
                         f"(these split: {', '.join(splitting)})")
    return units


def _need_locks() -> None:
    if _results.fcntl is None:
        raise ValueError("--jobs needs POSIX file locks (fcntl), which this system lacks; run without --jobs")


def prefill(chapter: str, scale: str, jobs: int, device: str = "auto", seed: int = 0) -> None:
    """Journal the chapter's independent units with ``jobs`` worker processes.

    The experiment module's ``units(cfg, store, seed, device)`` gives each unit's journal key
    and computation. Worker ``i`` takes every ``jobs``-th unit from the ``i``-th, then the
    others' units from the last backwards, skipping those another worker is computing, and
    at the end waits for those and takes any that are left. Each worker gets an equal share
    of the CPU cores as its ``OMP_NUM_THREADS`` unless that is set already (then every worker
    gets that many), and its device from ``worker_devices`` (several workers may share a GPU,
    which is said on stderr). Stopping the caller (Ctrl-C, or SIGTERM as from ``kill``) stops the
    workers; each fit checkpoints itself, so a rerun resumes. Call it with
    ``GMP_RESULTS_STAGING`` set, as :func:`run` does.
    """
    _units_of(chapter)
    _need_locks()
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, not {jobs}")
    if not os.environ.get(_results.STAGING_ENV):
        raise ValueError(f"prefill journals units only under gmp.runs: set {_results.STAGING_ENV}")
    threads = str(_worker_threads(jobs))
    devices = worker_devices(device, jobs, _cuda_devices())
    shared = {d: devices.count(d) for d in devices if d.startswith("cuda") and devices.count(d) > 1}
    if shared:
        print(f"gmp.runs: {jobs} workers on {len(set(devices))} GPU(s): "
              + ", ".join(f"{n} share {d}" for d, n in shared.items())
              + " (each with its own memory; --jobs 1 gives one process the whole GPU)", file=sys.stderr)
    command = [sys.executable, "-m", "gmp.runs", chapter, "--scale", scale, "--seed", str(seed)]
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workers = []
    try:
        for i in range(jobs):
            workers.append(subprocess.Popen(command + ["--device", devices[i], "--worker", f"{i}/{jobs}"],
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


def _worker_threads(jobs: int) -> int:
    """The threads of each of ``jobs`` workers: ``$OMP_NUM_THREADS`` if set, else an equal share of the cores."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // jobs)


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


@contextlib.contextmanager
def run_lock(journal: Path) -> Iterator[None]:
    """Hold the lock of a run of one chapter at one config (its ``journal``) for the whole run, or refuse.

    Two runs that share a journal would each resume, cache and then delete the other's units, so
    the second to start is refused with a ValueError (on systems without POSIX locks, nothing
    stops them). The lock is a file in the run's scratch folder beside the journal; at the end
    it is removed, and so are that folder and ``_partial`` when nothing else is left in them.
    """
    scratch = journal.with_suffix("")
    if _results.fcntl is None:
        try:
            yield
        finally:
            _remove_if_empty(scratch, scratch.parent)
        return
    lock = scratch / "run.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as held:
        try:
            _results.fcntl.flock(held, _results.fcntl.LOCK_EX | _results.fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            who = held.read().strip() or "another process"
            raise ValueError(f"another gmp.runs of this chapter with the same config is running ({who}; it holds "
                             f"{lock}): two runs would share one journal and one cache, so this one does not "
                             f"start. Wait for it to finish, or stop it, then rerun") from None
        held.truncate(0)
        held.write(f"pid {os.getpid()} on {platform.node()}, since "
                   f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
        held.flush()
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)  # still held: a run that opens it now gets a new file, after this one
            _remove_if_empty(scratch, scratch.parent)


def _remove_if_empty(*folders: Path) -> None:
    """Remove each of ``folders`` (the units' scratch folder, then ``_partial``) that is empty, in turn."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def worker_devices(device: str, jobs: int, gpus: int) -> list[str]:
    """The device of each of ``jobs`` workers of a run on ``device`` on a machine with ``gpus`` CUDA devices.

    ``"cuda"`` (or ``"auto"`` where there is a GPU) spreads the workers over the GPUs in turn, so that
    with fewer GPUs than workers several workers share one (each with its own memory and CUDA
    context; :func:`prefill` says so); a named device (``"cuda:1"``, ``"cpu"``) is every worker's.
    """
    if device == "cuda" or (device == "auto" and gpus > 0):
        if gpus < 1:
            raise ValueError(f"--device {device} needs a CUDA device, and this machine has none")
        return [f"cuda:{i % gpus}" for i in range(jobs)]
    return [device] * jobs


def _cuda_devices() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(chapter: str, scale: str, device: str = "auto", seed: int = 0, root: Path | None = None,
        kernel: str = "python3", jobs: int = 1) -> Path:
    """Execute ``chapter`` at ``scale`` and return the folder its results were cached in.

    ``jobs`` > 1 first journals the chapter's units with that many workers (:func:`gmp.runs.prefill`).
    One run of a chapter at one config runs at a time (``run_lock``). The provenance names the
    code and threads the notebook ran with and how the units' code differs from it (see
    :func:`gmp.results.read_run_records`); the run resumes, caches and removes from the journal only
    the units it used, so an interrupted run with another seed keeps its own.
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
        _need_locks()
        worker_devices(device, jobs, _cuda_devices())
    cfg = _config.load(chapter, scale)
    resolved = _config.resolve_device(device)
    results_dir = (_results.results_root() or root / _results.RESULTS_PATH) / chapter
    journal = results_dir / "_partial" / f"{scale}-{cfg.digest}.jsonl"
    with run_lock(journal):
        return _run_locked(chapter, scale, device, seed, root, kernel, jobs, notebook, cfg, resolved, results_dir,
                           journal, papermill)


def _stop(signum, frame):
    sys.exit(128 + signum)


def _run_locked(chapter, scale, device, seed, root, kernel, jobs, notebook, cfg, resolved, results_dir, journal,
                papermill) -> Path:
    """:func:`run` once it holds the run's lock.

    From before its staging folder exists until the cache is in place, SIGTERM (``kill``) raises
    SystemExit, so that the staging folder is removed as after any failure (papermill's kernel is
    killed at once: nbclient's own handler of SIGTERM does that while a notebook runs).
    """
    staging = results_dir / f".staging-{scale}-{os.getpid()}"
    failed = results_dir / "_partial" / f"failed-{scale}-{notebook.name}"
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        _remove_abandoned_staging(results_dir)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        started = time.time()
        resumed = _results.journal_entries(journal)
        _announce_resume(chapter, journal, _results.resumed_code(resumed, chapter))
        workers = _execute(chapter, scale, device, seed, kernel, jobs, notebook, staging, papermill)
        signal.signal(signal.SIGTERM, _stop)  # nbclient set it back to the default when the notebook finished
        return _cache(chapter, scale, device, seed, root, jobs, cfg, resolved, results_dir, journal, staging, failed,
                      resumed, started, workers)
    except BaseException:
        if (staging / notebook.name).is_file():
            failed.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staging / notebook.name, failed)
            print(f"gmp.runs: {chapter} failed; the executed notebook is at {failed}. Finished units "
                  f"are journalled and a rerun resumes from them.", file=sys.stderr)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _remove_abandoned_staging(results_dir: Path) -> None:
    """Remove the staging folders ``.staging-<scale>-<pid>`` of ``results_dir`` whose runner is gone: a run
    killed outright (SIGKILL, a power cut) cannot remove its own. Only on POSIX, where a process can be
    asked whether it lives; a folder of a live process (a run under way) is left alone."""
    if os.name != "posix":
        return
    for folder in results_dir.glob(".staging-*-*"):
        pid = folder.name.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (POSIX)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _execute(chapter, scale, device, seed, kernel, jobs, notebook, staging, papermill) -> list[dict[str, Any]]:
    """The workers of ``--jobs`` (if any), then the notebook, with the run's environment; the workers'
    records (:func:`gmp.results.read_run_records`)."""
    env = {_results.STAGING_ENV: str(staging), PROGRESS_ENV: "1", "GMP_SCALE": scale,
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    workers: list[dict[str, Any]] = []
    try:
        if jobs > 1:
            prefill(chapter, scale, jobs, device, seed)
            workers = _results.read_run_records(staging)[0]  # their units name their code
        papermill.execute_notebook(
            str(notebook), str(staging / notebook.name),
            parameters={"SCALE": scale, "DEVICE": device, "SEED": seed},
            cwd=str(notebook.parent), kernel_name=kernel, progress_bar=True,
            shutdown_kernel="immediate",  # on SIGTERM or Ctrl-C nbclient kills the kernel at once, so it journals no more
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return workers


def _cache(chapter, scale, device, seed, root, jobs, cfg, resolved, results_dir, journal, staging, failed, resumed,
           started, workers) -> Path:
    """Write the finished run's provenance and units into ``staging`` and put it in place of the cache."""
    records, used = _results.read_run_records(staging)
    notebook_run = records[0] if records else None
    code = notebook_run["code"] if notebook_run else _results.code_fingerprint()
    entries = _results.journal_entries(journal)
    units = _results.with_code(list({e["key"]: e for e in entries if e["key"] in used}.values()), entries)
    resumed = [e for e in resumed if e["key"] in used]
    if units and hasattr(_config.experiment(chapter), "units"):
        lines = "".join(json.dumps(entry) + "\n" for entry in units)
        _results.atomic_write_bytes(staging / UNITS_FILE, gzip.compress(lines.encode(), mtime=0))
    now = _results.read_module_hashes(code.get("hash", "source"))
    edited = {m for m in set(code["modules"]) | set(now) if code["modules"].get(m) != now.get(m)}
    edited |= set(notebook_run["edited"] if notebook_run else _results.code_edited())
    edited |= {m for entry in units for m in entry.get("edited", [])}
    provenance = {
        "chapter": chapter, "scale": scale, "seed": seed, "device": describe_device(resolved),
        "commit": git_commit(root), "gmp_version": gmp.__version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": round(time.time() - started, 1), "jobs": jobs, "config": cfg.as_dict(), "config_digest": cfg.digest,
        "resumed_units": len({e["key"] for e in resumed}),
        "resumed_seconds": round(sum(e.get("seconds", 0.0) for e in resumed), 1),
        "resumed_code": _results.resumed_code(resumed, chapter),
        "carried_units": _results.carried_units(resumed),
        "code": code, "code_of": "the notebook" if notebook_run else "the runner (the notebook opened no Store)",
        "code_edited": sorted(edited), "units_code": _results.code_against(units, code, chapter),
        "threads": {"notebook": notebook_run.get("threads") if notebook_run else None,
                    "workers": _worker_threads(jobs) if jobs > 1 else None},
        "cpu_map": {"notebook": notebook_run.get("map") if notebook_run else None,
                    "workers": _distinct(record.get("map") for record in workers) if jobs > 1 else None},
        "command": f"python -m gmp.runs {chapter} --scale {scale} --device {device} --seed {seed}"
                   + (f" --jobs {jobs}" if jobs > 1 else ""),
        "payload_sha256": _results.payload_hashes(staging),
    }
    _results.atomic_write_json(staging / "provenance.json", provenance)
    final = results_dir / scale
    _results.replace_folder(staging, final)
    left = [e for e in _results.journal_entries(journal) if e["key"] not in used]
    if left:  # units of another seed (or key) that this run did not use stay for the run that will
        _results.atomic_write_bytes(journal, "".join(json.dumps(e) + "\n" for e in _results.with_code(left, entries)).encode())
    else:
        journal.unlink(missing_ok=True)
    failed.unlink(missing_ok=True)
    return final


def _distinct(values) -> list[Any]:
    """``values`` without repeats, in the order first met."""
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


TIMING_KEYS = ("seconds",)
"""Keys of a unit's value that :func:`verify` leaves out as timings, with every key ending in ``_s``."""


def _recorded_units(chapter: str, scale: str) -> tuple[list[dict], _config.Config, int | None, str]:
    """The journalled units of an unfinished run with the current config, else those the cache kept.

    Returns the entries, the config and seed they were computed with (None: not recorded) and where they come from.
    """
    cfg = _config.load(chapter, scale)
    journal = _results.journal_path(chapter, scale, cfg.digest)
    entries = _results.journal_entries(journal) if journal else []
    if entries:
        return entries, cfg, None, f"journalled in {journal}"
    folder, provenance, entries = _cached_run(chapter, scale, "verify")
    cfg = _config.Config(chapter, scale, provenance["config"])
    return entries, cfg, provenance.get("seed"), f"cached by the run of {provenance.get('date', '?')} in {folder}"


def _cached_run(chapter: str, scale: str, what: str) -> tuple[Path, dict, list[dict]]:
    """The folder, provenance and kept units of the ``scale`` cache of ``chapter``, checked against the
    hashes the run recorded; a ValueError saying what is wrong (``what``: nothing to verify or re-stamp)."""
    root = _results.results_root()
    folder = root / chapter / scale if root else Path(chapter, scale)
    damaged = f"the {scale}-scale cache of {chapter} is damaged; restore {folder} from git or rerun the chapter"
    try:
        provenance = json.loads((folder / "provenance.json").read_bytes())
    except FileNotFoundError:
        raise ValueError(f"{chapter} has no {scale}-scale cache" + (" and no unfinished run with its current config"
                         if what == "verify" else "") + f": nothing to {what}") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{folder / 'provenance.json'} cannot be read ({err}); {damaged}") from None
    if not isinstance(provenance, dict):
        raise ValueError(f"{folder / 'provenance.json'} is not a provenance record (it holds a "
                         f"{type(provenance).__name__}); {damaged}")
    hashes, seed = provenance.get("payload_sha256", {}), provenance.get("seed")
    if not isinstance(provenance.get("config"), dict):
        raise ValueError(f"{folder / 'provenance.json'} records no config (a JSON object under 'config'), so the "
                         f"run cannot be repeated; {damaged}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
        raise ValueError(f"{folder / 'provenance.json'} records the seed {seed!r}, not an integer from 0 to "
                         f"2**32 - 1; {damaged}")
    if not isinstance(hashes, dict):
        raise ValueError(f"{folder / 'provenance.json'}: its payload_sha256 is not an object; {damaged}")
    units = folder / UNITS_FILE
    if not units.is_file() and UNITS_FILE in hashes:
        raise ValueError(f"{units} is missing: the run wrote it (provenance.json records its sha256), so it was "
                         f"deleted since; restore it from git (git checkout -- {units}) or rerun the chapter")
    if not units.is_file():
        raise ValueError(f"the {scale}-scale cache of {chapter} keeps no units ({UNITS_FILE}: it was written "
                         f"before gmp.runs kept them); rerun the chapter to {what} it")
    data = units.read_bytes()
    recorded = hashes.get(UNITS_FILE)
    if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
        raise ValueError(f"{units} differs from the file the run wrote (sha256 mismatch)")
    return folder, provenance, _cached_units(units, data, damaged)


def _cached_units(path: Path, data: bytes, damaged: str) -> list[dict]:
    """The entries of a cache's ``units.jsonl.gz`` (its bytes ``data``); a ValueError naming ``path``
    and the line if any is not an entry (:func:`gmp.results.entry_problem`).

    Unlike a journal, this file was written whole and atomically by a finished run, so a bad line
    is damage, never an interruption: nothing is skipped.
    """
    try:
        lines = gzip.decompress(data).splitlines()
    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError; a cut stream an EOFError
        raise ValueError(f"{path} is not a readable gzip file ({type(err).__name__}: {err}); {damaged}") from None
    entries = []
    for number, raw in enumerate(lines, start=1):
        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError(f"{path}, line {number}: not UTF-8 text; {damaged}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {number}: not JSON ({err}): {raw[:80]!r}; {damaged}") from None
        if problem := _results.entry_problem(entry):
            raise ValueError(f"{path}, line {number}: {problem}: {raw[:80]!r}; {damaged}")
        entries.append(entry)
    return entries


def compare(cached: Any, fresh: Any, rtol: float, atol: float, path: str = "value") -> list[str]:
    """Where the JSON values ``cached`` and ``fresh`` differ, one line each.

    Numbers match when ``|fresh - cached| <= atol + rtol * |cached|`` (NaN matches NaN);
    other values must be equal. Dict keys of :data:`TIMING_KEYS` or ending in ``_s`` are left out.
    """
    if isinstance(cached, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(cached) | set(fresh), key=str):
            if key in TIMING_KEYS or str(key).endswith("_s"):
                continue
            if key not in cached or key not in fresh:
                out.append(f"{path}[{key!r}]: only in the {'cached' if key in cached else 'recomputed'} value")
            else:
                out += compare(cached[key], fresh[key], rtol, atol, f"{path}[{key!r}]")
        return out
    if isinstance(cached, list) and isinstance(fresh, list):
        if len(cached) != len(fresh):
            return [f"{path}: {len(cached)} entries cached, {len(fresh)} recomputed"]
        return [line for i, (a, b) in enumerate(zip(cached, fresh)) for line in compare(a, b, rtol, atol, f"{path}[{i}]")]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cached, fresh))
    if numbers and (cached == fresh or (math.isnan(cached) and math.isnan(fresh))
                    or abs(fresh - cached) <= atol + rtol * abs(cached)):
        return []
    if not numbers and type(cached) is type(fresh) and cached == fresh:
        return []
    return [f"{path}: cached {cached!r}, recomputed {fresh!r}"]


def verify(chapter: str, scale: str = "paper", unit: str | None = None, seed: int | None = None,
           device: str = "auto", rtol: float = 1e-5, atol: float = 1e-8) -> tuple[str, list[str]]:
    """Recompute one unit of ``chapter`` with today's code and compare it with its recorded value.

    The unit comes from the journal of an unfinished run with the chapter's current config,
    else from the units its ``scale`` cache kept (computed with that run's config and seed).
    ``unit`` is its key (default: the first recorded one in the order of the experiment
    module's ``units(cfg, store, seed, device)``); ``seed`` defaults to the cache's, else 0.
    The computation neither reads nor writes a journal or checkpoint. Returns a sentence on
    what was compared and the differences (:func:`compare`); none means it matches.
    """
    if not all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in (rtol, atol)):
        raise ValueError(f"rtol and atol must be finite numbers >= 0, got rtol={rtol!r}, atol={atol!r}")
    units = _units_of(chapter, "to recompute, so --verify has nothing to check")
    entries, cfg, recorded_seed, source = _recorded_units(chapter, scale)
    recorded = {entry["key"]: entry for entry in entries}
    seed = seed if seed is not None else recorded_seed if recorded_seed is not None else 0
    with _outside_a_run() as before:
        todo = units(cfg, _results.Store(chapter, cfg), seed, _config.resolve_device(device))
        both = [key for key in todo if key in recorded]
        if unit is None and not both:
            raise ValueError(f"none of the units of {chapter} for seed {seed} is {source}")
        if unit is not None and unit not in both:
            raise ValueError(f"unit {unit!r} of {chapter} (seed {seed}) is not {source}; these are: "
                             f"{', '.join(both) or 'none'}")
        key = unit or both[0]
        threads = recorded[key].get("threads")
        started = time.perf_counter()
        fresh = _recompute(todo[key], threads)
    code = _results.resumed_code(_results.with_code([recorded[key]], entries), chapter)  # its code's modules
    then = ("by code that differs from today's in " + ", ".join(code["changed_modules"]) if code["other_code_units"]
            else "with no code fingerprint recorded" if code["code_not_recorded_units"] else "by today's code")
    threads_text = (f"with {threads} threads as it was computed" if threads is not None else
                    f"with {before} threads; the unit records no thread count, and results can differ with it by "
                    f"more than the tolerance (reductions split over threads round differently)")
    what = (f"unit {key!r} of {chapter} at {scale} scale, {source} (computed {then}), recomputed with today's code "
            f"{threads_text} in {time.perf_counter() - started:.1f} s; tolerance rtol={rtol:g}, atol={atol:g}, "
            f"timings left out")
    return what, compare(recorded[key]["value"], fresh, rtol, atol)


@contextlib.contextmanager
def _outside_a_run() -> Iterator[int]:
    """Recompute units without journalling them: ``GMP_RESULTS_STAGING`` unset, and torch's thread count
    (given to the block) set back afterwards."""
    saved = os.environ.pop(_results.STAGING_ENV, None)
    before = torch.get_num_threads()
    try:
        yield before
    finally:
        torch.set_num_threads(before)
        if saved is not None:
            os.environ[_results.STAGING_ENV] = saved


def _recompute(compute, threads: int | None) -> Any:
    """``compute()`` as its journal entry would hold it (through JSON), with ``threads`` threads where recorded:
    like with like, since sums split over threads round differently."""
    if threads is not None:
        torch.set_num_threads(threads)
    return json.loads(json.dumps(compute()))


def largest_difference(cached: Any, fresh: Any, path: str = "value") -> tuple[float, float | None, str] | None:
    """The largest absolute difference between the numbers of the JSON values ``cached`` and ``fresh`` (of
    the same shape, as :func:`compare` finds them), with its size relative to the cached number (None where that
    is 0) and where it is; None where no
    number differs. Timings are left out as in :func:`compare`; NaN against NaN is no difference."""
    pairs: list[tuple[float, float, str]] = []
    if isinstance(cached, dict) and isinstance(fresh, dict):
        for key in sorted(set(cached) & set(fresh), key=str):
            if key not in TIMING_KEYS and not str(key).endswith("_s"):
                found = largest_difference(cached[key], fresh[key], f"{path}[{key!r}]")
                pairs += [found] if found else []
    elif isinstance(cached, list) and isinstance(fresh, list) and len(cached) == len(fresh):
        for i, (a, b) in enumerate(zip(cached, fresh)):
            found = largest_difference(a, b, f"{path}[{i}]")
            pairs += [found] if found else []
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cached, fresh)) and cached != fresh \
            and not (math.isnan(cached) and math.isnan(fresh)):
        gap = abs(fresh - cached)
        pairs.append((gap, gap / abs(cached) if cached else None, path))
    return max(pairs, key=lambda pair: pair[0], default=None)


UNIT_ARM = re.compile(r"(seed)?\d+")
"""A part of a unit's key (between ``-`` and ``/``) that names a seed or an index, not an arm."""


def unit_arm(chapter: str, key: str) -> str:
    """The arm of the unit ``key`` of ``chapter``: its experiment module's ``unit_arm(key)`` where it has one, else
    the key without its parts that are numbers or ``seed<n>`` (``reverse-3-0`` and ``reverse-5-0`` are one arm,
    ``fig7-sin-0`` and ``fig7-triangle-0`` two)."""
    own = getattr(_config.experiment(chapter), "unit_arm", None)
    if own is not None:
        return own(key)
    return "-".join(part for part in re.split(r"[-/]", key) if not UNIT_ARM.fullmatch(part)) or key


def unit_tolerance(chapter: str, key: str) -> tuple[float, float]:
    """``(rtol, atol)`` within which a recomputation of the unit ``key`` of ``chapter`` must equal its cached value
    (see :func:`compare`): its experiment module's ``unit_tolerance(key)`` where it has one (a unit that is not
    deterministic, such as one trained on a GPU), else ``(0, 0)``: bitwise, since a unit computed again on the
    CPU with the same code, config, seed and threads gives the same bits."""
    own = getattr(_config.experiment(chapter), "unit_tolerance", None)
    rtol, atol = own(key) if own is not None else (0.0, 0.0)
    if not all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in (rtol, atol)):
        raise ValueError(f"{chapter}.unit_tolerance({key!r}) gives rtol={rtol!r}, atol={atol!r}; a tolerance is a "
                         f"finite number >= 0")
    return float(rtol), float(atol)


def sample_units(chapter: str, keys: list[str], size: int | None, seed: int) -> list[str]:
    """The units of ``keys`` that ``--restamp`` recomputes: all of them when ``size`` is None or not smaller,
    else ``size`` of them drawn with ``random.Random(seed)``: first one of each arm (:func:`unit_arm`), then
    the rest from the others; in the order of ``keys``."""
    if size is None or size >= len(keys):
        return list(keys)
    arms: dict[str, list[str]] = {}
    for key in keys:
        arms.setdefault(unit_arm(chapter, key), []).append(key)
    if size < len(arms):
        raise ValueError(f"a sample of {size} units cannot cover the {len(arms)} arms of {chapter} "
                         f"({', '.join(arms)}); give --sample {len(arms)} or more")
    draw = random.Random(seed)
    chosen = {draw.choice(members) for members in arms.values()}
    chosen |= set(draw.sample([key for key in keys if key not in chosen], size - len(chosen)))
    return [key for key in keys if key in chosen]


RESTAMPS = "restamps"
"""The key of ``provenance.json`` under which :func:`restamp` records each re-stamp of a cache, oldest first."""


class RestampRefused(RuntimeError):
    """A recomputed unit differs from the cached one by more than its tolerance; the cache is left as it was."""


def restamp(chapter: str, scale: str = "paper", sample: int | None = None, sample_seed: int = 0,
            device: str = "auto", root: Path | None = None) -> dict[str, Any]:
    """Re-stamp the ``scale`` cache of ``chapter`` with today's code by recomputing its units.

    A refactor (code that computes the same function another way) need not cost a rerun: the units the cache
    kept (``units.jsonl.gz``) are recomputed with today's code, with the run's config, seed and each unit's
    thread count, all of them or a seeded ``sample`` that covers every arm (:func:`sample_units`), and each
    is compared with its cached value within its own tolerance (:func:`unit_tolerance`: bitwise unless the
    chapter says otherwise). When every one is equal, the evidence is appended to the cache's provenance
    under :data:`RESTAMPS` (provenance.json is not among the hashed payload files): today's code fingerprint,
    the date, commit, device, how many units of how many, which, the sample's seed, each tolerance and the
    largest difference; the page then compares today's code with that fingerprint, not the run's
    (:func:`gmp.results.cached`). The first unit that differs raises :class:`RestampRefused` naming it and
    where it differs, and nothing is written. Returns the evidence.
    """
    units = _units_of(chapter, "to recompute, so it cannot be re-stamped (rerun it instead)")
    folder, provenance, entries = _cached_run(chapter, scale, "re-stamp")
    if provenance.get("config_digest") != _config.load(chapter, scale).digest:
        raise ValueError(f"the {scale}-scale cache of {chapter} is stale (its config differs from the chapter's "
                         f"current one): a re-stamp says today's code computes what that run computed, which does "
                         f"not make it current; rerun python -m gmp.runs {chapter} --scale {scale}")
    cfg, seed = _config.Config(chapter, scale, provenance["config"]), provenance.get("seed") or 0
    recorded = {entry["key"]: entry for entry in entries}
    resolved = _config.resolve_device(device)
    code = _results.code_fingerprint()
    with _outside_a_run():
        todo = units(cfg, _results.Store(chapter, cfg), seed, resolved)
        unnamed = [key for key in recorded if key not in todo]
        if unnamed:
            raise ValueError(f"today's {chapter}.units does not name {len(unnamed)} of the cached units "
                             f"({', '.join(unnamed[:5])}{', ...' if len(unnamed) > 5 else ''}), so they cannot be "
                             f"recomputed; rerun the chapter")
        keys = [key for key in todo if key in recorded]
        chosen = sample_units(chapter, keys, sample, sample_seed)
        tolerances, largest, started = {}, None, time.perf_counter()
        for number, key in enumerate(chosen, start=1):
            rtol, atol = tolerances[key] = unit_tolerance(chapter, key)
            print(f"gmp.runs: re-stamp {chapter}: unit {number} of {len(chosen)}, {key!r}", file=sys.stderr)
            fresh = _recompute(todo[key], recorded[key].get("threads"))
            differences = compare(recorded[key]["value"], fresh, rtol, atol)
            if differences:
                raise RestampRefused(
                    f"unit {key!r} of {chapter} recomputed with today's code differs from the cached one beyond its "
                    f"tolerance (rtol={rtol:g}, atol={atol:g}) in {len(differences)} places, first "
                    f"{'; '.join(differences[:3])}; the cache is not re-stamped (rerun python -m gmp.runs {chapter} "
                    f"--scale {scale} to recompute it with today's code)")
            found = largest_difference(recorded[key]["value"], fresh)
            if found and (largest is None or found[0] > largest["absolute"]):
                largest = {"unit": key, "path": found[2], "absolute": found[0], "relative": found[1]}
    if edited := _results.code_edited():
        raise RestampRefused(f"the files of {', '.join(edited)} changed during the re-stamp, so which code the units "
                             f"were recomputed with is uncertain; nothing is recorded, re-stamp again")
    evidence = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "code": code, "commit": git_commit(root or _results.repository_root() or Path.cwd()),
        "gmp_version": gmp.__version__, "torch_version": torch.__version__, "device": describe_device(resolved),
        "units": len(chosen), "of": len(keys), "keys": chosen,
        "sample": None if len(chosen) == len(keys) else {"size": len(chosen), "seed": sample_seed},
        "tolerance": tolerances, "largest_difference": largest,
        "seconds": round(time.perf_counter() - started, 1),
        "command": f"python -m gmp.runs {chapter} --scale {scale} --restamp --device {device}"
                   + (f" --sample {sample} --sample-seed {sample_seed}" if len(chosen) < len(keys) else ""),
    }
    provenance[RESTAMPS] = [*(provenance.get(RESTAMPS) or []), evidence]
    _results.atomic_write_json(folder / "provenance.json", provenance)
    return evidence


def _seed_arg(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= seed < 2**32:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**32 - 1 (NumPy's range), got {seed}")
    return seed


def _tolerance_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"a tolerance is a finite number >= 0, got {text!r} (an infinite or NaN one "
                                         f"would let any difference, or none, match)")
    return value


def _device_arg(text: str) -> str:
    try:
        _config.resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help="chapter name, e.g. chen_uci (the stem of book/<part>/<chapter>.md)")
    parser.add_argument("--scale", required=True, choices=_config.SCALES,
                        help="smoke, small or paper (required: a paper-scale run can take hours)")
    parser.add_argument("--device", default="auto", type=_device_arg, help="'auto' (default), 'cpu' or 'cuda[:N]'")
    parser.add_argument("--seed", type=_seed_arg, default=None,
                        help="0 to 2**32 - 1; default 0 (with --verify: the cached run's)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes that journal the chapter's units first (chapters with units)")
    parser.add_argument("--verify", action="store_true",
                        help="recompute one journalled or cached unit with today's code and compare (exit 1 if it differs)")
    parser.add_argument("--unit", help="the unit --verify recomputes (default: the first recorded)")
    parser.add_argument("--rtol", type=_tolerance_arg, default=None, help="relative tolerance of --verify (default 1e-5)")
    parser.add_argument("--atol", type=_tolerance_arg, default=None, help="absolute tolerance of --verify (default 1e-8)")
    parser.add_argument("--restamp", action="store_true",
                        help="recompute the cache's units (all, or --sample of them) with today's code and, when every "
                             "one equals its cached value, record today's code with the evidence (exit 1 if one differs)")
    parser.add_argument("--sample", type=int, default=None,
                        help="with --restamp: recompute this many units, drawn to cover every arm (default: all)")
    parser.add_argument("--sample-seed", type=_seed_arg, default=None, help="with --restamp --sample: the draw's seed (default 0)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("unit", "rtol", "atol"):
        if getattr(args, name) is not None and not args.verify:
            parser.error(f"--{name} goes with --verify (it says which unit to recompute or how closely it must match)")
    for name in ("sample", "sample_seed"):
        if getattr(args, name) is not None and not args.restamp:
            parser.error(f"--{name.replace('_', '-')} goes with --restamp (it says which units to recompute)")
    if args.sample is not None and args.sample < 1:
        parser.error(f"--sample is a number of units, at least 1, not {args.sample}")
    if args.restamp:
        if args.verify or args.jobs != 1 or args.seed is not None:
            parser.error("--restamp recomputes the cache's units with its run's seed in this process; it takes no "
                         "--verify, --jobs or --seed")
        try:
            evidence = restamp(args.chapter, args.scale, args.sample, args.sample_seed or 0, args.device)
        except ValueError as err:
            parser.error(str(err))
        except RestampRefused as err:
            print(f"gmp.runs: REFUSED: {err}", file=sys.stderr)
            return 1
        print(f"gmp.runs: re-stamped the {args.scale}-scale cache of {args.chapter}: "
              + _results.restamp_text(evidence))
        return 0
    if args.verify:
        if args.jobs != 1:
            parser.error("--verify recomputes one unit in this process; it takes no --jobs")
        try:
            what, differences = verify(args.chapter, args.scale, args.unit, args.seed, args.device,
                                       1e-5 if args.rtol is None else args.rtol, 1e-8 if args.atol is None else args.atol)
        except ValueError as err:
            parser.error(str(err))
        print(f"gmp.runs: {what}:")
        if not differences:
            print("matches")
            return 0
        print(f"DIFFERS in {len(differences)} places:\n  " + "\n  ".join(differences[:20])
              + (f"\n  ... and {len(differences) - 20} more" if len(differences) > 20 else ""))
        return 1
    seed = 0 if args.seed is None else args.seed
    if args.worker:
        index, jobs = (int(n) for n in args.worker.split("/"))
        _work(args.chapter, args.scale, args.device, seed, index, jobs)
        return 0
    try:
        final = run(args.chapter, args.scale, args.device, seed, jobs=args.jobs)
    except ValueError as err:
        parser.error(str(err))
    except WorkersFailed as err:
        print(f"gmp.runs: {err}", file=sys.stderr)
        return 1
    print(f"gmp.runs: cached {args.chapter} at {args.scale} scale in {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
