"""The papermill runner: results move into the cache only when a run succeeds."""

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import nbformat
import pytest

from gmp import config, results, runs

WRITE = """
import json, os, pathlib
staging = pathlib.Path(os.environ["GMP_RESULTS_STAGING"])
(staging / "summary.json").write_text(json.dumps({"scale": SCALE, "seed": SEED, "env": os.environ["GMP_SCALE"]}))
"""


def _notebook(path, body):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('SCALE = "small"\nDEVICE = "auto"\nSEED = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture
def book(tmp_path, monkeypatch):
    module = types.ModuleType("gmp.experiments.fake_chapter")
    module.CONFIG = config.scaled(smoke={"n": 1}, small={"n": 2}, paper={"n": 3})
    monkeypatch.setitem(sys.modules, "gmp.experiments.fake_chapter", module)
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "book" / "_results"))
    return tmp_path


def test_a_successful_run_is_cached_with_provenance(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    final = runs.run("fake_chapter", "smoke", device="cpu", seed=7, root=book)
    assert final == book / "book" / "_results" / "fake_chapter" / "smoke"
    assert json.loads((final / "summary.json").read_text()) == {"scale": "smoke", "seed": 7, "env": "smoke"}
    provenance = json.loads((final / "provenance.json").read_text())
    assert provenance["config_digest"] == config.load("fake_chapter", "smoke").digest
    assert provenance["config"] == {"n": 1} and provenance["seed"] == 7
    assert provenance["device"].startswith("cpu") and provenance["wall_time_s"] > 0
    assert {"commit", "gmp_version", "torch_version", "date"} <= set(provenance)
    assert provenance["payload_sha256"] == results.payload_hashes(final)
    assert set(provenance["payload_sha256"]) == {"summary.json", "fake_chapter.ipynb"}
    executed = nbformat.read(final / "fake_chapter.ipynb", as_version=4)
    assert any(c.metadata.get("tags") == ["injected-parameters"] for c in executed.cells)
    assert results.cached("fake_chapter", "summary", "smoke").status == "current"
    assert not list(final.parent.glob(".staging-*"))


def test_a_failed_run_leaves_the_previous_cache_untouched(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    before = (final / "summary.json").read_text()
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE + "\nraise RuntimeError('diverged on purpose')")
    with pytest.raises(Exception, match="diverged on purpose"):
        runs.run("fake_chapter", "smoke", device="cpu", root=book)
    assert (final / "summary.json").read_text() == before
    assert not list(final.parent.glob(".staging-*"))
    assert (final.parent / "_partial" / "failed-smoke-fake_chapter.ipynb").is_file()


def test_unknown_chapter_lists_the_known_ones(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    with pytest.raises(ValueError, match="chapters: fake_chapter"):
        runs.run("other_chapter", "smoke", root=book)


def test_a_resumed_run_reports_the_work_of_earlier_attempts(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    digest = config.load("fake_chapter", "smoke").digest
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"key": "a", "value": 1, "seconds": 60.0}\n{"key": "b", "value": 2, "seconds": 30.5}\n{"key": "c"')
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    provenance = json.loads((final / "provenance.json").read_text())
    assert (provenance["resumed_units"], provenance["resumed_seconds"]) == (2, 90.5)
    assert "after resuming 2 units" in results.cached("fake_chapter", "summary", "smoke").describe()
    assert not journal.parent.exists()


def test_a_finished_run_leaves_no_partial_folder_behind(book):
    memo = ("from gmp import config, results\n"
            "store = results.Store('fake_chapter', config.Config('fake_chapter', SCALE, {'n': 1}))\n"
            "store.save('summary', {'unit': store.memo('unit-0', lambda: 41) + 1})\n")
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", memo)
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    assert json.loads((final / "summary.json").read_text()) == {"unit": 42}
    assert not (final.parent / "_partial").exists()


def test_jobs_need_a_chapter_that_splits_into_units(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    with pytest.raises(ValueError, match="does not split into independent units.*these split: sbsnn_encoders, "
                                          "sbsnn_fitting, sbsnn_gap"):
        runs.run("fake_chapter", "smoke", device="cpu", root=book, jobs=2)
    with pytest.raises(ValueError, match="--jobs must be at least 1"):
        runs.run("fake_chapter", "smoke", device="cpu", root=book, jobs=0)
    with pytest.raises(ValueError, match="--jobs must be at least 1"):
        runs.prefill("sbsnn_fitting", "smoke", jobs=0)
    with pytest.raises(ValueError, match="only under gmp.runs"):
        runs.prefill("sbsnn_fitting", "smoke", jobs=2)


def test_two_workers_journal_every_unit_of_a_chapter_once(tmp_path, monkeypatch):
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "sbsnn_fitting" / ".staging-test"))
    cfg = config.load("sbsnn_fitting", "smoke")
    from gmp.experiments import sbsnn_fitting

    expected = list(sbsnn_fitting.units(cfg, results.Store("sbsnn_fitting", cfg), 0, "cpu"))
    runs.prefill("sbsnn_fitting", "smoke", jobs=2, device="cpu", seed=0)
    entries = results.journal_entries(results.journal_path("sbsnn_fitting", "smoke", cfg.digest))
    assert sorted(e["key"] for e in entries) == sorted(expected)
    assert len(expected) == len(cfg.activations) + 1 + len(cfg.lr_sweep)
    fits = sbsnn_fitting.journalled(cfg, results.journal_units(results.journal_path("sbsnn_fitting", "smoke", cfg.digest)), 0)
    assert len(fits) == len(cfg.activations) + 1 and all(len(fit.mse) == cfg.steps for fit in fits.values())
    assert not list((tmp_path / "sbsnn_fitting" / "_partial").glob("*/*.lock"))


def test_committed_journals_are_still_units_a_rerun_resumes(root):
    """An unfinished paper-scale run resumes from its committed journal only while the chapter's
    ``units`` still name the journalled keys: renaming a key would silently redo hours of fits."""
    journals = sorted(root.glob("book/_results/*/_partial/*.jsonl"))
    for path in journals:
        chapter, (scale, digest) = path.parents[1].name, path.stem.rsplit("-", 1)
        cfg = config.load(chapter, scale)
        if cfg.digest != digest:
            continue
        units = getattr(config.experiment(chapter), "units", None)
        if units is None:
            continue
        keys = set(results.journal_units(path))
        assert keys <= set(units(cfg, results.Store(chapter, cfg), 0, "cpu")), path


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through Linux's /proc")
def test_stopping_prefill_with_sigterm_stops_its_workers(tmp_path):
    env = {**os.environ, results.ROOT_ENV: str(tmp_path),
           results.STAGING_ENV: str(tmp_path / "sbsnn_fitting" / ".staging-test")}
    parent = subprocess.Popen([sys.executable, "-c", "from gmp import runs; runs.prefill('sbsnn_fitting', 'paper', 2)"],
                              env=env)
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    deadline = time.time() + 60
    while time.time() < deadline and len(children.read_text().split()) < 2:
        time.sleep(0.2)
    workers = [int(pid) for pid in children.read_text().split()]
    assert len(workers) == 2
    time.sleep(2)  # let them import torch and start on their first units
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 128 + signal.SIGTERM
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_commit_is_dirty_for_changed_code_but_not_for_a_changed_journal(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    journal = tmp_path / "book" / "_results" / "ch" / "_partial" / "paper-0.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "start")
    clean = runs.git_commit(tmp_path)
    assert len(clean) == 40 and "+" not in clean
    journal.write_text("{}\n{}\n")
    assert runs.git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert runs.git_commit(tmp_path) == clean + "+dirty"


def test_resuming_units_of_other_code_is_announced_and_recorded(book, capsys):
    """Interrupted after one unit, ``train_one`` edited, rerun: the old unit is kept but never silently."""
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    digest = config.load("fake_chapter", "smoke").digest
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    today = results.code_fingerprint()
    before = {**today["modules"], "experiments/chen_levy.py": "0" * 16}
    journal.write_text(json.dumps({"key": "a", "value": 1, "code": "old", "modules": before}) + "\n"
                       + json.dumps({"key": "b", "value": 2, "code": today["digest"]}) + "\n"
                       + json.dumps({"key": "c", "value": 3}) + "\n")
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    err = capsys.readouterr().err
    assert "resuming 1 units of fake_chapter journalled by code that differs from today's in " \
           "experiments/chen_levy.py" in err
    assert "resuming 1 units of fake_chapter journalled with no code fingerprint" in err
    provenance = json.loads((final / "provenance.json").read_text())
    assert provenance["code"] == today
    assert provenance["resumed_code"] == {"other_code_units": 1, "code_not_recorded_units": 1,
                                          "changed_modules": ["experiments/chen_levy.py"]}
    described = results.cached("fake_chapter", "summary", "smoke").describe()
    assert "1 of them by code that differs from today's in experiments/chen_levy.py" in described
    assert "The gmp code is unchanged since." in described
