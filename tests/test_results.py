import ast
import html
import json
import os
import stat
import sys
import threading
import time
import types

import numpy as np
import pytest

from conftest import ROOT
from gmp import config, results
from gmp.results import FAILS, NOT_RUN, PARTLY, REPRODUCED, STALE, VERIFIED, Claim
from gmp.results import verdicts as ledger


def _check(payload):
    value = payload["gap"]
    return f"gap {value:.2f}", REPRODUCED if value < 1 else PARTLY


@pytest.fixture
def chapter(monkeypatch, tmp_path):
    """A chapter 'fake_chapter' with one claim, and an empty results root."""
    module = types.ModuleType("gmp.experiments.fake_chapter")
    module.CONFIG = config.scaled(smoke={"n": 1}, small={"n": 2}, paper={"n": 3})
    module.CLAIMS = [Claim("fake-gap", "chen", "The gap is small.", "summary", "reproduced if gap < 1", _check, source="paper")]
    monkeypatch.setitem(sys.modules, "gmp.experiments.fake_chapter", module)
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "_results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    return module


def _publish(tmp_path, scale, payload, digest, commit="abc"):
    folder = tmp_path / "_results" / "fake_chapter" / scale
    results.atomic_write_json(folder / "summary.json", payload)
    results.atomic_write_json(folder / "provenance.json", {"config_digest": digest, "date": "2026-11-22 00:00 UTC",
                                                           "device": "cpu", "commit": commit, "wall_time_s": 3.0})
    return folder


def test_save_is_a_no_op_outside_the_runner(chapter, tmp_path):
    store = results.Store("fake_chapter", config.load("fake_chapter", "small"))
    assert store.save("summary", {"gap": 0.5}) is None
    assert not (tmp_path / "_results").exists()


def test_save_writes_json_and_arrays_into_staging(chapter, tmp_path, monkeypatch):
    staging = tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"
    monkeypatch.setenv(results.STAGING_ENV, str(staging))
    store = results.Store("fake_chapter", config.load("fake_chapter", "paper"))
    path = store.save("summary", {"gap": 0.5}, arrays={"curve": np.arange(5.0)})
    assert json.loads(path.read_text()) == {"gap": 0.5}
    with np.load(staging / "summary.npz") as data:
        np.testing.assert_array_equal(data["curve"], np.arange(5.0))
    assert not [p for p in staging.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError, match="JSON serialisable"):
        store.save("bad", {"x": object()})
    with pytest.raises(ValueError, match="result names"):
        store.save("../escape", {})


def test_cached_is_absent_current_or_stale(chapter, tmp_path):
    assert results.cached("fake_chapter", "summary").status == "absent"
    current = config.load("fake_chapter", "paper").digest
    _publish(tmp_path, "paper", {"gap": 0.25}, current)
    entry = results.cached("fake_chapter", "summary")
    assert entry.status == "current" and entry.payload == {"gap": 0.25}
    assert "Paper-scale results cached 2026-11-22" in entry.describe()
    chapter.CONFIG["paper"]["n"] = 4
    stale = results.cached("fake_chapter", "summary")
    assert stale.status == "stale" and not stale.current
    assert "STALE" in stale.describe()
    assert "warning" in stale.note().data
    _publish(tmp_path, "paper", {"gap": 0.25}, current, commit="0123456789abcdef+dirty")
    assert "commit 0123456789 with uncommitted changes" in results.cached("fake_chapter", "summary").describe()


def test_a_table_cell_without_a_cached_value_says_why():
    assert results.missing_cell("absent") == NOT_RUN
    assert results.missing_cell("stale") == "stale cache"
    assert results.missing_cell("current") == "—"


def test_memo_resumes_after_an_interruption(chapter, tmp_path, monkeypatch):
    staging = tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"
    monkeypatch.setenv(results.STAGING_ENV, str(staging))
    cfg = config.load("fake_chapter", "paper")
    calls = []

    def unit(i):
        calls.append(i)
        return {"i": i, "value": i * i}

    store = results.Store("fake_chapter", cfg)
    assert [store.memo(f"unit-{i}", lambda i=i: unit(i)) for i in range(3)][2] == {"i": 2, "value": 4}
    journal = tmp_path / "_results" / "fake_chapter" / "_partial" / f"paper-{cfg.digest}.jsonl"
    assert all(entry["seconds"] >= 0 for entry in results.journal_entries(journal))
    with open(journal, "a") as handle:
        handle.write('{"key": "unit-3", "val')  # a write cut short by the interruption
    monkeypatch.delenv(results.STAGING_ENV)
    absent = results.cached("fake_chapter", "summary")
    assert absent.status == "absent" and absent.journalled == 3
    assert "journalled 3 finished units" in absent.describe()
    assert "Unfinished paper-scale run" in absent.note().data
    monkeypatch.setenv(results.STAGING_ENV, str(staging))
    resumed = results.Store("fake_chapter", cfg)
    values = [resumed.memo(f"unit-{i}", lambda i=i: unit(i)) for i in range(5)]
    assert calls == [0, 1, 2, 3, 4]
    assert values[1] == {"i": 1, "value": 1}
    again = results.Store("fake_chapter", cfg)
    assert [again.memo(f"unit-{i}", lambda i=i: unit(i)) for i in range(5)] == values
    assert calls == [0, 1, 2, 3, 4]  # the unit written after the cut-short line was kept
    assert "" not in journal.read_text().splitlines()


def test_carried_units_are_resumed_and_counted_apart_from_the_runs_own(chapter, tmp_path, monkeypatch):
    cfg = config.load("fake_chapter", "paper")
    code = {"digest": "old", "modules": {"gmp/train.py": "h"}, "hash": results.CODE_HASH}
    with pytest.raises(ValueError, match="why"):
        results.carry("fake_chapter", "paper", {"a": 1}, "the old run", "")
    path = results.carry("fake_chapter", "paper", {"a": {"v": 1}, "b": {"v": 2}}, "the cache of config X",
                         "only other units read the changed key", code)
    assert path.name == f"paper-{cfg.digest}.jsonl"
    results.carry("fake_chapter", "paper", {"a": {"v": 9}}, "another run", "again")  # a journalled key stays
    entries = results.journal_entries(path)
    assert [e["key"] for e in entries] == ["a", "b"] and entries[0]["modules"] == code["modules"]
    assert results.carried_units(entries) == {"the cache of config X": {
        "units": 2, "why": "only other units read the changed key", "code_recorded": 2}}
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    calls = []
    store = results.Store("fake_chapter", cfg)
    assert [store.memo(k, lambda k=k: calls.append(k) or {"v": 3}) for k in "abc"] == [{"v": 1}, {"v": 2}, {"v": 3}]
    assert calls == ["c"]
    bad = dict(entries[0], carried={"from": "x"})
    assert "carried" in results.entry_problem(bad)
    folder = _publish(tmp_path, "paper", {"gap": 0.5}, cfg.digest)
    provenance = json.loads((folder / "provenance.json").read_text())
    provenance.update(resumed_units=3, resumed_seconds=1.0, carried_units={
        "the cache of config X": {"units": 2, "why": "only other units read the changed key", "code_recorded": 0}})
    results.atomic_write_json(folder / "provenance.json", provenance)
    monkeypatch.delenv(results.STAGING_ENV)
    text = results.cached("fake_chapter", "summary").describe()
    assert "after resuming 1 units journalled by earlier, interrupted attempts" in text
    assert ("2 of its units were carried over from the cache of config X, not recomputed (only other units read "
            "the changed key; 2 of them by code whose fingerprint that run did not record)") in text


