"""``python -m gmp.gpu`` against what the GPU machine holds and gives back: chapter code run as under a
plain ``python`` without IPython (the packages the GPU image lacks blocked: ``tests/gpu_image``), and
what comes back from ``OUT`` within the machine's limits."""

import json
import os
from pathlib import Path

import pytest

from gmp import gpu

GPU_IMAGE = Path(__file__).resolve().parent / "gpu_image"
"""A folder whose ``sitecustomize`` blocks the packages the GPU image lacks, in every process started with it
on ``PYTHONPATH``."""


def _notebook(path: Path, cells: list[str]) -> Path:
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": source} for source in cells],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_chapter_code_runs_where_ipython_is_absent(tmp_path, monkeypatch):
    """pyplot, gmp's HTML notes and the ``display`` a notebook has run in a process that cannot import IPython;
    IPython stays absent there (matplotlib asked a stand-in ``IPython`` for ``get_ipython``)."""
    monkeypatch.setenv("PYTHONPATH", str(GPU_IMAGE))
    notebook = _notebook(tmp_path / "chapter.ipynb", [
        "import sys\n\nimport matplotlib.pyplot as plt\n\nimport gmp",
        "plt.plot([0, 1], [1, 0])\nplt.show()",
        "display(gmp.results.verdict_box('lu_gpn'))\ndisplay(gmp.results.cached('lu_gpn', 'gpn').note())",
        "assert 'IPython' not in sys.modules\ntry:\n    import IPython\nexcept ImportError:\n    pass\nelse:\n"
        "    raise AssertionError('IPython imported')"])
    result = gpu.run_chapter(notebook, "smoke", "cpu", 120)
    assert result["ok"], result["output_tail"]


def test_what_the_command_leaves_under_out_is_within_the_return_limits(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "_partial").mkdir(parents=True)
    for name in ("gpu.json", "a/_partial/smoke-0.jsonl"):
        (out / name).write_text("{}")
    assert gpu.return_problems(out) == []
    (out / "a" / "_partial" / "smoke-0").mkdir()
    (out / "a" / "_partial" / "smoke-0" / "unit.pt").write_bytes(b"")
    (out / "a b.json").write_bytes(b"x" * (gpu.RETURN_BYTES + 1))
    for i in range(6):
        (out / f"{i}.json").write_text("")
    assert gpu.return_problems(out) == [
        "10 files, more than 8", "a/_partial/smoke-0/unit.pt: 3 folders below OUT, more than 2",
        "a b.json: 16,777,217 bytes, more than 16 MiB",
        "a b.json: a name with characters other than letters, digits, '.', '_' and '-'"]


def test_within_return_limits_folds_the_reports_then_removes_checkpoints_too_big_or_too_many(tmp_path):
    """The journals of lu_real and of the five chapters of the second job, a unit's checkpoint, the two reports and
    the summary are ten files: the reports are folded into the summary, and the journals and the checkpoint come
    back; of two checkpoints the last by name is removed, and one over 16 MiB always."""
    out = tmp_path / "out"
    environment = {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}
    gpu.files.write_json(out / "gpu.json", environment)
    (out / "smoke.jsonl").write_text('{"chapter": "lu_gpn", "ok": true}\n{"tests": "cuda", "rc": 0}\n')
    for chapter in ("lu_real", *gpu.UNIT_CHAPTERS):
        (out / chapter / "_partial").mkdir(parents=True)
        (out / chapter / "_partial" / "paper-0.jsonl").write_text("")
    (out / "sbsnn_gap" / "_partial" / "paper-0.full-0.pt").write_bytes(b"")
    summary = {"environment": environment}
    gpu.files.write_json(out / "summary.json", summary)
    assert gpu.files.within_return_limits(out, summary) == []
    assert summary == {"environment": environment, "smoke_log": [{"chapter": "lu_gpn", "ok": True},
                                                                 {"tests": "cuda", "rc": 0}],
                       "folded": {"smoke.jsonl": "smoke_log", "gpu.json": "environment"}}
    gpu.files.write_json(out / "summary.json", summary)
    assert gpu.return_problems(out) == [] and sum(p.is_file() for p in out.rglob("*")) == gpu.RETURN_FILES
    (out / "sbsnn_gap" / "_partial" / "paper-0.siren-0.pt").write_bytes(b"")
    (out / "sbsnn_gap" / "_partial" / "paper-0.big-0.pt").write_bytes(b"x" * (gpu.RETURN_BYTES + 1))
    assert gpu.files.within_return_limits(out, summary) == ["sbsnn_gap/_partial/paper-0.big-0.pt: over 16 MiB",
                                                            "sbsnn_gap/_partial/paper-0.siren-0.pt: more than 8 files"]
    assert gpu.return_problems(out) == [] and (out / "sbsnn_gap" / "_partial" / "paper-0.full-0.pt").is_file()


