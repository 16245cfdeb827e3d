"""The papermill runner: results move into the cache only when a run succeeds."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import nbformat
import pytest

from gmp import config, results, runs, samefunction, verification

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


def test_a_run_removes_the_staging_folders_of_killed_runs_but_not_of_live_ones(book):
    # A run killed by SIGKILL cannot remove its .staging-<scale>-<pid>; before, nothing ever did.
    import subprocess

    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    results_dir = book / "book" / "_results" / "fake_chapter"
    gone = subprocess.Popen(["true"])
    gone.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        for pid, scale in ((gone.pid, "paper"), (gone.pid, "smoke"), (live.pid, "paper")):
            (results_dir / f".staging-{scale}-{pid}").mkdir(parents=True)
            (results_dir / f".staging-{scale}-{pid}" / "summary.json").write_text("{}")
        runs.run("fake_chapter", "smoke", device="cpu", root=book)
        assert sorted(p.name for p in results_dir.glob(".staging-*")) == [f".staging-paper-{live.pid}"]
    finally:
        live.kill()
        live.wait()


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


def _memo(*keys):
    """A notebook that writes ``summary`` after ``Store.memo`` of each of ``keys`` (computing ``0`` where not journalled)."""
    return ("from gmp import config, results\n"
            "store = results.Store('fake_chapter', config.Config('fake_chapter', SCALE, {'n': 1}))\n"
            f"values = [store.memo(key, lambda: 0) for key in {list(keys)!r}]\n"
            "store.save('summary', {'values': values})\n")


def test_a_resumed_run_reports_the_work_of_earlier_attempts(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", _memo("a", "b"))
    digest = config.load("fake_chapter", "smoke").digest
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"key": "a", "value": 1, "seconds": 60.0}\n'
                       '{"key": "b", "value": 2, "seconds": 30.5, "device": "cuda (NVIDIA H100 80GB HBM3)"}\n{"key": "c"')
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    provenance = json.loads((final / "provenance.json").read_text())
    assert (provenance["resumed_units"], provenance["resumed_seconds"]) == (2, 90.5)
    assert provenance["units_device"] == {"cuda (NVIDIA H100 80GB HBM3)": 1}  # a unit a GPU lease returned (merge)
    text = results.cached("fake_chapter", "summary", "smoke").describe()
    assert "after resuming 2 units journalled before it (" in text
    assert "; 1 of them were computed on cuda (NVIDIA H100 80GB HBM3) by the GPU command" in text
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
    with pytest.raises(ValueError, match="does not split into independent units.*these split: chen_banana, "
                                          "chen_banana_arms, chen_levy, chen_levy_arms, chen_uci, chen_uci_arms, .*"
                                          "lu_real, sbsnn_author, sbsnn_author_figs, sbsnn_encoders, sbsnn_fitting, "
                                          "sbsnn_gap"):
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
    from gmp import gpu

    journals = sorted(root.glob("book/_results/*/_partial/*.jsonl"))
    for path in journals:  # of today's config or of one with the chapter's queued settings (gmp.gpu.unit_config)
        chapter, (scale, digest) = path.parents[1].name, path.stem.rsplit("-", 1)
        cfg = next((c for c in (config.load(chapter, scale), gpu.unit_config(chapter, scale)) if c.digest == digest),
                   None)
        if cfg is None:
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
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", _memo("a", "b", "c"))
    digest = config.load("fake_chapter", "smoke").digest
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    today = results.code_fingerprint()
    before = {**today["modules"], "experiments/chen_levy.py": "0" * 16}
    journal.write_text(json.dumps({"key": "a", "value": 1, "code": "old", "modules": before, "hash": today["hash"]}) + "\n"
                       + json.dumps({"key": "b", "value": 2, "code": today["digest"]}) + "\n"
                       + json.dumps({"key": "c", "value": 3}) + "\n")
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    err = capsys.readouterr().err
    assert "resuming 1 units of fake_chapter journalled by code that differs from today's in " \
           "experiments/chen_levy.py" in err
    assert "resuming 1 units of fake_chapter journalled with no code fingerprint" in err
    provenance = json.loads((final / "provenance.json").read_text())
    assert provenance["code_of"] == "the notebook"
    assert provenance["resumed_code"] == {"other_code_units": 1, "code_not_recorded_units": 1,
                                          "changed_modules": ["experiments/chen_levy.py"]}
    # Which map computed the CPU's hyperspherical directions, with what compiler and flags (issue 38).
    from gmp import _native

    assert provenance["cpu_map"] == {"notebook": _native.describe(), "workers": None}
    assert provenance["cpu_map"]["notebook"]["map"] == "compiled" and provenance["cpu_map"]["notebook"]["flags"]
    results.code_fingerprint.cache_clear()  # today's code is the files now, as the kernel read them (not at our start)
    described = results.cached("fake_chapter", "summary", "smoke").describe()
    assert "1 of them by code that differs from the run's in experiments/chen_levy.py" in described
    assert "The code of the gmp modules has not changed since this run finished." in described  # not "unchanged" beside
    assert "unchanged" not in described  # "1 of them by code that differs", which would read as a contradiction


MEMO_UNITS = """
from gmp import config, results
store = results.Store('fake_chapter', config.Config('fake_chapter', SCALE, {'n': 1}))
for key, curve in (('a', [1.0, 2.0]), ('b', [3.0, float('nan')])):
    store.memo(f'{key}-{SEED}', lambda curve=curve: {'curve': curve, 'seconds': 1.0})
