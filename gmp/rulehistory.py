"""A claim's rule as it was at a recorded commit, judged from the repository's history.

A rule whose hash (:func:`gmp.results.rule_digest`) changed since its paper-scale run was either
refactored (rewritten to decide the same) or revised (made to decide otherwise). The ledger tells them
apart by what they decide: the package as it was at the run's commit is read from git (``git archive``,
never from a cache file), imported in a fresh Python process, checked to hash the claim's rule as the run
recorded, and given the run's payload (:func:`judge_at`).
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
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
    try:
        done = subprocess.run([sys.executable, "-c", _JUDGE, str(tree), chapter, key], input=json.dumps(payload),
                              capture_output=True, text=True, timeout=300, cwd=tree)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"the rule at commit {commit[:10]} did not finish within 300 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise Unavailable(f"the rule at commit {commit[:10]} could not be run ({last})")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found["digest"] != recorded:
        raise Unavailable(f"the rule at commit {commit[:10]} hashes as {found['digest']}, not as the run recorded "
                          f"({recorded}), so it is not the rule the run was made with")
    return found["measured"], found["verdict"]


@functools.cache
def earlier_runs(root: str, provenance: str) -> tuple[tuple[str, str, tuple[tuple[str, str], ...] | None], ...]:
    """Every earlier version of the committed ``provenance`` file (a cache's ``provenance.json``, its path
    relative to ``root``) as ``(commit, date of the run, rules recorded or None)``, newest first, from git's
    history (``git log``, ``git show``); empty where git cannot tell. A rerun records the rules in force at
    it, which says nothing of whether they were written before an earlier run's results were seen."""
    try:
        commits = subprocess.run(["git", "log", "--format=%H", "--", provenance], cwd=root, capture_output=True,
                                 text=True, check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ()
    out = []
    for commit in commits:
        try:
            text = subprocess.run(["git", "show", f"{commit}:{provenance}"], cwd=root, capture_output=True,
                                  text=True, check=True, timeout=60).stdout
            record = json.loads(text)
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
        code = record.get("code") if isinstance(record.get("code"), dict) else {}
        rules = code.get("rules") if isinstance(code.get("rules"), dict) else None
        out.append((commit, str(record.get("date", "?")),
                    tuple(sorted((str(k), str(v)) for k, v in rules.items())) if rules is not None else None))
    return tuple(out)