def test_a_unit_checkpoints_under_the_name_that_keep_returned_and_merge_look_for(tmp_path, monkeypatch):
    """``scratch_stem`` names each unit's checkpoint as ``Store.scratch`` does for every chapter of the second job
    (``fig6-sin/nerf-0`` checkpoints in ``fig6-sin_nerf-0.pt``), so that a journalled unit's checkpoint is known as
    such (it was taken for another unit's before)."""
    from gmp import results

    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "staging"))  # as under a run: the store has a journal
    store = results.Store("sbsnn_encoders", gpu.unit_config("sbsnn_encoders", "smoke"))
    for chapter in gpu.UNIT_CHAPTERS:
        for key in gpu.unit_keys(chapter, gpu.unit_config(chapter, "smoke")):
            assert store.scratch(key).stem == gpu.files.scratch_stem(key)
    assert not gpu.files.checkpoint_unjournalled("fig6-sin_nerf-0", {"fig6-sin/nerf-0": {}})
    assert gpu.files.checkpoint_unjournalled("fig6-sin_rotated-0", {"fig6-sin/nerf-0": {}})


def test_merge_reads_each_checkpoint_once(tmp_path, monkeypatch):
    """``merge`` reads a returned checkpoint and the repository's checkpoint of the same unit once each (it read
    the repository's twice: once to compare the epochs, again to say which it kept), and keeps the furthest."""
    import torch

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    digest = gpu.unit_config("sbsnn_author_figs", "smoke").digest
    partial = tmp_path / "out" / "sbsnn_author_figs" / "_partial"
    partial.mkdir(parents=True)
    torch.save({"epoch": 3}, partial / f"smoke-{digest}.fig4seeds-triangle-0.pt")
    repo = tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{digest}" / "fig4seeds-triangle-0.pt"
    repo.parent.mkdir(parents=True)
    torch.save({"epoch": 30}, repo)
    reads = []
    original = torch.load
    monkeypatch.setattr(torch, "load", lambda path, *args, **kwargs: reads.append(Path(path).name) or original(
        path, *args, **kwargs))
    assert gpu.merge(tmp_path / "out") == []
    assert sorted(reads) == ["fig4seeds-triangle-0.pt", f"smoke-{digest}.fig4seeds-triangle-0.pt"]
    assert original(repo)["epoch"] == 30


def test_merge_changes_nothing_when_a_returned_checkpoint_is_damaged(tmp_path, monkeypatch):
    """Everything that came back is checked before the repository changes (issue 38): a damaged checkpoint
    beside a good journal leaves the repository's journal as it was."""
    import torch

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    digest = gpu.unit_config("sbsnn_author_figs", "smoke").digest
    partial = tmp_path / "out" / "sbsnn_author_figs" / "_partial"
    partial.mkdir(parents=True)
    (partial / f"smoke-{digest}.jsonl").write_text(json.dumps({"key": "fig4seeds-sin-0", "value": 1}) + "\n")
    torch.save({"epoch": 4}, partial / f"smoke-{digest}.fig4seeds-triangle-0.pt")
    (partial / f"smoke-{digest}.fig6seeds-sin-nerf-0.pt").write_bytes(b"PK\x03\x04 cut short")
    gpu.files.write_json(tmp_path / "out" / "gpu.json", gpu.environment("cpu"))
    with pytest.raises(ValueError, match="fig6seeds-sin-nerf-0.pt is damaged.*Nothing was merged"):
        gpu.merge(tmp_path / "out")
    assert not (tmp_path / "repo").exists()
    (partial / f"smoke-{digest}.fig6seeds-sin-nerf-0.pt").unlink()
    assert gpu.merge(tmp_path / "out") == ["fig4seeds-sin-0"]
    assert gpu.returned._checkpoint_progress(tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{digest}"
                                 / "fig4seeds-triangle-0.pt") == 4


