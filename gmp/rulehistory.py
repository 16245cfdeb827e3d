"""A claim's rule as it was at a recorded commit, judged from the repository's history.

A rule whose hash (:func:`gmp.results.rule_digest`) changed since its paper-scale run was either
refactored (rewritten to decide the same) or revised (made to decide otherwise). The ledger tells them
apart by what they decide: the package as it was at the run's commit is read from git (``git archive``,
never from a cache file), imported in a process of its own (a child forked from one that imported torch and scipy
once, ``_ZYGOTE``), checked to hash the claim's rule as the run recorded, and given the run's payload
(:func:`judge_at`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any



class Unavailable(Exception):
    """The rule as it was at the run cannot be recovered or run; the message says why."""


_JUDGE = r"""
import json, sys
tree, chapter, key = sys.argv[1:4]
sys.path.insert(0, tree)
import gmp
from gmp import config, results
if not gmp.__file__.startswith(tree):
    sys.exit(f"imported gmp from {gmp.__file__}, not from {tree}")
claims = [c for c in getattr(config.experiment(chapter), "CLAIMS", []) if c.key == key]
if not claims:
    sys.exit(f"the commit has no claim {key!r} in gmp.experiments.{chapter}")
measured, verdict = claims[0].evaluate(json.load(sys.stdin))
print(json.dumps({"digest": results.rule_digest(claims[0]), "measured": measured, "verdict": verdict}))
"""


@functools.cache
def _package_at(root: str, commit: str) -> Path:
    """The folder ``gmp`` of ``commit`` of the repository at ``root``, extracted once per process into a
    temporary folder that is removed when the process exits."""
    try:
        archive = subprocess.run(["git", "archive", "--format=tar", commit, "gmp"], cwd=root, capture_output=True,
                                 check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        stderr = getattr(err, "stderr", b"") or b""
        raise Unavailable(f"git cannot read gmp at commit {commit[:10]} "
                          f"({stderr.decode(errors='replace').strip() or err})") from None
    folder = Path(tempfile.mkdtemp(prefix=f"gmp-rules-{commit[:10]}-"))
    atexit.register(shutil.rmtree, folder, True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def judge_at(root: Path, commit: str, chapter: str, key: str, payload: Mapping[str, Any],
             recorded: str) -> tuple[str, str]:
    """``(measured, verdict)`` of the claim ``key`` of ``chapter`` on ``payload`` by its rule as it was at
    ``commit`` of the repository at ``root``, run in a separate Python process (this one keeps today's
    ``gmp``). Raises :class:`Unavailable` saying why where that cannot be told: a commit with uncommitted
    changes or not in the repository's history (a shallow clone), a rule there that does not hash as
    ``recorded`` (the run's record of it), or a rule that fails on the payload."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise Unavailable(f"the run records the commit {commit!r}, not a clean commit (uncommitted changes cannot "
                          f"be read back)")
    tree = _package_at(str(root), commit)
    code, out, err = _run(_JUDGE, [str(tree), chapter, key], json.dumps(payload), tree)
    if code is None:
        raise Unavailable(f"the rule at commit {commit[:10]} did not finish within {TIMEOUT} s") from None
    if code != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        raise Unavailable(f"the rule at commit {commit[:10]} could not be run ({last})")
    found = json.loads(out.strip().splitlines()[-1])
    if found["digest"] != recorded:
        raise Unavailable(f"the rule at commit {commit[:10]} hashes as {found['digest']}, not as the run recorded "
                          f"({recorded}), so it is not the rule the run was made with")
    return found["measured"], found["verdict"]


@dataclasses.dataclass(frozen=True)
class Run:
    """A committed paper-scale run of a chapter, as a version of its cache's ``provenance.json`` in git records it."""

    commit: str
    """The commit that holds this version of the cache (where its payload is read from)."""
    run_commit: str
    """The commit the run was made at, as its provenance records it (``+dirty`` marks uncommitted changes), or ""."""
    date: str
    rules: tuple[tuple[str, str], ...] | None
    """The rule digests the run recorded, or None where it recorded none (it predates them)."""

    @property
    def base(self) -> str:
        """The commit the run's code was taken from (its uncommitted changes aside), or "" where none is recorded."""
        return self.run_commit.removesuffix("+dirty") if re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?",
                                                                       self.run_commit) else ""

    @property
    def dirty(self) -> bool:
        return self.run_commit.endswith("+dirty")


