"""Run a chapter with papermill and cache its results with provenance.

    python -m gmp.runs CHAPTER --scale paper [--device cuda] [--seed 0] [--jobs 2]
    python -m gmp.runs CHAPTER --scale paper --verify [--unit KEY]

The chapter's paired notebook ``book/<part>/CHAPTER.ipynb`` is executed with its
``parameters`` cell overridden. Everything the chapter saves with
``gmp.results.Store.save`` lands in a private staging folder; when the run succeeds, the
executed notebook and ``provenance.json`` join it and the folder replaces
``book/_results/CHAPTER/<scale>/``. A failed or interrupted run leaves the previous cache
untouched, and the journal of finished units (``Store.memo``) lets the next run resume.

With ``--jobs N`` (chapters whose experiment module has a ``units`` function: the Part III
image-fitting chapters and lu_real), N worker processes first journal the chapter's independent units,
each with its share of the CPU threads, and the notebook then runs from the journal; the
cache keeps those units (``units.jsonl.gz``). ``--verify`` recomputes one of them with
today's code and compares it with the journalled or cached value (``verify``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import zlib
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


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


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
    gets that many). Stopping the caller (Ctrl-C, or SIGTERM as from ``kill``) stops the
    workers; each fit checkpoints itself, so a rerun resumes. Call it with
    ``GMP_RESULTS_STAGING`` set, as :func:`run` does.
    """
    _units_of(chapter)
    _need_locks()
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
        _need_locks()
    cfg = _config.load(chapter, scale)
    resolved = _config.resolve_device(device)
    results_dir = (_results.results_root() or root / _results.RESULTS_PATH) / chapter
    staging = results_dir / f".staging-{scale}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    journal = results_dir / "_partial" / f"{scale}-{cfg.digest}.jsonl"
    resumed = _results.journal_entries(journal)
    resumed_code = _results.resumed_code(resumed, chapter)
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
    units = _results.journal_entries(journal) if hasattr(_config.experiment(chapter), "units") else []
    if units:
        lines = "".join(json.dumps(entry) + "\n" for entry in units)
        _results.atomic_write_bytes(staging / UNITS_FILE, gzip.compress(lines.encode(), mtime=0))
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
    root = _results.results_root()
    folder = root / chapter / scale if root else Path(chapter, scale)
    damaged = f"the {scale}-scale cache of {chapter} is damaged; restore {folder} from git or rerun the chapter"
    try:
        provenance = json.loads((folder / "provenance.json").read_bytes())
    except FileNotFoundError:
        raise ValueError(f"{chapter} has no {scale}-scale cache and no unfinished run with its current config: "
                         f"nothing to verify") from None
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
    if not units.is_file():
        raise ValueError(f"the {scale}-scale cache of {chapter} keeps no units ({UNITS_FILE}: it was written "
                         f"before gmp.runs kept them); rerun the chapter to verify it")
    data = units.read_bytes()
    recorded = hashes.get(UNITS_FILE)
    if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
        raise ValueError(f"{units} differs from the file the run wrote (sha256 mismatch)")
    entries = _cached_units(units, data, damaged)
    cfg = _config.Config(chapter, scale, provenance["config"])
    return entries, cfg, seed, f"cached by the run of {provenance.get('date', '?')} in {folder}"


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
    units = _units_of(chapter, "to recompute, so --verify has nothing to check")
    entries, cfg, recorded_seed, source = _recorded_units(chapter, scale)
    recorded = {entry["key"]: entry for entry in entries}
    seed = seed if seed is not None else recorded_seed if recorded_seed is not None else 0
    saved = os.environ.pop(_results.STAGING_ENV, None)
    try:
        todo = units(cfg, _results.Store(chapter, cfg), seed, _config.resolve_device(device))
        both = [key for key in todo if key in recorded]
        if unit is None and not both:
            raise ValueError(f"none of the units of {chapter} for seed {seed} is {source}")
        if unit is not None and unit not in both:
            raise ValueError(f"unit {unit!r} of {chapter} (seed {seed}) is not {source}; these are: "
                             f"{', '.join(both) or 'none'}")
        key = unit or both[0]
        started = time.perf_counter()
        fresh = json.loads(json.dumps(todo[key]()))
    finally:
        if saved is not None:
            os.environ[_results.STAGING_ENV] = saved
    code = _results.resumed_code([recorded[key]], chapter)
    then = ("by code that differs from today's in " + ", ".join(code["changed_modules"]) if code["other_code_units"]
            else "with no code fingerprint recorded" if code["code_not_recorded_units"] else "by today's code")
    what = (f"unit {key!r} of {chapter} at {scale} scale, {source} (computed {then}), recomputed with today's code "
            f"in {time.perf_counter() - started:.1f} s; tolerance rtol={rtol:g}, atol={atol:g}, timings left out")
    return what, compare(recorded[key]["value"], fresh, rtol, atol)


def _seed_arg(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= seed < 2**32:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**32 - 1 (NumPy's range), got {seed}")
    return seed


def _device_arg(text: str) -> str:
    try:
        _config.resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help="chapter name, e.g. chen_uci (the stem of book/<part>/<chapter>.md)")
    parser.add_argument("--scale", default="paper", choices=_config.SCALES)
    parser.add_argument("--device", default="auto", type=_device_arg, help="'auto' (default), 'cpu' or 'cuda[:N]'")
    parser.add_argument("--seed", type=_seed_arg, default=None,
                        help="0 to 2**32 - 1; default 0 (with --verify: the cached run's)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes that journal the chapter's units first (Part III chapters)")
    parser.add_argument("--verify", action="store_true",
                        help="recompute one journalled or cached unit with today's code and compare (exit 1 if it differs)")
    parser.add_argument("--unit", help="the unit --verify recomputes (default: the first recorded)")
    parser.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of --verify (default 1e-5)")
    parser.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance of --verify (default 1e-8)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.unit is not None and not args.verify:
        parser.error("--unit goes with --verify")
    if args.verify:
        if args.jobs != 1:
            parser.error("--verify recomputes one unit in this process; it takes no --jobs")
        try:
            what, differences = verify(args.chapter, args.scale, args.unit, args.seed, args.device, args.rtol, args.atol)
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
