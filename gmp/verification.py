"""Verify a chapter's cache against today's code, and record what verifies it.

    python -m gmp.runs CHAPTER --scale paper --verify [--unit KEY]
    python -m gmp.runs CHAPTER --scale paper --restamp [--sample N [--sample-seed S]]
    python -m gmp.runs --same-function MODULE --why TEXT --tests NODEID [NODEID ...]

A finished run of a chapter whose experiment module has ``units`` keeps them in its cache
(:data:`gmp.provenance.UNITS_FILE`). :func:`verify` recomputes one of them with today's code and compares it
with the journalled or cached value; :func:`restamp` recomputes all of them (or a sample that covers every
arm) and, when each equals its cached value, records today's code as having re-verified the cache, so that a
refactor need not cost a rerun. :func:`vouch` (:mod:`gmp.samefunction`) is the re-stamp of one module for
every cache at once, with tests as its evidence instead of recomputed units.

None of this computes a result that a cache keeps: units are recomputed only to be compared, and what is
written is provenance. So this module is not among the code a chapter's results depend on
(:data:`gmp.results.RENDERING`), and editing it leaves every cache current.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import hashlib
import inspect
import json
import math
import os
import random
import re
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

import gmp
from gmp import config as _config
from gmp import results as _results
from gmp.provenance import UNITS_FILE, describe_device, git_commit, units_of
from gmp.results import fingerprint as _fingerprint
from gmp.runlock import run_lock
from gmp.samefunction import RESTAMPS, SameFunctionRefused, definitions, git_output, vouch


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
    units = units_of(chapter, "to recompute, so --verify has nothing to check")
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


class RestampRefused(RuntimeError):
    """A recomputed unit differs from the cached one by more than its tolerance, or code that changed since the cache
    did not run in the units recomputed (or cannot be told apart); the cache is left as it was."""


@contextlib.contextmanager
def tracing(files: Iterable[Path]) -> Iterator[dict[str, set[int]]]:
    """Within the block, the lines that functions (and methods) of ``files`` run, by file path, in this thread
    and threads started in the block (``sys.settrace``); a module's own top-level code (run once, where it is
    imported) does not count. It costs a Python call per Python call made in the block (a small fit's CPU time
    rose 1.3 to 1.7 times, two measurements on a loaded machine), nothing per line outside ``files``."""
    wanted = {os.path.realpath(path) for path in files}
    lines: dict[str, set[int]] = {}
    inside: dict[str, bool] = {}

    def line(frame, event, arg):
        if event == "line":
            lines[frame.f_code.co_filename].add(frame.f_lineno)
        return line

    def call(frame, event, arg):
        code = frame.f_code
        if code.co_filename not in inside:
            inside[code.co_filename] = os.path.realpath(code.co_filename) in wanted
        if not (inside[code.co_filename] and code.co_flags & inspect.CO_OPTIMIZED):
            return None
        lines.setdefault(code.co_filename, set()).add(frame.f_lineno)
        return line

    previous = sys.gettrace()
    threading.settrace(call)
    sys.settrace(call)
    try:
        yield lines
    finally:
        sys.settrace(previous)
        threading.settrace(None)


def _source_at(root: Path, commit: str, module: str, recorded: str) -> bytes | None:
    """``gmp/<module>`` at ``commit`` where git has it and it hashes as ``recorded`` (:data:`gmp.results.CODE_HASH`),
    else None: the code a cache recorded, read back."""
    try:
        prefix = _fingerprint.PACKAGE.resolve().relative_to(root.resolve()).as_posix()
        data = git_output(root, "show", f"{commit.removesuffix('+dirty')}:{prefix}/{module}", what=module)
    except ValueError:
        return None
    return data if _fingerprint._syntax_digest(data) == recorded else None


def _changeddefinitions(chapter: str, provenance: Mapping[str, Any], root: Path | None
                         ) -> tuple[dict[str, list[tuple[str, int, int]]], list[str]]:
    """What changed in the chapter's code since the code the cache was last computed or re-verified by:
    ``(functions, unknown)``, the functions and methods of each changed or added module whose syntax differs
    (qualified name, first and last line today), and what cannot be told function by function (module-level
    code that changed, a module whose recorded code git cannot give back), each as a phrase."""
    restamps = provenance.get(RESTAMPS) or []
    last = restamps[-1] if restamps else provenance
    code = last.get("code") if isinstance(last.get("code"), dict) else {}
    modules, scheme, commit = code.get("modules") or {}, code.get("hash", "source"), str(last.get("commit") or "")
    within = _fingerprint.chapter_modules(chapter)
    today = _fingerprint.read_module_hashes(_results.CODE_HASH)
    changed = _fingerprint.changed_modules(modules, scheme, within) if scheme == _results.CODE_HASH else []
    added = sorted(m for m in (within or ()) if m not in modules and m in today)
    functions: dict[str, list[tuple[str, int, int]]] = {}
    unknown = [] if scheme == _results.CODE_HASH else [
        f"the code of the run, fingerprinted by its files' bytes ({scheme!r}), which git cannot compare function by "
        "function"]
    for module in changed + added:
        if module not in today:
            continue
        now, now_rest = definitions((_fingerprint.PACKAGE / module).read_bytes())
        old = (_source_at(root, commit, module, modules[module]) if root and commit else None) if module in modules \
            else b""  # a module added since: every function of it is new
        if old is None:
            unknown.append(f"gmp/{module} (its code at the run, commit {commit[:12] or 'unrecorded'}, is not in git)")
            continue
        then, then_rest = definitions(old) if old else ({}, None)
        functions[module] = [(name, first, end) for name, (tree, first, end) in now.items()
                             if then.get(name, (None,))[0] != tree]
        if old and then_rest != now_rest:
            unknown.append(f"gmp/{module}'s module-level code (constants, class attributes)")
    return functions, unknown


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

    A re-stamp vouches only for what it recomputed: each function or method of the chapter's code that differs
    from the code the cache recorded (read back from git at the commit it records) must have run in a recomputed
    unit (traced, :func:`tracing`); one that did not (a function the notebook calls to compute a payload, say),
    changed module-level code, or recorded code that git cannot give back raises :class:`RestampRefused` naming
    it, and nothing is written.

    It holds the lock of the chapter's run at this config (:func:`gmp.runlock.run_lock`) throughout, or is refused
    naming the run that holds it: a re-stamp beside a run would write the old run's provenance into the folder
    the run just replaced.
    """
    journal = _results.journal_path(chapter, scale, _config.load(chapter, scale).digest)
    with run_lock(journal) if journal is not None else contextlib.nullcontext():
        return _restamp(chapter, scale, sample, sample_seed, device, root)


