"""Record that a rewritten module of gmp computes the same function as before, with tests as the evidence.

    python -m gmp.runs --same-function MODULE --why TEXT --tests NODEID [NODEID ...]

:func:`vouch` is the re-stamp (:func:`gmp.verification.restamp`) of one module for every cache at once, with tests
as its evidence instead of recomputed units: when the named tests pass and run the rewritten code (traced), it
writes the records of :data:`gmp.results.SAME_FUNCTION` by which the caches and journals that recorded the module
as it was count as run by today's code in it. Like :mod:`gmp.verification`, which alone imports it, it computes
nothing a cache keeps, so it is not among the code a chapter's results depend on.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import gzip
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gmp import results as _results
from gmp.provenance import UNITS_FILE, git_commit
from gmp.results import fingerprint as _fingerprint


RESTAMPS = "restamps"
"""The key of ``provenance.json`` under which :func:`gmp.verification.restamp` records each re-stamp of a cache, oldest
first (read here for the code each re-stamp recorded)."""


def definitions(source: str | bytes) -> tuple[dict[str, tuple[Any, int, int]], Any]:
    """The functions and methods of a module's ``source`` by qualified name (``Store.memo``), each as its syntax
    tree without docstrings (:func:`gmp.results.fingerprint._tree`) and its first and last lines; and the tree of
    the rest, its other statements (constants, class attributes) less imports and docstrings."""
    functions: dict[str, tuple[Any, int, int]] = {}

    def rest(body: list[ast.stmt], prefix: str) -> list[Any]:
        kept = []
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                functions[prefix + node.name] = (_fingerprint._tree(node), first, node.end_lineno)
            elif isinstance(node, ast.ClassDef):
                kept.append([prefix + node.name, _fingerprint._tree(node.bases), _fingerprint._tree(node.keywords),
                             _fingerprint._tree(node.decorator_list), rest(node.body, f"{prefix}{node.name}.")])
            elif not isinstance(node, (ast.Import, ast.ImportFrom)) and _fingerprint._tree([node]):
                kept.append(_fingerprint._tree(node))
        return kept

    return functions, rest(ast.parse(source).body, "")


def git_output(root: Path, *args: str, what: str) -> bytes:
    """The output of ``git args`` in ``root``; a ValueError naming ``what`` was sought where git fails."""
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        detail = err.stderr.decode(errors="replace").strip() if isinstance(err, subprocess.CalledProcessError) else err
        raise ValueError(f"git cannot give {what} ({detail})") from None



class SameFunctionRefused(RuntimeError):
    """The tests named as the evidence that a module computes the same function did not all pass, or none ran;
    nothing is recorded."""


def vouch(module: str, why: str, tests: list[str], since: str | None = None,
          root: Path | None = None) -> dict[str, Any]:
    """Record that ``module`` of gmp (its path in the package, ``"runs.py"``) computes the same function as at
    commit ``since``, with the pytest node ids ``tests`` as the evidence, in :data:`gmp.results.SAME_FUNCTION_FILE`.

    ``since`` defaults to ``HEAD`` where the module's file differs from it (a rewrite not yet committed), else
    to the parent of the last commit that changed the file. The tests run in a subprocess (``python -m pytest``) in the
    repository ``root``; unless every one of them passes, and at least one was collected, a
    :class:`SameFunctionRefused` names what failed (an unknown node id, a failing, erroring or skipped test)
    and nothing is written. The tests are traced: unless one of them runs a line of a function or method of the
    module that differs from its code at ``since`` (any function of it, where only module-level code differs), a
    :class:`SameFunctionRefused` says so and nothing is written; the record names the tests that did. Then:

    - every hash of the module that counted as its code at ``since``, that hash itself and each that a
      record vouched for as that code, and that a cache (its run's, its re-stamps' or its kept units'
      fingerprints) or a journal under ``book/_results`` records, gets a record from it to today's code;
    - a record whose ``after`` named the module at ``since`` is renewed in place (its ``why`` extended), not
      duplicated; one for the same earlier code that lapsed because a module it names changed since (one the module
      imports) is replaced by the new record;
    - ``after`` is today's hash of the module and of each module it now imports, directly or through others,
      that the fingerprints which recorded it as ``before`` lack (a module added for it; for a renewed record
      that none records, those that recorded it as at ``since``, else the package at ``since``), not those of
      :data:`gmp.results.RENDERING`;
    - ``why`` is the given text and the evidence: the date, the commit, ``since``, and the tests that passed.

    Returns what was done: the records ``written`` (new or renewed), ``since``, how many tests ``passed``,
    and ``lapsing``: other records whose ``after`` names the module as it was, which today's code lapses
    (renew them for their own modules). A ValueError says what is wrong with the arguments.
    """
    root = root or _results.repository_root()
    if root is None:
        raise ValueError("run --same-function from inside the book's repository (the folder with _toc.yml)")
    with _one_voucher(root):
        return _vouch(module, why, tests, since, root)


VOUCH_LOCK = Path("_build") / "same-function.lock"
"""The lock, under the repository, that one ``--same-function`` at a time holds while it reads, tests and rewrites
gmp/same_function.json (two at once would each write the records as they read them, and the first one's be lost)."""


@contextlib.contextmanager
def _one_voucher(root: Path) -> Iterator[None]:
    """Hold :data:`VOUCH_LOCK` of the repository ``root``, or refuse naming the process that holds it."""
    if _results.fcntl is None:
        yield
        return
    lock = root / VOUCH_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as held:
        try:
            _results.fcntl.flock(held, _results.fcntl.LOCK_EX | _results.fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            raise SameFunctionRefused(f"another --same-function is writing gmp/same_function.json "
                                      f"({held.read().strip() or 'a process'}; it holds {lock}): one writes at a "
                                      f"time, so nothing is recorded; run this one again when it has finished"
                                      ) from None
        held.truncate(0)
        held.write(f"pid {os.getpid()}, since {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
        held.flush()
        yield


def _vouch(module: str, why: str, tests: list[str], since: str | None, root: Path) -> dict[str, Any]:
    package = _fingerprint.PACKAGE
    path = package / module
    if not (module.endswith(".py") and path.is_file()):
        raise ValueError(f"{module!r} is not a module of gmp: name it by its path in the package, as a code "
                         f"fingerprint does (runs.py, results/fingerprint.py)")
    if not why.strip():
        raise ValueError("--why says what changed and why the function did not; it is empty")
    if not tests:
        raise ValueError("--tests names at least one pytest node id that shows the function unchanged")
    try:
        prefix = package.resolve().relative_to(root.resolve())  # gmp's folder in the repository, as git names it
    except ValueError:
        raise ValueError(f"the imported gmp ({package}) is not the one in the repository {root}: run "
                         f"--same-function with the repository's gmp on the path (PYTHONPATH=$PWD)") from None
    source = (prefix / module).as_posix()
    since = git_output(root, "rev-parse", "--verify", "-q", f"{since or _since(root, source)}^{{commit}}",
                 what=f"the commit {since}").decode().strip()
    then = git_output(root, "show", f"{since}:{source}", what=f"{source} at {since}")
    earlier = _fingerprint._syntax_digest(then)
    today = _fingerprint.read_module_hashes(_results.CODE_HASH, package)
    if earlier == today[module]:
        raise ValueError(f"gmp/{module} at {since} hashes as today ({earlier}): its code did not change, so there "
                         f"is nothing to vouch for (give --since the commit before the rewrite)")
    records = list(_fingerprint.read_same_function(_fingerprint.SAME_FUNCTION_FILE))
    vouched = {earlier} | {r.before for r in records if r.module == module and r.after.get(module) == earlier}
    recorded = [modules for modules in _recorded_fingerprints() if modules.get(module) in vouched]
    renewing = [r for r in records if r.module == module and r.before in vouched and r.after.get(module) == earlier]
    held = {r.before for r in records if r.module == module and all(today.get(m) == h for m, h in r.after.items())}
    fresh = sorted({modules[module] for modules in recorded} - {r.before for r in renewing} - held)
    if not (fresh or renewing):
        raise ValueError(f"no cache or journal under book/_results records gmp/{module} as it was at {since} "
                         f"({earlier}) without a record that already vouches for it, and no record vouches for "
                         f"that code: nothing to vouch for")
    passed, ran = _run_tests(tests, root, path)
    rewritten = _rewritten(then, path.read_bytes())
    imported = ran.pop(IMPORTED, [])
    evidence_tests = sorted(test for test, lines in ran.items()
                            if any(first <= line <= end for line in lines for _, first, end in rewritten)
                            or (not rewritten and lines))
    if not evidence_tests and not rewritten and imported and not definitions(path.read_bytes())[0]:
        evidence_tests = sorted(tests)  # a module of module-level code alone (imports, constants): run by importing it
    what = (f"the rewritten {'function' if len(rewritten) == 1 else 'functions'} "
            f"{', '.join(name for name, _, _ in rewritten)} of gmp/{module}" if rewritten else
            f"a function of gmp/{module} (the rewrite changed no function, only module-level code)")
    if not evidence_tests:
        raise SameFunctionRefused(f"none of the {passed} tests that passed ran {what}: a test is evidence only for "
                                  f"code it runs (traced line by line), so nothing is recorded; name tests that call "
                                  f"it")
    if _fingerprint.read_module_hashes(_results.CODE_HASH, package) != today:
        raise SameFunctionRefused(f"gmp's files changed while the tests ran, so which code they tested is "
                                  f"uncertain; nothing is recorded, run --same-function again")
    at_since = git_output(root, "ls-tree", "-r", "--name-only", since, "--", prefix.as_posix(),
                    what=f"the files of gmp at {since}").decode().splitlines()

    def after(before: str) -> dict[str, str]:
        """Today's hash of the module and of those it now imports that the fingerprints recording it as
        ``before`` lack (else those recording it as at ``since``; else the package at ``since``)."""
        against = ([m for m in recorded if m.get(module) == before] or [m for m in recorded if m.get(module) == earlier]
                   or [{Path(name).relative_to(prefix).as_posix(): "" for name in at_since}])
        return {module: today[module], **{m: today[m] for m in _added_imports(path, package, against)}}

    commit = git_commit(root)
    evidence = (f"vouched on {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by python -m "
                f"gmp.runs --same-function at commit {commit[:12]}"
                f"{' with uncommitted changes' if commit.endswith('+dirty') else ''}, against the module at "
                f"{since[:12]}: the {passed} tests of {test_names(tests)} passed, and {len(evidence_tests)} of them ran "
                f"{what} ({test_names(evidence_tests)})")
    written = []
    for number, record in enumerate(records):
        if record in renewing:
            records[number] = written_record = record._replace(
                after=after(record.before), why=f"{record.why}; renewed: {why.strip()} ({evidence})")
            written.append(written_record)
    for before in fresh:
        record = _fingerprint.SameFunction(module, before, after(before), f"{why.strip()} ({evidence})")
        lapsed = [number for number, r in enumerate(records) if r.module == module and r.before == before]
        if lapsed:  # it lapsed when a module it names changed (one it imports): today's record takes its place
            records[lapsed[0]] = record
            records[:] = [r for number, r in enumerate(records) if number not in lapsed[1:]]
        else:
            records.append(record)
        written.append(record)
    text = json.dumps([record._asdict() for record in records], indent=2, ensure_ascii=False) + "\n"
    _results.atomic_write_bytes(_fingerprint.SAME_FUNCTION_FILE, text.encode("utf-8"))
    lapsing = [r for r in records if r.module != module and r.after.get(module) not in (None, today[module])]
    return {"written": written, "since": since, "passed": passed, "lapsing": lapsing}


def test_names(node_ids: Iterable[str]) -> str:
    """The tests of ``node_ids`` for a record a reader sees: a parametrized test once, with its number of cases, since
    its parameter ids are any text (a shell command's ``$$``, say) that a page would render as markup."""
    cases: dict[str, int] = {}
    for node in node_ids:
        name, bracket, _ = node.partition("[")
        cases[name] = cases.get(name, 0) + bool(bracket)
    return ", ".join(name if count == 0 else f"{name} ({count} case{'s' if count > 1 else ''})"
                     for name, count in cases.items())


def _since(root: Path, source: str) -> str:
    """The commit whose ``source`` a rewrite in the working tree or in the last commit that changed it
    started from: ``HEAD`` where the file differs from it, else the parent of that last commit."""
    if git_output(root, "status", "--porcelain", "--", source, what=f"the status of {source}").strip():
        return git_output(root, "rev-parse", "HEAD", what="HEAD").decode().strip()
    last = git_output(root, "log", "-n", "1", "--format=%H", "--", source, what=f"the last commit of {source}").decode()
    if not last.strip():
        raise ValueError(f"{source} has no commit: there is no earlier code to vouch for")
    try:
        return git_output(root, "rev-parse", "--verify", "-q", f"{last.strip()}^", what="").decode().strip()
    except ValueError:
        raise ValueError(f"{source} has not changed since its first commit, {last.strip()[:12]}: there is no earlier "
                         f"code to vouch for") from None


def _recorded_fingerprints() -> list[Mapping[str, str]]:
    """The per-module hashes of every code fingerprint, hashed as :data:`gmp.results.CODE_HASH`, that a cache
    (its run's, its re-stamps' and its kept units') or a journal under the results root records; files that
    cannot be read are left out (the page of a damaged cache says so)."""
    root, found = _results.results_root(), []
    if root is None or not root.is_dir():
        return []

    def add(entry: Any) -> None:
        if (isinstance(entry, dict) and isinstance(entry.get("modules"), dict)
                and entry.get("hash", "source") == _results.CODE_HASH):
            found.append(entry["modules"])

    for provenance in sorted(root.glob("*/*/provenance.json")):
        with contextlib.suppress(OSError, ValueError, EOFError, zlib.error):  # a damaged file: its page says so
            record = json.loads(provenance.read_bytes())
            add(record.get("code"))
            for restamped in record.get(RESTAMPS) or []:
                add(restamped.get("code") if isinstance(restamped, dict) else None)
            units = provenance.parent / UNITS_FILE
            if units.is_file():
                for line in gzip.decompress(units.read_bytes()).splitlines():
                    add(json.loads(line))
    for journal in sorted(root.glob("*/_partial/*.jsonl")):
        for entry in _results.journal_entries(journal):
            add(entry)
    return found


def _added_imports(path: Path, package: Path, recorded: list[Mapping[str, str]]) -> list[str]:
    """The modules of ``package`` that the module at ``path`` imports, directly or through others that are also
    added, which one of the ``recorded`` fingerprints lacks, leaving out :data:`gmp.results.RENDERING`.

    A module of a package that took the place of a module the fingerprint records (``results/store.py`` where
    it records ``results.py``) is not added: the removed module already counts as changed for it
    (:func:`gmp.results.changed_modules`), so the record need not lapse with each module of the package."""
    added, todo = set(), [path]
    while todo:
        for found in _fingerprint._imported(todo.pop(), package):
            name = found.relative_to(package).as_posix()
            if name in added or name in _fingerprint.RENDERING or all(
                    name in modules or f"{name.split('/')[0]}.py" in modules for modules in recorded):
                continue
            added.add(name)
            todo.append(found)
    return sorted(added)


RECORDS_CHECK = "tests/test_results.py::test_every_same_function_record_names_todays_code"
"""The test that every record of :data:`gmp.results.SAME_FUNCTION` names today's code. It fails by design while a
record has lapsed, which is when ``--same-function`` runs to renew it, so it is never part of the evidence."""


_TRACED_PYTEST = """
import inspect, json, os, sys, threading
import pytest
target, out, current, hits, seen = os.path.realpath(sys.argv[1]), sys.argv[2], [None], {}, {}
IMPORTED = sys.argv[3]
def line(frame, event, arg):
    if event == "line" and current[0] is not None:
        hits.setdefault(current[0], set()).add(frame.f_lineno)
    return line
def module(frame, event, arg):
    if event == "line":
        hits.setdefault(IMPORTED, set()).add(frame.f_lineno)
    return module
def call(frame, event, arg):
    name = frame.f_code.co_filename
    if name not in seen:
        seen[name] = os.path.realpath(name) == target
    if not seen[name]:
        return None
    return line if frame.f_code.co_flags & inspect.CO_OPTIMIZED else module
class Trace:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        current[0] = item.nodeid
        yield
        current[0] = None
threading.settrace(call)
sys.settrace(call)
code = pytest.main(sys.argv[4:], plugins=[Trace()])
sys.settrace(None)
with open(out, "w") as handle:
    json.dump({test: sorted(lines) for test, lines in hits.items()}, handle)
sys.exit(code)
"""
"""``python -c`` of pytest that records, per test, the lines of one module's functions it ran, and under
:data:`IMPORTED` the lines of its module-level code the process ran (:func:`_run_tests`)."""

IMPORTED = "(module-level code, imported)"
"""The key under which ``_TRACED_PYTEST`` records the module-level lines of the module that ran (on import)."""


def _rewritten(before: bytes, after: bytes) -> list[tuple[str, int, int]]:
    """The functions and methods of a module's source ``after`` whose syntax differs from ``before``'s (or that
    ``before`` lacks): qualified name, first and last line in ``after``."""
    then, now = definitions(before)[0], definitions(after)[0]
    return [(name, first, end) for name, (tree, first, end) in now.items() if then.get(name, (None,))[0] != tree]


def _run_tests(tests: list[str], root: Path, module: Path) -> tuple[int, dict[str, list[int]]]:
    """Run the pytest node ids ``tests`` (less :data:`RECORDS_CHECK`) in a subprocess in ``root``: how many tests
    passed, and per test the lines of the functions of ``module`` (a file) that it ran, traced; a
    :class:`SameFunctionRefused` naming the failure unless every one collected passed and at least one was."""
    with tempfile.TemporaryDirectory() as scratch:
        report, traced = Path(scratch) / "report.xml", Path(scratch) / "lines.json"
        done = subprocess.run([sys.executable, "-c", _TRACED_PYTEST, str(module), str(traced), IMPORTED, "-q", "-p",
                               "no:cacheprovider", f"--junitxml={report}", f"--deselect={RECORDS_CHECK}", *tests],
                              cwd=root, capture_output=True, text=True)
        ran = json.loads(traced.read_text()) if traced.is_file() else {}
        cases = ElementTree.parse(report).getroot().iter("testcase") if report.is_file() else []
        outcomes = {f"{case.get('classname')}::{case.get('name')}":
                    next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
                    for case in cases}
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    bad = {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}
    if done.returncode != 0 or bad or not outcomes:
        named = "; ".join(f"{name} {outcome}" for name, outcome in bad.items()) or (
            "no test was collected" if not outcomes else f"pytest exited with {done.returncode}")
        raise SameFunctionRefused(f"the tests named as evidence did not all pass ({named}); nothing is recorded. "
                                  f"pytest said:\n{tail}")
    return len(outcomes), ran
