"""The journal of an unfinished run: the units it has finished, one JSON line each, so that a run
interrupted resumes from them.

``gmp.runs`` keeps it at ``<results root>/<chapter>/_partial/<scale>-<config digest>.jsonl``
(:func:`journal_path`); :meth:`gmp.results.Store.memo` appends to it, and a line cut short by an
interruption, or one that gmp did not write (:func:`entry_problem`), is skipped when it is read.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gmp import config as _config
from gmp.results import files as _files
from gmp.results.fingerprint import CODE_HASH

def journal_path(chapter: str, scale: str, digest: str) -> Path | None:
    """The journal of finished units of an unfinished ``gmp.runs`` run (see :meth:`Store.memo`)."""
    root = _files.results_root()
    return root / chapter / "_partial" / f"{scale}-{digest}.jsonl" if root else None


def journal_entries(path: Path) -> list[dict[str, Any]]:
    """The complete entries of a journal: JSON objects with a string ``key`` and a ``value``.

    A line cut short by an interruption (not valid JSON) is skipped. A line that is not an
    entry (valid JSON of another shape, bytes that are not UTF-8, or an entry whose ``code``,
    ``modules`` or ``seconds`` has the wrong type, see :func:`entry_problem`) is
    skipped with a warning naming the file and the line, so that it never blocks a resume.

    Two entries for one unit are a ValueError naming the file and both lines: which of them is the unit's
    result cannot be told (a process that journalled without the run's lock, a line pasted in), and taking
    either would be a silent choice.
    """
    entries, lines = [], {}
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
        if (first := lines.setdefault(entry["key"], number)) != number:
            raise ValueError(f"journal {path} holds two entries for the unit {entry['key']!r}, on lines {first} and "
                             f"{number}: which is its result cannot be told. Delete the wrong line (or both, to "
                             f"compute the unit again) and rerun")
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
    """The values of a journal's units by key (a unit journalled twice is an error: :func:`journal_entries`)."""
    return {entry["key"]: entry["value"] for entry in journal_entries(path)}


def _journalled(chapter: str, scale: str) -> list[dict[str, Any]]:
    path = journal_path(chapter, scale, _config.load(chapter, scale).digest)
    return journal_entries(path) if path else []