def test_carry_refuses_a_unit_that_every_later_read_would_skip(chapter, tmp_path):
    # Before: carry wrote it, and every read after warned "skipped" and recomputed the unit.
    code = {"digest": "old", "modules": {"gmp/train.py": "h"}, "hash": results.CODE_HASH}
    path = results.journal_path("fake_chapter", "paper", config.load("fake_chapter", "paper").digest)
    for units, source, code_of, problem in (({3: {"v": 1}}, "the old run", code, "not a journal entry"),
                                            ({"a": {"v": 1}}, ["the old run"], code, "carried"),
                                            ({"a": {"v": 1}}, "the old run", {**code, "digest": 7}, "'code' is a int"),
                                            ({"a": {"v": 1}}, "the old run", {**code, "hash": "md5"}, "'hash' is 'md5'"),
                                            ({"a": {1, 2}}, "the old run", code, "cannot be journalled")):
        with pytest.raises(ValueError, match=f"carry: unit .*{problem}.*nothing was written"):
            results.carry("fake_chapter", "paper", {"b": {"v": 0}, **units}, source, "only other units read it", code_of)
        assert not path.exists()


def test_memo_picks_up_units_of_another_worker_and_clears_their_scratch(chapter, tmp_path, monkeypatch):
    assert results.Store("fake_chapter", config.load("fake_chapter", "paper")).scratch("a") is None
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    cfg = config.load("fake_chapter", "paper")
    first, second = results.Store("fake_chapter", cfg), results.Store("fake_chapter", cfg)
    scratch = first.scratch("fig/a-0")
    assert scratch.parent == tmp_path / "_results" / "fake_chapter" / "_partial" / f"paper-{cfg.digest}"
    assert "/" not in scratch.name
    scratch.parent.mkdir(parents=True)
    scratch.write_bytes(b"state")
    assert first.memo("fig/a-0", lambda: 1) == 1
    assert not scratch.exists()
    assert second.memo("fig/a-0", lambda: 2) == 1  # journalled by the other store after this one opened


@pytest.mark.skipif(results.fcntl is None, reason="unit locks need POSIX fcntl")
def test_memo_without_waiting_reports_a_unit_another_worker_holds(chapter, tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    store = results.Store("fake_chapter", config.load("fake_chapter", "paper"))
    lock = store.scratch("a-0").with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as other:  # another worker computing the unit
        fcntl.flock(other, fcntl.LOCK_EX)
        assert store.memo("a-0", lambda: pytest.fail("computed a busy unit"), wait=False) is results.BUSY
        assert lock.exists()
    assert store.memo("a-0", lambda: 7, wait=False) == 7
    assert not lock.exists()


def test_memo_outside_the_runner_keeps_nothing_on_disk(chapter, tmp_path):
    store = results.Store("fake_chapter", config.load("fake_chapter", "small"))
    assert store.memo("a", lambda: [1, 2]) == [1, 2]
    assert store.memo("a", lambda: [3]) == [1, 2]
    assert not (tmp_path / "_results").exists()


def test_claims_table_and_ledger_use_the_paper_scale_cache_only(chapter, tmp_path, monkeypatch):
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    table = results.claims_table("fake_chapter", {"summary": {"gap": 0.1}}, "small").data
    assert "gap 0.10" in table and NOT_RUN in table
    [row] = ledger.ledger_rows()
    assert row["Verdict"].endswith(f"{NOT_RUN}</span>") and row["verdict"] == NOT_RUN
    _publish(tmp_path, "paper", {"gap": 3.0}, config.load("fake_chapter", "paper").digest)
    [row] = ledger.ledger_rows()
    assert PARTLY in row["Verdict"] and row["Measured at paper scale"] == "gap 3.00"
    _publish(tmp_path, "paper", {"gap": 0.0}, "0000")
    [row] = ledger.ledger_rows()
    assert STALE in row["Verdict"]
    summary = results.ledger().data
    assert '<tr data-paper="chen" data-total="1"><th>Chen &amp; Ge</th>' in summary
    assert f'data-verdict="stale" data-count="1" title="{STALE}: 1"' in summary
    with pytest.raises(ValueError, match="needs the live result 'summary'"):
        results.claims_table("fake_chapter", {}, "small")


def test_a_claim_must_return_a_known_verdict():
    claim = Claim("k", "lu", "text", "r", "rule", lambda payload: ("m", "probably"), source="paper")
    with pytest.raises(ValueError, match="verdict 'probably'"):
        claim.evaluate({})
    with pytest.raises(ValueError, match="verdict 'verified'"):
        Claim("k", "lu", "text", "r", "rule", lambda payload: ("m", VERIFIED), source="paper").evaluate({})
    with pytest.raises(ValueError, match="verdict 'reproduced'"):
        Claim("k", "lu", "text", "r", "rule", lambda payload: ("m", REPRODUCED), kind="identity", source="paper").evaluate({})
    with pytest.raises(ValueError, match="kind 'theorem'"):
        Claim("k", "lu", "text", "r", "rule", lambda payload: ("m", VERIFIED), kind="theorem", source="paper")


def test_the_ledger_shows_findings_and_identities_apart_with_counts_per_paper_and_per_ledger(chapter, tmp_path,
                                                                                             monkeypatch):
    """The papers' claims, our robustness checks and superseded readings are three ledgers, each with its own
    tally: a check's verdict never counts among the paper's."""
    identity = Claim("fake-identity", "chen", "The gap is an identity.", "summary", "verified if gap < 1",
                     lambda p: (f"gap {p['gap']:.2f}", VERIFIED if p["gap"] < 1 else FAILS), kind="identity",
                     source="paper")
    lu_finding = Claim("fake-lu", "lu", "Lu's gap is small.", "summary", "reproduced if gap < 1", _check, source="paper")
    arm = Claim("fake-arm", "chen", "The gap is small at lr 0.1.", "summary", "reproduced if gap < 0.1",
                lambda p: ("gap", results.NOT_REPRODUCED), source="check")
    chapter.CLAIMS = [*chapter.CLAIMS, identity, lu_finding, arm]
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    _publish(tmp_path, "paper", {"gap": 0.5}, config.load("fake_chapter", "paper").digest)
    rows = ledger.ledger_rows()
    assert [(r["source"], r["kind"], r["verdict"]) for r in rows] == [
        ("paper", "finding", REPRODUCED), ("paper", "identity", VERIFIED), ("paper", "finding", REPRODUCED),
        ("check", "finding", results.NOT_REPRODUCED)]
    zero = dict.fromkeys(ledger.categories("finding"), 0)
    assert ledger.ledger_counts(rows, "finding", "paper") == {"Chen &amp; Ge": {**zero, REPRODUCED: 1},
                                                              "Lu et al.": {**zero, REPRODUCED: 1}}
    assert ledger.ledger_counts(rows, "finding", "check") == {"Chen &amp; Ge": {**zero, results.NOT_REPRODUCED: 1}}
    assert ledger.ledger_counts(rows, "finding")["Chen &amp; Ge"] == {**zero, REPRODUCED: 1, results.NOT_REPRODUCED: 1}
    assert ledger.ledger_counts(rows, "identity", "paper") == {
        "Chen &amp; Ge": {**dict.fromkeys(ledger.categories("identity"), 0), VERIFIED: 1}}
    assert ledger.ledger_counts(rows, "finding", "superseded") == {}
    page = results.ledger().data
    papers, checks = page.split("Our robustness checks")
    findings, identities = papers.split("Identities: theorems")
    assert "The papers&#x27; claims" in findings and "Lu&#x27;s gap is small." in findings
    assert "The gap is an identity." not in findings and "The gap is an identity." in identities
    assert 'data-verdict="verified" data-count="1"' in identities and 'data-verdict="reproduced"' not in identities
    assert '<tr data-paper="chen" data-total="1"><th>Chen &amp; Ge</th>' in identities
    assert "(identity checked numerically)" in identities and "(identity checked numerically)" not in findings
    assert 'data-verdict="not-reproduced"' not in papers and 'data-verdict="not-reproduced" data-count="1"' in checks
    assert "The gap is small at lr 0.1." in checks and "our robustness check, not a claim of the paper" in checks
    _publish(tmp_path, "paper", {"gap": 3.0}, config.load("fake_chapter", "paper").digest)
    assert [r["verdict"] for r in ledger.ledger_rows()] == [PARTLY, FAILS, PARTLY, results.NOT_REPRODUCED]
    assert "(identity checked numerically)" in results.claims_table("fake_chapter", {"summary": {"gap": 0.1}},
                                                                   "small").data


def test_glue_stores_numpy_and_torch_scalars_as_python_numbers(monkeypatch):
    import myst_nb
    import torch

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=False: glued.update({name: value}))
    results.glue("a", np.float64(9.5))
    results.glue("b", torch.tensor(3))
    results.glue("c", [1.0, 2.0])
    assert glued == {"a": 9.5, "b": 3, "c": [1.0, 2.0]}
    assert type(glued["a"]) is float and type(glued["b"]) is int