def test_the_stacked_second_job_probes_and_when_it_fails_leaves_every_unit_to_the_unit_by_unit_path(tmp_path,
                                                                                                      monkeypatch):
    """``compute_units_stacked`` plans a chapter's queued units as one queue; ``probe_only`` predicts its time and
    trains nothing; a stacked fit that fails journals nothing and says so, and ``compute_units`` then computes
    every unit by itself."""
    import time

    from gmp import minibatch_queue, results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    keys = ["fig4seeds-sin-0", "fig6seeds-sin-nerf-0", "fig6seeds-gpn_relu-rotated-0"]
    monkeypatch.setattr(gpu.units, "missing_units", lambda chapter, scale, seed=0: keys)
    out = tmp_path / "out"
    probed = gpu.compute_units_stacked(out, ["sbsnn_author_figs"], "smoke", "cpu", time.monotonic() + 120,
                                       probe_only=True)
    [queue] = probed["queues"]
    assert queue["status"] == "probed only" and queue["networks"] == 3 and queue["groups"] == [[1, 2]]
    assert queue["probe_ms_per_step"] > 0 and queue["predicted_minutes"] > 0 and probed["done"] == {}

    def fail(*args, **kwargs):
        raise RuntimeError("a device error")

    monkeypatch.setattr(minibatch_queue, "fit_jobs", fail)
    failed = gpu.compute_units_stacked(out, ["sbsnn_author_figs"], "smoke", "cpu", time.monotonic() + 120)
    assert failed["queues"][0]["status"].startswith("failed (the units it had not journalled go unit by unit): "
                                                    "RuntimeError: a device error")
    digest = gpu.unit_config("sbsnn_author_figs", "smoke").digest
    assert not (out / "sbsnn_author_figs" / "_partial" / f"smoke-{digest}.jsonl").exists()
    done = gpu.compute_units(out, "sbsnn_author_figs", "smoke", "cpu", time.monotonic() + 120)
    assert list(done["done"]) == keys


def test_the_stacked_second_job_journals_each_unit_as_the_unit_by_unit_path_does(tmp_path, monkeypatch):
    """The units that the stacked fit journals hold the values the unit-by-unit path journals for them (the
    chapter's own code builds both), to float rounding; only the seconds differ."""
    import math
    import time

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    keys = ["fig4seeds-sin-0", "fig6seeds-sin-nerf-0", "fig6seeds-gpn_relu-rotated-0", "sirenschedule-0"]
    monkeypatch.setattr(gpu.units, "missing_units", lambda chapter, scale, seed=0: keys)
    stacked = gpu.compute_units_stacked(tmp_path / "a", ["sbsnn_author_figs"], "smoke", "cpu", time.monotonic() + 120)
    assert list(stacked["done"]) == [f"sbsnn_author_figs/{key}" for key in keys] and stacked["not_stacked"] == {}
    gpu.compute_units(tmp_path / "b", "sbsnn_author_figs", "smoke", "cpu", time.monotonic() + 120)
    digest = gpu.unit_config("sbsnn_author_figs", "smoke").digest

    def journal(folder):
        return results.journal_entries(tmp_path / folder / "sbsnn_author_figs" / "_partial" / f"smoke-{digest}.jsonl")

    def close(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a if k != "seconds")
        if isinstance(a, list):
            return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-12)
        return a == b

    mine, theirs = journal("a"), journal("b")
    assert [e["key"] for e in mine] == [e["key"] for e in theirs] == keys
    assert [set(e) for e in mine] == [set(e) for e in theirs]
    assert all(close(a["value"], b["value"]) for a, b in zip(mine, theirs))
    changed = json.loads(json.dumps(theirs[0]["value"]))
    changed["fits"][0]["train_mse"][-1] *= 1.001
    assert not close(mine[0]["value"], changed)  # the comparison sees a change of 0.1% in one number