store.save('summary', {'done': True})
"""


def _with_units(values):
    """Give the fake chapter a ``units`` function whose unit ``<key>-<seed>`` computes ``values[key]`` now."""
    calls = []

    def units(cfg, store, seed, device):
        assert store.scratch("x") is None and cfg["n"] == 1  # no checkpoint to resume from; the run's config

        def unit(key):
            calls.append((key, seed))
            return {"curve": list(values[key]), "seconds": time.time()}

        return {f"{key}-{seed}": (lambda key=key: unit(key)) for key in values}

    sys.modules["gmp.experiments.fake_chapter"].units = units
    return calls


def test_verify_recomputes_a_cached_unit_and_reports_whether_it_matches(book, capsys):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", MEMO_UNITS)
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--verify"])
    assert "does not split into independent units to recompute, so --verify has nothing to check" \
        in capsys.readouterr().err
    values = {"a": [1.0, 2.0], "b": [3.0, float("nan")]}
    calls = _with_units(values)
    final = runs.run("fake_chapter", "smoke", device="cpu", seed=7, root=book)
    assert "units.jsonl.gz" in json.loads((final / "provenance.json").read_text())["payload_sha256"]
    results.code_fingerprint.cache_clear()  # today's code is the files now, as the kernel read them (not at our start)
    capsys.readouterr()
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "unit 'a-7' of fake_chapter at smoke scale, cached by the run of" in out and out.endswith("matches\n")
    assert "computed by today's code" in out
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--unit", "b-7"]) == 0  # NaN matches NaN
    assert calls == [("a", 7), ("b", 7)]
    values["a"] = [1.0, 2.1]
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify"]) == 1
    assert "DIFFERS in 1 places:\n  value['curve'][1]: cached 2.0, recomputed 2.1" in capsys.readouterr().out
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--rtol", "0.1"]) == 0
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--unit", "c-7"])
    assert "unit 'c-7' of fake_chapter (seed 7) is not cached by the run of" in capsys.readouterr().err
    (final / "units.jsonl.gz").write_bytes(b"edited")
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--verify"])
    assert "sha256 mismatch" in capsys.readouterr().err


GOOD_UNIT = b'{"key": "a-7", "value": {"curve": [1.0, 2.0]}}\n'


@pytest.mark.parametrize("provenance, units, message", [
    ([1, 2], GOOD_UNIT, "provenance.json is not a provenance record (it holds a list)"),
    ({"seed": 7}, GOOD_UNIT, "provenance.json records no config"),
    ({"config": {"n": 1}, "seed": "7"}, GOOD_UNIT, "provenance.json records the seed '7'"),
    ({"config": {"n": 1}, "seed": 7, "payload_sha256": [1]}, GOOD_UNIT, "its payload_sha256 is not an object"),
    ({"config": {"n": 1}, "seed": 7}, b"not gzip", "units.jsonl.gz is not a readable gzip file"),
    ({"config": {"n": 1}, "seed": 7}, None, "units.jsonl.gz is not a readable gzip file"),  # a cut gzip stream
    ({"config": {"n": 1}, "seed": 7}, GOOD_UNIT + b'{"key": "b-7", "va', "units.jsonl.gz, line 2: not JSON"),
    ({"config": {"n": 1}, "seed": 7}, GOOD_UNIT + b'[1]\n', "units.jsonl.gz, line 2: not a journal entry"),
    ({"config": {"n": 1}, "seed": 7}, b'{"key": "a-7", "value": 1, "code": ["x"]}\n', "its 'code' is a list"),
    ({"config": {"n": 1}, "seed": 7}, b"\xff\n", "units.jsonl.gz, line 1: not UTF-8"),
])
def test_verify_of_a_damaged_cache_names_the_file_and_the_damage(book, capsys, provenance, units, message):
    _with_units({"a": [1.0, 2.0]})
    folder = book / "book" / "_results" / "fake_chapter" / "smoke"
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text(json.dumps(provenance))
    data = gzip.compress(GOOD_UNIT * 50)[:-20] if units is None else units if units == b"not gzip" else gzip.compress(units)
    (folder / "units.jsonl.gz").write_bytes(data)
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--device", "cpu"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and str(folder) in err and "Traceback" not in err


def test_verify_recomputes_a_unit_of_an_unfinished_run_from_its_journal(book, monkeypatch, capsys):
    cfg = config.load("fake_chapter", "smoke")
    monkeypatch.setenv(results.STAGING_ENV, str(book / "book" / "_results" / "fake_chapter" / ".staging-smoke-1"))
    results.Store("fake_chapter", cfg).memo("a-0", lambda: {"curve": [0.5], "seconds": 9.0})
    calls = _with_units({"a": [0.5 + 1e-9]})
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify"]) == 0
    assert "journalled in" in capsys.readouterr().out and calls == [("a", 0)]
    assert os.environ[results.STAGING_ENV].endswith(".staging-smoke-1")  # restored after the recomputation
    assert len(results.journal_entries(results.journal_path("fake_chapter", "smoke", cfg.digest))) == 1  # not journalled


def test_compare_reports_each_difference_and_leaves_timings_out():
    cached = {"x": [1.0, None, "a"], "n": 3, "wall_s": 1.0, "seconds": 2.0, "only": 1}
    fresh = {"x": [1.0 + 1e-7, 1.0, "b"], "n": 3, "wall_s": 9.0, "seconds": 5.0, "new": 2}
    assert verification.compare(cached, fresh, rtol=1e-5, atol=0) == [
        "value['new']: only in the recomputed value", "value['only']: only in the cached value",
        "value['x'][1]: cached None, recomputed 1.0", "value['x'][2]: cached 'a', recomputed 'b'"]
    assert verification.compare([1, 2], [1], 0, 0) == ["value: 2 entries cached, 1 recomputed"]
    assert verification.compare(True, 1, 1, 1) == ["value: cached True, recomputed 1"]


@pytest.mark.parametrize("args, message", [(["--seed", "-5"], "a seed is an integer from 0 to 2**32 - 1"),
                                           (["--seed", "x"], "not an integer"),
                                           (["--device", "meta"], "cannot train or evaluate a network"),
                                           (["--unit", "a-0"], "--unit goes with --verify")])
def test_bad_arguments_are_refused_before_anything_runs(book, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter", "--scale", "smoke", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


NOTEBOOK_CODE = """
from gmp import config, results
store = results.Store('fake_chapter', config.Config('fake_chapter', SCALE, {'n': 1}))
ran = results.code_fingerprint()
other = {**ran['modules'], 'implicit.py': '0' * 16}
results.fingerprint.code_fingerprint = lambda: {'digest': 'other', 'modules': other, 'hash': ran['hash']}  # a worker's code
store.memo('a', lambda: 1)
store.save('summary', {'code': ran})
"""


def test_provenance_names_the_code_the_notebook_ran_and_where_its_units_differ(book, monkeypatch):
    """The runner's own fingerprint (taken at launch, here a stand-in) is not what the notebook ran: the
    provenance names the notebook's code, and says which units another code computed and where."""
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", NOTEBOOK_CODE)
    real = results.code_fingerprint
    launched = {**real(), "digest": "launch-time"}
    monkeypatch.setattr(results, "code_fingerprint", lambda: launched)
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    provenance = json.loads((final / "provenance.json").read_text())
    ran = json.loads((final / "summary.json").read_text())["code"]
    assert provenance["code"] == ran and provenance["code_of"] == "the notebook"
    assert provenance["units_code"] == {"other_code_units": 1, "code_not_recorded_units": 0,
                                        "changed_modules": ["implicit.py"]}
    monkeypatch.setattr(results, "code_fingerprint", real)
    described = results.cached("fake_chapter", "summary", "smoke").describe()
    assert "Of the units this run used, 1 by code that differs from the notebook's in implicit.py." in described
    assert not list(final.glob(".code")) and not list(final.glob(".used"))  # read into provenance, not cached