def test_a_unit_another_worker_is_computing_is_waited_for_not_computed_twice(chapter, tmp_path, monkeypatch):
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    cfg = config.load("fake_chapter", "paper")
    started, calls, got = threading.Event(), [], {}

    def slow():
        started.set()
        time.sleep(0.5)
        calls.append("first")
        return "first"

    def second():
        calls.append("second")
        return "second"

    worker = threading.Thread(target=lambda: got.setdefault("first", results.Store("fake_chapter", cfg).memo("u", slow)))
    worker.start()
    started.wait()
    got["second"] = results.Store("fake_chapter", cfg).memo("u", second)
    worker.join()
    assert calls == ["first"] and got == {"first": "first", "second": "first"}


def test_atomic_writes_are_readable_by_others_not_private_like_a_temporary_file(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    results.atomic_write_bytes(tmp_path / "a" / "x.bin", b"data")
    results.atomic_write_json(tmp_path / "y.json", {"a": 1})
    for path in (tmp_path / "a" / "x.bin", tmp_path / "y.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~mask


def test_a_journal_line_of_the_wrong_shape_is_skipped_with_a_warning_not_blocking_a_resume(chapter, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    cfg = config.load("fake_chapter", "paper")
    journal = results.journal_path("fake_chapter", "paper", cfg.digest)
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b'{"key": "a", "value": 1}\n123\n{"value": 2}\n{"key": 5, "value": 2}\n\xff\xfe\n'
                        b'{"key": "b", "value": 3}\n{"key": "c", "va')
    with pytest.warns(UserWarning) as caught:
        assert results.journal_units(journal) == {"a": 1, "b": 3}
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        f"{journal}, line {n}" for n in (2, 3, 4, 5)]
    assert "not UTF-8" in str(caught[-1].message)
    with pytest.warns(UserWarning):
        store = results.Store("fake_chapter", cfg)
        assert store.memo("a", lambda: pytest.fail("recomputed a journalled unit")) == 1
        assert store.memo("c", lambda: 4) == 4
    with pytest.warns(UserWarning):
        assert results.journal_units(journal) == {"a": 1, "b": 3, "c": 4}


def test_a_journal_line_with_wrong_typed_metadata_is_skipped_with_a_warning(chapter, tmp_path):
    cfg = config.load("fake_chapter", "paper")
    journal = results.journal_path("fake_chapter", "paper", cfg.digest)
    journal.parent.mkdir(parents=True)
    lines = [{"key": "a", "value": 1, "code": ["x"]}, {"key": "b", "value": 2, "seconds": "12"},
             {"key": "c", "value": 3, "modules": ["m"]}, {"key": "d", "value": 4, "seconds": -1},
             {"key": "e", "value": 5, "seconds": True}, {"key": "f", "value": 6, "modules": {"a.py": 1}},
             {"key": "g", "value": 7, "code": "0123456789abcdef", "seconds": 1.5}, {"key": "h", "value": 8}]
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"key": "i", "value": 9, "seconds": NaN}\n'
                       + '{"key": "j", "value": 10, "hash": "md5"}\n')
    with pytest.warns(UserWarning) as caught:
        entries = results.journal_entries(journal)
    assert [e["key"] for e in entries] == ["g", "h"]
    assert [str(w.message).split(":")[0] for w in caught] == [
        f"{journal}, line {n}" for n in (1, 2, 3, 4, 5, 6, 9, 10)]
    assert "'hash' is 'md5'" in str(caught[-1].message)
    assert "'code'" in str(caught[0].message) and "'seconds'" in str(caught[1].message)
    assert sum(e.get("seconds", 0.0) for e in entries) == 1.5  # what gmp.runs records as resumed_seconds
    with pytest.warns(UserWarning):
        absent = results.cached("fake_chapter", "summary")  # resumed_code hashed the 'code' of each line
    assert absent.units == {"g": 7, "h": 8}
    assert absent.units_code["code_not_recorded_units"] == 2


@pytest.mark.parametrize("under_runner", [False, True])
def test_memo_returns_the_same_type_fresh_and_resumed(chapter, tmp_path, monkeypatch, under_runner):
    if under_runner:
        monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    cfg = config.load("fake_chapter", "paper")
    fresh = results.Store("fake_chapter", cfg).memo("u", lambda: {0: 1.5, "t": (1, 2)})
    assert fresh == {"0": 1.5, "t": [1, 2]}
    if under_runner:
        assert results.Store("fake_chapter", cfg).memo("u", lambda: pytest.fail("recomputed")) == fresh


def _publish_hashed(tmp_path, payload, arrays=None):
    """A cache as gmp.runs writes it: provenance.json records the sha256 of every other file."""
    folder = tmp_path / "_results" / "fake_chapter" / "paper"
    results.atomic_write_json(folder / "summary.json", payload)
    if arrays:
        results.atomic_write_bytes(folder / "summary.npz", results._npz_bytes(arrays))
    results.atomic_write_json(folder / "provenance.json", {
        "config_digest": config.load("fake_chapter", "paper").digest, "date": "2026-11-22 00:00 UTC",
        "payload_sha256": results.payload_hashes(folder)})
    return folder


def test_an_edited_or_missing_payload_file_is_corrupt_not_current(chapter, tmp_path, monkeypatch):
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    folder = _publish_hashed(tmp_path, {"gap": 0.25}, {"curve": np.arange(3.0)})
    entry = results.cached("fake_chapter", "summary")
    assert entry.current and "hashes not recorded" not in entry.describe()
    (folder / "summary.json").write_text('{"gap": 0.0}')
    corrupt = results.cached("fake_chapter", "summary")
    assert corrupt.status == "corrupt" and not corrupt.current and corrupt.payload is None
    assert "summary.json differs from the file the run wrote" in corrupt.describe()
    assert "CORRUPT" in corrupt.describe() and "error" in corrupt.note().data
    assert results.missing_cell("corrupt") == "corrupt cache"
    [row] = ledger.ledger_rows()
    assert row["verdict"] == results.CORRUPT
    folder = _publish_hashed(tmp_path, {"gap": 0.25}, {"curve": np.arange(3.0)})
    (folder / "summary.npz").unlink()
    assert results.cached("fake_chapter", "summary").problem == "summary.npz is missing"
    (folder / "summary.json").unlink()
    assert results.cached("fake_chapter", "summary").problem == "summary.json is missing"
    folder = _publish_hashed(tmp_path, {"gap": 0.25})
    results.atomic_write_bytes(folder / "summary.npz", results._npz_bytes({"curve": np.arange(3.0)}))
    assert "summary.npz was not written by the run" in results.cached("fake_chapter", "summary").problem


@pytest.mark.parametrize("damage", ["payload_json", "payload_list", "npz", "provenance", "no_provenance"])
def test_an_unreadable_cache_without_hashes_is_corrupt_not_an_exception(chapter, tmp_path, damage):
    folder = _publish(tmp_path, "paper", {"gap": 0.25}, config.load("fake_chapter", "paper").digest)
    assert "Payload hashes not recorded" in results.cached("fake_chapter", "summary").describe()
    if damage == "payload_json":
        (folder / "summary.json").write_text('{"gap": 0.2')
    elif damage == "payload_list":
        (folder / "summary.json").write_text("[1]")
    elif damage == "npz":
        (folder / "summary.npz").write_bytes(b"PK\x03\x04 not a zip")
    elif damage == "provenance":
        (folder / "provenance.json").write_bytes(b"\xff{")
    else:
        (folder / "provenance.json").unlink()
    entry = results.cached("fake_chapter", "summary")
    assert entry.status == "corrupt" and entry.payload is None and entry.problem
    assert entry.problem in entry.describe()