def test_the_units_of_a_chapter_without_units_keys_are_listed_without_computing_any(tmp_path, monkeypatch):
    """``missing_units`` of a full-batch chapter (no ``units_keys``): the keys of its ``units``, whose fits are not
    called and which write nothing, less those the repository's journal holds; the stacked fit refuses it."""
    import time

    from gmp import results
    from gmp.experiments import sbsnn_gap

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "staging"))
    monkeypatch.setattr(sbsnn_gap, "fit_spec", lambda *args, **kwargs: pytest.fail("a fit was computed"))
    assert not hasattr(sbsnn_gap, "units_keys")
    cfg = gpu.unit_config("sbsnn_gap", "smoke")
    keys = [f"{name}-0" for name in ("default", "default+gain", "full", "full+gain", "siren", "siren+scale",
                                     "siren+omega")]
    assert gpu.unit_keys("sbsnn_gap", cfg) == keys == gpu.missing_units("sbsnn_gap", "smoke")
    journal = tmp_path / "repo" / "sbsnn_gap" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"key": "full-0", "value": {}}) + "\n")
    assert gpu.missing_units("sbsnn_gap", "smoke") == [key for key in keys if key != "full-0"]
    assert not (tmp_path / "staging").exists() and os.environ[results.STAGING_ENV] == str(tmp_path / "staging")
    with pytest.raises(ValueError, match="sbsnn_gap: not among gmp.gpu.STACKED_CHAPTERS.*unit by unit"):
        gpu.compute_units_stacked(tmp_path / "out", ["sbsnn_author_figs", "sbsnn_gap"], "smoke", "cpu",
                                  time.monotonic() + 60)
    assert not (tmp_path / "out").exists()


