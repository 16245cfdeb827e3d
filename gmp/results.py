"""Cached results with provenance, and the claims of the papers with their rules.

The ledger that judges every claim on its paper-scale cache and renders it is :mod:`gmp.ledger`.

Layout, for a chapter ``book/<part>/<chapter>.md`` run at some scale::

    book/_results/<chapter>/<scale>/
        provenance.json     commit, versions, device, date, wall time, config and its digest,
                            the code fingerprint (per-module hashes of gmp), and the
                            sha256 of every other file of the folder
        <name>.json         one payload per result (plain JSON)
        <name>.npz          optional arrays beside it
        <chapter>.ipynb     the notebook as papermill executed it (kept locally, not committed)

Only ``python -m gmp.runs`` writes there: it sets ``GMP_RESULTS_STAGING`` to a private
folder, the chapter's :meth:`Store.save` calls write into it, and the runner moves it into
place when the run succeeds. A chapter built by Jupyter Book, or opened in Colab, only
reads. A cached result whose config digest differs from the chapter's current config is
reported as stale, and one whose files fail their hashes or cannot be read as corrupt,
never as current. One computed by gmp code that has changed since stays current, and says
in which modules the code changed (:func:`code_fingerprint`), or that a module was rewritten
without changing what it computes, and why that is known (:data:`SAME_FUNCTION`), or that the
code was refactored and today's code re-verified on a stated sample of the cache's units
(``python -m gmp.runs CHAPTER --scale S --restamp``, recorded in provenance.json).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import html
import importlib
import json
import math
import os
import pkgutil
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from gmp import config as _config

try:
    import fcntl
except ImportError:  # Windows: no locks, so gmp.runs refuses --jobs there
    fcntl = None

#: What :meth:`Store.memo` returns with ``wait=False`` for a unit another worker is computing.
BUSY = object()

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
#: An identity (a theorem or algebraic identity checked numerically) holds within its stated tolerance.
VERIFIED = "verified"
#: An identity does not hold within its stated tolerance.
FAILS = "fails"
#: Shown when no paper-scale cache exists.
NOT_RUN = "not yet run at paper scale"
#: Shown when the paper-scale cache was computed with a different config.
STALE = "stale: config changed since the paper-scale run"
#: Shown when the paper-scale cache fails its checks (a file edited, missing or unreadable).
CORRUPT = "corrupt: the paper-scale cache fails its checks"
#: A comparison that cannot tell the methods apart, because its test's smallest attainable p-value is not
#: below the rule's level (:class:`PowerTest`) or the count it measured is beyond noise in neither
#: direction. Neither a weak reproduction nor a failure.
INCONCLUSIVE = "inconclusive"
#: The verdicts the rule of a finding may give; the ledger adds :data:`NOT_RUN`, :data:`STALE` and :data:`CORRUPT`.
VERDICTS: tuple[str, ...] = (REPRODUCED, PARTLY, NOT_REPRODUCED, INCONCLUSIVE)
#: The verdicts the rule of an identity may give (no "partly", since it holds within its tolerance or not).
IDENTITY_VERDICTS: tuple[str, ...] = (VERIFIED, FAILS)
FINDING = "finding"
IDENTITY = "identity"
#: The kinds of claim and the verdicts each may give. A finding is an empirical claim that could have
#: come out otherwise; an identity is a theorem or algebraic identity checked numerically.
KIND_VERDICTS: dict[str, tuple[str, ...]] = {FINDING: VERDICTS, IDENTITY: IDENTITY_VERDICTS}
#: A claim the paper makes.
PAPER = "paper"
#: A robustness check of ours, an arm the paper never ran.
CHECK = "check"
#: A literal reading of the paper's text that the author's public code rules out.
SUPERSEDED = "superseded"
#: Where a claim comes from, which sets the ledger it is counted in. ``"paper"`` is a claim the paper makes
#: (its verdicts answer "does the paper hold?"), ``"check"`` a robustness check of ours (an arm the paper
#: never ran, such as another learning rate or initialisation), ``"superseded"`` a literal reading of the
#: paper's text that the author's public code rules out, kept for the record.
SOURCES: tuple[str, ...] = (PAPER, CHECK, SUPERSEDED)

STAGING_ENV = "GMP_RESULTS_STAGING"
ROOT_ENV = "GMP_RESULTS"
RESULTS_PATH = "book/_results"
"""Where the results cache lives in the repository, relative to its root."""


def repository_root() -> Path | None:
    """The book's repository (the folder holding ``_toc.yml`` and ``book/``), if we are in one."""
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for folder in (start, *start.parents):
            if (folder / "_toc.yml").is_file() and (folder / "book").is_dir():
                return folder
    return None