def _other_code(module="experiments/chen_levy.py"):
    """A code fingerprint that differs from today's in ``module`` (as after editing ``train_one``)."""
    today = results.code_fingerprint()
    return {"digest": "0123456789abcdef", "modules": {**today["modules"], module: "0" * 16}, "hash": today["hash"]}


def test_memo_journals_the_fingerprint_of_the_code_that_computed_each_unit(chapter, tmp_path, monkeypatch):
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    cfg = config.load("fake_chapter", "paper")
    results.code_fingerprint.cache_clear()
    store = results.Store("fake_chapter", cfg)
    assert results.code_fingerprint.cache_info().currsize == 1  # read when the run starts, not at its first unit
    today = results.code_fingerprint()
    assert "results/store.py" in today["modules"] and "experiments/chen_levy.py" in today["modules"]
    store.memo("a", lambda: 1)
    store.memo("b", lambda: 2)
    results.Store("fake_chapter", cfg).memo("c", lambda: 3)  # another process: the hashes are in the journal already
    entries = results.journal_entries(results.journal_path("fake_chapter", "paper", cfg.digest))
    assert [e["code"] for e in entries] == [today["digest"]] * 3
    assert [("modules" in e) for e in entries] == [True, False, False]
    assert results.journal_code(entries) == {today["digest"]: (today["modules"], results.CODE_HASH)}
    assert results.resumed_code(entries) == {"other_code_units": 0, "code_not_recorded_units": 0,
                                             "changed_modules": []}


def test_a_cache_says_whether_the_code_changed_since_and_where_but_stays_current(chapter, tmp_path):
    digest = config.load("fake_chapter", "paper").digest
    folder = _publish(tmp_path, "paper", {"gap": 0.25}, digest)
    old = results.cached("fake_chapter", "summary")
    assert old.current and old.code_changed is None and "Code fingerprint not recorded" in old.describe()
    provenance = json.loads((folder / "provenance.json").read_text())
    for code, changed in ((results.code_fingerprint(), ()), (_other_code(), ("experiments/chen_levy.py",))):
        results.atomic_write_json(folder / "provenance.json", {**provenance, "code": code})
        entry = results.cached("fake_chapter", "summary")
        assert entry.status == "current" and entry.code_changed == changed
    assert "CODE CHANGED since: of the gmp modules, experiments/chen_levy.py differ" in entry.describe()
    assert "Cached paper-scale run (code changed since)" in entry.note().data
    results.atomic_write_json(folder / "provenance.json", {**provenance, "code": results.code_fingerprint()})
    assert "The code of the gmp modules has not changed since this run finished." in results.cached("fake_chapter", "summary").describe()


def test_a_module_rewritten_with_the_same_function_is_named_not_counted_as_changed(chapter, tmp_path, monkeypatch):
    digest = config.load("fake_chapter", "paper").digest
    folder = _publish(tmp_path, "paper", {"gap": 0.25}, digest)
    provenance = json.loads((folder / "provenance.json").read_text())
    today = results.code_fingerprint()["modules"]
    module = "experiments/chen_levy.py"
    same = results.SameFunction(module, "0" * 16, {module: today[module], "layers.py": today["layers.py"]}, "tested equal")
    monkeypatch.setattr(results.fingerprint, "SAME_FUNCTION", (same,))
    for recorded, changed, named in (("0" * 16, (), (same,)), ("1" * 16, (module,), ())):
        code = {**results.code_fingerprint(), "modules": {**today, module: recorded}}
        results.atomic_write_json(folder / "provenance.json", {**provenance, "code": code})
        entry = results.cached("fake_chapter", "summary")
        assert entry.code_changed == changed and entry.code_same == named
        assert results.changed_modules(code["modules"], results.CODE_HASH) == list(changed)
    code = {**results.code_fingerprint(), "modules": {**today, module: "0" * 16}}
    for lapsed in ({module: "2" * 16}, {module: today[module], "layers.py": "2" * 16}):  # it, or what it relies on, changed again
        monkeypatch.setattr(results.fingerprint, "SAME_FUNCTION", (same._replace(after=lapsed),))
        assert results.changed_modules(code["modules"], results.CODE_HASH) == [module]
        assert results.same_function(code["modules"], results.CODE_HASH) == []
    assert results.same_function(code["modules"], "source") == []  # byte hashes are never vouched for
    monkeypatch.setattr(results.fingerprint, "SAME_FUNCTION", (same,))
    # Units journalled by the code before the rewrite count as computed by the notebook's code,
    # also when the notebook's code has a module the units' code did not (one added since).
    notebook = {**results.code_fingerprint(), "modules": {**today, "added.py": "3" * 16}}
    unit = {"key": "a", "code": "old", "modules": {**today, module: "0" * 16}, "hash": results.CODE_HASH}
    assert results.code_against([unit], notebook)["other_code_units"] == 0
    assert results.code_against([{**unit, "modules": {**today, module: "1" * 16}}], notebook) == {
        "other_code_units": 1, "code_not_recorded_units": 0, "changed_modules": [module]}
    results.atomic_write_json(folder / "provenance.json", {**provenance, "code": code})
    entry = results.cached("fake_chapter", "summary")
    text = entry.describe()
    assert f"gmp/{module} has been rewritten since in how it computes, not what it computes: tests vouch for it" in text
    assert "CODE CHANGED" not in text and "tested equal" not in text  # the record's account is in the note's details
    assert (f"<details><summary>How each module was rewritten since, and the tests that vouch for it</summary><ul><li>"
            f"<code>gmp/{module}</code>: tested equal</li></ul></details>") in entry.note().data


def test_every_same_function_record_names_todays_code():
    # A record lapses when its module changes again: renew it (with tests) or drop it.
    today = results.read_module_hashes(results.CODE_HASH)
    for same in results.SAME_FUNCTION:
        assert {m: today.get(m) for m in same.after} == dict(same.after), same
        assert same.module in same.after and same.before != same.after[same.module] and same.why


def test_same_function_records_live_outside_the_fingerprinted_code(tmp_path):
    """Records kept in a module of gmp could not vouch for that module: adding one changed the hash it vouched for."""
    assert results.SAME_FUNCTION == results.read_same_function(results.SAME_FUNCTION_FILE)
    assert results.SAME_FUNCTION_FILE.suffix == ".json"
    assert not any(m.endswith(".json") for m in results.code_fingerprint()["modules"])
    record = {"module": "results/fingerprint.py", "before": "0" * 16, "after": {"results/fingerprint.py": "1" * 16},
              "why": "tested equal"}
    (tmp_path / "same.json").write_text(json.dumps([record]))
    assert results.read_same_function(tmp_path / "same.json") == (results.SameFunction(**record),)
    (tmp_path / "same.json").write_text(json.dumps([record, {**record, "why": ""}]))
    with pytest.raises(ValueError, match="same.json, record 1: not a record of a module rewritten"):
        results.read_same_function(tmp_path / "same.json")


def test_what_is_read_from_a_modules_source_is_kept_per_source_and_read_back_only_for_those_bytes(
        tmp_path, monkeypatch):
    """Each module's syntax digest and imports are kept under the repository once read, for every later process: a
    kept fact is the one computed, a changed file is read afresh, and a folder that cannot be written to only costs
    the time."""
    from gmp.results import fingerprint
    package = tmp_path / "gmp"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from gmp.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("import gmp.sub\nX = 1\n")
    monkeypatch.setattr(results.files, "repository_root", lambda: tmp_path)
    fresh = {p.relative_to(package).as_posix(): results._syntax_digest(p.read_bytes()) for p in package.rglob("*.py")}
    assert results.read_module_hashes(results.CODE_HASH, package) == fresh
    kept = sorted((tmp_path / fingerprint.MEMO).iterdir())
    assert len(kept) == 3 and results.read_module_hashes(results.CODE_HASH, package) == fresh
    umask = os.umask(0o022)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in kept} == {0o644 & ~umask}  # readable in a shared checkout
    assert sorted((tmp_path / fingerprint.MEMO).iterdir()) == kept  # read back, not written again
    (package / "sub" / "b.py").write_text("import gmp.sub\nX = 2\n")
    changed = results.read_module_hashes(results.CODE_HASH, package)
    assert changed["sub/b.py"] == results._syntax_digest(b"import gmp.sub\nX = 2\n") != fresh["sub/b.py"]
    imports = {package / "__init__.py", package / "sub" / "__init__.py", package / "sub" / "b.py"}
    assert fingerprint._imported(package / "__init__.py", package) == imports
    assert len(list((tmp_path / fingerprint.MEMO).iterdir())) == 5  # three digests, one changed, one module's imports
    assert fingerprint._imported(package / "__init__.py", package) == imports
    monkeypatch.setattr(results.files, "repository_root", lambda: tmp_path / "file")
    (tmp_path / "file").write_text("not a folder")
    assert results.read_module_hashes(results.CODE_HASH, package) == changed