def test_merge_records_the_device_that_computed_each_returned_unit(tmp_path, monkeypatch):
    """Each unit that ``merge`` adds carries the device of ``OUT/gpu.json`` (or of the summary it was folded into);
    the units a CPU run journalled have no such field; without either file nothing is merged."""
    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    digest = gpu.unit_config("sbsnn_gap", "paper").digest
    journal = tmp_path / "repo" / "sbsnn_gap" / "_partial" / f"paper-{digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"key": "default-0", "value": 1, "seconds": 944.0}) + "\n")
    out = tmp_path / "out"
    (out / "sbsnn_gap" / "_partial").mkdir(parents=True)
    (out / "sbsnn_gap" / "_partial" / journal.name).write_text(
        "".join(json.dumps({"key": key, "value": 2, "seconds": 9.0}) + "\n" for key in ("default-0", "full-0")))
    with pytest.raises(ValueError, match="neither gpu.json nor a summary.json.*nothing was merged"):
        gpu.merge(out)
    assert len(results.journal_entries(journal)) == 1
    gpu.files.write_json(out / "summary.json", {"environment": {"device": "cuda:0", "gpu": "NVIDIA H200"}})
    assert gpu.returned_device(out) == "cuda (NVIDIA H200)"
    gpu.files.write_json(out / "gpu.json", {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"})
    assert gpu.merge(out) == ["full-0"]
    entries = results.journal_entries(journal)
    assert [(e["key"], e.get("device")) for e in entries] == [("default-0", None),
                                                              ("full-0", "cuda (NVIDIA H100 80GB HBM3)")]
    assert entries[1]["value"] == 2 and entries[1]["seconds"] == 9.0


SMALL = {"hidden_features": 16, "hidden_layers": 1}
"""A network small enough that a 210-step fit of the smoke scale's image takes a second or two."""


@pytest.mark.parametrize("chapter, key, changes", [
    ("sbsnn_gap", "default-0", {"steps": 210, **SMALL}),
    ("sbsnn_fitting", "sin-0", {"steps": 210, **SMALL}),
    ("sbsnn_encoders", "fig6-sin/nerf-0", {"steps": {"fig6": 210, "fig7": 6}, **SMALL})])
def test_a_full_batch_unit_cut_short_comes_back_and_resumes_to_the_same_fit(tmp_path, monkeypatch, chapter, key,
                                                                             changes):
    """A ``fit_spec`` unit of each full-batch chapter stopped after its checkpoint at step 200: the checkpoint
    comes back beside the journal, ``merge`` puts it where the unit checkpoints (it read only a ``fit_stack``
    epoch before), and the next second job resumes the unit from it to the curves of a fit never stopped."""
    import importlib
    import time

    from gmp import implicit, results

    experiment = importlib.import_module(f"gmp.experiments.{chapter}")
    monkeypatch.setitem(experiment.CONFIG, "smoke", {**experiment.CONFIG["smoke"], **changes})
    monkeypatch.setattr(gpu.units, "missing_units", lambda chapter, scale, seed=0: [key])
    digest = gpu.unit_config(chapter, "smoke").digest
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    written = implicit.atomic_write_bytes

    class Stopped(Exception):
        pass

    def stop(path, data):
        written(path, data)
        raise Stopped(path)  # the deadline: the child process ends right after its checkpoint

    monkeypatch.setattr(implicit, "atomic_write_bytes", stop)
    with pytest.raises(Stopped):
        gpu.compute_units(tmp_path / "cut", chapter, "smoke", "cpu", time.monotonic() + 120)
    monkeypatch.setattr(implicit, "atomic_write_bytes", written)
    gpu.files.keep_returned(tmp_path / "cut" / chapter)
    returned = sorted(p.relative_to(tmp_path / "cut").as_posix() for p in (tmp_path / "cut").rglob("*") if p.is_file())
    name = f"{gpu.files.scratch_stem(key)}.pt"
    assert returned == [f"{chapter}/_partial/smoke-{digest}.{name}"]
    gpu.files.write_json(tmp_path / "cut" / "gpu.json", gpu.environment("cpu"))
    assert gpu.merge(tmp_path / "cut") == []
    assert gpu.returned._checkpoint_progress(tmp_path / "repo" / chapter / "_partial" / f"smoke-{digest}" / name) == 200
    resumed = gpu.compute_units(tmp_path / "resumed", chapter, "smoke", "cpu", time.monotonic() + 120)
    assert resumed["resumed"] == [key] and list(resumed["done"]) == [key]
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "elsewhere"))
    whole = gpu.compute_units(tmp_path / "whole", chapter, "smoke", "cpu", time.monotonic() + 120)
    assert "resumed" not in whole

    def fit(folder):
        [entry] = results.journal_entries(tmp_path / folder / chapter / "_partial" / f"smoke-{digest}.jsonl")
        return {k: v for k, v in entry["value"].items() if k != "seconds"}

    assert fit("resumed") == fit("whole") and len(fit("whole")["mse"]) == 210


def test_a_chapter_without_claims_whose_current_cache_keeps_its_units_misses_none():
    # Before: missing_units read the cache through the chapter's first claim, and sbsnn_gap has none: on the first
    # GPU lease (2026-11-28) its units job failed with an IndexError. The repository's paper cache keeps all 7 units.
    assert gpu.missing_units("sbsnn_gap", "paper") == []