@functools.cache
def runs(root: str, chapter: str) -> tuple[Run, ...]:
    """The committed paper-scale runs of ``chapter`` in the repository at ``root``, oldest first, one per run (a
    re-stamped or re-committed cache of the same run counts once, at the first commit that holds it), from the
    history of its ``provenance.json``; empty where git cannot tell."""
    path = f"book/_results/{chapter}/paper/provenance.json"
    try:
        commits = subprocess.run(["git", "log", "--reverse", "--format=%H", "--", path], cwd=root,
                                 capture_output=True, text=True, check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ()
    out, seen = [], set()
    for commit in commits:
        record = _show_json(root, commit, path)
        if not isinstance(record, dict):
            continue
        code = record.get("code") if isinstance(record.get("code"), dict) else {}
        rules = code.get("rules") if isinstance(code.get("rules"), dict) else None
        run = Run(commit, str(record.get("commit", "")), str(record.get("date", "?")),
                  tuple(sorted((str(k), str(v)) for k, v in rules.items())) if rules is not None else None)
        if (run.run_commit, run.date) not in seen:
            seen.add((run.run_commit, run.date))
            out.append(run)
    return tuple(out)


def _show_json(root: str, commit: str, path: str) -> Any:
    """The JSON file ``path`` as ``commit`` holds it, or None where git cannot show it or it does not parse."""
    try:
        return json.loads(subprocess.run(["git", "show", f"{commit}:{path}"], cwd=root, capture_output=True, text=True,
                                         check=True, timeout=60).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


@functools.cache
def payload_at(root: str, commit: str, chapter: str, result: str) -> Any:
    """The paper-scale payload ``result`` of ``chapter`` as ``commit`` holds it, or None where it holds none."""
    return _show_json(root, commit, f"book/_results/{chapter}/paper/{result}.json")


_RULES_AT = r"""
import importlib, json, sys, types
tree = sys.argv[1]
sys.path.insert(0, tree)
request = json.load(sys.stdin)
hashing = {}
exec(request["hashing"], hashing)
import gmp
if not gmp.__file__.startswith(tree):
    sys.exit(f"imported gmp from {gmp.__file__}, not from {tree}")
from gmp import results
out = {}
for chapter, asked in request["claims"].items():
    try:
        module = importlib.import_module(f"gmp.experiments.{chapter}")
    except ImportError:
        module = None
    claims = {c.key: c for c in getattr(module, "CLAIMS", [])}
    for key, payloads in asked.items():
        claim = claims.get(key)
        if claim is None:
            out[f"{chapter}/{key}"] = None
            continue
        view = types.SimpleNamespace(rule=claim.rule, kind=getattr(claim, "kind", "finding"),
                                     test=getattr(claim, "test", None), check=claim.check)
        bare = types.SimpleNamespace(rule="", kind="", test=view.test, check=claim.check)
        verdicts = []
        for payload in payloads:
            try:
                verdicts.append(list((claim.evaluate if hasattr(claim, "evaluate") else claim.check)(payload)))
            except Exception as err:
                verdicts.append([f"{type(err).__name__}: {err}", None])
        out[f"{chapter}/{key}"] = {"kind": view.kind, "digest": hashing["rule_digest"](view),
                                   "decision": hashing["rule_digest"](bare),
                                   "recorded_as": results.rule_digest(claim) if hasattr(results, "rule_digest") else "",
                                   "verdicts": verdicts}
print(json.dumps(out))
"""


def rules_at(root: Path, commit: str, chapter: str, asked: Mapping[str, list[Any]], hashing: str,
             keep: Callable[[Path, Any], None]) -> dict[str, dict[str, Any] | None]:
    """For each claim key of ``asked`` (key to payloads), the claim of ``chapter`` as it was at ``commit`` of the
    repository at ``root`` (read from git, run in a separate Python process), or None where that commit has no such
    claim: its ``kind``, its ``digest`` and ``decision`` (its rule hashed by today's :func:`gmp.results.rule_digest`,
    and the same without its words and kind: what decides), ``recorded_as`` (hashed as that commit hashed rules, ""
    where it did not) and its ``[measured, verdict]`` on each payload (``[error, None]`` where it fails on it). Raises :class:`Unavailable` saying
    why where that cannot be told. The answer is kept under :data:`MEMO` of ``root`` by ``keep(path, answer)`` (the
    caller gives ``gmp.results.files.atomic_write_json``: this module imports nothing of ``gmp``, whose other
    commits it runs) and read from there when asked again."""
    request = json.dumps({"hashing": hashing, "claims": {chapter: dict(asked)}}, sort_keys=True)
    key = hashlib.sha256(json.dumps([commit, request, _RULES_AT, sys.version]).encode()).hexdigest()
    memo = Path(root) / MEMO / f"{key}.json"
    try:
        kept = json.loads(memo.read_text())
        if isinstance(kept, dict) and set(kept) == set(asked):
            return kept
    except (OSError, ValueError):
        pass
    found = _rules_at(str(_package_at(str(root), commit)), commit, request)
    with contextlib.suppress(OSError):  # a folder it cannot write to: the answer is computed, not kept
        keep(memo, found)
    return found


MEMO = Path("_build") / "rule-history"
"""Where :func:`rules_at` keeps what it found, under the repository (ignored by git), one file per commit and request:
a commit's package and the payloads asked about never change, so every later process (a chapter's kernel, the
claims page, the tests) reads the answer instead of importing that commit's ``gmp`` again (seconds each)."""


@functools.cache
def _rules_at(tree: str, commit: str, request: str) -> dict[str, dict[str, Any] | None]:
    code, out, err = _run(_RULES_AT, [tree], request, Path(tree))
    if code is None:
        raise Unavailable(f"the rules at commit {commit[:10]} did not finish within {TIMEOUT} s") from None
    if code != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        raise Unavailable(f"the rules at commit {commit[:10]} could not be read ({last})")
    found = json.loads(out.strip().splitlines()[-1])
    return {key.partition("/")[2]: value for key, value in found.items()}


TIMEOUT = 300
"""Seconds a commit's package may take to answer (``_run``)."""

_ZYGOTE = r"""
import json, os, sys, traceback
import numpy, scipy.stats, torch, torchvision  # what every commit's gmp imports: loaded once, before the forks
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd, path in ((1, job["out"]), (2, job["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            sys.stdin = open(job["stdin"])
            sys.argv = ["-c", *job["argv"]]
            os.chdir(job["cwd"])
            exec(compile(job["script"], "<gmp.rulehistory>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            if stop.code not in (None, 0):
                code = stop.code if isinstance(stop.code, int) else 1
                if not isinstance(stop.code, int):
                    print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
"""A process that imports once what every commit's package imports (torch and scipy, seconds), then forks a fresh
child for each script it is given, so that each commit's ``gmp`` is imported in a process of its own, as by a new
Python process, without paying for torch again."""

_zygote: list[subprocess.Popen] = []
"""The zygote this process started, while it runs."""


@atexit.register
def _stop_zygote() -> None:
    while _zygote:
        process = _zygote.pop()
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _run(script: str, argv: list[str], stdin: str, cwd: Path) -> tuple[int | None, str, str]:
    """``(exit code, stdout, stderr)`` of ``script`` run as ``python -c script *argv`` in ``cwd``, reading ``stdin``,
    in a fresh child of :data:`_ZYGOTE` (started once per process, stopped when it exits); the exit code is None
    where it did not finish within :data:`TIMEOUT` seconds (the zygote is then stopped, and the next call starts
    another)."""
    if not _zygote:
        _zygote.append(subprocess.Popen([sys.executable, "-c", _ZYGOTE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, start_new_session=True,
                                        cwd=tempfile.gettempdir()))
    process = _zygote[0]
    with tempfile.TemporaryDirectory(prefix="gmp-rules-job-") as folder:
        paths = {name: os.path.join(folder, name) for name in ("stdin", "out", "err")}
        Path(paths["stdin"]).write_text(stdin)
        try:
            process.stdin.write(json.dumps({"script": script, "argv": argv, "cwd": str(cwd), **paths}) + "\n")
            process.stdin.flush()
            ready = select.select([process.stdout], [], [], TIMEOUT)[0]
            line = process.stdout.readline() if ready else ""
        except OSError:
            ready, line = True, ""
        if not line.strip():
            _stop_zygote()
            return (1, "", "the process that runs each commit's package ended unexpectedly") if ready else (None, "", "")
        return int(line), Path(paths["out"]).read_text(), Path(paths["err"]).read_text()