def test_the_code_hash_leaves_out_documentation_comments_and_layout_but_not_code():
    source = 'X = 1\n"""Doc of X."""\n\n\ndef f(x):\n    """Doc."""\n    return x + X  # why\n'
    reworded = '# a header\nX = 1\n"""Another doc."""\ndef f(x):\n    """Doc,\n    longer."""\n\n    return (x +\n            X)\n'
    assert results._syntax_digest(source.encode()) == results._syntax_digest(reworded.encode())
    for edit in (source.replace("x + X", "x - X"), source.replace("return", 'print("why")\n    return'),
                 source.replace("X = 1", "X = 1.0")):
        assert results._syntax_digest(edit.encode()) != results._syntax_digest(source.encode()), edit
    # Python 3.12 puts empty strings among an f-string's parts where 3.11 and 3.13 do not.
    parts = [ast.Constant("a"), ast.FormattedValue(ast.Name("x", ast.Load()), -1, None)]
    assert results._tree(ast.JoinedStr(parts + [ast.Constant("")])) == results._tree(ast.JoinedStr(parts))
    assert results._tree(ast.Call(ast.Name("f", ast.Load()), [ast.Constant("")], [])) != \
        results._tree(ast.Call(ast.Name("f", ast.Load()), [], []))  # f("") is not f()
    assert results._syntax_digest(b"def broken(:\n") != results._syntax_digest(b"def broken(:\n\n")  # bytes, no error


def test_a_fingerprint_in_an_unknown_hash_says_so(chapter, tmp_path):
    folder = _publish(tmp_path, "paper", {"gap": 0.25}, config.load("fake_chapter", "paper").digest)
    provenance = json.loads((folder / "provenance.json").read_text())
    results.atomic_write_json(folder / "provenance.json", {**provenance, "code": {"digest": "d", "modules": {}, "hash": "md5"}})
    entry = results.cached("fake_chapter", "summary")
    assert entry.code_changed is None and "hashed as 'md5', which this gmp cannot compare" in entry.describe()


def test_a_fingerprint_recorded_before_the_syntax_hash_is_compared_with_the_files_bytes(chapter, tmp_path):
    """Caches and journals written before ``hash`` was recorded hashed each file's bytes."""
    folder = _publish(tmp_path, "paper", {"gap": 0.25}, config.load("fake_chapter", "paper").digest)
    provenance = json.loads((folder / "provenance.json").read_text())
    source = results.module_digests(ROOT / "gmp")
    for modules, changed in ((source, ()), ({**source, "layers.py": "0" * 16}, ("layers.py",))):
        results.atomic_write_json(folder / "provenance.json", {**provenance, "code": {"digest": "d", "modules": modules}})
        assert results.cached("fake_chapter", "summary").code_changed == changed


def test_a_chapter_counts_the_modules_it_imports_and_not_another_chapters_experiment():
    modules = results.chapter_modules("chen_levy")
    assert {"__init__.py", "experiments/chen_levy.py", "layers.py", "results/store.py", "train.py"} <= modules
    assert "experiments/chen_levy_arms.py" in modules  # only the chapter's page imports it
    assert not modules & {"experiments/sbsnn_author/__init__.py", "experiments/chen_uci.py", "bench.py"}
    assert not modules & {"results/verdicts.py", "results/rulestatus.py", "rulehistory.py"}  # the ledger renders
    assert "runs.py" in results.chapter_modules("chen_banana")  # the runner, whether or not the page names it
    assert results.chapter_modules("no_such_chapter") is None
    today = results.code_fingerprint()["modules"]
    for module, listed in (("experiments/sbsnn_author/claims.py", []), ("experiments/chen_levy_arms.py", ["experiments/chen_levy_arms.py"])):
        recorded = {**today, module: "0" * 16}
        assert results.changed_modules(recorded, results.CODE_HASH, modules) == listed
        assert results.changed_modules(recorded, results.CODE_HASH) == [module]
    # a removed module counts only where a package of its name, which the chapter imports, took its place
    assert results.changed_modules({**today, "gone.py": "0" * 16}, results.CODE_HASH, modules) == []
    assert results.changed_modules({**today, "gone.py": "0" * 16}, results.CODE_HASH) == ["gone.py"]
    assert results.changed_modules({**today, "results.py": "0" * 16}, results.CODE_HASH, modules) == ["results.py"]
    assert results.changed_modules({**today, "gpu.py": "0" * 16}, results.CODE_HASH, modules) == []
    assert results.chapter_modules("lu_real") >= {"experiments/lu_real/__init__.py"}
    assert results.changed_modules({**today, "experiments/lu_real.py": "0" * 16}, results.CODE_HASH,
                                   results.chapter_modules("lu_real")) == ["experiments/lu_real.py"]
    unit = {"key": "u", "value": 1, "code": "old", "modules": {**today, "results.py": "0" * 16, "gpu.py": "1" * 16},
            "hash": results.CODE_HASH}
    reference = {"digest": "now", "modules": today, "hash": results.CODE_HASH}
    assert results.code_against([unit], reference, "chen_levy")["changed_modules"] == ["results.py"]
    resumed = {"other_code_units": 2, "changed_modules": ["experiments/sbsnn_author.py"]}
    assert results._units_code_text(resumed, modules) == ""
    assert results._units_code_text(resumed) == "; 2 of them by code that differs from today's in experiments/sbsnn_author.py"


def test_the_verification_of_caches_is_not_among_a_chapters_code_while_the_runner_is():
    """gmp.verification (--verify, --restamp, --same-function) recomputes units only to compare them and writes only
    provenance: the runner imports it for its command line, yet an edit to it leaves every cache current."""
    assert "verification.py" in results.RENDERING
    for chapter in ("chen_levy", "sbsnn_gap", "lu_real"):
        modules = results.chapter_modules(chapter)
        assert {"runs.py", "provenance.py"} <= modules and not modules & {"verification.py", "samefunction.py"}, chapter
    today = results.code_fingerprint()["modules"]
    within = results.chapter_modules("chen_levy")
    assert results.changed_modules({**today, "verification.py": "0" * 16}, results.CODE_HASH, within) == []
    assert results.changed_modules({**today, "runs.py": "0" * 16}, results.CODE_HASH, within) == ["runs.py"]


def test_imports_are_followed_through_relative_imports_functions_and_packages(tmp_path):
    package = tmp_path / "gmp"
    (package / "sub").mkdir(parents=True)
    files = {"__init__.py": "from gmp import a\n", "a.py": "import numpy\ndef f():\n    from . import b\n",
             "b.py": "", "sub/__init__.py": "", "sub/c.py": "from ..a import f\nfrom gmp.sub import d\n",
             "sub/d.py": "import gmp.b\n", "unused.py": ""}
    for name, text in files.items():
        (package / name).write_text(text)
    assert results._imported(package / "a.py", package) == {package / "__init__.py", package / "b.py"}
    assert results._imported(package / "sub" / "c.py", package) == {
        package / "__init__.py", package / "a.py", package / "sub" / "__init__.py", package / "sub" / "d.py"}
    assert results._imported(package / "sub" / "d.py", package) == {package / "__init__.py", package / "b.py"}


