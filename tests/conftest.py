"""Shared fixtures. The tests read real data from GMP_DATA (this project: ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKE_BOOK = ROOT / "_build" / "smoke"
"""Where ``make book SCALE=smoke`` and tests/test_book.py build the smoke book, with its own execution cache."""


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def chapters() -> list[Path]:
    """The chapter sources: every MyST notebook under book/part*/."""
    return sorted(ROOT.glob("book/part*/*.md"))


def running_pages() -> list[Path]:
    """The pages of the part "Running and trusting the book": every MyST page under book/running/."""
    return sorted(ROOT.glob("book/running/*.md"))


def running_notebooks() -> list[Path]:
    """The pages of :func:`running_pages` that have code cells: executed by the build, paired with an .ipynb."""
    return [page for page in running_pages() if "```{code-cell}" in page.read_text()]


def pytest_report_header(config):
    return f"GMP_DATA={os.environ.get('GMP_DATA', '(unset: ~/.cache/gmp)')}"


# Tests that share a costly set-up run on one pytest-xdist worker, in collection order: the Colab runtime
# (tests/test_colab.py), the single-node Slurm cluster (tests/test_cluster.py), and the smoke book, whose build reuses the chapter smoke runs through its execution cache
# (tests/test_book.py after tests/test_chapters.py's smoke runs).
WORKER_GROUPS = {
    "colab": ("tests/test_colab.py::",),
    "smoke-book": ("tests/test_chapters.py::test_chapter_runs_at_smoke_scale[", "tests/test_book.py::"),
    "slurm": ("tests/test_cluster.py::test_slurm_detached_array_assembles_the_cache_a_local_run_assembles_without_sacct",
              "tests/test_cluster.py::test_slurm_a_cancelled_array_resumes_with_only_its_missing_units",
              "tests/test_cluster.py::test_slurm_trains_lu_reals_last_stack_as_one_task_whose_unit_file_holds_its_networks"
              "_epochs"),
}


def worker_group(nodeid: str) -> str | None:
    """The group of WORKER_GROUPS a test belongs to, None for a test that any worker may run."""
    return next((group for group, prefixes in WORKER_GROUPS.items() if nodeid.startswith(prefixes)), None)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``-n N`` (``--dist load``, as ``make test`` runs): each group of WORKER_GROUPS goes whole to one worker
    (the largest first), every other test to whichever worker is free. (pytest-xdist's own ``--dist loadgroup``
    marks groups by ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid) or nodeid

    return Grouped(config, log)


def pytest_collection_modifyitems(config, items):
    """The smoke book's tests (tests/test_book.py) go last: its build reuses the chapter smoke runs of
    tests/test_chapters.py through its execution cache. Tests marked ``cuda`` skip on a machine without a CUDA GPU."""
    items.sort(key=lambda item: item.path.name == "test_book.py")
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