LOCKED = """
import fcntl, json, os, pathlib
staging = pathlib.Path(os.environ["GMP_RESULTS_STAGING"])
lock = staging.parent / "_partial" / f"{SCALE}-{DIGEST}" / "run.lock"
with open(lock, "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = False
    except BlockingIOError:
        held = True
(staging / "summary.json").write_text(json.dumps({"held": held}))
"""


@pytest.mark.skipif(runs._results.fcntl is None, reason="POSIX file locks")
def test_one_run_of_a_chapter_and_config_at_a_time(book):
    """Two runners sharing a journal each deleted the other's units (a cache without units.jsonl.gz): a run
    holds its journal's lock throughout, and a second one is refused before it starts."""
    digest = config.load("fake_chapter", "smoke").digest
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", LOCKED.replace("{DIGEST}", digest))
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    assert json.loads((final / "summary.json").read_text()) == {"held": True}
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    with runs.run_lock(journal):
        with pytest.raises(ValueError, match=rf"another gmp.runs of this chapter with the same config is running "
                                             rf"\(pid {os.getpid()} on .*\): two runs would share one journal"):
            runs.run("fake_chapter", "smoke", device="cpu", root=book)
    assert not (final.parent / "_partial").exists()  # the lock leaves nothing behind


def test_a_run_with_another_seed_resumes_caches_and_removes_only_its_own_units(book):
    """Interrupted with seed 0 after 3 units, then run with seed 1: nothing of seed 0 is counted as resumed
    or cached, and its units stay journalled for the seed-0 rerun, which resumes them."""
    _with_units({"a": [1.0], "b": [2.0], "c": [3.0]})
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", MEMO_UNITS)
    digest = config.load("fake_chapter", "smoke").digest
    journal = book / "book" / "_results" / "fake_chapter" / "_partial" / f"smoke-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    today = results.code_fingerprint()
    code = {"modules": today["modules"], "hash": today["hash"]}  # on the first entry of that code only
    journal.write_text("".join(json.dumps({"key": f"{k}-0", "value": {"curve": [0.5], "seconds": 1.0}, "seconds": 5.0,
                                           "code": today["digest"], **(code if k == "a" else {})}) + "\n"
                               for k in ("a", "b", "x")))
    final = runs.run("fake_chapter", "smoke", device="cpu", seed=1, root=book)
    provenance = json.loads((final / "provenance.json").read_text())
    assert provenance["resumed_units"] == 0 and provenance["resumed_seconds"] == 0
    cached = [json.loads(line) for line in gzip.decompress((final / "units.jsonl.gz").read_bytes()).splitlines()]
    assert sorted(e["key"] for e in cached) == ["a-1", "b-1"]
    left = results.journal_entries(journal)
    assert [e["key"] for e in left] == ["a-0", "b-0", "x-0"]
    assert results.journal_code(left) == {today["digest"]: (today["modules"], today["hash"])}  # kept with the units
    final = runs.run("fake_chapter", "smoke", device="cpu", seed=0, root=book)
    provenance = json.loads((final / "provenance.json").read_text())
    assert (provenance["resumed_units"], provenance["resumed_seconds"]) == (2, 10.0)
    assert [e["key"] for e in results.journal_entries(journal)] == ["x-0"]  # used by neither run


@pytest.mark.parametrize("args, message", [
    (["--verify", "--rtol", "inf"], "a tolerance is a finite number >= 0, got 'inf'"),
    (["--verify", "--atol", "nan"], "a tolerance is a finite number >= 0, got 'nan'"),
    (["--verify", "--rtol", "-0.1"], "a tolerance is a finite number >= 0, got '-0.1'"),
    (["--rtol", "1e-3"], "--rtol goes with --verify"),
    (["--atol", "1e-3"], "--atol goes with --verify"),
])
def test_verify_tolerances_must_be_finite_non_negative_and_go_with_verify(book, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter", "--scale", "smoke", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError, match="rtol and atol must be finite numbers >= 0"):
        verification.verify("fake_chapter", "smoke", rtol=float("inf"))


def test_the_scale_must_be_given_since_the_paper_scale_takes_hours(book, capsys):
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter"])
    assert exit_.value.code == 2 and "the following arguments are required: --scale" in capsys.readouterr().err


def test_verify_of_a_cache_whose_units_were_deleted_says_they_are_missing_and_how_to_restore(book, capsys):
    _with_units({"a": [1.0, 2.0]})
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", MEMO_UNITS)
    final = runs.run("fake_chapter", "smoke", device="cpu", root=book)
    (final / "units.jsonl.gz").unlink()
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter", "--scale", "smoke", "--verify"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{final / 'units.jsonl.gz'} is missing: the run wrote it" in err
    assert "git checkout --" in err and "before gmp.runs kept them" not in err


def test_verify_recomputes_with_the_thread_count_the_unit_was_computed_with(book, monkeypatch, capsys):
    """A unit computed by a one-thread worker and verified in a two-thread process differed (sums split over
    threads round differently): the recomputation uses the recorded count, and says so."""
    import torch

    cfg = config.load("fake_chapter", "smoke")
    monkeypatch.setenv(results.STAGING_ENV, str(book / "book" / "_results" / "fake_chapter" / ".staging-smoke-1"))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        results.Store("fake_chapter", cfg).memo("a-0", lambda: {"threads": torch.get_num_threads()})
    finally:
        torch.set_num_threads(1)

    def units(cfg, store, seed, device):
        return {"a-0": lambda: {"threads": torch.get_num_threads()}}

    sys.modules["gmp.experiments.fake_chapter"].units = units
    try:
        assert runs.main(["fake_chapter", "--scale", "smoke", "--verify"]) == 0
        assert "with 3 threads as it was computed" in capsys.readouterr().out
        assert torch.get_num_threads() == 1  # restored
    finally:
        torch.set_num_threads(before)


def test_a_successful_rerun_removes_the_notebook_of_the_failed_run(book):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE + "\nraise RuntimeError('diverged on purpose')")
    with pytest.raises(Exception, match="diverged on purpose"):
        runs.run("fake_chapter", "smoke", device="cpu", root=book)
    failed = book / "book" / "_results" / "fake_chapter" / "_partial" / "failed-smoke-fake_chapter.ipynb"
    assert failed.is_file()
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", WRITE)
    runs.run("fake_chapter", "smoke", device="cpu", root=book)
    assert not failed.exists() and not failed.parent.exists()