def _returned_journal(tmp_path, monkeypatch, name=None):
    """An OUT of one sbsnn_gap unit journalled on a GPU, as python -m gmp.gpu leaves it; the repository's journal."""
    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    digest = gpu.unit_config("sbsnn_gap", "smoke").digest
    out = tmp_path / "out"
    (out / "sbsnn_gap" / "_partial").mkdir(parents=True)
    (out / "sbsnn_gap" / "_partial" / (name or f"smoke-{digest}.jsonl")).write_text(
        json.dumps({"key": "full-0", "value": 2, "seconds": 9.0}) + "\n")
    gpu.files.write_json(out / "gpu.json", GPU_JSON)
    return out, tmp_path / "repo" / "sbsnn_gap" / "_partial" / f"smoke-{digest}.jsonl"


GPU_JSON = {"device": "cuda", "gpu": "NVIDIA H200", "date": "2026-11-28 16:44:13 UTC"}
"""A returned gpu.json: the device, and the date by which merge keeps the lease's summary."""


def test_merge_refuses_what_it_would_have_merged_nothing_of_in_silence(tmp_path, monkeypatch, capsys):
    """Issue #48: ``merge`` of a mistyped path or of a file printed "added 0 journal entries" and exited 0; a journal
    renamed ``smoke-<digest>.old.jsonl`` was merged into a journal no run reads; a checkpoint a folder too deep
    and summary.json's ``return_problems`` were ignored; a corrupt gpu.json gave a traceback."""
    out, journal = _returned_journal(tmp_path, monkeypatch)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty").mkdir()
    for path, message in ((tmp_path / "missing", "missing is not there"), (tmp_path / "afile", "afile is a file"),
                          (tmp_path / "empty", "empty holds no journal, no checkpoint and neither gpu.json")):
        with pytest.raises(ValueError, match=message):
            gpu.merge(path)
        assert gpu.command.main(["merge", str(path)]) == 1
        assert message in capsys.readouterr().err
    deep = out / "sbsnn_gap" / "_partial" / journal.stem / "full-0.pt"
    deep.parent.mkdir()
    deep.write_bytes(b"x")
    with pytest.raises(ValueError, match=rf"where merge does not read them: sbsnn_gap/_partial/{journal.stem}/full-0.pt"):
        gpu.merge(out)
    deep.unlink()
    deep.parent.rmdir()
    (out / "gpu.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"gpu.json is damaged \(JSONDecodeError.*nothing was merged"):
        gpu.merge(out)
    assert not (tmp_path / "repo").exists()  # nothing changed, not even a folder for the lock
    gpu.files.write_json(out / "gpu.json", GPU_JSON)
    gpu.files.write_json(out / "summary.json", {"return_problems": ["9 files, more than 8"], "left_out": []})
    assert gpu.merge(out) == ["full-0"]
    assert "warning: 9 files, more than 8 (did not come back, summary.json's return_problems)" in capsys.readouterr().out


def test_merge_refuses_a_journal_renamed_with_another_suffix(tmp_path, monkeypatch):
    digest = gpu.unit_config("sbsnn_gap", "smoke").digest
    out, journal = _returned_journal(tmp_path, monkeypatch, name=f"smoke-{digest}.old.jsonl")
    with pytest.raises(ValueError, match=rf"smoke-{digest}.old.jsonl: not a name that gmp.gpu writes"):
        gpu.merge(out)
    assert not journal.exists()


def test_merge_waits_for_the_run_that_holds_the_journal(tmp_path, monkeypatch):
    """Issue #48: ``merge`` wrote into a journal while a run of the chapter held its lock."""
    from gmp import runs

    out, journal = _returned_journal(tmp_path, monkeypatch)
    with runs.run_lock(journal):
        with pytest.raises(ValueError, match=rf"pid {os.getpid()} on .*it holds {journal.with_suffix('')}/run.lock"):
            gpu.merge(out)
        assert not journal.exists()
    assert gpu.merge(out) == ["full-0"]


def test_the_units_form_writes_the_gpu_json_that_merge_reads(tmp_path, monkeypatch):
    """Issue #48: ``python -m gmp.gpu units`` (and ``stacked``) wrote no gpu.json, so their own output could not be
    merged."""
    def nothing(*args):
        """Computes nothing."""

    monkeypatch.setattr(gpu.command, "compute_units", nothing)
    monkeypatch.setattr(gpu.command, "compute_units_stacked", nothing)
    for form, chapter in (("units", gpu.UNIT_CHAPTERS[0]), ("stacked", gpu.STACKED_CHAPTERS[0])):
        out = tmp_path / form
        assert gpu.command.main([form, str(out), chapter, "--device", "cpu", "--seconds", "1"]) == 0
        assert gpu.returned_device(out) == "cpu"


@pytest.mark.parametrize("seconds, message", [("nan", "a NaN or infinite deadline would never stop"),
                                              ("inf", "a NaN or infinite deadline"), ("-5", "a negative one would run"),
                                              ("-inf", "got '-inf' (a NaN or infinite deadline"),
                                              ("0", "seconds > 0, got 0"), ("soon", "a number of seconds, got 'soon'")])
def test_the_gpu_command_refuses_a_deadline_it_cannot_keep(tmp_path, capsys, seconds, message):
    """Issue #48's probe: ``units --seconds nan`` ran with no deadline at all, ``--seconds -5`` ran nothing, both
    exiting 0."""
    for argv in (["units", str(tmp_path), gpu.UNIT_CHAPTERS[0], "--device", "cpu", "--seconds", seconds],
                 [str(tmp_path), "--device", "cpu", "--seconds", seconds],
                 ["lease", str(tmp_path), "--device", "cpu", "--seconds", seconds]):
        with pytest.raises(SystemExit) as exit:
            gpu.command.main(argv)
        assert exit.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_lease_refuses_a_deadline_within_the_time_it_keeps_to_write(tmp_path, capsys):
    """My probe of the lease form: ``--seconds 5`` probed, then said "-0.5 min left" and exited 0."""
    with pytest.raises(SystemExit) as exit:
        gpu.command.main(["lease", str(tmp_path), "--device", "cpu", "--scale", "smoke", "--seconds", "5"])
    assert exit.value.code == 2 and "argument --seconds: the lease keeps its last 30 s to write what it did, so it " \
                                    "must be more than 30 s, got '5'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("options, message", [
    (["--lease-seconds", "20"], "argument --lease-seconds: the lease keeps its last 30 s to write what it did"),
    (["--seconds", "90", "--lease-seconds", "40"], "--lease-seconds 40 is less than --seconds 90: the machine goes "
                                                   "back before this command's deadline"),
    (["--state", "FILE"], "FILE is a file, not a folder"), (["OUT=FILE"], "FILE is a file, not a folder")])