TOY_PACKAGE = {
    "__init__.py": "from gmp import results\n", "runs.py": "", "layers.py": "", "other.py": "", "rulehistory.py": "",
    "results/__init__.py": "from gmp.results.store import Store\nfrom gmp.results.verdicts import verdict_box\n",
    "results/store.py": "from gmp.results import files as _files\n", "results/files.py": "",
    "results/verdicts.py": "from gmp import rulehistory\n", "experiments/__init__.py": "",
    "experiments/toy/__init__.py": "from .claims import CLAIMS\nfrom gmp.experiments.toy import figures\n",
    "experiments/toy/claims.py": "from gmp.layers import GmPLinear\nCLAIMS = []\n",
    "experiments/toy/figures.py": "", "experiments/toy/unused.py": "", "experiments/plain.py": "import gmp.other\n"}


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A stand-in for the repository and its gmp, with a chapter whose experiment is a package (toy) and one
    whose experiment is a module (plain), each with its page."""
    package = tmp_path / "gmp"
    for name, text in TOY_PACKAGE.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    (tmp_path / "book" / "part9").mkdir(parents=True)
    (tmp_path / "book" / "part9" / "toy.md").write_text("gmp.results.verdict_box('toy')\n")
    (tmp_path / "book" / "part9" / "plain.md").write_text("store = gmp.results.Store('plain', cfg)\n")
    monkeypatch.setattr(results.fingerprint, "PACKAGE", package)
    monkeypatch.setattr(results.files, "repository_root", lambda: tmp_path)
    results.chapter_modules.cache_clear()
    yield package
    results.chapter_modules.cache_clear()


def test_a_chapter_whose_experiment_is_a_package_counts_its_modules_and_those_of_packages_it_imports(toy_package):
    """A package is its __init__.py and what that imports; a module in a package brings the __init__.py of every
    package on the way; the ledger (RENDERING), and what only it imports, is not counted; nor is a module of the
    chapter's package that nothing imports."""
    common = {"__init__.py", "runs.py", "results/__init__.py", "results/store.py", "results/files.py",
              "experiments/__init__.py"}
    assert results.chapter_modules("toy") == common | {
        "experiments/toy/__init__.py", "experiments/toy/claims.py", "experiments/toy/figures.py", "layers.py"}
    assert results.chapter_modules("plain") == common | {"experiments/plain.py", "other.py"}
    assert results.experiment_source("toy", toy_package) == toy_package / "experiments" / "toy" / "__init__.py"
    assert results.experiment_source("plain", toy_package) == toy_package / "experiments" / "plain.py"
    assert results.experiment_source("absent", toy_package) is None and results.chapter_modules("absent") is None
    hashes = results.read_module_hashes(results.CODE_HASH, toy_package)
    assert {"results/store.py", "experiments/toy/claims.py", "experiments/toy/__init__.py"} <= set(hashes)
    assert hashes["results/store.py"] != hashes["results/files.py"]


def test_an_unfinished_run_says_which_journalled_units_other_code_computed(chapter, tmp_path, monkeypatch):
    cfg = config.load("fake_chapter", "paper")
    journal = results.journal_path("fake_chapter", "paper", cfg.digest)
    journal.parent.mkdir(parents=True)
    other = _other_code("results/store.py")
    journal.write_text(json.dumps({"key": "a", "value": 1, "code": other["digest"], "modules": other["modules"],
                                   "hash": other["hash"]})
                       + '\n{"key": "b", "value": 2}\n')
    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    results.Store("fake_chapter", cfg).memo("c", lambda: 3)
    monkeypatch.delenv(results.STAGING_ENV)
    absent = results.cached("fake_chapter", "summary")
    assert absent.units_code == {"other_code_units": 1, "code_not_recorded_units": 1,
                                 "changed_modules": ["results/store.py"]}
    assert ("journalled 3 finished units; 1 of them by code that differs from today's in results/store.py; "
            "1 of them with no code fingerprint recorded, and") in absent.describe()


def _ledger_structure(page: str) -> dict[str, dict]:
    """Per kind: the summary's counts per paper (``{paper: (total, {verdict: count})}``) and its claims
    (``[(paper, verdict, details)]``), read back from the ledger's HTML."""
    import re

    kinds = {}
    for section in re.findall(r'<section class="gmp-ledger-kind" data-kind="(\w+)" data-source="paper">(.*?)</section>',
                              page, re.S):
        kind, body = section
        summary = {}
        for paper, total, bar in re.findall(r'<tr data-paper="(\w+)" data-total="(\d+)">(.*?)</tr>', body, re.S):
            counts = {v: int(n) for v, n in re.findall(r'data-verdict="([\w-]+)" data-count="(\d+)"', bar)}
            summary[paper] = (int(total), counts)
        claims = re.findall(r'<details class="gmp-claim" id="[\w-]+" data-paper="(\w+)" data-verdict="([\w-]+)" '
                            r'data-source="paper">(.*?)</details>', body, re.S)
        kinds[kind] = {"summary": summary, "claims": claims}
    return kinds


def test_the_ledger_sums_up_each_paper_then_gives_one_line_per_claim_that_opens_onto_its_rule(chapter, tmp_path,
                                                                                              monkeypatch):
    long_text = ("Text reading (an iteration is one full-batch update; the photograph of today): the gap is small "
                 "for every one of the many settings that the paper tries, and stays small to the end (Fig. 9).")
    chapter.CLAIMS = [*chapter.CLAIMS,
                      Claim("fake-long", "chen", long_text, "summary", "reproduced if gap < 1, else partly", _check, source="paper"),
                      Claim("fake-lu", "lu", "Lu's gap is small.", "summary", "reproduced if gap < 0.1", _check,
                            short="Lu: small gap", source="paper"),
                      Claim("fake-identity", "lu", "An identity.", "summary", "verified if gap < 1",
                            lambda p: (f"gap {p['gap']:.2f}", VERIFIED if p["gap"] < 1 else FAILS), kind="identity", source="paper")]
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    _publish(tmp_path, "paper", {"gap": 0.5}, config.load("fake_chapter", "paper").digest)
    page = results.ledger().data
    kinds = _ledger_structure(page)
    assert set(kinds) == {"finding", "identity"}
    assert kinds["finding"]["summary"] == {"chen": (2, {"reproduced": 2}), "lu": (1, {"reproduced": 1})}
    assert kinds["identity"]["summary"] == {"lu": (1, {"verified": 1})}
    for kind in kinds.values():  # the counts add up to the claims listed below them
        for paper, (total, counts) in kind["summary"].items():
            assert sum(counts.values()) == total == sum(p == paper for p, _, _ in kind["claims"])
    rules = ["reproduced if gap &lt; 1", "reproduced if gap &lt; 1, else partly", "reproduced if gap &lt; 0.1"]
    for (paper, verdict, details), rule in zip(kinds["finding"]["claims"], rules, strict=True):
        line, body = details.split("</summary>")
        assert verdict == "reproduced" and "gap 0.50" in line and rule not in line
        assert f"<strong>Rule.</strong> {rule}</p>" in body and "<strong>Claim.</strong>" in body
    line, body = kinds["finding"]["claims"][1][2].split("</summary>")
    assert "Text reading: the gap is small" in line and line.count("…") == 1 and "Fig. 9" not in line
    assert html.escape(long_text) in body
    assert "Lu: small gap" in kinds["finding"]["claims"][2][2].split("</summary>")[0]
    assert 'id="claim-fake-long"' in page
    # a filter button for each paper and each verdict found, and CSS that filters by each of them
    css = (ROOT / "book" / "_static" / "gmp.css").read_text()
    for group, values in (("paper", ["chen", "lu", *results.PAPERS]),
                          ("verdict", [ledger._slug(v) for v in (*results.VERDICTS, *results.IDENTITY_VERDICTS,
                                                                 NOT_RUN, STALE, results.CORRUPT)])):
        for value in values:
            ident = f"gmp-ledger-{group}-{value}"
            assert f"#{ident}:checked ~ .gmp-ledger-kind" in css and f'label[for="{ident}"]' in css, ident
    for ident in ("paper-all", "paper-chen", "paper-lu", "verdict-all", "verdict-reproduced", "verdict-verified"):
        assert f'<label for="gmp-ledger-{ident}">' in page
    assert page.count('name="gmp-ledger-paper"') == 3 and page.count('name="gmp-ledger-verdict"') == 3