SLOW_UNITS = """
import time
from gmp import config, results
store = results.Store('fake_chapter', config.Config('fake_chapter', SCALE, {'n': 1}))
for i in range(200):
    store.memo(f'u{i}', lambda: time.sleep(0.2) or 1)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("when", ["as the staging folder appears", "after two units"])
def test_sigterm_of_a_runner_removes_its_staging_folder_and_stops_its_kernel(book, when):
    _notebook(book / "book" / "part9" / "fake_chapter.ipynb", SLOW_UNITS)
    script = ("import sys, types; from gmp import config, runs\n"
              "m = types.ModuleType('gmp.experiments.fake_chapter'); m.CONFIG = config.scaled(smoke={'n': 1}, "
              "small={'n': 2}, paper={'n': 3}); sys.modules[m.__name__] = m\n"
              f"runs.run('fake_chapter', 'smoke', device='cpu', root=__import__('pathlib').Path({str(book)!r}))\n")
    runner = subprocess.Popen([sys.executable, "-c", script], env={**os.environ})
    digest = config.load("fake_chapter", "smoke").digest
    folder = book / "book" / "_results" / "fake_chapter"
    journal = folder / "_partial" / f"smoke-{digest}.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (list(folder.glob(".staging-*")) if when.startswith("as")
                                          else len(results.journal_entries(journal)) >= 2):
        time.sleep(0.01)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) != 0
    journalled = len(results.journal_entries(journal))
    time.sleep(2)
    assert len(results.journal_entries(journal)) == journalled < 200  # the kernel journals no more
    assert not list(folder.glob(".staging-*"))


def test_workers_on_a_cuda_device_spread_over_the_gpus_and_share_where_there_are_fewer(book, monkeypatch, capsys):
    assert runs.worker_devices("cuda", 3, 1) == ["cuda:0"] * 3
    assert runs.worker_devices("cuda", 3, 2) == ["cuda:0", "cuda:1", "cuda:0"]
    assert runs.worker_devices("auto", 2, 2) == ["cuda:0", "cuda:1"]
    assert runs.worker_devices("cuda:1", 2, 2) == ["cuda:1", "cuda:1"]
    assert runs.worker_devices("auto", 2, 0) == ["auto", "auto"] and runs.worker_devices("cpu", 2, 1) == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="needs a CUDA device, and this machine has none"):
        runs.worker_devices("cuda", 2, 0)
    started = []
    monkeypatch.setattr(runs, "_cuda_devices", lambda: 1)
    monkeypatch.setattr(runs.subprocess, "Popen", lambda command, env: started.append(command) or
                        types.SimpleNamespace(wait=lambda: 0, terminate=lambda: None))
    monkeypatch.setenv(results.STAGING_ENV, str(book / "staging"))
    runs.prefill("sbsnn_fitting", "smoke", jobs=2, device="cuda")
    assert [c[c.index("--device") + 1] for c in started] == ["cuda:0", "cuda:0"]
    assert "2 workers on 1 GPU(s): 2 share cuda:0" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _recorded_code_as_today(monkeypatch):
    """The code a fake cache records (a module hashed "0" * 16 at commit "0" * 40) read back from git as today's
    file: a rewrite that changed no function (:func:`gmp.verification._source_at`)."""
    monkeypatch.setattr(verification, "_source_at",
                        lambda root, commit, module, recorded: (results.fingerprint.PACKAGE / module).read_bytes())


def _cache_with_units(book, values, threads=1):
    """A smoke-scale cache of the fake chapter as gmp.runs writes it, keeping the units ``<key>-7`` with
    ``values[key]``, computed by a code whose results/store.py differs from today's (as after a refactor)."""
    folder = book / "book" / "_results" / "fake_chapter" / "smoke"
    folder.mkdir(parents=True)
    ran = {**results.code_fingerprint(), "digest": "ran"}
    ran["modules"] = {**ran["modules"], "results/store.py": "0" * 16}
    entries = [{"key": f"{key}-7", "value": {"curve": list(value), "seconds": 9.0}, "seconds": 9.0, "code": "ran",
                "threads": threads} for key, value in values.items()]
    entries[0] |= {"modules": ran["modules"], "hash": ran["hash"]}
    (folder / "summary.json").write_text(json.dumps({"done": True}))
    (folder / runs.UNITS_FILE).write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in entries).encode()))
    provenance = {"config": {"n": 1}, "config_digest": config.load("fake_chapter", "smoke").digest, "seed": 7,
                  "date": "2026-11-20 00:00 UTC", "code": ran, "payload_sha256": results.payload_hashes(folder),
                  "commit": "0" * 40}
    (folder / "provenance.json").write_text(json.dumps(provenance))
    return folder


def test_a_refactor_that_keeps_every_unit_equal_re_stamps_and_the_page_says_so(book, capsys):
    values = {"a": [1.0, 2.0], "b": [3.0, float("nan")]}
    calls = _with_units(values)
    folder = _cache_with_units(book, values)
    before = results.cached("fake_chapter", "summary", "smoke")
    assert before.code_changed == ("results/store.py",) and "CODE CHANGED since" in before.describe()
    assert "--restamp" in before.describe()  # the cache keeps units, so the page says how to re-stamp it
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 0
    assert calls == [("a", 7), ("b", 7)]
    assert "re-stamped the smoke-scale cache of fake_chapter: on " in capsys.readouterr().out
    evidence = json.loads((folder / "provenance.json").read_text())["restamps"][-1]
    assert evidence["code"] == results.code_fingerprint() and evidence["units"] == evidence["of"] == 2
    assert evidence["keys"] == ["a-7", "b-7"] and evidence["sample"] is None and evidence["largest_difference"] is None
    assert evidence["tolerance"] == {"a-7": [0.0, 0.0], "b-7": [0.0, 0.0]}
    assert {"date", "commit", "device", "command"} <= set(evidence)
    after = results.cached("fake_chapter", "summary", "smoke")
    assert after.current and after.code_changed == () and after.restamp == evidence
    text = after.describe()
    assert "CODE CHANGED" not in text and "The code was refactored since this run (in results/store.py) and re-verified: on " \
        in text and "2 of its 2 units, all of them (a-7, b-7) were recomputed" in text
    assert "equal the cached ones bitwise; no number differed." in text
    assert "has not changed since it was re-verified" in text
    assert "Cached smoke-scale run (code refactored since, re-verified)" in after.note().data
    assert results.payload_hashes(folder) == json.loads((folder / "provenance.json").read_text())["payload_sha256"]
    # Code that changes after the re-stamp is flagged against the re-stamp's code, not the run's.
    restamped = json.loads((folder / "provenance.json").read_text())
    restamped["restamps"][-1]["code"]["modules"]["runs.py"] = "1" * 16
    (folder / "provenance.json").write_text(json.dumps(restamped))
    changed = results.cached("fake_chapter", "summary", "smoke")
    assert changed.code_changed == ("runs.py",) and "differ from those of its re-verification" in changed.describe()