def _restamp(chapter: str, scale: str, sample: int | None, sample_seed: int, device: str,
             root: Path | None) -> dict[str, Any]:
    """:func:`restamp` once it holds the run's lock."""
    units = units_of(chapter, "to recompute, so it cannot be re-stamped (rerun it instead)")
    folder, provenance, entries = _cached_run(chapter, scale, "re-stamp")
    if provenance.get("config_digest") != _config.load(chapter, scale).digest:
        raise ValueError(f"the {scale}-scale cache of {chapter} is stale (its config differs from the chapter's "
                         f"current one): a re-stamp says today's code computes what that run computed, which does "
                         f"not make it current; rerun python -m gmp.runs {chapter} --scale {scale}")
    cfg, seed = _config.Config(chapter, scale, provenance["config"]), provenance.get("seed") or 0
    recorded = {entry["key"]: entry for entry in entries}
    resolved = _config.resolve_device(device)
    code = _results.code_fingerprint()
    functions, unknown = _changeddefinitions(chapter, provenance, root or _results.repository_root())
    if unknown:
        raise RestampRefused(f"the code of {chapter} changed since its cache in {'; '.join(unknown)}: a re-stamp "
                             f"recomputes the units only, so it cannot vouch for code that may compute the payloads "
                             f"outside them; rerun python -m gmp.runs {chapter} --scale {scale} (or record a rewrite "
                             f"that computes the same with --same-function)")
    traced = [_fingerprint.PACKAGE / module for module, changed in functions.items() if changed]
    with _outside_a_run(), tracing(traced) if traced else contextlib.nullcontext({}) as executed:
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
    ran = {os.path.realpath(path): lines for path, lines in executed.items()}
    outside = [f"gmp/{module}: {name}" for module, changed in functions.items() for name, first, end in changed
               if not any(first <= line <= end for line in ran.get(os.path.realpath(_fingerprint.PACKAGE / module), ()))]
    if outside:
        raise RestampRefused(f"code of {chapter} that changed since its cache ran in none of the {len(chosen)} units "
                             f"recomputed: {', '.join(outside)}; it may compute the payloads outside the units (in the "
                             f"notebook), which a re-stamp does not recompute, so the cache is not re-stamped (rerun "
                             f"python -m gmp.runs {chapter} --scale {scale}"
                             + (", or re-stamp without --sample, if the other units run it)" if len(chosen) < len(keys)
                                else ")"))
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