def test_short_text_keeps_a_short_claim_and_shortens_a_long_one_at_a_word():
    def claim(text, short=""):
        return Claim("k", "lu", text, "r", "rule", _check, short=short, source="paper")

    assert ledger.short_text(claim("Eq. (9): the boundary turns by eps.")) == "Eq. (9): the boundary turns by eps."
    assert ledger.short_text(claim("Anything.", short="Mine")) == "Mine"
    text = "Theorem 3: E[f(W)^2] = 1 for every order n and every symmetric law W, when f = sqrt(2) sin(x + pi/4)."
    assert ledger.short_text(claim(text), limit=90) == \
        "Theorem 3: E[f(W)^2] = 1 for every order n and every symmetric law W, when f = sqrt(2)…"
    # a cut inside a parenthesis goes back before it
    assert ledger.short_text(claim(text), limit=95) == \
        "Theorem 3: E[f(W)^2] = 1 for every order n and every symmetric law W, when f = sqrt(2) sin…"
    assert ledger.short_text(claim("A finding that holds well (Sec. 5, Fig. 3; notebook: 0.8)."), limit=40) \
        == "A finding that holds well."


def test_verdict_box_names_each_claim_of_the_chapter_with_its_paper_scale_verdict(chapter, tmp_path, monkeypatch):
    def large(payload):
        return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] > 1 else PARTLY

    chapter.CLAIMS = [*chapter.CLAIMS, Claim("fake-other", "chen", "The other gap is large.", "summary",
                                             "reproduced if gap > 1", large, source="paper")]
    box = results.verdict_box("fake_chapter").data
    assert box.count(f'<span class="verdict verdict-not-yet-run-at-paper-scale">{NOT_RUN}</span>') == 2
    _publish(tmp_path, "paper", {"gap": 0.5}, config.load("fake_chapter", "paper").digest)
    box = results.verdict_box("fake_chapter").data
    items = box.split("<li")[1:]
    assert len(items) == 2
    assert "The gap is small." in items[0] and f'verdict-reproduced">{REPRODUCED}</span>' in items[0]
    assert "The other gap is large." in items[1] and f'verdict-partly">{PARTLY}</span>' in items[1]
    assert all("gap 0.50" in item for item in items)
    assert '<a href="../claims.html#claim-fake-gap">' in items[0] and '<a href="#claims">' in box
    assert '<a href="../claims.html">claims ledger</a>' in box
    monkeypatch.setattr(results.files, "results_root", lambda: None)  # Colab: no repository, so no cache beside it
    box = results.verdict_box("fake_chapter").data
    assert "The gap is small." in box and "The other gap is large." in box and 'class="verdict' not in box
    assert '<a href="../claims.html">claims ledger</a>' in box
    chapter.CLAIMS = []
    assert results.verdict_box("fake_chapter") is None


def test_verdict_box_of_a_real_chapter_agrees_with_the_ledger(monkeypatch):
    """chen_levy's paper-scale cache is committed: the box and the ledger give the same verdicts."""
    monkeypatch.delenv(results.ROOT_ENV, raising=False)
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["chen_levy"])
    box = results.verdict_box("chen_levy").data
    rows = ledger.ledger_rows("../")
    assert len(rows) == len(results._claims_of("chen_levy")) == box.count("<li") > 0
    for row in rows:
        assert row["Short"] in box and row["Measured at paper scale"] in box
        assert ledger._verdict_html(row["verdict"], row["provisional"]) in box


def test_sign_test_is_the_binomial_tail():
    from gmp.results import sign_test

    assert sign_test(5, 5) == pytest.approx(1 / 32)
    assert sign_test(7, 7) == pytest.approx(1 / 128)
    assert sign_test(6, 7) == pytest.approx(8 / 128)
    assert sign_test(0, 3) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="wins <= trials"):
        sign_test(4, 3)


def test_fig6_rotated_needs_every_activation_beyond_noise_by_the_sign_test():
    """Four wins of four is every activation but not beyond noise (p = 1/16), and six of seven neither
    (p = 8/128): the count cannot tell the encoders apart, so inconclusive; the NeRF-type encoder winning
    every one of seven is beyond noise the other way: not reproduced."""
    from gmp.experiments import sbsnn_encoders
    from gmp.results import INCONCLUSIVE, NOT_REPRODUCED, PARTLY, REPRODUCED

    def payload(gains):
        names = [f"a{i}" for i in range(len(gains))]
        rows = {**{f"{n}/nerf": {"final_psnr": 30.0} for n in names},
                **{f"{n}/rotated": {"final_psnr": 30.0 + g} for n, g in zip(names, gains)}}
        return {"activations": names, "rows": rows}

    assert sbsnn_encoders._fig6_check(payload([1, 2, 3, 4, 5, 6, 7]))[1] == REPRODUCED
    assert sbsnn_encoders._fig6_check(payload([1, 2, 3, 4]))[1] == INCONCLUSIVE
    measured, verdict = sbsnn_encoders._fig6_check(payload([1, 2, 3, 4, 5, 6, -1]))
    assert verdict == INCONCLUSIVE and "6 of 7" in measured and "-1.00 dB" in measured
    assert sbsnn_encoders._fig6_check(payload([-1] * 7))[1] == NOT_REPRODUCED
    assert sbsnn_encoders._earlier_fig6_check(payload([1, 2, 3, 4, 5, 6, -1]))[1] == PARTLY  # the rule it replaced


def test_a_cached_payload_lacking_what_a_rule_reads_is_corrupt_in_the_ledger_and_verdict_box(chapter, tmp_path,
                                                                                             monkeypatch):
    """A payload without the key a claim's rule reads (``KeyError: 'gap'``) was a crash of the verdict box and
    the ledger; it is judged corrupt, saying what the rule could not read."""
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    _publish_hashed(tmp_path, {"methods": {}})
    [row] = ledger.ledger_rows()
    assert row["verdict"] == results.CORRUPT and "summary.json is malformed" in row["Measured at paper scale"]
    assert "KeyError: &#x27;gap&#x27;" in row["Measured at paper scale"]
    assert "verdict-corrupt" in results.verdict_box("fake_chapter").data


def test_a_cache_replaced_while_it_is_read_is_read_whole_never_corrupt_or_absent(chapter, tmp_path):
    """One thread replaces the cache as gmp.runs does (results.replace_folder) again and again while another
    reads it: every read sees one of the two complete caches (before, 25 of 2,603 reads saw CORRUPT)."""
    final = _publish_hashed(tmp_path, {"gap": 0.5})
    root, digest = final.parent, config.load("fake_chapter", "paper").digest
    stop, seen = threading.Event(), []

    def replace():
        for i in range(400):
            staging = root / f".staging-paper-{i}"
            results.atomic_write_json(staging / "summary.json", {"gap": float(i % 2)})
            results.atomic_write_bytes(staging / "summary.npz", results._npz_bytes({"x": np.zeros(50_000)}))
            results.atomic_write_json(staging / "provenance.json", {
                "config_digest": digest, "date": "2026-11-22 00:00 UTC", "payload_sha256": results.payload_hashes(staging)})
            results.replace_folder(staging, final)
        stop.set()

    writer = threading.Thread(target=replace)
    writer.start()
    while not stop.is_set():
        seen.append(results.cached("fake_chapter", "summary").status)
    writer.join()
    assert len(seen) > 50 and set(seen) == {"current"}, {s: seen.count(s) for s in set(seen)}


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A stand-in for the gmp folder whose files code_fingerprint hashes, 'imported' now."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (folder / name).write_text(f"def {name[0]}():\n    return 1\n")
    monkeypatch.setattr(results.fingerprint, "PACKAGE", folder)
    monkeypatch.setattr(results.fingerprint, "_IMPORTED_STATS", results._file_stats(folder))
    results.code_fingerprint.cache_clear()
    yield folder
    results.code_fingerprint.cache_clear()