def test_a_unit_that_moves_beyond_its_tolerance_refuses_the_re_stamp_and_is_named(book, capsys):
    values = {"a": [1.0, 2.0], "b": [3.0, 4.0]}
    _with_units(values)
    folder = _cache_with_units(book, values)
    unrestamped = (folder / "provenance.json").read_bytes()
    values["b"] = [3.0, 4.0 + 1e-12]  # deterministic by default, so bitwise: a rounding difference refuses
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp"]) == 1
    err = capsys.readouterr().err
    assert "REFUSED: unit 'b-7' of fake_chapter recomputed with today's code differs" in err
    assert "value['curve'][1]: cached 4.0, recomputed 4.000000000001" in err
    assert (folder / "provenance.json").read_bytes() == unrestamped  # nothing recorded
    assert results.cached("fake_chapter", "summary", "smoke").code_changed == ("results/store.py",)
    # A unit that is not deterministic states its tolerance; within it, the re-stamp records the largest difference.
    sys.modules["gmp.experiments.fake_chapter"].unit_tolerance = lambda key: (1e-3, 0.0)
    values["b"] = [3.0, 4.0 * (1 + 1e-2)]
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp"]) == 1
    assert "unit 'b-7'" in capsys.readouterr().err and (folder / "provenance.json").read_bytes() == unrestamped
    values["b"] = [3.0, 4.0 * (1 + 1e-5)]
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp"]) == 0
    largest = results.cached("fake_chapter", "summary", "smoke").restamp["largest_difference"]
    assert largest["unit"] == "b-7" and largest["path"] == "value['curve'][1]"
    assert largest["absolute"] == pytest.approx(4e-5) and largest["relative"] == pytest.approx(1e-5)
    text = results.cached("fake_chapter", "summary", "smoke").describe()
    assert "equal the cached ones within rtol=0.001, atol=0; the largest difference was 4e-05 (relative 1e-05) " \
           "in unit b-7 at value['curve'][1]." in text


def test_a_sampled_re_stamp_covers_every_arm_and_states_its_size_and_seed(book, capsys):
    values = {"a-1": [1.0], "a-2": [2.0], "a-3": [3.0], "b-1": [4.0], "c": [5.0]}
    calls = _with_units(values)
    folder = _cache_with_units(book, values)
    assert [verification.unit_arm("fake_chapter", f"{key}-7") for key in values] == ["a", "a", "a", "b", "c"]
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--sample", "2"])
    assert "a sample of 2 units cannot cover the 3 arms of fake_chapter (a, b, c); give --sample 3" \
        in capsys.readouterr().err
    for seed in range(5):
        chosen = verification.sample_units("fake_chapter", [f"{key}-7" for key in values], 3, seed)
        assert {verification.unit_arm("fake_chapter", key) for key in chosen} == {"a", "b", "c"}
        assert chosen == verification.sample_units("fake_chapter", [f"{key}-7" for key in values], 3, seed)  # seeded
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--sample", "4", "--sample-seed", "3"]) == 0
    evidence = json.loads((folder / "provenance.json").read_text())["restamps"][-1]
    assert evidence["units"] == 4 and evidence["of"] == 5 and evidence["sample"] == {"size": 4, "seed": 3}
    assert len(calls) == 4 and evidence["keys"] == [f"{k}-7" for k, _ in calls]
    assert "4 of its 5 units, a sample drawn with seed 3 to cover every arm" in \
        results.cached("fake_chapter", "summary", "smoke").describe()


