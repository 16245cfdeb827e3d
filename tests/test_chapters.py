"""Every chapter's notebook runs end to end at smoke scale, as the smoke book executes it."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import papermill
import pytest
import yaml

from conftest import ROOT, SMOKE_BOOK, chapters
from gmp import bookcache, config, results
from gmp.implicit import FitResult


@pytest.mark.chapter
@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_chapter_runs_at_smoke_scale(page, monkeypatch):
    """The chapter runs as the smoke book (``make book SCALE=smoke``) executes it: its MyST source, in its own
    folder, by jupyter-cache's executor with no error allowed. The executed notebook then goes into the smoke
    book's execution cache under the page's current fingerprint (gmp.bookcache), so the book build of
    tests/test_book.py, and ``make book SCALE=smoke`` after it, use this run instead of running the chapter again.
    (The paired ``.ipynb`` runs at smoke scale under papermill with ``SCALE`` injected in tests/test_colab.py.)"""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.executors.utils import single_nb_execution

    monkeypatch.setenv("GMP_SCALE", "smoke")
    monkeypatch.delenv("GMP_RESULTS_STAGING", raising=False)
    execute = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    notebook = bookcache.read_page(page, ROOT)
    # What the book's build does before it executes anything: drop the cached executions of changed code or results.
    bookcache.invalidate(SMOKE_BOOK, ROOT)
    executed = single_nb_execution(notebook, cwd=str(page.parent), timeout=execute["timeout"],
                                   allow_errors=execute["allow_errors"])
    assert executed.err is None, f"{page.name} failed at smoke scale:\n{executed.exc_string}"
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert os.environ["GMP_SCALE"] == "smoke"
    cache = get_cache(SMOKE_BOOK / "_build" / ".jupyter_cache")
    cache.cache_notebook_bundle(CacheBundleIn(notebook, str(page), data={"execution_seconds": executed.time}),
                                check_validity=False, overwrite=True)
    assert cache.match_cache_notebook(bookcache.read_page(page, ROOT)).uri == str(page)


@pytest.mark.chapter
@pytest.mark.parametrize("chapter, units, others, column", [
    ("sbsnn_fitting", ["sin-0", "siren-0"], ["sin_lr0.001-0"], "ours (paper scale): steps"),
    ("sbsnn_encoders", ["fig7-sin/rotated-0", "fig7-gpn_elu/rotated-0"], [], "ours (paper scale)"),  # ELU: paper only
])
def test_an_unfinished_paper_run_is_shown_as_partial(chapter, units, others, column, tmp_path, monkeypatch):
    """Networks journalled by an unfinished paper-scale run appear in the chapter's table, the rest as not run,
    also those this scale does not run (GPN ELU in Fig. 7 at smoke scale); journalled fits of other figures
    (``others``: the learning-rate sweep) appear in the prose beside theirs."""
    mse = 1e-2 * 10 ** (-np.arange(60) / 12)
    fit = FitResult(mse, 10 * np.log10(4 / mse), np.full(60, 1e-3), {}, None, 1.0)
    digest = config.load(chapter, "paper").digest
    root = tmp_path / "results"
    journal = results.journal_path(chapter, "paper", digest).relative_to(results.results_root())
    (root / journal).parent.mkdir(parents=True)
    (root / journal).write_text("".join(json.dumps({"key": k, "value": fit.to_json(), "seconds": 1.0}) + "\n"
                                        for k in units + others))
    monkeypatch.setenv(results.ROOT_ENV, str(root))
    monkeypatch.setenv("GMP_SCALE", "smoke")
    monkeypatch.delenv("GMP_RESULTS_STAGING", raising=False)
    page = next(p for p in chapters() if p.stem == chapter)
    executed = papermill.execute_notebook(
        str(page.with_suffix(".ipynb")), str(tmp_path / f"{chapter}.ipynb"), parameters={"SCALE": "smoke"},
        cwd=str(page.parent), kernel_name="python3", progress_bar=False)
    tables = [o["data"]["text/html"] for c in executed.cells for o in c.get("outputs", [])
              if column in o.get("data", {}).get("text/html", "")]
    assert len(tables) == 1
    headers = re.findall(r'<th [^>]*class="col_heading level0 col(\d+)"[^>]*>(.*?)</th>', tables[0])
    index = next(i for i, name in headers if name == column)
    shown = [text.strip() for col, text in re.findall(r'<td [^>]*class="data row\d+ col(\d+)"[^>]*>(.*?)</td>',
                                                        tables[0]) if col == index]
    assert shown.count(str(fit.first_step_below(1e-5))) == len(units)
    assert shown.count("not yet run at paper scale") == len(shown) - len(units)
    if chapter == "sbsnn_fitting":
        glued = [o["data"]["application/papermill.record/text/plain"] for c in executed.cells
                 for o in c.get("outputs", []) if o.get("metadata", {}).get("scrapbook", {}).get("name")
                 == "sbsnn_fit_sweep_paper"]
        final = f"{fit.psnr[-1]:.1f} dB after 60 steps"
        assert glued == [repr(f"lr 0.0002 (the paper's) {final}, lr 0.001 {final}, SIREN {final}")]


@pytest.mark.chapter
def test_the_author_chapter_shows_an_unfinished_paper_run_and_reads_its_numbers(tmp_path, monkeypatch):
    """Fits journalled by an unfinished paper-scale run of sbsnn_author appear in its table of when each network
    passes 50 and 56 dB, with the epochs, updates and seconds of the journalled curves; no claim is judged on them."""
    from gmp.minibatch import EpochCurves

    epochs = np.arange(1, 101)
    mse = 10 ** (-epochs / 15)  # 50 dB at epoch 75, 56.02 dB at epoch 85
    fit = EpochCurves(mse, mse, None, np.full(100, 1e-3), epochs * 2.0, 2048, 1.0, None)
    units = {"readme-aggressive-0": {"script": fit.to_json()},
             "fig7-sin-0": {"nerf": fit.to_json(), "rotated": fit.to_json()}}
    digest = config.load("sbsnn_author", "paper").digest
    root = tmp_path / "results"
    journal = root / results.journal_path("sbsnn_author", "paper", digest).relative_to(results.results_root())
    journal.parent.mkdir(parents=True)
    journal.write_text("".join(json.dumps({"key": k, "value": v, "seconds": 1.0}) + "\n" for k, v in units.items()))
    monkeypatch.setenv(results.ROOT_ENV, str(root))
    monkeypatch.setenv("GMP_SCALE", "smoke")
    monkeypatch.delenv("GMP_RESULTS_STAGING", raising=False)
    page = next(p for p in chapters() if p.stem == "sbsnn_author")
    executed = papermill.execute_notebook(
        str(page.with_suffix(".ipynb")), str(tmp_path / "sbsnn_author.ipynb"), parameters={"SCALE": "smoke"},
        cwd=str(page.parent), kernel_name="python3", progress_bar=False)
    tables = [o["data"]["text/html"] for c in executed.cells for o in c.get("outputs", [])
              if "56.0 dB: updates" in o.get("data", {}).get("text/html", "")]
    assert len(tables) == 1
    cells = [text.strip() for text in re.findall(r"<td [^>]*>(.*?)</td>", tables[0])]
    assert cells.count(f"{75 * 2048:,}") == 3 and cells.count("150") == 3  # 50 dB: updates, seconds
    assert cells.count("85") == 3 and cells.count(f"{85 * 2048:,}") == 3 and cells.count("170") == 3  # 56.0 dB
    notes = [o["data"]["text/html"] for c in executed.cells for o in c.get("outputs", [])
             if "Unfinished paper-scale run" in o.get("data", {}).get("text/html", "")]
    assert len(notes) == 1 and "journalled 2 finished units" in notes[0]