def _rewrite(path, text):
    """Write ``text`` to ``path`` with a new mtime, as an editor would."""
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_code_edited_names_the_modules_changed_after_gmp_was_imported(package):
    """Edited after the import but before the fingerprint (its code may be old or new), or after the fingerprint
    in its code (not in a comment): named. An untouched module is not."""
    _rewrite(package / "a.py", "def a():\n    return 2\n")
    fingerprint = results.code_fingerprint()
    assert results.code_edited() == ["a.py"]
    _rewrite(package / "b.py", "def b():\n    return 1  # a comment changes no code\n")
    assert results.code_edited() == ["a.py"]
    _rewrite(package / "c.py", "def c():\n    return 3\n")
    assert results.code_edited() == ["a.py", "c.py"]
    assert results.code_fingerprint() == fingerprint  # still the files as first hashed


def test_journal_entries_record_threads_and_edits_and_refuse_wrong_types(chapter, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"))
    monkeypatch.setattr(results.fingerprint, "code_edited", lambda: ["implicit.py"])
    store = results.Store("fake_chapter", config.load("fake_chapter", "paper"))
    store.memo("u", lambda: 1)
    [entry] = results.journal_entries(store._journal_path)
    assert entry["threads"] == torch.get_num_threads() and entry["edited"] == ["implicit.py"]
    record = json.loads(next((store.staging / results.RUN_CODE).glob("*.json")).read_text())
    assert record["edited"] == ["implicit.py"] and record["threads"] == torch.get_num_threads()
    assert results.entry_problem({"key": "u", "value": 1, "threads": 0}) == "its 'threads' is 0, not an integer >= 1"
    assert results.entry_problem({"key": "u", "value": 1, "edited": "x"}) == "its 'edited' is not a list of strings"
    assert results.entry_problem({"key": "u", "value": 1, "threads": None}) is None  # torch not imported


def test_the_ledger_judges_a_rule_that_cannot_take_a_perfect_seeds_infinity_inconclusive(chapter, tmp_path):
    from gmp.experiments import sbsnn_author_figs

    claim = {c.key: c for c in sbsnn_author_figs.CLAIMS}["sbsnn-fig6-rotated-author"]
    rows = {a: {"best_train_psnr": 40.0} for a in sbsnn_author_figs.FIG7_ACTIVATIONS}
    payload = {"figures": {"fig6": {f"{a}/{e}": rows[a] for a in rows for e in ("nerf", "rotated")}}, "seeds": {}}
    for a in rows:
        payload["seeds"][f"{a}/nerf"] = [{"seed": s, "best_train_psnr": 40.0} for s in range(5)]
        payload["seeds"][f"{a}/rotated"] = [{"seed": s, "best_train_psnr": 43.0 + 0.1 * s} for s in range(5)]
    payload["seeds"][f"{a}/rotated"][2]["best_train_psnr"] = float("inf")  # a perfect fit
    chapter.CLAIMS = [claim]
    folder = _publish(tmp_path, "paper", payload, config.load("fake_chapter", "paper").digest)
    results.atomic_write_json(folder / f"{claim.result}.json", payload)
    judged = ledger.judge("fake_chapter", claim)  # paired_interval refuses +inf: the ledger crashed with ValueError
    assert judged.verdict == results.INCONCLUSIVE and judged.measured.startswith(
        f"the cached {claim.result}.json holds an infinite number (a perfect fit's PSNR, say), a result this rule's "
        "statistics cannot take (ValueError: paired_interval needs one or more finite differences")
    payload["seeds"][f"{a}/rotated"][2]["best_train_psnr"] = float("nan")  # not a result: no verdict, saying why
    results.atomic_write_json(folder / f"{claim.result}.json", payload)
    results.atomic_write_json(folder / "provenance.json", {**json.loads((folder / "provenance.json").read_text()),
                                                           "payload_sha256": results.payload_hashes(folder)})
    judged = ledger.judge("fake_chapter", claim)
    assert judged.verdict == results.INCONCLUSIVE and judged.measured.startswith(
        f"no verdict: the rule's statistics refuse a NaN of the cached {claim.result}.json (a network that diverged")


def test_a_rule_never_compares_a_nan_of_its_payload():
    """Issue #48: a NaN best PSNR of Fig. 6 (a network that diverged at epoch 1: ``np.nanmax`` of NaNs) compared
    False both ways and was counted against the rotated encoder ("rotated better for 6 of 7"); the rule now
    compares no NaN: the finding is inconclusive, naming where the NaN is."""
    from gmp.experiments import sbsnn_author_figs

    claim = {c.key: c for c in sbsnn_author_figs.CLAIMS}["sbsnn-fig6-rotated-author"]
    acts = sbsnn_author_figs.FIG7_ACTIVATIONS
    payload = {"figures": {"fig6": {f"{a}/{e}": {"best_train_psnr": 40.0 + (e == "rotated")} for a in acts
                                    for e in ("nerf", "rotated")}}, "seeds": {}}
    assert claim.evaluate(payload)[1] == results.REPRODUCED  # rotated better by 1 dB for each of the seven
    payload["figures"]["fig6"][f"{acts[0]}/rotated"]["best_train_psnr"] = float("nan")
    measured, verdict = claim.evaluate(payload)
    assert verdict == results.INCONCLUSIVE
    assert measured.startswith(f"no verdict: the rule would compare payload['figures']['fig6']['{acts[0]}/rotated']"
                               "['best_train_psnr'], which is NaN")
    identity = results.Claim(key="x", paper="chen", result="r", text="t", rule="r", kind=results.IDENTITY,
                             source="paper", check=lambda p: ("m", results.VERIFIED if p["err"] < 1e-9 else results.FAILS))
    assert identity.evaluate({"err": 0.0})[1] == results.VERIFIED
    with pytest.raises(ValueError, match=r"compared payload\['err'\], which is NaN"):
        identity.evaluate({"err": float("nan")})


def test_no_executed_notebook_of_a_paper_scale_run_is_kept_in_git():
    """A run's executed notebook holds the prose and verdicts of its day, which go stale as the chapter changes
    (the page renders the cache with today's text): git ignores it, and none is committed."""
    import subprocess

    root = results.repository_root()
    try:
        listed = subprocess.run(["git", "ls-files", "book/_results/*/paper/*.ipynb"], cwd=root, capture_output=True,
                                text=True, check=True, timeout=60).stdout.split()
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "book/_results/chen_banana/paper/x.ipynb"],
                                 cwd=root, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        pytest.skip("git is not at hand")
    assert listed == [] and ignored


def test_a_provenance_whose_config_was_edited_but_not_its_digest_is_corrupt_not_current(chapter, tmp_path):
    """Issue #48: ``provenance.json`` with its ``config`` changed but its ``config_digest`` kept read "current";
    the digest is recomputed from the recorded config when the cache is read."""
    cfg = config.load("fake_chapter", "paper")
    folder = _publish_hashed(tmp_path, {"gap": 0.5})
    provenance = json.loads((folder / "provenance.json").read_text())
    results.atomic_write_json(folder / "provenance.json", {**provenance, "config": cfg.as_dict()})
    assert results.cached("fake_chapter", "summary").status == "current"
    edited = {**cfg.as_dict(), next(iter(cfg.as_dict())): "edited"}
    results.atomic_write_json(folder / "provenance.json", {**provenance, "config": edited})
    entry = results.cached("fake_chapter", "summary")
    assert entry.status == "corrupt" and entry.problem.startswith(
        f"its provenance.json records a config whose digest is {config.digest_of(edited)}, not the config_digest "
        f"{cfg.digest!r}")


def test_a_journal_with_two_entries_for_one_unit_is_an_error_naming_the_file_and_both_lines(tmp_path):
    """Issue #48: a unit journalled twice was resolved silently, the last line winning (a second ``default-0``
    entry with PSNR 99 put 99 in the cache)."""
    journal = tmp_path / "smoke-x.jsonl"
    journal.write_text("".join(json.dumps(e) + "\n" for e in ({"key": "default-0", "value": {"psnr": 30.0}},
                                                             {"key": "full-0", "value": {"psnr": 31.0}},
                                                             {"key": "default-0", "value": {"psnr": 99.0}})))
    for read in (results.journal_entries, results.journal_units):
        with pytest.raises(ValueError, match=rf"journal {journal} holds two entries for the unit 'default-0', on "
                                             "lines 1 and 3"):
            read(journal)