@pytest.mark.parametrize("args, message", [
    (["--sample", "2"], "--sample goes with --restamp"), (["--restamp", "--sample", "0"], "at least 1"),
    (["--restamp", "--jobs", "2"], "--restamp recomputes the cache's units with its run's seed"),
])
def test_restamp_arguments_are_checked(book, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        runs.main(["fake_chapter", "--scale", "smoke", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_chapter_without_units_or_with_a_stale_cache_is_not_re_stamped(book, capsys):
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--restamp"])
    assert "does not split into independent units to recompute, so it cannot be re-stamped" in capsys.readouterr().err
    _with_units({"a": [1.0]})
    folder = _cache_with_units(book, {"a": [1.0]})
    provenance = json.loads((folder / "provenance.json").read_text())
    (folder / "provenance.json").write_text(json.dumps({**provenance, "config_digest": "other"}))
    with pytest.raises(SystemExit):
        runs.main(["fake_chapter", "--scale", "smoke", "--restamp"])
    assert "cache of fake_chapter is stale" in capsys.readouterr().err


def test_verify_names_the_code_of_a_unit_whose_fingerprint_another_entry_carries(book, capsys):
    """A cache names each code's modules once, on its first unit: a later unit of the same code was said to
    have no code fingerprint recorded."""
    _with_units({"a": [1.0], "b": [2.0]})
    _cache_with_units(book, {"a": [1.0], "b": [2.0]})
    assert runs.main(["fake_chapter", "--scale", "smoke", "--verify", "--unit", "b-7"]) == 0
    out = capsys.readouterr().out
    assert "(computed by code that differs from today's in results/store.py)" in out and "no code fingerprint" not in out


def test_a_cpu_run_records_the_processor_and_the_vector_instructions_its_kernels_use():
    """Two processors can round the same sums differently (a chaotic fit then ends elsewhere), so a CPU run's
    provenance names the processor and torch's CPU capability beside the machine and its cores."""
    import torch

    from gmp.provenance import describe_device, processor

    text = describe_device(torch.device("cpu"))
    assert text.startswith("cpu (") and text.endswith(f", {torch.backends.cpu.get_cpu_capability()})")
    assert f"{os.cpu_count()} cores" in text and (processor() in text)


TOY_TESTS = """import pytest


def test_same():
    from gmp import a

    assert a.f(1) == 2


def test_unrelated():
    assert True


def test_moved():
    assert 1 + 1 == 3


def test_skipped():
    pytest.skip("needs a GPU")
"""


@pytest.fixture
def vouching(tmp_path, monkeypatch):
    """A repository with a gmp of three modules committed, a cache that recorded them, tests to name as evidence
    and an empty gmp/same_function.json, in place of the real ones."""
    repo = tmp_path / "repo"
    package = repo / "gmp"
    (repo / "tests").mkdir(parents=True)
    package.mkdir()
    (repo / "_toc.yml").write_text("root: intro\n")
    for name, text in {"__init__.py": "", "a.py": "def f(x):\n    return x + 1\n", "helper.py": "def g(x):\n    return x\n",
                       "verification.py": ""}.items():
        (package / name).write_text(text)
    (repo / "tests" / "test_toy.py").write_text(TOY_TESTS)
    for command in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "gmp"]):
        subprocess.run(["git", *command], cwd=repo, check=True)
    monkeypatch.setattr(results.fingerprint, "PACKAGE", package)
    monkeypatch.setattr(results.fingerprint, "SAME_FUNCTION_FILE", package / "same_function.json")
    (package / "same_function.json").write_text("[]\n")
    monkeypatch.setenv(results.ROOT_ENV, str(repo / "book" / "_results"))
    modules = results.read_module_hashes(results.CODE_HASH, package)
    cache = repo / "book" / "_results" / "toy" / "paper"
    cache.mkdir(parents=True)
    (cache / "provenance.json").write_text(json.dumps({"code": {"digest": "d", "modules": modules, "hash": "syntax"}}))
    monkeypatch.chdir(repo)
    return repo, package, modules


def test_same_function_runs_the_named_tests_and_writes_the_record_of_a_rewritten_module(vouching, capsys):
    repo, package, ran = vouching
    older = repo / "book" / "_results" / "older" / "paper"  # other code, which the tests do not vouch for
    older.mkdir(parents=True)
    (older / "provenance.json").write_text(json.dumps({"code": {"digest": "e", "modules": {**ran, "a.py": "9" * 16},
                                                               "hash": "syntax"}}))
    (package / "added.py").write_text("def one():\n    return 1\n")
    (package / "a.py").write_text("from gmp import added, helper, verification\n\n\ndef f(x):\n"
                                  "    return helper.g(x) + added.one()\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds through added.one", "--tests",
                      "tests/test_toy.py::test_same"]) == 0
    today = results.read_module_hashes(results.CODE_HASH, package)
    [record] = results.read_same_function(package / "same_function.json")
    assert record.module == "a.py" and record.before == ran["a.py"] != today["a.py"]
    assert record.after == {"a.py": today["a.py"], "added.py": today["added.py"]}  # not helper.py (recorded), nor
    assert record.why.startswith("f adds through added.one (vouched on ")           # verification.py (RENDERING)
    assert "the 1 tests of tests/test_toy.py::test_same passed" in record.why
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert f"at commit {head[:12]} with uncommitted changes, against the module at {head[:12]}: " in record.why
    assert f"gmp/a.py as {ran['a.py']} computes the same function as today's code" in capsys.readouterr().out
    # Rewritten again after the record was committed: the record is renewed, not duplicated.
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rewrite"], cwd=repo, check=True)
    (package / "a.py").write_text("from gmp import added, helper\n\n\ndef f(x):\n    return added.one() + helper.g(x)\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds in the other order", "--tests",
                      "tests/test_toy.py::test_same"]) == 0
    [renewed] = results.read_same_function(package / "same_function.json")
    assert renewed.before == ran["a.py"] and renewed.after["a.py"] == results.read_module_hashes(
        results.CODE_HASH, package)["a.py"] != today["a.py"]
    assert renewed.why.startswith(record.why + "; renewed: f adds in the other order (vouched on ")
    # Nothing to vouch for: the module as it was at the commit is today's.
    with pytest.raises(SystemExit):
        runs.main(["--same-function", "a.py", "--why", "x", "--tests", "tests/test_toy.py::test_same", "--since", "HEAD",
                   "--scale", "paper"])
    assert "takes only --why, --tests and --since, not scale" in capsys.readouterr().err


@pytest.mark.parametrize("tests, named", [
    (["tests/test_toy.py::test_same", "tests/test_toy.py::test_moved"], "tests.test_toy::test_moved failure"),
    (["tests/test_toy.py::test_skipped"], "tests.test_toy::test_skipped skipped"),
    (["tests/test_toy.py::test_absent"], "no test was collected"),
])
def test_same_function_refuses_and_writes_nothing_unless_every_named_test_passes(vouching, capsys, tests, named):
    repo, package, ran = vouching
    (package / "a.py").write_text("def f(x):\n    return 1 + x\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests", *tests]) == 1
    err = capsys.readouterr().err
    assert "REFUSED: the tests named as evidence did not all pass" in err and named in err
    assert "nothing is recorded" in err and (package / "same_function.json").read_text() == "[]\n"
    if "test_absent" in tests[0]:
        assert "not found" in err  # pytest's own words for an unknown node id


def test_same_function_leaves_out_the_check_that_records_name_todays_code_which_fails_until_it_renews_one(vouching):
    # Before: naming tests/test_results.py as evidence refused every renewal, since that check fails by design.
    repo, package, ran = vouching
    (repo / "tests" / "test_results.py").write_text("def test_every_same_function_record_names_todays_code():\n"
                                                   "    assert False\n\n\ndef test_other():\n"
                                                   "    from gmp import a\n\n    assert a.f(1) == 2\n")
    (package / "a.py").write_text("def f(x):\n    return 1 + x\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests",
                      "tests/test_results.py"]) == 0
    [record] = results.read_same_function(package / "same_function.json")
    assert "the 1 tests of tests/test_results.py passed" in record.why


def test_same_function_refuses_a_module_that_did_not_change_or_that_no_cache_recorded(vouching, capsys):
    repo, package, ran = vouching
    with pytest.raises(SystemExit):
        runs.main(["--same-function", "a.py", "--why", "x", "--tests", "tests/test_toy.py::test_same"])
    assert "gmp/a.py has not changed since its first commit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runs.main(["--same-function", "a.py", "--why", "x", "--tests", "tests/test_toy.py::test_same", "--since", "HEAD"])
    assert "hashes as today" in capsys.readouterr().err
    (package / "a.py").write_text("def f(x):\n    return 1 + x\n")
    (repo / "book" / "_results" / "toy" / "paper" / "provenance.json").unlink()
    with pytest.raises(SystemExit):
        runs.main(["--same-function", "a.py", "--why", "x", "--tests", "tests/test_toy.py::test_same"])
    assert "nothing to vouch for" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runs.main(["--same-function", "gone.py", "--why", "x", "--tests", "tests/test_toy.py::test_same"])
    assert "'gone.py' is not a module of gmp" in capsys.readouterr().err
    assert (package / "same_function.json").read_text() == "[]\n"


