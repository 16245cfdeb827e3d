"""Code fingerprints: which code of ``gmp`` computed a cached result, and whether today's code still would.

A run records :func:`code_fingerprint`, the hash of every source file of the package by its path inside
it (``"layers.py"``, ``"results/store.py"``, ``"experiments/chen_levy.py"``), and each journalled unit
names the fingerprint of the code that computed it. A cache is then told against today's code in the
modules its chapter can depend on (:func:`chapter_modules`, :func:`changed_modules`), where a module
rewritten without changing its function is vouched for by a record (:data:`SAME_FUNCTION`), and a
journal's units are counted by the code that computed them (:func:`resumed_code`, :func:`code_against`).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import re
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from gmp.results import files as _files

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


PACKAGE = Path(__file__).resolve().parent.parent
"""The folder of the imported package ``gmp``, whose modules :func:`code_fingerprint` hashes (those of its
subpackages by their path inside it, ``"results/store.py"``)."""


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
    return {p.relative_to(package).as_posix(): _kept("syntax", p.read_bytes(), _syntax_digest)
            for p in sorted(package.rglob("*.py"))}


MEMO = Path("_build") / "module-facts"
"""Where ``_kept`` keeps what is read from a module's source (its ``_syntax_digest``, the imports ``_imported``
finds), under the repository (ignored by git), one file per fact, source and reading code (this
module's bytes and the Python it runs under): a fact never changes while those bytes do not, so every later process
(each chapter's kernel, the tests) reads it instead of parsing about 100 modules again (seconds)."""

_READING = hashlib.sha256(Path(__file__).read_bytes() + sys.version.encode()).digest()


def _kept(fact: str, source: bytes, read: Callable[[bytes], Any]) -> Any:
    """``read(source)``, a JSON value, kept under :data:`MEMO` of the repository (where there is one) for these
    bytes, this ``fact`` and this reading code, and read from there when kept."""
    root = _files.repository_root()
    if root is None:
        return read(source)
    path = root / MEMO / hashlib.sha256(_READING + fact.encode() + b"\0" + source).hexdigest()
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and set(kept) == {"fact"}:
            return kept["fact"]
    value = read(source)
    with contextlib.suppress(OSError):  # a folder it cannot write to: the fact is computed, not kept
        _files.atomic_write_json(path, {"fact": value})
    return value


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


SAME_FUNCTION_FILE = PACKAGE / "same_function.json"
"""The file of the records of :data:`SAME_FUNCTION`, a JSON list of objects with the fields of :class:`SameFunction`.
Not a ``.py`` file, so that a record can vouch for any module, this one too, without its own edit changing
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
evidence. Records are written by ``python -m gmp.runs --same-function MODULE --why TEXT --tests NODEID ...``
(:func:`gmp.verification.vouch`), which runs the tests, refuses unless they all pass, and writes or renews
the records with their hashes and evidence: no hash is typed by hand."""


def _same(module: str, recorded: str, now: Mapping[str, str]) -> SameFunction | None:
    """The record of :data:`SAME_FUNCTION` by which ``module``, recorded as ``recorded``, is the same
    function in the code hashed as ``now`` (module to hash), if any."""
    return next((same for same in SAME_FUNCTION if (same.module, same.before) == (module, recorded)
                 and all(now.get(m) == digest for m, digest in same.after.items())), None)


def changed_modules(modules: Mapping[str, str], scheme: str = "source",
                    within: Collection[str] | None = None) -> list[str]:
    """The modules of a recorded fingerprint's ``modules``, hashed under ``scheme`` (its ``"hash"``;
    ``"source"`` when it records none), that today's code has changed or removed; only those in
    ``within`` when given (a chapter's :func:`chapter_modules`). A module rewritten since without
    changing its function (:data:`SAME_FUNCTION`, :func:`same_function`) is not listed.

    Modules added since are not listed: a new module cannot have changed an old result
    unless an old module changed to use it. By the same token a removed module is listed only
    where its name now names a package in ``within`` (``results.py`` became ``results/``, which
    the chapter imports by the same name: other code under an unchanged import). Any other module
    the chapter used can only have gone with a change to the module that imported it, which is
    listed; a removed module the chapter never used (another chapter's, say) is not.
    """
    today = _module_hashes(scheme)
    return sorted(module for module, digest in modules.items()
                  if (_removed_counts(module, within) if module not in today else
                      today[module] != digest and (within is None or module in within)
                      and not (scheme == CODE_HASH and _same(module, digest, today))))


def _removed_counts(module: str, within: Collection[str] | None) -> bool:
    """Whether a module that is gone from the code compared against counts as changed for a chapter whose
    modules are ``within`` (None: every module counts): only where its name now names a package in ``within``
    (see :func:`changed_modules`)."""
    return within is None or (module.endswith(".py") and f"{module[:-len('.py')]}/__init__.py" in within)


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

    def imports(source: bytes) -> list[list[str]]:
        named = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                named += [alias.name.split(".") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(here[:len(here) - node.level + 1]) if node.level else []
                module = base + (node.module.split(".") if node.module else [])
                named += [module] + [module + [alias.name] for alias in node.names]
        return named
    named = _kept("imports in " + "/".join(here), path.read_bytes(), imports)
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


def experiment_source(chapter: str, package: Path | None = None) -> Path | None:
    """The source of the experiment of ``chapter`` in ``package`` (default :data:`PACKAGE`):
    ``experiments/<chapter>.py``, or ``experiments/<chapter>/__init__.py`` for a chapter whose experiment
    is a package (its runs, its claims, its figures); None when there is neither."""
    folder = (package or PACKAGE) / "experiments"
    found = [path for path in (folder / f"{chapter}.py", folder / chapter / "__init__.py") if path.is_file()]
    return found[0] if found else None


RENDERING = frozenset({"results/verdicts.py", "verification.py"})
"""Modules that judge, render or verify cached results and compute none that a cache keeps (the claims ledger,
whose verdict boxes and tables every chapter calls as ``gmp.results.<name>``, and the verification of a cache
against today's code, :mod:`gmp.verification`, whose ``--verify``, ``--restamp`` and ``--same-function`` the
runner's command line hands their arguments, and which recomputes units only to compare them and writes only
provenance): :func:`chapter_modules` does not count them, or what only they import (:mod:`gmp.rulehistory`),
among the code a chapter's results depend on, so that editing them leaves every cache current. A rule's own code
is fingerprinted apart (:func:`gmp.results.rule_digests`)."""


@functools.cache
def chapter_modules(chapter: str) -> frozenset[str] | None:
    """The modules of ``gmp`` (paths inside the package, as in :func:`code_fingerprint`) whose code
    the results of ``chapter`` can depend on, or None where that cannot be told (no experiment
    module or no page of that name).

    They are those that ``gmp/__init__.py`` (which every chapter runs), the chapter's experiment
    module, the runner ``gmp.runs`` (which sets a paper-scale run's parameters, seeds and threads)
    and every ``gmp.<module>`` that its page names (in code or prose) import, directly or through
    one another, by static ``import`` statements (``gmp.config`` imports only the chapter's own
    experiment module by name). An import of a package counts its ``__init__.py`` and what that imports
    (``from gmp.results import Store`` is ``results/__init__.py`` and its modules), an import of a module in
    a package that module and the ``__init__.py`` of every package on the way; a chapter's experiment may be
    a module or a package (:func:`experiment_source`). Another chapter's experiment module and the
    benchmarks are not among them unless one of those imports them, nor the ledger and the verification of
    caches (:data:`RENDERING`).
    The page's own code is not fingerprinted.
    """
    package = PACKAGE
    root = _files.repository_root()
    experiment = experiment_source(chapter, package)
    pages = sorted(root.glob(f"book/*/{chapter}.md")) if root else []
    if experiment is None or len(pages) != 1:
        return None
    page = pages[0].read_text(encoding="utf-8")
    named = {m.partition(".")[2] for m in re.findall(r"\bgmp(?:\.\w+)+", page)}
    for module, names in re.findall(r"\bfrom\s+(gmp(?:\.\w+)*)\s+import\s+\(?([\w\s,]+)", page):
        named |= {f"{module}.{name.split()[0]}".partition(".")[2] for name in names.split(",") if name.strip()}
    todo = [package / "__init__.py", experiment, package / "runs.py"]
    todo += [package / folder / "__init__.py" for folder in experiment.relative_to(package).parents]
    for name in named:
        parts = name.split(".")
        todo += [package.joinpath(*parts[:end]).with_suffix(".py") for end in range(1, len(parts) + 1)]
        todo += [package.joinpath(*parts[:end]) / "__init__.py" for end in range(1, len(parts) + 1)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file() or path.relative_to(package).as_posix() in RENDERING:
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
    added after a unit was computed, removed since unless a package of its name took its place, or
    rewritten since without changing its function (:data:`SAME_FUNCTION`), does not count."""
    scheme, theirs = reference.get("hash", "source"), reference.get("modules", {})
    codes = {reference.get("digest"): (theirs, scheme), **journal_code(entries)}
    within = chapter_modules(chapter) if chapter else None
    other, unknown, changed = 0, 0, set()
    for entry in {entry["key"]: entry for entry in entries}.values():
        recorded = codes.get(entry.get("code"))
        if recorded is None or recorded[1] != scheme:
            unknown += 1
            continue
        differ = {m for m, digest in recorded[0].items()
                  if (_removed_counts(m, within) if m not in theirs else
                      theirs[m] != digest and (within is None or m in within)
                      and not (scheme == CODE_HASH and _same(m, digest, theirs)))}
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

