"""Reading a cached result, and what a page shows of it: its payload only when its checks pass, and a note
on where it comes from.

:func:`cached` reads ``<results root>/<chapter>/<scale>/`` as one consistent snapshot, checks every file
against the hashes the run recorded, and tells whether the config and the code have changed since
(:class:`Cached`); :meth:`Cached.note` is the admonition a chapter shows beside its numbers, and
:func:`glue` hands a number to the page's prose.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import importlib
import json
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gmp import config as _config
from gmp.results import files as _files
from gmp.results.claims import NOT_RUN
from gmp.results.files import _check_name
from gmp.results.fingerprint import (CODE_HASH, SameFunction, chapter_modules, changed_modules, resumed_code,
                                     same_function)
from gmp.results.journal import _journalled


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
        devices = p.get("units_device") or {}
        if p.get("resumed_units", 0) > n_carried:
            when += (f" after resuming {p['resumed_units'] - n_carried} units journalled "
                     f"{'before it' if devices else 'by earlier, interrupted attempts'} "
                     f"({_duration(p.get('resumed_seconds'))} of computing"
                     f"{_units_code_text(p.get('resumed_code', {}), uses, 'the run')})")
        for where, n in devices.items():
            when += (f"; {n} of them were computed on {where} by the GPU command (`python -m gmp.gpu`) and merged, "
                     f"not on the device above")
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
        if self.code_same:
            names = [f"gmp/{same.module}" for same in self.code_same]
            one = len(names) == 1
            checks += (f" {names[0] if one else ', '.join(names[:-1]) + ' and ' + names[-1]} "
                       f"{'has' if one else 'have'} been rewritten since in how {'it computes' if one else 'they compute'},"
                       f" not what {'it computes' if one else 'they compute'}: tests vouch for {'it' if one else 'each'}"
                       f" (gmp/same_function.json records what changed and which tests passed).")
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
        rewrites = "".join(f"<li><code>gmp/{html.escape(same.module)}</code>: {html.escape(same.why)}</li>"
                           for same in self.code_same)
        if rewrites:
            rewrites = (f"<details><summary>How each module was rewritten since, and the tests that vouch for it"
                        f"</summary><ul>{rewrites}</ul></details>")
        return HTML(f'<div class="admonition {kind}"><p class="admonition-title">{html.escape(title)}</p>'
                    f"<p>{_inline_code(html.escape(self.describe()))}</p>{rewrites}</div>")


def restamp_text(evidence: Mapping[str, Any]) -> str:
    """One sentence on a re-stamp's ``evidence`` (as :func:`gmp.verification.restamp` records it): when, how many units of
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


def cached(chapter: str, name: str, scale: str = "paper") -> Cached:
    """Read the cached result ``name`` of ``chapter`` at ``scale`` and check it is current.

    Its files are checked against the sha256 hashes that ``gmp.runs`` records in
    ``provenance.json`` (caches written before that have none); a cache that fails a check
    or cannot be read is returned with status "corrupt", never as current. Whether the code has changed
    since is told against the code of the cache's latest re-stamp (``python -m gmp.runs CHAPTER --restamp``,
    which found today's code computing the same units) where it has one, else against the run's.
    """
    _check_name(name)
    root = _files.results_root()
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
    recorded = provenance.get("config")
    if isinstance(recorded, dict) and _config.digest_of(recorded) != provenance.get("config_digest"):
        return Cached(chapter, name, scale, "corrupt", problem=(
            f"its provenance.json records a config whose digest is {_config.digest_of(recorded)}, not the "
            f"config_digest {provenance.get('config_digest')!r} it records beside it: one of them was edited after "
            f"the run, so which config computed these results is unknown; restore the folder from git or rerun "
            f"the chapter"))
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