def results_root() -> Path | None:
    """``$GMP_RESULTS`` if set, else ``book/_results`` of the repository, else None."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    root = repository_root()
    return root / RESULTS_PATH if root else None


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o644 & ~_read_umask()  # read once, at import: os.umask is process-wide and not thread-safe


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The file is readable by everyone (mode 0644 less the process's umask, as ``open`` would
    give), not private like the temporary file it starts as, so a shared checkout can read it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n").encode())


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return buffer.getvalue()


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"result names are made of letters, digits, '_' and '-', got {name!r}")


def missing_cell(status: str) -> str:
    """What a table cell shows where a paper-scale cache with this status has no value for it."""
    return {"absent": NOT_RUN, "stale": "stale cache", "corrupt": "corrupt cache"}.get(status, "—")


@dataclasses.dataclass(frozen=True)
class Cached:
    """One cached result: ``status`` is "current", "stale", "corrupt" or "absent".

    "corrupt" means the cache fails its checks (``problem`` says how): a payload file differs
    from what the run wrote, is missing, or cannot be read. Its payload is never returned.
    """

    chapter: str
    name: str
    scale: str
    status: str
    payload: dict[str, Any] | None = None
    arrays: dict[str, np.ndarray] | None = None
    provenance: dict[str, Any] | None = None
    units: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The units (key to value) that an unfinished run with the current config has journalled (if absent)."""
    problem: str | None = None
    """What is wrong with a corrupt cache."""
    code_changed: tuple[str, ...] | None = None
    """The gmp modules of the chapter (:func:`chapter_modules`) changed since the cached run (None when it
    recorded no code fingerprint)."""
    units_code: dict[str, Any] = dataclasses.field(default_factory=dict)
    """How many of the journalled :attr:`units` today's code did not compute, as :func:`resumed_code` gives it."""
    code_same: tuple[SameFunction, ...] = ()
    """The chapter's modules rewritten since the cached run without changing what they compute (:data:`SAME_FUNCTION`)."""
    restamp: dict[str, Any] | None = None
    """The evidence of the latest re-stamp of the cache (``python -m gmp.runs CHAPTER --restamp``), None when
    never re-stamped. Its code, not the run's, is what :attr:`code_changed` is then told against."""

    @property
    def journalled(self) -> int:
        """How many units an unfinished run with the current config has journalled."""
        return len(self.units)

    @property
    def current(self) -> bool:
        return self.status == "current"

    def describe(self) -> str:
        """One sentence on where this result comes from, for a chapter or the ledger."""
        command = f"`python -m gmp.runs {self.chapter} --scale {self.scale}`"
        if self.scale == "paper":  # a chapter whose paper scale is run otherwise names its command
            try:
                command = getattr(importlib.import_module(f"gmp.experiments.{self.chapter}"), "PAPER_COMMAND", command)
            except ImportError:
                pass
        uses = chapter_modules(self.chapter)
        if self.status == "absent" and self.journalled:
            return (f"Not finished at {self.scale} scale: an unfinished run with the current config has journalled "
                    f"{self.journalled} finished units{_units_code_text(self.units_code, uses)}, and {command} resumes "
                    f"from them. A claim is judged on them only where its rule says so.")
        if self.status == "absent":
            return f"Not yet run at {self.scale} scale: run {command}."
        if self.status == "corrupt":
            return (f"CORRUPT: the {self.scale}-scale cache of {self.name!r} fails its checks ({self.problem}); "
                    f"it is not shown. Rerun {command} (or restore the folder from git).")
        p = self.provenance or {}
        commit = str(p.get("commit", "?"))
        commit = commit[:10] + (" with uncommitted changes" if commit.endswith("+dirty") else "")
        when = f"{p.get('date', '?')} on {p.get('device', '?')}, commit {commit}, " \
               f"gmp {p.get('gmp_version', '?')}, torch {p.get('torch_version', '?')}, " \
               f"wall time {_duration(p.get('wall_time_s'))}"
        carried = p.get("carried_units") if isinstance(p.get("carried_units"), dict) else {}
        n_carried = sum(c.get("units", 0) for c in carried.values())
        if p.get("resumed_units", 0) > n_carried:
            when += (f" after resuming {p['resumed_units'] - n_carried} units journalled by earlier, interrupted "
                     f"attempts ({_duration(p.get('resumed_seconds'))} of computing"
                     f"{_units_code_text(p.get('resumed_code', {}), uses, 'the run')})")
        for source, c in carried.items():
            unknown = c.get("units", 0) - c.get("code_recorded", 0)
            when += (f"; {c.get('units')} of its units were carried over from {source}, not recomputed "
                     f"({c.get('why')}" + (f"; {unknown} of them by code whose fingerprint that run did not record"
                                          if unknown else "") + ")")
        threads = p.get("threads") if isinstance(p.get("threads"), dict) else {}
        if threads.get("notebook") or threads.get("workers"):
            when += ", " + " and ".join(f"{n} thread{'s' * (n != 1)} {who}" for who, n in (("in the notebook", threads.get("notebook")),
                                                                            ("per worker", threads.get("workers"))) if n)
        checks = "" if "payload_sha256" in p else " Payload hashes not recorded (a cache written before they were)."
        checks += _units_code_text(p.get("units_code", {}), uses, "the notebook", sentence=True)
        edited = [m for m in p.get("code_edited", []) if uses is None or m in uses]
        if edited:
            checks += (f" The files of {', '.join(edited)} changed while the run ran, so which version of them it "
                       f"ran is uncertain; rerun {command} to be sure.")
        code = p.get("code") if isinstance(p.get("code"), dict) else {}
        scope = "gmp modules this chapter uses" if uses is not None else "gmp modules"
        if self.restamp is not None:
            then, ran = self.restamp["code"], code.get("modules", {})
            moved = sorted(m for m in set(then["modules"]) | set(ran) if (uses is None or m in uses)
                           and then["modules"].get(m) != ran.get(m)) if then.get("hash") == code.get("hash") else []
            checks += (f" The code was refactored since this run" + (f" (in {', '.join(moved)})" if moved else "")
                       + f" and re-verified: {restamp_text(self.restamp)}")
        if self.code_changed is None and "modules" in code:
            checks += (f" Code fingerprint hashed as {code.get('hash')!r}, which this gmp cannot compare, so whether "
                       f"gmp has changed since is unknown.")
        elif self.code_changed is None:
            checks += " Code fingerprint not recorded, so whether gmp has changed since is unknown."
        elif self.code_changed:
            checks += (f" CODE CHANGED since: of the {scope}, {', '.join(self.code_changed)} differ from those of "
                       f"{'that run' if self.restamp is None else 'its re-verification'}; the numbers are that run's "
                       f"(rerun {command} to recompute them"
                       + (f", or re-stamp it: `python -m gmp.runs {self.chapter} --scale {self.scale} --restamp`)."
                          if self.restamp is not None or p.get("payload_sha256", {}).get("units.jsonl.gz") else ")."))
        else:
            checks += (f" The code of the {scope} has not changed since "
                       f"{'this run finished' if self.restamp is None else 'it was re-verified'}.")
        for same in self.code_same:
            checks += (f" gmp/{same.module} has been rewritten since in how it computes, not what it computes: "
                       f"{same.why}.")
        if self.status == "stale":
            return (f"STALE: the {self.scale}-scale results cached {when} were computed with a config "
                    f"(digest {p.get('config_digest')}) that differs from the chapter's current one; "
                    f"they are not shown as current. Rerun {command}.{checks}")
        return f"{self.scale.capitalize()}-scale results cached {when}.{checks}"

    def note(self):
        """An HTML admonition for the chapter (renders in the book, Jupyter and Colab)."""
        from IPython.display import HTML

        kind = {"current": "note", "stale": "warning", "corrupt": "error", "absent": "important"}[self.status]
        title = {"current": "Cached paper-scale run", "stale": "Stale cached results", "corrupt": "Corrupt cached results",
                 "absent": "Unfinished paper-scale run" if self.journalled else "Not yet run at paper scale"}[self.status]
        if self.status == "current" and self.code_changed:
            title += " (code changed since)"
        elif self.status == "current" and self.restamp is not None and self.code_changed is not None:
            title += " (code refactored since, re-verified)"
        if self.scale != "paper":
            title = title.replace("paper-scale", f"{self.scale}-scale").replace("paper scale", f"{self.scale} scale")
        return HTML(f'<div class="admonition {kind}"><p class="admonition-title">{html.escape(title)}</p>'
                    f"<p>{_inline_code(html.escape(self.describe()))}</p></div>")


def restamp_text(evidence: Mapping[str, Any]) -> str:
    """One sentence on a re-stamp's ``evidence`` (as ``gmp.runs.restamp`` records it): when, how many units of
    how many, which, within what tolerance, and the largest difference."""
    keys = list(evidence.get("keys", []))
    which = ", ".join(keys) if len(keys) <= 6 else f"{', '.join(keys[:6])} and {len(keys) - 6} more"
    sample = evidence.get("sample")
    drawn = (f", a sample drawn with seed {sample['seed']} to cover every arm" if isinstance(sample, dict)
             else ", all of them")
    tolerances = {(t[0], t[1]) for t in evidence.get("tolerance", {}).values()}
    within = ("bitwise" if tolerances == {(0.0, 0.0)} else
              f"within rtol={next(iter(tolerances))[0]:g}, atol={next(iter(tolerances))[1]:g}" if len(tolerances) == 1
              else "each within its own tolerance")
    largest = evidence.get("largest_difference")
    differs = ("no number differed" if not largest else
               f"the largest difference was {largest['absolute']:.3g}"
               + (f" (relative {largest['relative']:.3g})" if largest.get("relative") is not None else "")
               + f" in unit {largest['unit']} at {largest['path']}")
    return (f"on {evidence.get('date', '?')}, {evidence.get('units')} of its {evidence.get('of')} units{drawn} "
            f"({which}) were recomputed with the code of commit {str(evidence.get('commit', '?'))[:10]} on "
            f"{evidence.get('device', '?')} and equal the cached ones {within}; {differs}.")


def _restamp(provenance: Mapping[str, Any]) -> dict[str, Any] | None:
    """The latest re-stamp recorded in ``provenance`` whose code fingerprint can be read, None if none."""
    found = [r for r in provenance.get("restamps", []) if isinstance(r, dict) and isinstance(r.get("code"), dict)
             and isinstance(r["code"].get("modules"), dict)] if isinstance(provenance.get("restamps"), list) else []
    return found[-1] if found else None


def _units_code_text(summary: Mapping[str, Any], within: Collection[str] | None = None, than: str = "today",
                     sentence: bool = False) -> str:
    """The part of a sentence on journalled units that the code of ``than`` (today's, the run's that
    resumed them, or the notebook's) did not compute (see :func:`resumed_code`), naming only the
    changed modules in ``within`` (a chapter's :func:`chapter_modules`) when given; with
    ``sentence``, a sentence on the run's units."""
    parts = []
    changed = [m for m in summary.get("changed_modules", []) if within is None or m in within]
    if summary.get("other_code_units") and changed:
        parts.append(f"{summary['other_code_units']} of them by code that differs from {than}'s in "
                     f"{', '.join(changed)}")
    if summary.get("code_not_recorded_units"):
        parts.append(f"{summary['code_not_recorded_units']} of them with no code fingerprint recorded")
    if sentence:
        return " Of the units this run used, " + "; ".join(p.replace(" of them", "", 1) for p in parts) + "." \
            if parts else ""
    return "; " + "; ".join(parts) if parts else ""


