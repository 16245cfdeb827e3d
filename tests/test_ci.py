"""What CI and a fresh machine rely on: the browser test's Chromium, and the Pages workflow."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
INSTALL = "sudo apt-get install chromium chromium-driver"


def _make(*args: str, env: dict[str, str] | None = None, unprivileged: bool = False) -> subprocess.CompletedProcess:
    """``make args`` in the repository with ``env`` added, as nobody when asked and root; the flags of a
    ``make test`` that runs this test are not passed on."""
    command = ["make", "--no-print-directory", *args]
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is needed to run the check as a user who is not root")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
    outer = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(command, cwd=ROOT, env={**outer, **(env or {})}, capture_output=True, text=True, timeout=60)


def _chromium_check(env: dict[str, str], unprivileged: bool = False) -> subprocess.CompletedProcess:
    """``make chromium``, the first step of ``make test``."""
    return _make("chromium", env=env, unprivileged=unprivileged)


def test_make_test_checks_chromium_before_installing_or_testing():
    done = _make("-n", "test")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ".ci/chromium"


def test_make_test_installs_slurm_for_the_real_slurm_test_after_chromium():
    done = _make("-n", "test")
    assert done.stdout.splitlines()[:2] == [".ci/chromium", ".ci/slurm"]


def test_missing_slurm_is_no_error_but_names_the_command_that_installs_it():
    """Not root, without slurm-wlm's daemons on PATH: .ci/slurm says how to install them and lets the suite run (the
    real-Slurm test then skips, saying the same)."""
    done = _make("slurm", env={"PATH": "/usr/bin:/bin"}, unprivileged=True)
    assert done.returncode == 0
    assert "sudo apt-get install slurm-wlm munge" in done.stderr and "it skips without them" in done.stderr


def test_make_test_runs_on_every_core_keeping_the_tests_that_share_a_set_up_on_one_worker():
    """``make test`` runs pytest-xdist workers (one thread each); the groups of conftest.WORKER_GROUPS name tests
    that exist, so that the Colab runtime is installed once and the smoke book reuses the chapter smoke runs."""
    import importlib

    from conftest import WORKER_GROUPS, worker_group

    done = _make("-n", "test")
    assert done.returncode == 0, done.stderr
    assert "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} .venv/bin/python -m pytest -n auto" in done.stdout.splitlines()
    for prefixes in WORKER_GROUPS.values():
        for prefix in prefixes:
            path, _, name = prefix.partition("::")
            assert (ROOT / path).is_file(), prefix
            module = importlib.import_module(path.removeprefix("tests/").removesuffix(".py"))
            assert not name or hasattr(module, name.rstrip("[")), f"{prefix} names no test"
    assert worker_group("tests/test_chapters.py::test_chapter_runs_at_smoke_scale[chen_levy]") == "smoke-book"
    assert worker_group("tests/test_book.py::test_mathjax_is_served_by_the_book") == "smoke-book"
    assert worker_group("tests/test_colab.py::test_chapter_installs_gmp_notebook_and_runs_in_a_colab_like_runtime"
                        "[chen_levy]") == "colab"
    assert worker_group("tests/test_chapters.py::test_the_author_chapter_shows_an_unfinished_paper_run_and_reads_its"
                        "_numbers") is None
    assert worker_group("tests/test_ci.py::test_present_chromium_passes_silently") is None


def test_missing_chromium_stops_with_the_command_that_installs_it():
    done = _chromium_check({"CHROMIUM": "gmp-no-such-chromium"}, unprivileged=True)
    assert done.returncode != 0
    assert "gmp-no-such-chromium and chromedriver" in done.stderr
    assert INSTALL in done.stderr


def test_missing_chromedriver_stops_with_the_command_that_installs_it():
    done = _chromium_check({"CHROMEDRIVER": "gmp-no-such-chromedriver"}, unprivileged=True)
    assert done.returncode != 0
    assert "gmp-no-such-chromedriver" in done.stderr and INSTALL in done.stderr


def test_present_chromium_passes_silently():
    done = _chromium_check({"CHROMIUM": "sh", "CHROMEDRIVER": "sh"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_pages_workflow_builds_with_the_readme_command_and_deploys_the_html():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads the key `on` as True
    assert workflow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = workflow["jobs"]["build"]["steps"], workflow["jobs"]["deploy"]["steps"]
    commands = [s["run"] for s in build if "run" in s]
    readme = (ROOT / "README.md").read_text()
    assert "make book    # build the book at its default scale into _build/html/index.html" in readme
    assert any(re.search(r"(^|\s)make book$", c.strip()) for c in commands), f"no `make book` in {commands}"
    assert not any("paper" in c for c in commands), "the workflow shows the committed caches, it runs no paper scale"
    uses = {s["uses"].split("@")[0]: s for s in build + deploy if "uses" in s}
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "_build/html"
    assert "actions/deploy-pages" in uses and workflow["jobs"]["deploy"]["needs"] == "build"
    data = next(c for c in commands if "make book" in c)
    assert 'GMP_DATA="$HOME/.cache/gmp"' in data
    caches = [s["with"]["path"] for s in build if s.get("uses", "").startswith("actions/cache@")]
    assert "~/.cache/gmp" in caches, "the data cache is where GMP_DATA points"


def test_reader_job_runs_the_browser_test_and_keeps_its_screenshots():
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["reader"]
    commands = " && ".join(s["run"] for s in job["steps"] if "run" in s)
    assert "make chromium" in commands and "tests/test_book.py" in commands
    from test_book import SCREENSHOTS
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()", "the screenshots of a failing run are the ones a reader needs"
    assert (ROOT / upload["with"]["path"]).resolve() == SCREENSHOTS.resolve()
