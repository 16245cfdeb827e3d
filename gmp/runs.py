"""Run a chapter with papermill and cache its results with provenance.

    python -m gmp.runs CHAPTER --scale paper [--device cuda] [--seed 0] [--jobs 2]
    python -m gmp.runs CHAPTER --scale paper --executor slurm [--partition P] [--time 4:00:00] [--detach] ...
    python -m gmp.runs CHAPTER --scale paper --verify [--unit KEY]
    python -m gmp.runs CHAPTER --scale paper --restamp [--sample N [--sample-seed S]]
    python -m gmp.runs --same-function MODULE --why TEXT --tests NODEID [NODEID ...]

The chapter's paired notebook ``book/<part>/CHAPTER.ipynb`` is executed with its
``parameters`` cell overridden. Everything the chapter saves with
``gmp.results.Store.save`` lands in a private staging folder; when the run succeeds, the
executed notebook and ``provenance.json`` join it and the folder replaces
``book/_results/CHAPTER/<scale>/``. A failed or interrupted run leaves the previous cache
untouched, and the journal of finished units (``Store.memo``) lets the next run resume.

With ``--jobs N`` (chapters whose experiment module has a ``units`` function: Part I's training
chapters, the Part III image-fitting chapters and lu_real), N worker processes first journal the chapter's independent units,
each with its share of the CPU threads, and the notebook then runs from the journal; the
cache keeps those units (``units.jsonl.gz``). With ``--executor slurm`` (or ``local``) the units run instead as
a Slurm job array (or local processes) through submitit, each task writing its own unit file, which this
process merges into the journal before the notebook runs (``gmp.cluster``; lu_real's tasks each train a
stack of its networks whole, ``--networks-per-task``). ``--verify``, ``--restamp`` and
``--same-function`` check a cache against today's code; they live in :mod:`gmp.verification`, which computes nothing a cache keeps,
and this command line only hands them their arguments.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import gzip
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import gmp
from gmp import cluster
from gmp import config as _config
from gmp import results as _results
from gmp import verification
from gmp.progress import PROGRESS_ENV
from gmp.provenance import UNITS_FILE, describe_device, git_commit, units_of
from gmp.provenance import device_name, precision  # noqa: F401 (lu_real imports them as gmp.runs.<name>)
from gmp.runlock import run_lock


def chapter_notebook(chapter: str, root: Path) -> Path:
    """The paired notebook of ``chapter`` under ``root/book``."""
    found = sorted((root / "book").glob(f"*/{chapter}.ipynb"))
    if not found:
        known = sorted(p.stem for p in (root / "book").glob("*/*.ipynb"))
        raise ValueError(f"no chapter notebook book/*/{chapter}.ipynb; chapters: {', '.join(known) or 'none'}")
    return found[0]


class WorkersFailed(RuntimeError):
    """Some workers of :func:`prefill` failed; the units they finished are journalled."""


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
    units_of(chapter)
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
    todo = units_of(chapter)(cfg, store, seed, _config.resolve_device(device))
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
        kernel: str = "python3", jobs: int = 1, executor: cluster.Options | None = None) -> Path:
    """Execute ``chapter`` at ``scale`` and return the folder its results were cached in.

    ``jobs`` > 1 first journals the chapter's units with that many workers (:func:`gmp.runs.prefill`), an
    ``executor`` as a Slurm job array or local processes (``gmp.cluster.execute``).
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
    if executor is not None:
        if jobs > 1:
            raise ValueError("--jobs and --executor are two ways to compute the units: give one")
        cluster.check_chapter(chapter)
    if jobs > 1:
        units_of(chapter)
        _need_locks()
        worker_devices(device, jobs, _cuda_devices())
    cfg = _config.load(chapter, scale)
    resolved = _config.resolve_device(device)
    results_dir = (_results.results_root() or root / _results.RESULTS_PATH) / chapter
    journal = results_dir / "_partial" / f"{scale}-{cfg.digest}.jsonl"
    with run_lock(journal):
        return _run_locked(chapter, scale, device, seed, root, kernel, jobs, notebook, cfg, resolved, results_dir,
                           journal, papermill, executor)


def _stop(signum, frame):
    sys.exit(128 + signum)


def _run_locked(chapter, scale, device, seed, root, kernel, jobs, notebook, cfg, resolved, results_dir, journal,
                papermill, executor=None) -> Path:
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
        tasks = cluster.execute(executor, chapter, scale, device, seed, journal) if executor else None
        workers = _execute(chapter, scale, device, seed, kernel, jobs, notebook, staging, papermill)
        signal.signal(signal.SIGTERM, _stop)  # nbclient set it back to the default when the notebook finished
        return _cache(chapter, scale, device, seed, root, jobs, cfg, resolved, results_dir, journal, staging, failed,
                      resumed, started, workers, tasks)
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
    for name in ("GMP_DATA", "GMP_KERNELS"):  # the kernel runs in the notebook's folder: resolve from the caller's
        if os.environ.get(name):
            env[name] = os.path.abspath(os.path.expanduser(os.environ[name]))
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
           started, workers, tasks=None) -> Path:
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
        "units_device": dict(collections.Counter(e["device"] for e in resumed if isinstance(e.get("device"), str))),
        "code": code, "code_of": "the notebook" if notebook_run else "the runner (the notebook opened no Store)",
        "code_edited": sorted(edited), "units_code": _results.code_against(units, code, chapter),
        "threads": {"notebook": notebook_run.get("threads") if notebook_run else None,
                    "workers": _worker_threads(jobs) if jobs > 1 else None},
        "cpu_map": {"notebook": notebook_run.get("map") if notebook_run else None,
                    "workers": _distinct(record.get("map") for record in workers) if jobs > 1 else None},
        "command": f"python -m gmp.runs {chapter} --scale {scale} --device {device} --seed {seed}"
                   + (f" --jobs {jobs}" if jobs > 1 else "") + (f" {tasks['options']}" if tasks else ""),
        "executor": tasks,
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


def dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with a value that starts with '-' but is no option joined to its option (``--mem -3G`` as
    ``--mem=-3G``), so that the option's own check names what is wrong with it: argparse took it for an unknown
    option and said only "--mem: expected one argument"."""
    valued = {flag for action in parser._actions if action.option_strings and action.nargs is None
              for flag in action.option_strings}
    joined: list[str] = []
    for arg in argv:
        if joined and joined[-1] in valued and arg.startswith("-") and arg not in parser._option_string_actions:
            joined[-1] += f"={arg}"
        else:
            joined.append(arg)
    return joined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", nargs="?", help="chapter name, e.g. chen_uci (the stem of book/<part>/<chapter>.md)")
    parser.add_argument("--scale", choices=_config.SCALES,
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
    parser.add_argument("--same-function", metavar="MODULE",
                        help="record that MODULE of gmp (runs.py, results/store.py) computes the same function as "
                             "before its rewrite, once the --tests pass, for every cache that recorded it (no CHAPTER)")
    parser.add_argument("--why", help="with --same-function: what changed, and why the function did not")
    parser.add_argument("--tests", nargs="+", metavar="NODEID", help="with --same-function: the pytest node ids that "
                                                                     "show it (all must pass)")
    parser.add_argument("--since", help="with --same-function: the commit of the module as it was (default: the "
                                        "commit before the rewrite, uncommitted or last committed)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    cluster.add_arguments(parser)
    args = parser.parse_args(dash_values(parser, sys.argv[1:] if argv is None else argv))
    if args.chapter and ("/" in args.chapter or args.chapter.endswith((".md", ".ipynb"))):
        parser.error(f"give the chapter by its name, {Path(args.chapter).stem}, not as the path {args.chapter}")
    try:
        executor = cluster.options_from(args)
    except ValueError as err:
        parser.error(str(err))
    if executor is not None and (args.same_function or args.verify or args.restamp):
        parser.error("--executor computes a run's units; --verify, --restamp and --same-function take none")
    if args.same_function is not None:
        return _same_function(parser, args)
    for name in ("why", "tests", "since"):
        if getattr(args, name) is not None:
            parser.error(f"--{name} goes with --same-function")
    missing = [name for name, value in (("chapter", args.chapter), ("--scale", args.scale)) if value is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
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
            evidence = verification.restamp(args.chapter, args.scale, args.sample, args.sample_seed or 0, args.device)
        except ValueError as err:
            parser.error(str(err))
        except verification.RestampRefused as err:
            print(f"gmp.runs: REFUSED: {err}", file=sys.stderr)
            return 1
        print(f"gmp.runs: re-stamped the {args.scale}-scale cache of {args.chapter}: "
              + _results.restamp_text(evidence))
        return 0
    if args.verify:
        if args.jobs != 1:
            parser.error("--verify recomputes one unit in this process; it takes no --jobs")
        try:
            what, differences = verification.verify(args.chapter, args.scale, args.unit, args.seed, args.device,
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
        final = run(args.chapter, args.scale, args.device, seed, jobs=args.jobs, executor=executor)
    except ValueError as err:
        parser.error(str(err))
    except cluster.Detached as err:
        print(f"gmp.runs: {err}")
        return 0
    except (WorkersFailed, cluster.TasksFailed) as err:
        print(f"gmp.runs: {err}", file=sys.stderr)
        return 1
    print(f"gmp.runs: cached {args.chapter} at {args.scale} scale in {final}")
    return 0


def _same_function(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--same-function``: :func:`gmp.verification.vouch`, with its outcome said."""
    given = [name for name in ("chapter", "scale", "seed", "unit", "rtol", "atol", "sample", "sample_seed")
             if getattr(args, name) is not None] + [name for name in ("verify", "restamp") if getattr(args, name)]
    given += ["jobs"] * (args.jobs != 1) + ["device"] * (args.device != "auto")
    if given:
        parser.error(f"--same-function vouches for a module of gmp in every cache, not for one chapter's run: it "
                     f"takes only --why, --tests and --since, not {', '.join(given)}")
    if args.why is None or args.tests is None:
        parser.error("--same-function needs --why (what changed, and why the function did not) and --tests (the "
                     "pytest node ids that show it)")
    try:
        done = verification.vouch(args.same_function, args.why, args.tests, args.since)
    except ValueError as err:
        parser.error(str(err))
    except verification.SameFunctionRefused as err:
        print(f"gmp.runs: REFUSED: {err}", file=sys.stderr)
        return 1
    for record in done["written"]:
        print(f"gmp.runs: gmp/{record.module} as {record.before} computes the same function as today's code "
              f"({', '.join(f'{m} {h}' for m, h in record.after.items())}); recorded in {_results.fingerprint.SAME_FUNCTION_FILE}")
    for record in done["lapsing"]:
        print(f"gmp.runs: NOTE: the record for gmp/{record.module} as {record.before} relied on gmp/{args.same_function} "
              f"as it was and lapses now: renew it with --same-function {record.module}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