def _inline_code(text: str) -> str:
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Store:
    """Where a chapter saves its results (under ``gmp.runs``) and reads cached ones.

    ``save`` writes only when the chapter runs under ``python -m gmp.runs``; otherwise it
    does nothing and returns None, so building the book never changes the repository.
    ``memo`` makes a long loop resumable: under ``gmp.runs`` each finished unit is appended
    to a journal that survives an interruption, and a rerun with the same config skips it.
    """

    def __init__(self, chapter: str, cfg: _config.Config):
        self.chapter = chapter
        self.cfg = cfg
        staging = os.environ.get(STAGING_ENV)
        self.staging = Path(staging) if staging else None
        self._journal: dict[str, Any] = {}
        self._journal_path: Path | None = None
        self._codes_in_journal: set[str] = set()
        self._used: set[str] = set()
        code_fingerprint()  # read now, so units name the code the run started with, not files edited while it runs
        if self.staging is not None:
            self._journal_path = self.staging.parent / "_partial" / f"{cfg.scale}-{cfg.digest}.jsonl"
            entries = journal_entries(self._journal_path)
            self._journal = {entry["key"]: entry["value"] for entry in entries}
            self._codes_in_journal = set(journal_code(entries))
            record = self.staging / RUN_CODE / f"{os.getpid()}.json"
            if not record.exists():  # what this process runs, for the run's provenance (read_run_records)
                atomic_write_json(record, {"code": run_code(chapter), "edited": code_edited(), "threads": _threads(),
                                           "map": _cpu_map()})

    def save(self, name: str, payload: Mapping[str, Any],
             arrays: Mapping[str, np.ndarray] | None = None) -> Path | None:
        """Save one result (JSON payload, optional arrays) when running under ``gmp.runs``."""
        _check_name(name)
        try:
            json.dumps(payload)
        except TypeError as err:
            raise ValueError(f"payload of result {name!r} must be JSON serialisable: {err}") from None
        if self.staging is None:
            return None
        path = self.staging / f"{name}.json"
        atomic_write_json(path, dict(payload))
        if arrays:
            atomic_write_bytes(self.staging / f"{name}.npz", _npz_bytes(arrays))
        return path

    def journalled(self, key: str) -> Any | None:
        """The journalled value of ``key`` of :meth:`memo`, or None when the journal holds none
        (re-read from the journal, where another worker may have added it)."""
        if key not in self._journal and self._journal_path is not None:
            self._journal.update(journal_units(self._journal_path))
        return self._journal.get(key)

    def scratch(self, key: str) -> Path | None:
        """A file for the in-progress state of the unit ``key`` of :meth:`memo` (None outside ``gmp.runs``).

        A unit that takes long (one long training run) can checkpoint itself there; the file
        lives beside the journal, is not committed, and is deleted once the unit is journalled.
        """
        if self._journal_path is None:
            return None
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return self._journal_path.with_suffix("") / f"{safe}.pt"

    def memo(self, key: str, compute: Callable[[], Any], wait: bool = True) -> Any:
        """Return the journalled value of ``key``, or compute, journal and return it.

        The value is returned as the journal holds it, after a JSON round trip (dict keys
        become strings, tuples lists), whether it was computed now or resumed.

        Each journal entry names the :func:`code_fingerprint` of the code that computed it
        (with its per-module hashes the first time a process journals).

        Under ``gmp.runs`` several workers may share the journal: a unit that another worker
        is computing is waited for (a lock file beside its scratch file, on POSIX systems)
        and then read from the journal, not computed twice. With ``wait=False`` such a unit
        is not waited for: ``memo`` returns :data:`gmp.results.BUSY` at once.
        """
        if key in self._journal:
            return self._used_value(key)
        if self._journal_path is None:
            self._journal[key] = json.loads(json.dumps(compute()))
            return self._journal[key]
        lock = self.scratch(key).with_suffix(".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as held:
            if fcntl is not None:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))  # released on close
                except BlockingIOError:
                    return BUSY
            self._journal.update(journal_units(self._journal_path))  # another worker may have finished it
            if key not in self._journal:
                self._compute_and_journal(key, compute)
        with contextlib.suppress(OSError):  # Windows: another worker may hold the file open
            lock.unlink(missing_ok=True)
        return self._used_value(key)

    def _used_value(self, key: str) -> Any:
        """The journalled value of ``key``, noted (under ``gmp.runs``) as one this run uses, so that the
        runner resumes, caches and drops from the journal exactly the units the run used."""
        if self.staging is not None and key not in self._used:
            self._used.add(key)
            used = self.staging / RUN_USED / f"{os.getpid()}.jsonl"
            used.parent.mkdir(parents=True, exist_ok=True)
            with open(used, "a") as handle:
                handle.write(json.dumps(key) + "\n")
        return self._journal[key]

    def _compute_and_journal(self, key: str, compute: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = compute()
        self._append({key: (value, time.perf_counter() - started)})
        self.scratch(key).unlink(missing_ok=True)
        return self._journal[key]

    def record(self, units: Mapping[str, tuple[Any, float]]) -> None:
        """Journal units computed elsewhere, ``key -> (value, seconds)``, in one write and one
        fsync, in the order given and in the format of :meth:`memo` (which computes one at a
        time and journals each). Needs ``gmp.runs``'s staging folder, as the journal does."""
        if self._journal_path is None:
            raise RuntimeError("Store.record journals units only under gmp.runs (or with its staging folder set)")
        if units:
            self._append(units)

    def _append(self, units: Mapping[str, tuple[Any, float]]) -> None:
        code = code_fingerprint()
        lines = []
        for key, (value, seconds) in units.items():
            entry = {"key": key, "value": value, "seconds": round(seconds, 3), "code": code["digest"],
                     "threads": _threads()}
            if edited := code_edited():
                entry["edited"] = edited
            if code["digest"] not in self._codes_in_journal:
                entry["modules"], entry["hash"] = code["modules"], code["hash"]
                self._codes_in_journal.add(code["digest"])
            lines.append(json.dumps(entry))
            self._journal[key] = json.loads(lines[-1])["value"]
        append_journal(self._journal_path, lines)

    def cached(self, name: str, scale: str = "paper") -> Cached:
        return cached(self.chapter, name, scale)


RUN_CODE = ".code"
"""The folder of a run's staging folder where each process that opens a :class:`Store` records the code
(:func:`code_fingerprint`, :func:`code_edited`), threads and CPU map (``gmp._native.describe``) it runs with
(:func:`read_run_records`)."""
RUN_USED = ".used"
"""The folder of a run's staging folder where each process lists the journal keys its :meth:`Store.memo` returned."""


def _threads() -> int | None:
    """The number of threads torch computes with in this process (None when torch is not imported)."""
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def _cpu_map() -> dict[str, str] | None:
    """What computes the hyperspherical map on the CPU in this process (``gmp._native.describe``: the
    compiled map with its compiler and flags, or the torch map and why), None where gmp's layers are not
    imported."""
    import sys

    native = sys.modules.get("gmp._native")
    return native.describe() if native is not None else None


def read_run_records(staging: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """What the processes of a run recorded in its ``staging`` folder, removed from it: the code records
    of :data:`RUN_CODE` (one per process) and the journal keys they used (:data:`RUN_USED`)."""
    import shutil

    records, used = [], set()
    for path in sorted((staging / RUN_CODE).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_bytes()))
    for path in sorted((staging / RUN_USED).glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                used.add(json.loads(line))
    for folder in (RUN_CODE, RUN_USED):
        shutil.rmtree(staging / folder, ignore_errors=True)
    return [r for r in records if isinstance(r, dict) and isinstance(r.get("code"), dict)], \
        {key for key in used if isinstance(key, str)}


def cached(chapter: str, name: str, scale: str = "paper") -> Cached:
    """Read the cached result ``name`` of ``chapter`` at ``scale`` and check it is current.

    Its files are checked against the sha256 hashes that ``gmp.runs`` records in
    ``provenance.json`` (caches written before that have none); a cache that fails a check
    or cannot be read is returned with status "corrupt", never as current. Whether the code has changed
    since is told against the code of the cache's latest re-stamp (``python -m gmp.runs CHAPTER --restamp``,
    which found today's code computing the same units) where it has one, else against the run's.
    """
    _check_name(name)
    root = results_root()
    folder = root / chapter / scale if root else None
    try:
        found = _read_snapshot(folder, name) if folder is not None else None
    except CorruptCache as err:
        return Cached(chapter, name, scale, "corrupt", problem=str(err))
    if found is None:
        entries = _journalled(chapter, scale)
        return Cached(chapter, name, scale, "absent", units={e["key"]: e["value"] for e in entries},
                      units_code=resumed_code(entries, chapter))
    provenance, payload, arrays = found
    current = _config.load(chapter, scale).digest
    status = "current" if provenance.get("config_digest") == current else "stale"
    restamp = _restamp(provenance)
    code = restamp["code"] if restamp is not None else provenance.get("code")  # the code that last computed it
    modules = code.get("modules") if isinstance(code, dict) else None
    scheme = code.get("hash", "source") if isinstance(code, dict) else None
    comparable = isinstance(modules, dict) and scheme in (CODE_HASH, "source")
    code_changed = tuple(changed_modules(modules, scheme, chapter_modules(chapter))) if comparable else None
    code_same = tuple(same_function(modules, scheme, chapter_modules(chapter))) if comparable else ()
    return Cached(chapter, name, scale, status, payload, arrays, provenance, code_changed=code_changed,
                  code_same=code_same, restamp=restamp)


class CorruptCache(Exception):
    """A cache folder fails its checks (see :func:`cached`)."""


def replace_folder(staging: Path, final: Path) -> None:
    """Put the finished cache folder ``staging`` in place of ``final`` (as ``gmp.runs`` does when a run
    succeeds): ``final`` is renamed aside to ``.old-<name>-<pid>``, ``staging`` renamed to it and the
    old one removed. A reader never sees a mix of the two (``_read_snapshot``)."""
    import shutil

    old = final.parent / f".old-{final.name}-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def _folder_identity(folder: Path) -> tuple[int, int] | None:
    try:
        stat = folder.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


SNAPSHOT_TRIES = 50
"""How many times ``_read_snapshot`` reads a cache folder that is being replaced before it gives up."""


def _read_snapshot(folder: Path, name: str):
    """:func:`_read_cache` of one consistent state of ``folder``: the folder is the same one (device and
    inode) before and after the read, and no replacement (:func:`replace_folder`) is half done;
    otherwise it is read again, so a cache replaced during the read is not taken for a corrupt or
    absent one."""
    for attempt in range(SNAPSHOT_TRIES):
        before = _folder_identity(folder)
        try:
            found, problem = _read_cache(folder, name), None
        except CorruptCache as err:
            found, problem = None, err
        except OSError as err:  # a file that is_file() saw is gone, or cannot be read
            found, problem = None, CorruptCache(f"{Path(err.filename or folder).name} cannot be read: {err.strerror}")
        replacing = any(folder.parent.glob(f".old-{folder.name}-*")) if before is None else False
        if before == _folder_identity(folder) and not replacing:
            if problem is not None:
                raise problem
            return found
        time.sleep(0.002 * (attempt + 1))
    raise CorruptCache(f"the folder was replaced {SNAPSHOT_TRIES} times while it was read; read it again")


def payload_hashes(folder: Path) -> dict[str, str]:
    """The sha256 of every file of a cache folder but ``provenance.json``, by path relative to it."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "provenance.json"}


def _read_cache(folder: Path, name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray] | None] | None:
    """``(provenance, payload, arrays)`` of result ``name`` in ``folder``, None if absent; raises :class:`CorruptCache`."""
    json_file, npz_file = folder / f"{name}.json", folder / f"{name}.npz"
    if not (folder / "provenance.json").is_file():
        if json_file.is_file():
            raise CorruptCache(f"{json_file.name} has no provenance.json beside it")
        return None
    try:
        provenance = json.loads((folder / "provenance.json").read_bytes())
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise CorruptCache(f"provenance.json cannot be read: {err}") from None
    hashes = provenance.get("payload_sha256") if isinstance(provenance, dict) else None
    if not isinstance(provenance, dict) or not isinstance(hashes, (dict, type(None))):
        raise CorruptCache("provenance.json is not a provenance record")
    for path in (json_file, npz_file) if hashes is not None else ():
        recorded, present = hashes.get(path.name), path.is_file()
        if recorded is None and present:
            raise CorruptCache(f"{path.name} was not written by the run (provenance.json has no hash of it)")
        if recorded is not None and not present:
            raise CorruptCache(f"{path.name} is missing")
        if present and hashlib.sha256(path.read_bytes()).hexdigest() != recorded:
            raise CorruptCache(f"{path.name} differs from the file the run wrote (sha256 mismatch)")
    if not json_file.is_file():
        return None
    try:
        payload = json.loads(json_file.read_bytes())
    except ValueError as err:
        raise CorruptCache(f"{json_file.name} cannot be read: {err}") from None
    if not isinstance(payload, dict):
        raise CorruptCache(f"{json_file.name} holds a {type(payload).__name__}, not a JSON object")
    arrays = None
    if npz_file.is_file():
        try:
            with np.load(npz_file, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except Exception as err:  # a damaged zip raises any of BadZipFile, zlib.error, ValueError, OSError, EOFError
            raise CorruptCache(f"{npz_file.name} cannot be read: {type(err).__name__}: {err}") from None
    return provenance, payload, arrays


def journal_path(chapter: str, scale: str, digest: str) -> Path | None:
    """The journal of finished units of an unfinished ``gmp.runs`` run (see :meth:`Store.memo`)."""
    root = results_root()
    return root / chapter / "_partial" / f"{scale}-{digest}.jsonl" if root else None


def journal_entries(path: Path) -> list[dict[str, Any]]:
    """The complete entries of a journal: JSON objects with a string ``key`` and a ``value``.

    A line cut short by an interruption (not valid JSON) is skipped. A line that is not an
    entry (valid JSON of another shape, bytes that are not UTF-8, or an entry whose ``code``,
    ``modules`` or ``seconds`` has the wrong type, see :func:`entry_problem`) is
    skipped with a warning naming the file and the line, so that it never blocks a resume.
    """
    entries = []
    for number, raw in enumerate(path.read_bytes().splitlines() if path.is_file() else [], start=1):
        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            warnings.warn(f"{path}, line {number}: skipped, not UTF-8 text", stacklevel=2)
            continue
        except json.JSONDecodeError:
            continue
        if problem := entry_problem(entry):
            warnings.warn(f"{path}, line {number}: skipped, {problem}: {raw[:80]!r}", stacklevel=2)
            continue
        entries.append(entry)
    return entries


def entry_problem(entry: Any) -> str | None:
    """What makes ``entry`` (a parsed journal line) not a journal entry, None if nothing.

    An entry is a JSON object with a string ``key`` and a ``value``. ``Store.memo`` also
    writes ``code`` (a string), ``modules`` (strings by string), ``hash`` (:data:`CODE_HASH` or
    ``"source"``), ``threads`` (torch's thread count, an integer >= 1, or null), ``edited`` (the
    modules :func:`code_edited` names, when any) and ``seconds`` (a finite
    number >= 0); a line with any of them of another type was not written by gmp, so its
    value is not trusted either: :func:`journal_entries` skips the whole line (the unit is
    recomputed) rather than resume it with its code or time unknown.
    """
    if not (isinstance(entry, dict) and isinstance(entry.get("key"), str) and "value" in entry):
        return "not a journal entry (a JSON object with a string 'key' and a 'value')"
    if "code" in entry and not isinstance(entry["code"], str):
        return f"its 'code' is a {type(entry['code']).__name__}, not a string"
    modules = entry.get("modules")
    if "modules" in entry and not (isinstance(modules, dict) and all(isinstance(v, str) for v in modules.values())):
        return "its 'modules' is not an object of strings"
    if "hash" in entry and entry["hash"] not in (CODE_HASH, "source"):
        return f"its 'hash' is {entry['hash']!r}, not {CODE_HASH!r} or 'source'"
    edited = entry.get("edited")
    if "edited" in entry and not (isinstance(edited, list) and all(isinstance(m, str) for m in edited)):
        return "its 'edited' is not a list of strings"
    threads = entry.get("threads")
    if threads is not None and not (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1):
        return f"its 'threads' is {threads!r}, not an integer >= 1"
    seconds = entry.get("seconds")
    if "seconds" in entry and not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                                   and math.isfinite(seconds) and seconds >= 0):
        return f"its 'seconds' is {seconds!r}, not a finite number >= 0"
    carried = entry.get("carried")
    if "carried" in entry and not (isinstance(carried, dict) and set(carried) == {"from", "why"}
                                   and all(isinstance(v, str) and v for v in carried.values())):
        return "its 'carried' is not an object with the strings 'from' and 'why'"
    return None


def carry(chapter: str, scale: str, units: Mapping[str, Any], source: str, why: str,
          code: Mapping[str, Any] | None = None) -> Path:
    """Journal ``units`` (key -> value) that an earlier run computed, for the next ``gmp.runs`` run of
    ``chapter`` at ``scale`` with today's config to resume from instead of computing them again.

    For a config change that leaves these units' settings as they were (a key that only other units
    read): ``source`` names the run that computed them (chapter, config digest, commit), ``why`` says
    why their settings are today's. Each entry is marked ``carried`` with both, and names ``code``
    (that run's recorded :func:`code_fingerprint`, None when it recorded none), so the cache's
    provenance counts them apart and says by which code they were computed (:func:`resumed_code`).
    Run ``python -m gmp.runs <chapter> --verify --unit <key>`` on some to recompute them with today's code.
    A unit that would be journalled as an entry every read skips (:func:`entry_problem`: a key that is
    not a string, ``source`` or ``why`` not strings, a ``code`` of another form) is refused, and nothing written.
    """
    if not source or not why:
        raise ValueError("carry needs the run the units come from (source) and why their settings are today's (why)")
    path = journal_path(chapter, scale, _config.load(chapter, scale).digest)
    if path is None:
        raise RuntimeError("carry needs the book's results folder (a checkout of the repository, or GMP_RESULTS)")
    have = set(journal_units(path))
    lines, named = [], False
    for key, value in units.items():
        if key in have:
            continue
        entry = {"key": key, "value": value, "seconds": 0.0, "carried": {"from": source, "why": why}}
        if code:
            entry["code"] = code["digest"]
            if not named:
                entry["modules"], entry["hash"], named = code["modules"], code.get("hash", "source"), True
        try:
            line = json.dumps(entry)
        except (TypeError, ValueError) as err:
            raise ValueError(f"carry: unit {key!r} cannot be journalled ({err}); nothing was written") from None
        if problem := entry_problem(json.loads(line)):  # every later read would warn and skip it
            raise ValueError(f"carry: unit {key!r} would be journalled as an entry that every read skips "
                             f"({problem}); nothing was written")
        lines.append(line)
    if lines:
        append_journal(path, lines)
    return path


def append_journal(path: Path, lines: Sequence[str]) -> None:
    """Append the JSON ``lines`` to the journal ``path`` in one write and one fsync, first ending a line
    that an interrupted write cut short, so that it stays skipped alone."""
    text = "\n".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        if handle.seek(0, os.SEEK_END):
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                text = "\n" + text
        handle.write((text + "\n").encode())
        handle.flush()
        os.fsync(handle.fileno())


def carried_units(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """How many units of journal ``entries`` :func:`carry` journalled, by the run they came from: ``units``,
    ``why`` and ``code_recorded`` (how many name the code that computed them)."""
    out: dict[str, Any] = {}
    for entry in {entry["key"]: entry for entry in entries}.values():
        if "carried" in entry:
            found = out.setdefault(entry["carried"]["from"], {"units": 0, "why": entry["carried"]["why"],
                                                               "code_recorded": 0})
            found["units"] += 1
            found["code_recorded"] += isinstance(entry.get("code"), str)
    return out


def journal_units(path: Path) -> dict[str, Any]:
    """The values of a journal's units by key (a unit journalled twice keeps its last entry)."""
    return {entry["key"]: entry["value"] for entry in journal_entries(path)}


def _journalled(chapter: str, scale: str) -> list[dict[str, Any]]:
    path = journal_path(chapter, scale, _config.load(chapter, scale).digest)
    return journal_entries(path) if path else []


CODE_HASH = "syntax"
"""How :func:`code_fingerprint` hashes a module, by the SHA-256 of its syntax tree with every bare string
statement (docstrings, attribute docstrings) left out, so comments, layout and documentation
can change without changing the fingerprint. Fingerprints recorded before it (with no ``"hash"``)
hashed each file's bytes, ``"source"``, and are compared with today's files the same way."""


def _tree(node: Any) -> Any:
    """A syntax tree as nested lists, the same under every Python that gmp supports (``ast.dump``
    differs between 3.11, 3.12 and 3.13): each node as its class name and its fields that are
    neither None nor empty, by name; bare string statements, and the empty strings that 3.12 puts
    in an f-string's parts, left out."""
    if node is None:
        return None
    if isinstance(node, ast.JoinedStr):
        return ["JoinedStr", ["values", _tree([v for v in node.values
                                               if not (isinstance(v, ast.Constant) and v.value == "")])]]
    if isinstance(node, list):
        return [_tree(item) for item in node if not (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant)
                                                     and isinstance(item.value.value, str))]
    if isinstance(node, ast.AST):
        fields = ((name, _tree(getattr(node, name, None))) for name in node._fields)
        return [type(node).__name__, *([name, value] for name, value in fields if value is not None and value != [])]
    return repr(node)


def _syntax_digest(source: bytes) -> str:
    """SHA-256 (16 hex digits) of a module's syntax tree without its bare string statements; of its
    bytes, marked as such, when it does not parse (a scratch file must not stop every chapter)."""
    try:
        tree = json.dumps(_tree(ast.parse(source)))
    except SyntaxError:
        return "b" + hashlib.sha256(source).hexdigest()[:15]
    return hashlib.sha256(tree.encode()).hexdigest()[:16]


PACKAGE = Path(__file__).resolve().parent
"""The folder of the imported package ``gmp``, whose modules :func:`code_fingerprint` hashes."""


def _file_stats(package: Path) -> dict[str, tuple[int, int]]:
    """``(size, mtime_ns)`` of each source file of ``package``, by its path inside it."""
    stats = {}
    for path in sorted(package.rglob("*.py")):
        with contextlib.suppress(OSError):  # removed while we look
            stat = path.stat()
            stats[path.relative_to(package).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return stats


_IMPORTED_STATS = _file_stats(PACKAGE)  # when this process imported gmp (gmp/__init__.py imports this module)
_HASHED_STATS: dict[str, tuple[int, int]] = {}  # when code_fingerprint() hashed the files


def module_digests(package: Path) -> dict[str, str]:
    """SHA-256 (first 16 hex digits) of the bytes of each source file of the package folder ``package``
    (the files ``gmp.bookcache.package_digest`` hashes), by its path relative to ``package``."""
    return {p.relative_to(package).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(package.rglob("*.py"))}


def read_module_hashes(scheme: str, package: Path | None = None) -> dict[str, str]:
    """The hash of each source file of ``package`` (default :data:`PACKAGE`) under ``scheme``, read from
    the files now, not once per process as ``_module_hashes`` (see it for the schemes)."""
    package = package or PACKAGE
    if scheme == "source":
        return module_digests(package)
    if scheme != CODE_HASH:
        raise ValueError(f"unknown code hash {scheme!r}: expected {CODE_HASH!r} or 'source'")
    return {p.relative_to(package).as_posix(): _syntax_digest(p.read_bytes()) for p in sorted(package.rglob("*.py"))}


def _module_hashes(scheme: str) -> dict[str, str]:
    """Today's hash of each source file of the imported package ``gmp`` under ``scheme``, by its path
    inside the package (``"experiments/chen_levy.py"``): :data:`CODE_HASH` (those of
    :func:`code_fingerprint`) or ``"source"`` (:func:`module_digests`, the bytes of the files
    ``gmp.bookcache.package_digest`` hashes), each read once per process."""
    return code_fingerprint()["modules"] if scheme == CODE_HASH else _source_hashes()


@functools.cache
def _source_hashes() -> dict[str, str]:
    return read_module_hashes("source", PACKAGE)


def _digest(modules: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(modules, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def code_fingerprint() -> dict[str, Any]:
    """The code this process runs: ``{"digest": ..., "modules": {path: hash}, "hash": CODE_HASH}``.

    ``modules`` holds the :data:`CODE_HASH` of each source file of the imported package
    ``gmp``, by its path inside the package, such as ``"experiments/chen_levy.py"``; ``digest``
    identifies them all. Computed once per process, from the files as they are then: where a
    file has changed since the process imported ``gmp``, or changes later, :func:`code_edited`
    names it.
    """
    global _HASHED_STATS
    _HASHED_STATS = _file_stats(PACKAGE)
    modules = read_module_hashes(CODE_HASH, PACKAGE)
    return {"digest": _digest(modules), "modules": modules, "hash": CODE_HASH}


def run_code(chapter: str) -> dict[str, Any]:
    """What a run of ``chapter`` records as its code: :func:`code_fingerprint`, with the
    :func:`rule_digests` of the chapter's claims under ``"rules"`` (hashed as ``"rule_hash"``) when it has
    any, so that the ledger can tell a rule fixed before the run from one edited after it."""
    rules = rule_digests(chapter)
    return {**code_fingerprint(), "rules": rules, "rule_hash": RULE_HASH} if rules else code_fingerprint()


def code_edited() -> list[str]:
    """The modules of ``gmp`` whose files changed while this process ran, so that
    :func:`code_fingerprint` may not name the code it runs: a module imported before the edit runs
    the old code, one imported after it the new.

    They are the files whose size or mtime changed between the import of ``gmp`` and the
    fingerprint (a touch counts), and those whose syntax hash differs from the fingerprint's now
    (or that were removed). An edit undone before this is called goes unseen.
    """
    fingerprint = code_fingerprint()
    now = _file_stats(PACKAGE)
    edited = {module for module, stat in _IMPORTED_STATS.items() if _HASHED_STATS.get(module) != stat}
    for module, stat in _HASHED_STATS.items():
        if now.get(module) == stat:
            continue
        try:
            digest = _syntax_digest((PACKAGE / module).read_bytes())
        except OSError:
            digest = None
        if digest != fingerprint["modules"].get(module):
            edited.add(module)
    return sorted(edited)


class SameFunction(NamedTuple):
    """A module of gmp rewritten without changing what it computes (see :data:`SAME_FUNCTION`)."""

    module: str
    """Its path inside the package, as in :func:`code_fingerprint`."""
    before: str
    """Its :data:`CODE_HASH` in the runs the record vouches for."""
    after: Mapping[str, str]
    """The :data:`CODE_HASH` after the rewrite of the module and of every module it now relies on
    (those added for it); the record lapses when any of them changes again."""
    why: str
    """What changed and what shows that the function did not (the tests that compare them)."""


SAME_FUNCTION_FILE = Path(__file__).resolve().parent / "same_function.json"
"""The file of the records of :data:`SAME_FUNCTION`, a JSON list of objects with the fields of :class:`SameFunction`.
Not a ``.py`` file, so that a record can vouch for any module, ``results.py`` too, without its own edit changing
the code fingerprint it vouches for."""


def read_same_function(path: Path = SAME_FUNCTION_FILE) -> tuple[SameFunction, ...]:
    """The records of ``path`` (see :data:`SAME_FUNCTION_FILE`); a ValueError naming the file and the record
    where one is not a record."""
    records = json.loads(path.read_text(encoding="utf-8"))
    fields = set(SameFunction._fields)
    for number, record in enumerate(records if isinstance(records, list) else [records]):
        if not (isinstance(record, dict) and set(record) == fields and isinstance(record["after"], dict)
                and all(isinstance(record[f], str) and record[f] for f in fields - {"after"})):
            raise ValueError(f"{path}, record {number}: not a record of a module rewritten with the same function "
                             f"(an object with the strings {', '.join(sorted(fields - {'after'}))} and an object 'after' "
                             f"of module hashes)")
    return tuple(SameFunction(**record) for record in records)


SAME_FUNCTION: tuple[SameFunction, ...] = read_same_function()
"""Modules rewritten (for speed, say) since cached runs without changing the function they compute
(read from :data:`SAME_FUNCTION_FILE`). A cached run that recorded a module as ``before`` counts as run by
today's code in it while that module and the modules it now relies on hash as ``after``; its note names
the module and says why. Each record is a claim that tests back, and lapses when the module changes
again (a test then asks to renew or drop it), so that no later change can shelter under it. It is the
re-stamp (``python -m gmp.runs CHAPTER --restamp``) of one module for every cache, with tests as its
evidence instead of recomputed units: for a cache that keeps its units, the re-stamp is the stronger
evidence."""


def _same(module: str, recorded: str, now: Mapping[str, str]) -> SameFunction | None:
    """The record of :data:`SAME_FUNCTION` by which ``module``, recorded as ``recorded``, is the same
    function in the code hashed as ``now`` (module to hash), if any."""
    return next((same for same in SAME_FUNCTION if (same.module, same.before) == (module, recorded)
                 and all(now.get(m) == digest for m, digest in same.after.items())), None)


def changed_modules(modules: Mapping[str, str], scheme: str = "source",
                    within: Collection[str] | None = None) -> list[str]:
    """The modules of a recorded fingerprint's ``modules``, hashed under ``scheme`` (its ``"hash"``;
    ``"source"`` when it records none), that today's code has changed or removed; of the changed
    ones, only those in ``within`` when given (a chapter's :func:`chapter_modules`); a removed one
    is always listed. A module rewritten since without changing its function
    (:data:`SAME_FUNCTION`, :func:`same_function`) is not listed.

    Modules added since are not listed: a new module cannot have changed an old result
    unless an old module changed to use it.
    """
    today = _module_hashes(scheme)
    return sorted(module for module, digest in modules.items()
                  if module not in today or (today[module] != digest and (within is None or module in within)
                                             and not (scheme == CODE_HASH and _same(module, digest, today))))


def same_function(modules: Mapping[str, str], scheme: str = "source",
                  within: Collection[str] | None = None) -> list[SameFunction]:
    """The records of :data:`SAME_FUNCTION` by which modules of a recorded fingerprint's ``modules``
    (hashed under ``scheme``) differ from today's code without computing anything else; only
    for the modules in ``within`` when given."""
    if scheme != CODE_HASH:
        return []
    today = _module_hashes(scheme)
    found = (_same(module, digest, today) for module, digest in sorted(modules.items())
             if within is None or module in within)
    return [same for same in found if same is not None]


def _imported(path: Path, package: Path) -> set[Path]:
    """The source files of ``package`` (the folder of ``gmp``) that the module at ``path`` imports,
    by any ``import`` statement anywhere in it (those inside functions too), with the ``__init__.py``
    of every package on the way, which Python runs first."""
    here = path.relative_to(package.parent).parts[:-1]  # the package the module is in
    named = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            named += [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(here[:len(here) - node.level + 1]) if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            named += [module] + [module + [alias.name] for alias in node.names]
    files = set()
    for parts in named:
        for end in range(1, len(parts) + 1):
            if parts[0] != package.name:
                break
            folder = package.parent.joinpath(*parts[:end])
            for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
                if candidate.is_file():
                    files.add(candidate)
    return files


@functools.cache
def chapter_modules(chapter: str) -> frozenset[str] | None:
    """The modules of ``gmp`` (paths inside the package, as in :func:`code_fingerprint`) whose code
    the results of ``chapter`` can depend on, or None where that cannot be told (no experiment
    module or no page of that name).

    They are those that ``gmp/__init__.py`` (which every chapter runs), the chapter's experiment
    module, the runner ``gmp.runs`` (which sets a paper-scale run's parameters, seeds and threads)
    and every ``gmp.<module>`` that its page names (in code or prose) import, directly or through
    one another, by static ``import`` statements (``gmp.config`` imports only the chapter's own
    experiment module by name). Another chapter's experiment module and the benchmarks are not
    among them unless one of those imports them. The page's own code is not fingerprinted.
    """
    package = Path(__file__).resolve().parent
    root = repository_root()
    experiment = package / "experiments" / f"{chapter}.py"
    pages = sorted(root.glob(f"book/*/{chapter}.md")) if root else []
    if not experiment.is_file() or len(pages) != 1:
        return None
    page = pages[0].read_text(encoding="utf-8")
    named = {m.partition(".")[2] for m in re.findall(r"\bgmp(?:\.\w+)+", page)}
    for module, names in re.findall(r"\bfrom\s+(gmp(?:\.\w+)*)\s+import\s+\(?([\w\s,]+)", page):
        named |= {f"{module}.{name.split()[0]}".partition(".")[2] for name in names.split(",") if name.strip()}
    todo = [package / "__init__.py", experiment, package / "runs.py"]
    for name in named:
        parts = name.split(".")
        todo += [package.joinpath(*parts[:end]).with_suffix(".py") for end in range(1, len(parts) + 1)]
        todo += [package.joinpath(*parts[:end]) / "__init__.py" for end in range(1, len(parts) + 1)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        todo += _imported(path, package)
    return frozenset(p.relative_to(package).as_posix() for p in seen)


def journal_code(entries: list[dict[str, Any]]) -> dict[str, tuple[dict[str, str], str]]:
    """The per-module hashes, and how they were hashed, of each code fingerprint (by digest) that
    journal ``entries`` record."""
    return {entry["code"]: (entry["modules"], entry.get("hash", "source")) for entry in entries
            if isinstance(entry.get("code"), str) and isinstance(entry.get("modules"), dict)}


def resumed_code(entries: list[dict[str, Any]], chapter: str | None = None) -> dict[str, Any]:
    """How many units of journal ``entries`` (of ``chapter``: only its :func:`chapter_modules` count)
    today's code did not compute, and why.

    ``other_code_units``: units whose recorded code differs from today's, in the modules
    ``changed_modules``; ``code_not_recorded_units``: units journalled with no code
    fingerprint (before gmp recorded one). A unit journalled twice counts once, by its last entry.
    """
    today = code_fingerprint()
    codes = {today["digest"]: (today["modules"], CODE_HASH), **journal_code(entries)}
    other, unrecorded, changed = 0, 0, set()
    for entry in {entry["key"]: entry for entry in entries}.values():
        recorded = codes.get(entry.get("code"))
        if recorded is None:
            unrecorded += 1
        elif differ := changed_modules(*recorded, chapter_modules(chapter) if chapter else None):
            other += 1
            changed.update(differ)
    return {"other_code_units": other, "code_not_recorded_units": unrecorded, "changed_modules": sorted(changed)}


def code_against(entries: list[dict[str, Any]], reference: Mapping[str, Any],
                 chapter: str | None = None) -> dict[str, Any]:
    """How many units of journal ``entries`` were computed by code other than ``reference`` (a recorded
    :func:`code_fingerprint`, such as the one a run's notebook ran), in the same form as
    :func:`resumed_code`: units whose code differs in ``changed_modules`` (only the chapter's
    :func:`chapter_modules` when ``chapter`` is given), and units whose code was not recorded or was
    hashed another way, so that it cannot be compared. As in :func:`changed_modules`, a module
    added after a unit was computed, or rewritten since without changing its function
    (:data:`SAME_FUNCTION`), does not count."""
    scheme, theirs = reference.get("hash", "source"), reference.get("modules", {})
    codes = {reference.get("digest"): (theirs, scheme), **journal_code(entries)}
    within = chapter_modules(chapter) if chapter else None
    other, unknown, changed = 0, 0, set()
    for entry in {entry["key"]: entry for entry in entries}.values():
        recorded = codes.get(entry.get("code"))
        if recorded is None or recorded[1] != scheme:
            unknown += 1
            continue
        differ = {m for m, digest in recorded[0].items() if theirs.get(m) != digest and (within is None or m in within)
                  and not (scheme == CODE_HASH and _same(m, digest, theirs))}
        other += bool(differ)
        changed |= differ
    return {"other_code_units": other, "code_not_recorded_units": unknown, "changed_modules": sorted(changed)}


def with_code(entries: list[dict[str, Any]], source: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` (chosen from the journal entries ``source``) with the per-module hashes of each code
    digest on its first entry, where only a dropped entry of ``source`` carried them."""
    codes, out, named = journal_code(source), [], set()
    for entry in entries:
        digest = entry.get("code")
        if digest in codes and digest not in named and "modules" not in entry:
            entry = {**entry, "modules": codes[digest][0], "hash": codes[digest][1]}
        named.add(digest)
        out.append(entry)
    return out


@dataclasses.dataclass(frozen=True)
class PowerTest:
    """The significance test a comparative rule decides by, and the smallest p-value its design can reach.

    ``test`` is ``"sign"`` (wins of ``n`` paired comparisons), ``"wilcoxon"`` (the exact signed-rank
    test of ``n`` paired differences), ``"t"`` (a paired Student-t test or interval over ``n`` pairs) or
    ``"spearman"`` (the exact permutation test of a rank correlation over ``n`` points, ``ties`` the sizes
    of their groups of tied x-values); ``alternative`` is ``"two-sided"`` or one-sided (``"greater"``);
    the rule calls a result beyond noise when ``p < level``. A design whose :attr:`min_p` is not below
    ``level`` cannot separate the methods whatever the data: its verdict is :data:`INCONCLUSIVE`.
    """

    test: str
    n: int
    alternative: str = "two-sided"
    level: float = 0.05
    ties: tuple[int, ...] = ()

    def __post_init__(self):
        if self.test not in ("sign", "wilcoxon", "t", "spearman") or self.n < 1:
            raise ValueError(f"unknown test {self.test!r} or n = {self.n} < 1")
        if self.alternative not in ("two-sided", "greater", "less"):
            raise ValueError(f"alternative {self.alternative!r}: expected 'two-sided', 'greater' or 'less'")

    @property
    def min_p(self) -> float:
        """The smallest p-value the test can give on ``n`` pairs.

        It is 2^-n one-sided for the sign and exact Wilcoxon tests (every pair the same way; twice that
        two-sided), 0 for a t test with two pairs or more (1 with one), and prod(ties!) / n! one-sided for
        Spearman's permutation test (the one ordering of the y-values that matches x, among the distinct
        ones)."""
        sides = 1 if self.alternative != "two-sided" else 2
        if self.test in ("sign", "wilcoxon"):
            return min(1.0, sides * 0.5 ** self.n)
        if self.test == "t":
            return 0.0 if self.n >= 2 else 1.0
        arrangements = math.factorial(self.n) / math.prod(math.factorial(t) for t in self.ties or (1,))
        return min(1.0, sides / arrangements)

    @property
    def can_separate(self) -> bool:
        return self.min_p < self.level

    def describe(self) -> str:
        """The design in words, with its smallest attainable p against the level."""
        names = {"sign": "sign test", "wilcoxon": "exact Wilcoxon signed-rank test", "t": "paired Student-t test",
                 "spearman": "Spearman permutation test"}
        sided = "two-sided" if self.alternative == "two-sided" else "one-sided"
        floor = f"{self.min_p:.2g}" if self.min_p else "0 (no floor)"
        verdict = "can" if self.can_separate else "cannot"
        return (f"{sided} {names[self.test]} over {self.n} {'points' if self.test == 'spearman' else 'pairs'}: "
                f"smallest attainable p {floor}, so it {verdict} "
                f"reach p < {self.level:g}")


@dataclasses.dataclass(frozen=True)
class EarlierRule:
    """The rule a claim had when its paper-scale run was made, replaced since (kept so that the ledger
    shows its verdict beside today's): its ``rule`` text and ``check``, the ``commits`` that replaced it
    and the ``replaced`` date of the first of them (``"YYYY-MM-DD HH:MM UTC"``, as a provenance's date),
    and ``why`` it was replaced."""

    rule: str
    check: Callable[[Mapping[str, Any]], tuple[str, str]]
    commits: str
    replaced: str
    why: str = ""
    at_run: str = ""
    """The commit whose paper-scale cache was the earlier rule's own run, the last before ``replaced``, where a
    later run is the one judged today."""
    gave: str = ""
    """The verdict the earlier rule gave at ``at_run``, cited from history (``tests/test_ledger.py`` recomputes it
    from ``git show`` of that cache where the history is at hand)."""


@dataclasses.dataclass(frozen=True)
class EarlierDesign:
    """A headline design (data draw, initialisation, protocol, which arm is the headline) that was replaced after
    a paper-scale run of it had been seen, kept so that the ledger shows its verdict beside today's.

    ``design`` says what it was; ``commits`` replaced it on ``changed`` (``"YYYY-MM-DD HH:MM UTC"``), ``why``.
    ``run`` is the commit whose cache held the run of it that was seen, and ``gave`` the verdict of today's rule
    on that run (``check_run`` judges the cache of ``run``, default the claim's check), cited from history and
    recomputed by ``tests/test_ledger.py`` from ``git show`` where the history is at hand. Where the earlier design
    was kept as a check, the claim ``kept_as`` of ``chapter`` judges its runs by today's rule on today's cache, so
    that verdict is computed, not cited."""

    design: str
    commits: str
    changed: str
    why: str
    run: str
    gave: str
    check_run: Callable[[Mapping[str, Any]], tuple[str, str]] | None = None
    kept_as: str = ""
    chapter: str = ""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim of a paper that a chapter tests.

    ``check(payload)`` receives the payload of the result ``result`` and returns
    ``(measurement, verdict)``: a short text of what we measured and a verdict decided by the
    stated ``rule``: one of :data:`VERDICTS` for a finding (``kind="finding"``, an empirical
    claim that could have come out otherwise), one of :data:`IDENTITY_VERDICTS` for an
    identity (``kind="identity"``, a theorem or algebraic identity checked numerically).
    ``source`` (one of :data:`SOURCES`) says whose claim it is, and so which ledger counts it.
    """

    key: str
    paper: str
    text: str
    result: str
    rule: str
    check: Callable[[Mapping[str, Any]], tuple[str, str]]
    kind: str = FINDING
    short: str = ""
    """A one-line form of ``text`` for the ledger's rows and a chapter's verdict box (optional:
    without it :func:`gmp.ledger.short_text` shortens ``text``)."""
    unfinished: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    """For a claim that an unfinished paper-scale run can already judge (its ``rule`` says how):
    the payload ``check`` judges from the units the run has journalled (key to value), or None
    while they do not suffice. Without it, a claim waits for the finished run. Such a verdict is
    provisional."""
    source: str = ""
    """Whose claim it is, one of :data:`SOURCES` (required)."""
    test: PowerTest | None = None
    """The significance test of a comparative rule; where its design cannot reach the rule's level, the
    verdict is :data:`INCONCLUSIVE` whatever ``check`` says."""
    note: str = ""
    """What the ledger line says beside the verdict, such as the half of the rule that holds by
    construction (structural) or the scale the claim holds at."""
    earlier: EarlierRule | None = None
    """The rule in force when the paper-scale run was made, where it was replaced after the run."""
    provisional: str = ""
    """Why a verdict on a finished run is still provisional (such as one seed, where the margin lies within
    the spread of single runs): the ledger marks it so, with this reason, and counts it apart. It may also be a
    function of the cached payload giving the reason, or "" once the payload decides the verdict (such as
    when more seeds have run)."""
    earlier_design: EarlierDesign | None = None
    """The headline design replaced after a paper-scale run of it was seen."""
    caveat: Callable[[Mapping[str, Any]], str] | None = None
    """What the verdict rests on that its measurement does not say, computed from the cached payload (how narrowly
    it is decided, such as one seed deciding a majority; what a reference saw): a sentence shown beside the verdict,
    or "" where there is nothing to add."""
    baseline: str = ""
    """The baseline the claim is about (such as SIREN, or SP and WN), where the paper claims something of a method
    it compares against rather than of its own: the ledger labels it so, and its tallies count it apart."""

    def __post_init__(self):
        if self.kind not in KIND_VERDICTS:
            raise ValueError(f"claim {self.key!r} has kind {self.kind!r}, expected one of {tuple(KIND_VERDICTS)}")
        if self.source not in SOURCES:
            raise ValueError(f"claim {self.key!r} has source {self.source!r}, expected one of {SOURCES}")

    def evaluate(self, payload: Mapping[str, Any], check: Callable[[Mapping[str, Any]], tuple[str, str]] | None = None
                 ) -> tuple[str, str]:
        """``(measurement, verdict)`` of ``check`` (default: the claim's) on ``payload``; a comparative
        rule whose :attr:`test` cannot reach its level gives :data:`INCONCLUSIVE`, saying why."""
        measured, verdict = (check or self.check)(payload)
        allowed = KIND_VERDICTS[self.kind]
        if verdict not in allowed:
            raise ValueError(f"claim {self.key!r} ({self.kind}) returned verdict {verdict!r}, expected one of {allowed}")
        if self.test is not None and not self.test.can_separate:
            return f"{measured}; {self.test.describe()}", INCONCLUSIVE
        return measured, verdict


RULE_HASH = "rule-syntax"
"""How :func:`rule_digest` hashes a claim's rule, by its text, kind and test, and the syntax tree of its check
function with those of the gmp functions and the values of the plain constants it names (transitively)."""


def _function_parts(fn: Any, seen: set[int]) -> list[Any]:
    """The syntax tree of ``fn`` (a function, method or :func:`functools.partial`) without its docstrings,
    with those of the gmp functions and plain constants it names, through its globals and closure."""
    import inspect
    import textwrap

    if isinstance(fn, functools.partial):
        return ["partial", _function_parts(fn.func, seen), repr(fn.args), repr(sorted(fn.keywords.items()))]
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return [getattr(fn, "__qualname__", repr(fn))]
    seen.add(id(fn))
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree: Any = _tree(ast.parse(source))
    except (OSError, TypeError, SyntaxError):  # a lambda inside an expression: its bytecode names and constants
        tree = [repr(code.co_names), repr([c for c in code.co_consts if not hasattr(c, "co_code")])]
    names, todo = set(), [code]
    while todo:
        current = todo.pop()
        names |= set(current.co_names)
        todo += [c for c in current.co_consts if hasattr(c, "co_code")]
    values = {name: fn.__globals__[name] for name in sorted(names) if name in fn.__globals__}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):
            values[name] = cell.cell_contents
    parts = [tree]
    for name, value in sorted(values.items()):
        if isinstance(value, (bool, int, float, str, tuple)) and len(repr(value)) < 1000:
            parts.append([name, repr(value)])
        elif callable(value) and str(getattr(value, "__module__", "")).startswith("gmp"):
            parts.append([name, _function_parts(value, seen)])
    return parts


def rule_digest(claim: Claim) -> str:
    """SHA-256 (16 hex digits) of ``claim``'s rule (:data:`RULE_HASH`): recorded with a paper-scale run, it
    tells the ledger whether the rule was fixed before the run or edited since."""
    parts = [claim.rule, claim.kind, repr(claim.test), _function_parts(claim.check, set())]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def rule_digests(chapter: str) -> dict[str, str]:
    """:func:`rule_digest` of each claim of ``chapter``, by key (empty for a chapter without claims)."""
    try:
        module = _config.experiment(chapter)
    except ValueError:  # no experiment module of that name (a Store's chapter has imported its own already)
        return {}
    return {claim.key: rule_digest(claim) for claim in getattr(module, "CLAIMS", [])}


CONFIDENCE = 0.95
"""The level of the confidence intervals of :func:`paired_interval` that comparative rules use."""


def paired_interval(differences: Sequence[float], level: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of paired differences (one per seed) and its two-sided
    Student-t confidence interval at ``level``; with a single difference the interval is
    unbounded. A comparative rule calls a difference "beyond noise" when the interval excludes 0.
    """
    from scipy import stats

    values = np.asarray(differences, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"paired_interval needs one or more finite differences, got {values.tolist()}")
    mean = float(values.mean())
    if values.size == 1:
        return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.5 + level / 2, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size))
    return mean, mean - half, mean + half


SIGN_LEVEL = 0.05
"""The level of :func:`sign_test` below which a rule calls a count of wins beyond noise."""


def sign_test(wins: int, trials: int) -> float:
    """One-sided p-value of ``wins`` or more wins in ``trials`` paired comparisons when each is
    a fair coin: ``P(Binomial(trials, 1/2) >= wins)``. The test a comparative rule uses when
    its comparisons are paired over activations (one seed each) rather than over seeds; 5 of 5
    is the fewest that reaches 0.05 (p = 1/32)."""
    from scipy import stats

    if not (isinstance(wins, int) and isinstance(trials, int) and 0 <= wins <= trials and trials >= 1):
        raise ValueError(f"sign_test needs 0 <= wins <= trials and trials >= 1, got wins={wins!r}, trials={trials!r}")
    return float(stats.binomtest(wins, trials, 0.5, alternative="greater").pvalue)


PAPERS = {"chen": "Chen & Ge", "lu": "Lu et al.", "sbsnn": "SBSNN"}


def _claims_of(chapter: str) -> list[Claim]:
    return list(getattr(_config.experiment(chapter), "CLAIMS", []))


def experiment_chapters() -> list[str]:
    """Every chapter with an experiment module, in alphabetical order."""
    import gmp.experiments

    return sorted(m.name for m in pkgutil.iter_modules(gmp.experiments.__path__))


_LEDGER = ("ledger", "verdict_box", "claims_table", "_judged")


def __getattr__(name: str) -> Any:
    """The ledger's functions that chapters call as ``gmp.results.<name>``, from :mod:`gmp.ledger`.

    Imported on first use and by name, so that :func:`chapter_modules` does not count the ledger among
    the modules a chapter's results depend on: it renders verdicts and computes no cached result."""
    if name in _LEDGER:
        import importlib

        return getattr(importlib.import_module("gmp.ledger"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def glue(name: str, value: Any, display: bool = False) -> None:
    """``myst_nb.glue`` when available (book builds), else nothing (Colab, plain Jupyter).

    NumPy and torch scalars are glued as Python numbers, so that format specs such as
    ``{glue:text}`name:.3f``` work on them.
    """
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    _glue(name, value, display=display)