def test_a_record_that_lapsed_because_a_module_it_imports_changed_is_replaced_not_kept_beside_the_new_one(vouching):
    """A record names the modules its module came to import; when one of them changes the record lapses, and vouching
    again for the same earlier code replaces it (a lapsed record left beside fails the check that records name
    today's code)."""
    repo, package, ran = vouching
    (package / "added.py").write_text("def one():\n    return 1\n")
    (package / "a.py").write_text("from gmp import added\n\n\ndef f(x):\n    return x + added.one()\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds through added.one", "--tests",
                      "tests/test_toy.py::test_same"]) == 0
    (package / "added.py").write_text("def one():\n    return 2 - 1\n")
    assert runs.main(["--same-function", "a.py", "--why", "added.one subtracts", "--tests",
                      "tests/test_toy.py::test_same"]) == 0
    today = results.read_module_hashes(results.CODE_HASH, package)
    [record] = results.read_same_function(package / "same_function.json")
    assert record.before == ran["a.py"] and record.after == {"a.py": today["a.py"], "added.py": today["added.py"]}
    assert record.why.startswith("added.one subtracts (vouched on ")


def test_a_second_same_function_while_one_holds_the_records_is_refused_naming_it_and_writes_nothing(vouching, capsys):
    """Issue #48: two --same-function at once each rewrote gmp/same_function.json from what it read, so the first one's
    record was lost; one writes at a time, the other is refused with the holder named."""
    import fcntl

    repo, package, ran = vouching
    (package / "a.py").write_text("def f(x):\n    return 1 + x\n")
    lock = repo / samefunction.VOUCH_LOCK
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242, since now")
        held.flush()
        assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests",
                          "tests/test_toy.py::test_same"]) == 1
    err = capsys.readouterr().err
    assert "another --same-function is writing gmp/same_function.json (pid 4242, since now" in err
    assert (package / "same_function.json").read_text() == "[]\n"
    assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests",
                      "tests/test_toy.py::test_same"]) == 0                      # once it is let go
    assert len(results.read_same_function(package / "same_function.json")) == 1


def test_a_record_lapses_with_the_modules_added_for_its_module_not_with_those_of_a_package_that_replaced_one(tmp_path):
    """``after`` holds the modules that a rewritten module now imports and the old fingerprint lacked; a module
    of a package that took the place of one it recorded (results/ for results.py) counts as changed anyway."""
    package = tmp_path / "gmp"
    (package / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "a.py": "from gmp import added\nfrom gmp.sub import x\n", "added.py": "",
                       "sub/__init__.py": "", "sub/x.py": "from gmp import verification\n", "verification.py": ""}.items():
        (package / name).write_text(text)
    replaced, plain = {"__init__.py": "0", "a.py": "0", "sub.py": "0"}, {"__init__.py": "0", "a.py": "0"}
    assert samefunction._added_imports(package / "a.py", package, [replaced]) == ["added.py"]
    assert samefunction._added_imports(package / "a.py", package, [plain]) == [
        "added.py", "sub/__init__.py", "sub/x.py"]  # and not verification.py, which counts for no chapter
    assert samefunction._added_imports(package / "a.py", package, [replaced, plain]) == [
        "added.py", "sub/__init__.py", "sub/x.py"]  # lacking in one fingerprint is enough


def test_a_re_stamp_is_refused_while_a_run_of_the_chapter_holds_its_lock(book):
    """Issue #48: ``--restamp`` took no lock, so a re-stamp racing a run wrote the old run's provenance into the
    folder the run had just replaced (the new cache then read "corrupt")."""
    values = {"a": [1.0, 2.0], "b": [3.0, 4.0]}
    _with_units(values)
    folder = _cache_with_units(book, values)
    before = (folder / "provenance.json").read_bytes()
    journal = results.journal_path("fake_chapter", "smoke", config.load("fake_chapter", "smoke").digest)
    with runs.run_lock(journal):
        with pytest.raises(ValueError, match=rf"another gmp.runs .*\(pid {os.getpid()} on "):
            verification.restamp("fake_chapter", "smoke", device="cpu")
    assert (folder / "provenance.json").read_bytes() == before
    assert verification.restamp("fake_chapter", "smoke", device="cpu")["units"] == 2  # once the run has ended
    assert not journal.parent.exists()  # the lock's folder goes with it