def test_the_lease_refuses_a_lease_or_a_folder_it_cannot_use(tmp_path, capsys, options, message):
    """Issue #48's probe: ``--lease-seconds 20`` trained nothing ("-0.3 min left") and exited 0, a lease shorter
    than ``--seconds`` ran past the machine's return, and a state folder or OUT that is a file failed with a
    traceback (OUT's before anything was written, the state's after the group had trained)."""
    file = tmp_path / "file"
    file.write_text("")
    out = file if options == ["OUT=FILE"] else tmp_path / "out"
    options = [str(file) if o == "FILE" else o for o in options if o != "OUT=FILE"]
    with pytest.raises(SystemExit) as exit:
        gpu.command.main(["lease", str(out), "--device", "cpu", "--scale", "smoke", *options])
    assert exit.value.code == 2 and message.replace("FILE", str(file)) in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize("option, value, message", [("--device", "tpu", "'tpu' is no device torch knows"),
                                                   ("--networks", "0", "an integer >= 1, got '0'")])
def test_the_gpu_command_refuses_a_device_or_a_group_size_it_cannot_use(tmp_path, capsys, option, value, message):
    """Issue #48's probe: ``stacked --device tpu`` failed every queue inside and exited 0; ``--networks 0`` failed
    deep in the group's probe, said only in summary.json."""
    for form in ([], ["lease"]):
        with pytest.raises(SystemExit) as exit:
            gpu.command.main([*form, str(tmp_path), option, value])
        assert exit.value.code == 2 and message in capsys.readouterr().err and not list(tmp_path.iterdir())
