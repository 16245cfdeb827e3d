"""Every chapter's notebook runs end to end at smoke scale under papermill."""

from __future__ import annotations

import os

import papermill
import pytest

from conftest import chapters


@pytest.mark.chapter
@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_chapter_runs_at_smoke_scale(page, tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_SCALE", "smoke")
    monkeypatch.delenv("GMP_RESULTS_STAGING", raising=False)
    notebook = page.with_suffix(".ipynb")
    executed = papermill.execute_notebook(
        str(notebook), str(tmp_path / notebook.name), parameters={"SCALE": "smoke"},
        cwd=str(page.parent), kernel_name="python3", progress_bar=False,
    )
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert os.environ["GMP_SCALE"] == "smoke"