def test_a_kernel_whose_runner_was_killed_journals_nothing_more(book, monkeypatch):
    """Issue #48: after ``kill -9`` of the runner, its orphaned kernel went on journalling units without the run's
    lock (2 lines became 7). A process under a run whose runner (the pid ending its staging folder's name) has
    ended refuses to journal."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    staging = book / "book" / "_results" / "fake_chapter" / f".staging-smoke-{gone.pid}"
    monkeypatch.setenv(results.STAGING_ENV, str(staging))
    store = results.Store("fake_chapter", config.load("fake_chapter", "smoke"))
    with pytest.raises(RuntimeError, match=rf"the gmp.runs that started this process \(pid {gone.pid}, .*journals "
                                           "nothing more"):
        store.memo("a-0", lambda: 1)
    assert results.journal_entries(store._journal_path) == []
    monkeypatch.setenv(results.STAGING_ENV, str(staging.with_name(f".staging-smoke-{os.getpid()}")))
    assert results.Store("fake_chapter", config.load("fake_chapter", "smoke")).memo("a-0", lambda: 1) == 1


def test_a_relative_gmp_data_and_gmp_kernels_reach_the_kernel_resolved_from_where_the_run_started(book, monkeypatch):
    """Issue #48: a relative ``GMP_DATA`` was resolved from the notebook's folder (``book/part1``), failed, and created
    ``book/shared/data/`` inside the repository; a relative ``GMP_KERNELS`` made every build fail."""
    seen = {}

    def execute_notebook(source, target, cwd, **kwargs):
        seen.update({name: os.environ.get(name) for name in ("GMP_DATA", "GMP_KERNELS")}, cwd=cwd)

    monkeypatch.chdir(book)
    monkeypatch.setenv("GMP_DATA", "../shared/data")
    monkeypatch.setenv("GMP_KERNELS", "kernels")
    notebook = book / "book" / "part9" / "fake_chapter.ipynb"
    runs._execute("fake_chapter", "smoke", "cpu", 0, "python3", 1, notebook, book / "staging",
                  types.SimpleNamespace(execute_notebook=execute_notebook))
    assert seen == {"GMP_DATA": str(book.parent / "shared" / "data"), "GMP_KERNELS": str(book / "kernels"),
                    "cwd": str(notebook.parent)}
    assert os.environ["GMP_DATA"] == "../shared/data"  # the runner's own environment is set back
    from gmp.data import _fetch
    assert _fetch.data_root() == book.parent / "shared" / "data"


def test_a_re_stamp_vouches_only_for_changed_code_that_its_units_ran(book, capsys, monkeypatch):
    """Issue #48: a change to a function the notebook calls outside the units (``band_limited_psnr`` adding 3 dB)
    re-stamped, since every unit was bitwise equal, and the page said the code was re-verified. Each function that
    changed since the cache must have run in a recomputed unit, else the re-stamp is refused naming it."""
    values = {"a": [1.0, 2.0], "b": [3.0, 4.0]}
    _with_units(values)
    units = sys.modules["gmp.experiments.fake_chapter"].units
    sys.modules["gmp.experiments.fake_chapter"].units = lambda *args: {  # each unit calls config.digest_of
        key: (lambda compute=compute: {**compute(), "digest": config.digest_of({"n": 1})})
        for key, compute in units(*args).items()}
    folder = _cache_with_units(book, values)
    entries = [json.loads(line) for line in gzip.decompress((folder / runs.UNITS_FILE).read_bytes()).splitlines()]
    for entry in entries:
        entry["value"]["digest"] = config.digest_of({"n": 1})
    (folder / runs.UNITS_FILE).write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in entries).encode()))
    provenance = json.loads((folder / "provenance.json").read_text())
    provenance["code"]["modules"]["config.py"] = "1" * 16
    provenance["payload_sha256"] = results.payload_hashes(folder)
    (folder / "provenance.json").write_text(json.dumps(provenance))
    before = (folder / "provenance.json").read_bytes()
    today = (results.fingerprint.PACKAGE / "config.py").read_text()

    def recorded(changed):
        monkeypatch.setattr(verification, "_source_at", lambda root, commit, module, digest: (
            changed if module == "config.py" else (results.fingerprint.PACKAGE / module).read_text()).encode())

    recorded(today.replace("    @property\n    def scale(self) -> str:\n        return self._scale",
                           "    @property\n    def scale(self) -> str:\n        return str(self._scale)"))
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert ("REFUSED: code of fake_chapter that changed since its cache ran in none of the 2 units recomputed: "
            "gmp/config.py: Config.scale; it may compute the payloads outside the units") in err
    assert (folder / "provenance.json").read_bytes() == before
    recorded(today + "\nCOMPUTED = 0\n")  # module-level code changed
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 1
    assert "gmp/config.py's module-level code (constants, class attributes)" in capsys.readouterr().err
    monkeypatch.setattr(verification, "_source_at", lambda root, commit, module, digest: None)  # not in git
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 1
    assert "gmp/config.py (its code at the run, commit 000000000000, is not in git)" in capsys.readouterr().err
    recorded(today.replace("    text = json.dumps(values, sort_keys=True", "    text = json.dumps(dict(values), sort_keys=True"))
    assert runs.main(["fake_chapter", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 0  # the units ran it


def test_same_function_takes_as_evidence_only_a_test_that_runs_the_rewritten_code(vouching, capsys):
    """Issue #48: ``--same-function MODULE --tests NODEID`` accepted any passing test as evidence, even one that never
    touches the module (``assert True``). A test is evidence only where it runs a line of a rewritten function
    (traced), and the record says which tests did."""
    repo, package, ran = vouching
    (package / "a.py").write_text("def f(x):\n    return 1 + x\n\n\ndef unused(x):\n    return x\n")
    assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests",
                      "tests/test_toy.py::test_unrelated"]) == 1
    err = capsys.readouterr().err
    assert ("REFUSED: none of the 1 tests that passed ran the rewritten functions f, unused of gmp/a.py: a test is "
            "evidence only for code it runs") in err
    assert (package / "same_function.json").read_text() == "[]\n"
    assert runs.main(["--same-function", "a.py", "--why", "f adds the other way round", "--tests",
                      "tests/test_toy.py::test_unrelated", "tests/test_toy.py::test_same"]) == 0
    [record] = results.read_same_function(package / "same_function.json")
    assert ("the 2 tests of tests/test_toy.py::test_unrelated, tests/test_toy.py::test_same passed, and 1 of them ran "
            "the rewritten functions f, unused of gmp/a.py (tests/test_toy.py::test_same)") in record.why


def test_a_record_names_a_parametrized_test_once_with_its_cases_not_its_parameter_ids():
    """A record's tests are shown on every page whose cache it vouches for: a parameter id is any text (a shell
    command's ``kill -9 $$`` was one), which the page rendered as TeX delimiters, so a record names a parametrized
    test once with its number of cases."""
    assert samefunction.test_names(["t.py::a[kill -9 $$]", "t.py::a[exit 1]", "t.py::b", "t.py::c[0]", "t.py"]) == (
        "t.py::a (2 cases), t.py::b, t.py::c (1 case), t.py")
    for record in results.SAME_FUNCTION:
        assert "$" not in record.why and not re.search(r"::\w+\[", record.why), record.why


def test_same_function_takes_the_import_as_evidence_for_a_module_of_module_level_code_alone(vouching, capsys):
    """A module with no function (a package's ``__init__.py``: imports, ``__all__``) whose module-level code changed
    is run by importing it: a passing test that imports it is evidence; one that never does is not."""
    repo, package, ran = vouching
    (package / "__init__.py").write_text("from gmp import a\n\n__all__ = ['a']\n")
    assert runs.main(["--same-function", "__init__.py", "--why", "the package exports a", "--tests",
                      "tests/test_toy.py::test_unrelated"]) == 1
    assert "a function of gmp/__init__.py (the rewrite changed no function, only module-level code)" in \
        capsys.readouterr().err
    assert runs.main(["--same-function", "__init__.py", "--why", "the package exports a", "--tests",
                      "tests/test_toy.py::test_same"]) == 0
    [record] = results.read_same_function(package / "same_function.json")
    assert record.module == "__init__.py" and record.before == ran["__init__.py"]
