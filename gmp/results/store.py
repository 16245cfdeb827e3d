"""Where a chapter saves its results and journals the units of a long run: :class:`Store`, and what each
process of a ``gmp.runs`` run records in its staging folder for the run's provenance.

Only ``python -m gmp.runs`` writes the cache: it sets ``GMP_RESULTS_STAGING`` to a private folder, the
chapter's :meth:`Store.save` calls write into it, and the runner moves it into place when the run
succeeds (:func:`gmp.results.replace_folder`). A chapter built by Jupyter Book, or opened in Colab, only
reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gmp import config as _config
from gmp.results import fingerprint as _fingerprint
from gmp.results.cache import Cached, cached
from gmp.results.claims import RULE_HASH, rule_digests
from gmp.results.files import STAGING_ENV, _check_name, _npz_bytes, atomic_write_bytes, atomic_write_json
from gmp.results.journal import append_journal, journal_entries, journal_units

try:
    import fcntl
except ImportError:  # Windows: no locks, so gmp.runs refuses --jobs there
    fcntl = None

#: What :meth:`Store.memo` returns with ``wait=False`` for a unit another worker is computing.
BUSY = object()


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
        _fingerprint.code_fingerprint()  # read now: units name the code the run started with, not files edited since
        if self.staging is not None:
            self._journal_path = self.staging.parent / "_partial" / f"{cfg.scale}-{cfg.digest}.jsonl"
            entries = journal_entries(self._journal_path)
            self._journal = {entry["key"]: entry["value"] for entry in entries}
            self._codes_in_journal = set(_fingerprint.journal_code(entries))
            record = self.staging / RUN_CODE / f"{os.getpid()}.json"
            if not record.exists():  # what this process runs, for the run's provenance (read_run_records)
                atomic_write_json(record, {"code": run_code(chapter), "edited": _fingerprint.code_edited(),
                                           "threads": _threads(), "map": _cpu_map()})

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
        self._check_runner()
        code = _fingerprint.code_fingerprint()
        lines = []
        for key, (value, seconds) in units.items():
            entry = {"key": key, "value": value, "seconds": round(seconds, 3), "code": code["digest"],
                     "threads": _threads()}
            if edited := _fingerprint.code_edited():
                entry["edited"] = edited
            if code["digest"] not in self._codes_in_journal:
                entry["modules"], entry["hash"] = code["modules"], code["hash"]
                self._codes_in_journal.add(code["digest"])
            lines.append(json.dumps(entry))
            self._journal[key] = json.loads(lines[-1])["value"]
        append_journal(self._journal_path, lines)

    def _check_runner(self) -> None:
        """RuntimeError where the ``gmp.runs`` that started this process (its pid ends the staging folder's name,
        ``.staging-<scale>-<pid>``) has ended: a kernel or worker left running after ``kill -9`` of its runner no
        longer works under the run's lock, so it journals nothing more."""
        pid = self.staging.name.rpartition("-")[2] if self.staging is not None else ""
        if not (self.staging.name.startswith(".staging-") and pid.isdigit()) or os.name != "posix":
            return
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            raise RuntimeError(f"the gmp.runs that started this process (pid {pid}, whose staging folder is "
                               f"{self.staging}) has ended, so this process no longer works under its run's lock: "
                               f"it journals nothing more. Rerun python -m gmp.runs {self.chapter} to resume from "
                               f"the journal") from None
        except PermissionError:  # alive, under another user
            pass

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


def run_code(chapter: str) -> dict[str, Any]:
    """What a run of ``chapter`` records as its code: :func:`code_fingerprint`, with the
    :func:`rule_digests` of the chapter's claims under ``"rules"`` (hashed as ``"rule_hash"``) when it has
    any, so that the ledger can tell a rule fixed before the run from one edited after it."""
    rules = rule_digests(chapter)
    code = _fingerprint.code_fingerprint()
    return {**code, "rules": rules, "rule_hash": RULE_HASH} if rules else code


