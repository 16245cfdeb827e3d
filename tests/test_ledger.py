"""The claims ledger (gmp.results.verdicts): three ledgers with their own tallies, the power of a rule's test,
provisional verdicts, and whether a rule was fixed before its run."""

import dataclasses
import html
import itertools
import os
import json
import subprocess
import sys
import types

import pytest
from scipy import stats

from gmp import config, results
from gmp.results import rulestatus
from gmp.results import verdicts as ledger
from gmp.results import (INCONCLUSIVE, NOT_REPRODUCED, PARTLY, REPRODUCED, SOURCES, Claim, EarlierDesign, EarlierRule,
                         PowerTest, sign_test)


def _check(payload):
    return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] < 1 else PARTLY


def _strict(payload):
    return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] < 0.1 else NOT_REPRODUCED


def _claim(**changes):
    return Claim(**{"key": "fake-gap", "paper": "chen", "text": "The gap is small.", "result": "summary",
                    "rule": "reproduced if gap < 1, else partly", "check": _check, "source": "paper", **changes})


@pytest.fixture
def chapter(monkeypatch, tmp_path):
    """A chapter 'fake_chapter' with one claim, an empty results root, and the ledger reading only it."""
    module = types.ModuleType("gmp.experiments.fake_chapter")
    module.CONFIG = config.scaled(smoke={"n": 1}, small={"n": 2}, paper={"n": 3})
    module.CLAIMS = [_claim()]
    monkeypatch.setitem(sys.modules, "gmp.experiments.fake_chapter", module)
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "_results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    monkeypatch.setattr(results.claims, "experiment_chapters", lambda: ["fake_chapter"])
    return module


def _publish(tmp_path, payload, date="2026-11-22 00:00 UTC", rules=None):
    folder = tmp_path / "_results" / "fake_chapter" / "paper"
    results.atomic_write_json(folder / "summary.json", payload)
    code = {"digest": "d", "modules": {}, "hash": results.CODE_HASH}
    if rules is not None:
        code.update(rules=rules, rule_hash=results.RULE_HASH)
    results.atomic_write_json(folder / "provenance.json", {
        "config_digest": config.load("fake_chapter", "paper").digest, "date": date, "code": code})


def test_every_claim_of_every_chapter_says_whose_claim_it_is():
    """Every claim is the paper's, our robustness check, or a superseded reading; the arms chapters hold
    only checks, and the claims read from the text as the author's code rules out are the superseded ones."""
    with pytest.raises(ValueError, match="source ''"):
        _claim(source="")
    seen = set()
    for chapter in results.experiment_chapters():
        for claim in results._claims_of(chapter):
            assert claim.source in SOURCES, claim.key
            if chapter.endswith("_arms"):
                assert claim.source == "check", claim.key
            assert (claim.source == "superseded") == claim.text.startswith("Text reading"), claim.key
            seen.add(claim.source)
    assert seen == set(SOURCES)


def test_the_real_ledger_tallies_each_group_apart():
    """The tallies of the three ledgers add up to the claims of each, and no check or superseded reading is
    counted among the papers' claims."""
    rows = ledger.ledger_rows()
    for kind in ("finding", "identity"):
        everything = ledger.ledger_counts(rows, kind)
        for paper, counts in everything.items():
            per_group = [ledger.ledger_counts(rows, kind, source).get(paper, {}) for source in SOURCES]
            assert {c: sum(g.get(c, 0) for g in per_group) for c in counts} == counts
        for source in SOURCES:
            mine = [r for r in rows if r["kind"] == kind and r["source"] == source]
            assert sum(sum(c.values()) for c in ledger.ledger_counts(rows, kind, source).values()) == len(mine)
    page = results.ledger().data
    papers, rest = page.split("Our robustness checks")
    checks, superseded = rest.split("Superseded readings")
    for row in rows:
        where = {"paper": papers, "check": checks, "superseded": superseded}[row["source"]]
        assert f'id="{ledger.claim_anchor(row["key"])}"' in where, row["key"]


def test_a_design_that_cannot_reach_the_level_is_inconclusive_never_reproduced():
    """With 5 paired seeds an exact two-sided Wilcoxon test cannot reach p < 0.05 (its smallest p, all
    differences of one sign, is 2/32): a rule decided by it reports inconclusive, whatever its check says."""
    five = PowerTest("wilcoxon", 5)
    assert five.min_p == pytest.approx(stats.wilcoxon([1.0, 2.0, 3.0, 4.0, 5.0], method="exact").pvalue) == 0.0625
    assert not five.can_separate and "cannot reach p < 0.05" in five.describe()
    for verdict in (REPRODUCED, PARTLY, NOT_REPRODUCED):
        claim = _claim(check=lambda payload, v=verdict: ("GmP lower in 5 of 5 seeds", v), test=five)
        measured, judged = claim.evaluate({})
        assert judged == INCONCLUSIVE and "GmP lower in 5 of 5 seeds" in measured and "0.062" in measured
    six = PowerTest("wilcoxon", 6)
    assert six.min_p == pytest.approx(stats.wilcoxon([1.0, 2, 3, 4, 5, 6], method="exact").pvalue) and six.can_separate
    assert _claim(check=lambda payload: ("m", REPRODUCED), test=six).evaluate({}) == ("m", REPRODUCED)


def test_the_smallest_attainable_p_of_each_test_is_its_most_extreme_outcome():
    for n in (3, 5, 7):
        assert PowerTest("sign", n, alternative="greater").min_p == pytest.approx(sign_test(n, n))
    assert PowerTest("t", 5).min_p == 0.0 and PowerTest("t", 1).min_p == 1.0
    for ties in ((), (2, 2), (1, 3)):  # y in the one order that matches x, among the distinct orders
        x = [g for g, size in enumerate(ties or (1,) * 4) for _ in range(size)]
        rhos = [stats.spearmanr(x, y).statistic for y in itertools.permutations(range(4))]
        best = sum(r >= max(rhos) - 1e-12 for r in rhos) / len(rhos)
        assert PowerTest("spearman", 4, alternative="less", ties=ties).min_p == pytest.approx(best)
    with pytest.raises(ValueError, match="unknown test"):
        PowerTest("anova", 5)


def test_a_verdict_on_an_unfinished_run_is_provisional_and_counted_apart(chapter, tmp_path):
    chapter.CLAIMS = [_claim(unfinished=lambda units: {"gap": units["a"]} if "a" in units else None),
                      _claim(key="fake-final", text="The other gap is small.")]
    digest = config.load("fake_chapter", "paper").digest
    journal = results.journal_path("fake_chapter", "paper", digest)
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"key": "a", "value": 0.5}) + "\n")
    rows = ledger.ledger_rows()
    assert [(r["verdict"], r["provisional"], r["category"]) for r in rows] == [
        (REPRODUCED, True, "reproduced (provisional)"), (results.NOT_RUN, False, results.NOT_RUN)]
    counts = ledger.ledger_counts(rows, "finding")["Chen &amp; Ge"]
    assert counts["reproduced (provisional)"] == 1 and counts[REPRODUCED] == 0 and counts[results.NOT_RUN] == 1
    assert "(provisional)</small>" in rows[0]["Verdict"] and "(provisional)" not in rows[1]["Verdict"]
    page = results.ledger().data
    assert 'data-verdict="reproduced-provisional" data-count="1"' in page and "data-provisional" in page
    assert "(provisional)</small>" in results.verdict_box("fake_chapter").data


def test_the_rule_recorded_with_a_run_tells_a_rule_fixed_before_it_from_one_revised_after(chapter, tmp_path):
    claim = chapter.CLAIMS[0]
    _publish(tmp_path, {"gap": 0.5}, rules={claim.key: results.rule_digest(claim)})
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.FIXED and row["earlier"] is None
    _publish(tmp_path, {"gap": 0.5}, rules={claim.key: "0" * 16})
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.REVISED and "RULE REVISED" in row["Rule status"]
    _publish(tmp_path, {"gap": 0.5}, rules={"another-claim": "0" * 16})
    assert ledger.ledger_rows()[0]["rule_status"] == ledger.WRITTEN_AFTER  # the claim was written after the run
    _publish(tmp_path, {"gap": 0.5})
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.UNKNOWN and "recorded no rule hashes" in row["Rule status"]


def test_a_rule_replaced_after_its_run_shows_the_verdict_of_the_rule_in_force_at_it(chapter, tmp_path):
    earlier = EarlierRule(rule="reproduced if gap < 0.1, else not reproduced", check=_strict, commits="abc1234",
                          replaced="2026-11-23 00:00 UTC", why="The bound was relaxed after the run.")
    chapter.CLAIMS = [_claim(earlier=earlier)]
    _publish(tmp_path, {"gap": 0.5}, date="2026-11-22 00:00 UTC")
    [row] = ledger.ledger_rows()
    assert (row["verdict"], row["rule_status"], row["earlier"]) == (REPRODUCED, ledger.REVISED, NOT_REPRODUCED)
    assert "abc1234" in row["Rule status"] and "relaxed after the run" in row["Rule status"]
    page = results.ledger().data
    assert "Rule in force at the run" in page and "reproduced if gap &lt; 0.1, else not reproduced" in page
    assert "rule in force at the run: <span" in results.verdict_box("fake_chapter").data
    # A later run of the same design does not hide that the rule was chosen after seeing an earlier one.
    _publish(tmp_path, {"gap": 0.5}, date="2026-11-24 00:00 UTC")
    [row] = ledger.ledger_rows()
    assert (row["rule_status"], row["earlier"]) == (ledger.REVISED, NOT_REPRODUCED)
    assert "this run (2026-11-24 00:00 UTC) came after the revision" in row["Rule status"]


def test_a_rule_digest_follows_the_rule_not_its_documentation():
    def make(bound):
        def check(payload):
            """A check."""
            return "m", REPRODUCED if payload["gap"] < bound else PARTLY
        return check

    def documented(payload):
        """Another docstring, same code."""
        return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] < 1 else PARTLY

    base = results.rule_digest(_claim())
    assert results.rule_digest(_claim()) == base
    assert results.rule_digest(_claim(text="Reworded claim.", short="Short")) == base
    assert results.rule_digest(_claim(rule="reproduced if gap < 2")) != base
    assert results.rule_digest(_claim(check=_strict)) != base
    assert results.rule_digest(_claim(check=make(1.0))) != results.rule_digest(_claim(check=make(2.0)))
    assert results.rule_digest(_claim(test=PowerTest("t", 5))) != base
    assert results.rule_digest(_claim(check=documented)) != base  # another function name is another tree


def test_a_run_records_the_rules_of_its_chapters_claims(chapter, tmp_path, monkeypatch):
    staging = tmp_path / "_results" / "fake_chapter" / ".staging-paper-1"
    monkeypatch.setenv(results.STAGING_ENV, str(staging))
    results.Store("fake_chapter", config.load("fake_chapter", "paper"))
    [record] = [json.loads(p.read_text()) for p in (staging / results.RUN_CODE).glob("*.json")]
    assert record["code"]["rules"] == results.rule_digests("fake_chapter") == {
        "fake-gap": results.rule_digest(chapter.CLAIMS[0])}
    assert {k: v for k, v in record["code"].items() if k not in ("rules", "rule_hash")} == results.code_fingerprint()
    assert results.run_code("no_such_chapter") == results.code_fingerprint()


def test_an_earlier_rule_keeps_its_verdict_where_the_rule_at_the_run_cannot_be_read(monkeypatch):
    """A claim replaced after a run of its design, whose rule's hash also differs from the one its cache recorded,
    made at a commit with uncommitted changes (so git cannot give the rule it ran with): the row stays revised,
    says both, and still shows the earlier rule's verdict (it showed none)."""
    from gmp.experiments import chen_levy
    from gmp.results import cache

    claim = {c.key: c for c in chen_levy.CLAIMS}["chen-levy-stable"]
    entry = cache.cached("chen_levy", claim.result, "paper")
    code = {**entry.provenance["code"], "rules": {**entry.provenance["code"]["rules"], claim.key: "0" * 16}}
    unreadable = dataclasses.replace(entry, provenance={**entry.provenance, "code": code, "commit": "0" * 40 + "+dirty"})
    monkeypatch.setattr(ledger._cache, "cached", lambda chapter, name, scale="paper": unreadable)
    judged = ledger.judge("chen_levy", claim)
    assert judged.rule_status == ledger.REVISED
    assert "cannot be told" in judged.rule_note and "RULE REVISED after an earlier paper-scale run" in judged.rule_note
    assert judged.earlier == claim.evaluate(entry.payload, claim.earlier.check)


def test_every_rule_replaced_after_its_committed_run_shows_both_verdicts():
    """On the committed caches, each claim whose rule was replaced after a paper-scale run of its design shows
    the verdict of the rule in force at that run beside today's; the others say that their rule was fixed
    before the run (a cache that records rule hashes) or that this is unknown (one written before them)."""
    rows = {row["key"]: row for row in ledger.ledger_rows()}
    replaced = {claim.key for chapter in results.experiment_chapters() for claim in results._claims_of(chapter)
                if claim.earlier is not None}
    assert {"chen-levy-rmse", "chen-uci-gmp-best-clean", "chen-uci-naval-near-zero-clean", "lu-syn-gpn-preserves",
            "lu-syn-plain-explode", "chen-banana-accuracy", "chen-banana-lr", "sbsnn-fit-faster-author-minibatch"} <= replaced
    for key in replaced:
        assert rows[key]["rule_status"] == ledger.REVISED and rows[key]["earlier"] in results.VERDICTS, key
    for key, row in rows.items():  # a rule revised after its run, as the history shows it, shows both verdicts
        if key not in replaced and row["verdict"] in (*results.VERDICTS, *results.IDENTITY_VERDICTS):
            assert row["rule_status"] in rulestatus.STATUSES, key
            assert (row["rule_status"] == ledger.REVISED) == (row["earlier"] is not None), key
    # the arms' check keeps the runs of the headline's earlier design, seen before the check judged its own runs
    assert rows["chen-banana-accuracy-glorot"]["rule_status"] == ledger.UNKNOWN
    assert "the headline chen-banana-accuracy had until 2026-11-26" in html.unescape(
        rows["chen-banana-accuracy-glorot"]["Rule status"])
    # Levy's earlier draw was seen at 1cc9952 and judged there by the headline's rule of then, which is kept
    assert (rows["chen-levy-rmse-earlier-draw"]["rule_status"], rows["chen-levy-rmse-earlier-draw"]["earlier"]) == (
        ledger.REVISED, PARTLY)
    # the first banana run (2026-11-22) already held both rates; these checks came after it
    assert rows["chen-banana-accuracy-lr001"]["rule_status"] == rows["chen-banana-accuracy-lr01"]["rule_status"] == (
        ledger.WRITTEN_AFTER)
    # dca65ed rewrote the banana rules after their first run: the old accuracy rule gives more on today's cache.
    assert (rows["chen-banana-accuracy"]["verdict"], rows["chen-banana-accuracy"]["earlier"]) == (PARTLY, REPRODUCED)
    assert rows["sbsnn-fit-faster-author-minibatch"]["rule_status"] == ledger.REVISED


def test_a_claim_called_provisional_is_marked_with_its_reason_and_counted_apart(chapter, tmp_path):
    chapter.CLAIMS = [_claim(provisional="one seed; the margin lies within the spread of single runs")]
    _publish(tmp_path, {"gap": 0.5})
    [row] = ledger.ledger_rows()
    assert row["provisional"] and row["category"] == f"{REPRODUCED} ({ledger.PROVISIONAL})"
    assert 'title="one seed; the margin lies within the spread of single runs"' in row["Verdict"]
    assert ledger.ledger_counts([row], row["kind"], "paper")[row["Paper"]][row["category"]] == 1
    _publish(tmp_path, {"no gap": 0.5})  # a verdict the rule could not give is not provisional
    [row] = ledger.ledger_rows()
    assert row["verdict"] == results.CORRUPT and not row["provisional"]


def test_a_claim_provisional_until_its_payload_decides_it_is_marked_only_then(chapter, tmp_path):
    chapter.CLAIMS = [_claim(provisional=lambda p: "" if p.get("seeds", 1) >= 5 else "one seed")]
    _publish(tmp_path, {"gap": 0.5})
    [row] = ledger.ledger_rows()
    assert row["provisional"] and 'title="one seed"' in row["Verdict"]
    _publish(tmp_path, {"gap": 0.5, "seeds": 5})
    [row] = ledger.ledger_rows()
    assert not row["provisional"] and row["category"] == REPRODUCED


def test_a_rule_recorded_by_a_run_that_carried_units_is_not_called_fixed_before_them(chapter, tmp_path):
    claim = chapter.CLAIMS[0]
    _publish(tmp_path, {"gap": 0.5}, rules={claim.key: results.rule_digest(claim)})
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.FIXED
    path = tmp_path / "_results" / "fake_chapter" / "paper" / "provenance.json"
    provenance = json.loads(path.read_text())
    provenance["carried_units"] = {"the run of 2026-11-20": {"units": 3, "why": "unchanged settings", "code_recorded": 3}}
    results.atomic_write_json(path, provenance)
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.UNKNOWN
    assert "3 of the run&#x27;s units were carried over from earlier runs (the run of 2026-11-20)" in row["Rule status"]


def _history(commit, chapter, result):
    """The payload of ``chapter``'s paper-scale ``result`` as commit ``commit`` stored it, or None where the git
    history is not at hand (a copy without it, a shallow clone)."""
    root = results.repository_root()
    try:
        shown = subprocess.run(["git", "show", f"{commit}:book/_results/{chapter}/paper/{result}.json"], cwd=root,
                               capture_output=True, check=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return json.loads(shown.stdout)


def test_every_verdict_cited_from_the_history_is_what_its_rule_gives_on_that_commits_cache():
    """An earlier rule's verdict at its own run, and an earlier design's at the run of it that was seen, are cited
    with the commit whose cache held that run; recomputed here from that cache, each is what the ledger cites."""
    cited = []
    for chapter in results.experiment_chapters():
        for claim in results._claims_of(chapter):
            if claim.earlier is not None and claim.earlier.gave:
                payload = _history(claim.earlier.at_run, chapter, claim.result)
                if payload is not None:
                    cited.append((claim.key, claim.evaluate(payload, claim.earlier.check)[1], claim.earlier.gave))
            if claim.earlier_design is not None:
                design = claim.earlier_design
                payload = _history(design.run, chapter, claim.result)
                if payload is not None:
                    cited.append((claim.key, claim.evaluate(payload, design.check_run)[1], design.gave))
    if not cited:
        pytest.skip("the git history of the caches is not at hand")
    assert [(key, gives) for key, gives, _ in cited] == [(key, gave) for key, _, gave in cited]
    assert {"chen-banana-accuracy", "chen-levy-rmse", "chen-uci-naval-near-zero"} <= {key for key, _, _ in cited}


def test_levys_earlier_design_kept_as_a_check_holds_the_runs_of_that_design_that_were_seen():
    """chen_levy's headline moved from NumPy's default_rng draw to the official notebook's after a run of the earlier
    draw was seen (the cache of commit 1cc9952, 5 seeds). The check arm that keeps that design reruns it: on those
    seeds its test RMSEs are the ones of that run, bit for bit, so its verdict is computed on the design that was seen."""
    from gmp.experiments import chen_levy

    [claim] = [c for c in results._claims_of("chen_levy") if c.key == "chen-levy-rmse"]
    design = claim.earlier_design
    seen = _history(design.run, "chen_levy", "fig2")
    if seen is None:
        pytest.skip("the git history of the caches is not at hand")
    kept = results.cached(design.chapter, "arms", "paper")
    assert kept.current, kept.describe()
    for method in chen_levy.METHODS:
        arm = kept.payload["arms"][f"{method} earlier draw"]
        assert seen["runs"][method] and set(seen["runs"][method]) < set(arm)
        assert {s: arm[s]["test_rmse"] for s in seen["runs"][method]} == {
            s: run["test_rmse"] for s, run in seen["runs"][method].items()}


def test_a_rule_recorded_by_a_run_assembled_from_units_that_earlier_code_computed_is_not_called_fixed_before_them(
        chapter, tmp_path):
    """A cache re-assembled from resumed units records the rules in force when it was assembled, not when its units
    ran: where earlier code computed some of them, the ledger does not call the rule fixed before the run."""
    claim = chapter.CLAIMS[0]
    _publish(tmp_path, {"gap": 0.5}, rules={claim.key: results.rule_digest(claim)})
    path = tmp_path / "_results" / "fake_chapter" / "paper" / "provenance.json"
    provenance = json.loads(path.read_text())
    provenance.update(resumed_units=16, resumed_code={"other_code_units": 0, "code_not_recorded_units": 0,
                                                      "changed_modules": []})
    results.atomic_write_json(path, provenance)
    assert ledger.ledger_rows()[0]["rule_status"] == ledger.FIXED  # resumed units that today's code computed
    provenance["resumed_code"] = {"other_code_units": 16, "code_not_recorded_units": 0,
                                  "changed_modules": ["experiments/fake_chapter.py"]}
    results.atomic_write_json(path, provenance)
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.UNKNOWN
    assert "resumed 16 units that earlier code computed (modules changed since: experiments/fake_chapter.py)" in (
        html.unescape(row["Rule status"]))


def test_a_headline_whose_design_changed_after_a_run_was_seen_shows_the_earlier_designs_verdicts(
        chapter, tmp_path, monkeypatch):
    """The earlier design's verdict at the run seen (cited) and on its runs kept as a check (computed by the check's
    own rule on its own cache) show beside today's, on the claim's ledger row and in the chapter's verdict box."""
    kept = _claim(key="fake-gap-old-design", source="check", check=_strict, result="old")
    design = EarlierDesign(design="the old draw", commits="abc1234", changed="2026-11-23 00:00 UTC",
                           why="Chosen after the old draw had been seen.", run="def5678", gave=NOT_REPRODUCED,
                           kept_as=kept.key, chapter="fake_chapter")
    chapter.CLAIMS = [_claim(earlier_design=design, caveat=lambda p: "one seed decides it" if p["gap"] > 0.4 else ""),
                      kept]
    _publish(tmp_path, {"gap": 0.5})
    folder = tmp_path / "_results" / "fake_chapter" / "paper"
    results.atomic_write_json(folder / "old.json", {"gap": 0.05})
    rows = {row["key"]: row for row in ledger.ledger_rows()}
    row = rows["fake-gap"]
    assert row["verdict"] == REPRODUCED and row["earlier_design"] == (REPRODUCED, NOT_REPRODUCED)
    assert row["caveat"] == "one seed decides it" and "one seed decides it" in row["Verdict"]
    assert ledger.DESIGN_CHANGED in row["Verdict"] and "abc1234" in row["Earlier"] and "def5678" in row["Earlier"]
    assert "the old draw" in row["Earlier"] and "cited from the history" in row["Earlier"]
    box = results.verdict_box("fake_chapter").data
    assert ledger.DESIGN_CHANGED in box and "one seed decides it" in box
    results.atomic_write_json(folder / "old.json", {"gap": 0.5})  # the kept runs judged by the check's own rule
    assert {r["key"]: r for r in ledger.ledger_rows()}["fake-gap"]["earlier_design"] == (NOT_REPRODUCED,
                                                                                       NOT_REPRODUCED)
    chapter.CLAIMS = [_claim(earlier_design=design)]  # where the check is not held, the ledger says which to name
    with pytest.raises(ValueError, match="kept as 'fake-gap-old-design'"):
        ledger.ledger_rows()
    chapter.CLAIMS = [_claim()]
    [row] = ledger.ledger_rows()
    assert row["earlier_design"] is None and ledger.DESIGN_CHANGED not in row["Verdict"] and not row["caveat"]


def test_a_check_keeping_a_headlines_earlier_design_is_judged_by_the_headlines_rule_at_the_run_seen(
        chapter, tmp_path):
    """Where the run of a headline's earlier design that was seen was judged by the headline's earlier rule, that
    rule also judges the check keeping the design's runs: revised where it decides otherwise, refactored where not,
    unknown where that run's rule is not the one kept or the check cannot read its runs as the headline's."""
    earlier = EarlierRule(rule="reproduced if gap < 0.1, else partly",
                          check=lambda p: _check({"gap": p["gap"] + 0.9}),
                          commits="abc1234", replaced="2026-11-21 00:00 UTC", at_run="def5678", gave=PARTLY)
    design = EarlierDesign(design="the old draw", commits="abc1234", changed="2026-11-21 00:00 UTC",
                           why="Chosen after the old draw had been seen.", run="def5678", gave=NOT_REPRODUCED,
                           kept_as="fake-gap-old-design", chapter="fake_chapter")
    as_headline = lambda p: {"gap": p["old"]}  # noqa: E731 - the check's payload as the headline's
    kept = _claim(key="fake-gap-old-design", source="check", check=lambda p: _check(as_headline(p)),
                  as_headline=as_headline)

    def row(payload, **changes):
        chapter.CLAIMS = [_claim(earlier=dataclasses.replace(earlier, **changes), earlier_design=design), kept]
        _publish(tmp_path, payload)
        return {r["key"]: r for r in ledger.ledger_rows()}["fake-gap-old-design"]

    revised = row({"gap": 0.5, "old": 0.5})  # today's rule: reproduced; the headline's rule of then: partly
    assert (revised["verdict"], revised["rule_status"], revised["earlier"]) == (REPRODUCED, ledger.REVISED, PARTLY)
    assert "the cache of commit def5678), judged by the headline's rule of then (replaced by abc1234" in (
        html.unescape(revised["Rule status"]))
    assert "which gave partly there; on this check's runs that rule gives partly" in html.unescape(
        revised["Rule status"])
    same = row({"gap": 0.5, "old": 2.5})  # both rules: partly
    assert (same["verdict"], same["rule_status"], same["earlier"]) == (PARTLY, ledger.REFACTORED, None)
    other = row({"gap": 0.5, "old": 0.5}, at_run="0123abc")  # the earlier rule is not that of the run seen
    assert (other["rule_status"], other["earlier"]) == (ledger.UNKNOWN, None)
    unread = row({"gap": 0.5, "old": 0.5}, check=lambda p: _check({"gap": p["missing"]}))
    assert (unread["rule_status"], unread["earlier"]) == (ledger.UNKNOWN, None)
    assert "the headline's rule of then cannot judge this check's runs (KeyError" in html.unescape(
        unread["Rule status"])
    kept = dataclasses.replace(kept, as_headline=None)
    assert row({"gap": 0.5, "old": 0.5})["rule_status"] == ledger.UNKNOWN


def test_an_earlier_rule_applied_to_a_run_made_after_it_was_replaced_is_not_called_the_rule_in_force_at_it(
        chapter, tmp_path):
    earlier = EarlierRule(rule="reproduced if gap < 0.1, else not reproduced", check=_strict, commits="abc1234",
                          replaced="2026-11-23 00:00 UTC", at_run="fed4321", gave=REPRODUCED)
    chapter.CLAIMS = [_claim(earlier=earlier)]
    _publish(tmp_path, {"gap": 0.5}, date="2026-11-24 00:00 UTC")
    [row] = ledger.ledger_rows()
    box = results.verdict_box("fake_chapter").data
    for text in (row["Verdict"], row["Earlier"], box):
        assert "rule in force at the run" not in text.lower()
        assert "earlier rule applied to this later run" in text.lower()
        assert "at its own run (the cache of commit fed4321) it gave reproduced" in text.lower()


def test_a_claim_about_a_baseline_is_labelled_so_in_its_row_its_verdict_box_and_its_tally(chapter, tmp_path):
    chapter.CLAIMS = [_claim(baseline="SIREN"), _claim(key="fake-own")]
    _publish(tmp_path, {"gap": 0.5})
    rows = {row["key"]: row for row in ledger.ledger_rows()}
    assert rows["fake-gap"]["baseline"] == "SIREN" and rows["fake-own"]["baseline"] == ""
    assert "a claim about the baseline SIREN, not about the paper's own method" in rows["fake-gap"]["Claim"]
    assert "baseline" not in rows["fake-own"]["Claim"] + rows["fake-own"]["Short"]
    assert "(about the baseline SIREN)" in rows["fake-gap"]["Short"]
    page = results.ledger().data
    assert '2 <span class="verdict verdict-reproduced">reproduced</span> <small class="gmp-baseline" data-count="1">' in page
    box = results.verdict_box("fake_chapter").data
    assert box.count("a claim about the baseline SIREN") == 1


def test_the_papers_claims_about_their_baselines_are_labelled():
    about = {claim.key: claim.baseline for chapter in results.experiment_chapters()
             for claim in results._claims_of(chapter) if claim.baseline}
    assert about["sbsnn-siren-1e-5-classic"] == about["sbsnn-siren-1e-5"] == "SIREN"
    assert about["chen-characteristic-sp-wn-drastic"] == "SP and WN"


OLD_CHAPTER = '''
from gmp import config
from gmp.results import PARTLY, REPRODUCED, Claim

CONFIG = config.scaled(smoke={"n": 1}, small={"n": 2}, paper={"n": 3})


def _check(payload):
    return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] < 1 else PARTLY


CLAIMS = [Claim(key="fake-gap", paper="chen", text="The gap is small.", result="summary",
                rule="reproduced if gap < 1, else partly", check=_check, source="paper")]
'''


def _refactored(payload):
    gap = payload["gap"]
    return f"gap {gap:.2f}", PARTLY if gap >= 1 else REPRODUCED


def _repository_at_the_run(tmp_path, root, monkeypatch) -> str:
    """A git repository in ``tmp_path`` holding today's gmp with the chapter as it was at the run
    (``OLD_CHAPTER``), committed once and made the ledger's repository; its commit."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(root / "gmp", repo / "gmp", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "gmp" / "experiments" / "fake_chapter.py").write_text(OLD_CHAPTER)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-qm", "run"], cwd=repo, check=True)
    monkeypatch.setattr(results.files, "repository_root", lambda: repo)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def test_a_rule_is_judged_by_what_it_decides_with_the_rule_at_the_run_read_from_git(chapter, tmp_path, monkeypatch,
                                                                                     root):
    """A rule rewritten since the run reads as refactored when the rule at the run's commit, read from git and
    hashing as the run recorded, gives the same verdict; one whose verdict moved shows both."""
    import html

    commit = _repository_at_the_run(tmp_path, root, monkeypatch)
    recorded = results.rule_digest(_claim())  # the rule of the commit, as the run recorded it

    def publish(check, rules=None):
        chapter.CLAIMS = [_claim(check=check)]
        _publish(tmp_path, {"gap": 0.5}, rules=rules or {"fake-gap": recorded})
        provenance = tmp_path / "_results" / "fake_chapter" / "paper" / "provenance.json"
        provenance.write_text(json.dumps({**json.loads(provenance.read_text()), "commit": commit}))
        [row] = ledger.ledger_rows()
        return row

    row = publish(_refactored)
    assert results.rule_digest(_claim(check=_refactored)) != recorded
    assert (row["verdict"], row["rule_status"], row["earlier"]) == (REPRODUCED, ledger.REFACTORED, None)
    assert f"was made at commit {commit[:10]}, whose rule was rewritten since" in html.unescape(row["Rule status"])
    row = publish(_strict)  # the verdict moves: both show
    assert (row["verdict"], row["rule_status"], row["earlier"]) == (NOT_REPRODUCED, ledger.REVISED, REPRODUCED)
    assert f"RULE REVISED after the run: the run of 2026-11-22 00:00 UTC was made at commit {commit[:10]}, whose rule " \
           f"gives reproduced" in html.unescape(row["Rule status"])
    assert "Rule in force at the run</strong> (as at the run's commit, read from git)" in row["Earlier"]
    row = publish(_refactored, rules={"fake-gap": "0" * 16})  # the commit's rule is not the one the run recorded
    assert (row["rule_status"], row["earlier"]) == (ledger.REVISED, None)
    assert f"recorded the rule hash {'0' * 16}, but the rule at commit {commit[:10]} hashes as {recorded}" in (
        html.unescape(row["Rule status"]))


def test_a_claim_whose_units_the_cache_predates_reads_not_yet_run_not_corrupt(chapter, tmp_path):
    """A rule that raises ``NotYetRun`` on a cache that lacks its units (added after the run, or waiting for a GPU)
    gives "not yet run", with the rule's words and no rule status; a payload the rule cannot read stays corrupt."""

    def check(payload):
        if "late" not in payload:
            raise ledger.NotYetRun("not yet run: this run holds no unit late-0")
        return f"late {payload['late']}", REPRODUCED

    chapter.CLAIMS = [_claim(check=check)]
    _publish(tmp_path, {"gap": 0.5})
    [row] = ledger.ledger_rows()
    assert row["verdict"] == results.NOT_RUN and row["rule_status"] == "" and not row["provisional"]
    assert "no unit late-0" in row["Measured at paper scale"]
    _publish(tmp_path, {"gap": 0.5, "late": 1})
    [row] = ledger.ledger_rows()
    assert row["verdict"] == REPRODUCED


def test_a_rule_revised_after_its_run_and_refactored_since_still_shows_the_earlier_rule(chapter, tmp_path,
                                                                                        monkeypatch, root):
    """A refactor of a rule that was replaced after a run (``Claim.earlier``) keeps the revision on the row:
    status revised, the earlier rule's verdict beside today's, and the refactor said beside it."""
    import html

    commit = _repository_at_the_run(tmp_path, root, monkeypatch)
    earlier = EarlierRule(rule="reproduced if gap < 0.1, else not reproduced", check=_strict, commits="abc1234",
                          replaced="2026-11-21 00:00 UTC", why="the bar was tightened.")
    chapter.CLAIMS = [_claim(check=_refactored, earlier=earlier)]
    _publish(tmp_path, {"gap": 0.5}, rules={"fake-gap": results.rule_digest(_claim())})
    provenance = tmp_path / "_results" / "fake_chapter" / "paper" / "provenance.json"
    provenance.write_text(json.dumps({**json.loads(provenance.read_text()), "commit": commit}))
    [row] = ledger.ledger_rows()
    assert (row["verdict"], row["rule_status"], row["earlier"]) == (REPRODUCED, ledger.REVISED, NOT_REPRODUCED)
    assert "Also refactored since the run (same verdict)" in html.unescape(row["Rule status"])


def test_a_rule_recorded_by_a_rerun_is_not_called_fixed_before_an_earlier_run_that_recorded_none(chapter, tmp_path,
                                                                                                  monkeypatch):
    """A rerun records the rules in force at it; where an earlier committed run of the experiment recorded no rule
    of the claim, whether the rule was written before that run's results were seen is unknown, and the row says so."""
    import html
    import subprocess

    repo = tmp_path
    monkeypatch.setenv(results.ROOT_ENV, str(repo / "book" / "_results"))
    monkeypatch.setattr(results.files, "repository_root", lambda: repo)
    folder = repo / "book" / "_results" / "fake_chapter" / "paper"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    digest = config.load("fake_chapter", "paper").digest

    def commit(date, rules):
        results.atomic_write_json(folder / "summary.json", {"gap": 0.5})
        code = {"digest": "d", "modules": {}, "hash": results.CODE_HASH}
        if rules is not None:
            code.update(rules=rules, rule_hash=results.RULE_HASH)
        results.atomic_write_json(folder / "provenance.json", {"chapter": "fake_chapter", "config_digest": digest,
                                                              "date": date, "code": code})
        subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
        subprocess.run(git + ["commit", "-qm", date], cwd=repo, check=True)

    rules = {"fake-gap": results.rule_digest(_claim())}
    commit("2026-11-20 00:00 UTC", None)
    commit("2026-11-22 00:00 UTC", rules)
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.UNKNOWN
    assert "the run of 2026-11-20 00:00 UTC (cache of commit" in html.unescape(row["Rule status"])
    assert "recorded no rule hashes (it predates them)" in html.unescape(row["Rule status"])
    ledger_rows_again = tmp_path / "again"
    ledger_rows_again.mkdir()
    monkeypatch.setattr(results.files, "repository_root", lambda: ledger_rows_again)  # no history: as before
    [row] = ledger.ledger_rows()
    assert row["rule_status"] == ledger.FIXED


TOY_CHAPTER = '''
from gmp import config
from gmp.results import FAILS, IDENTITY, PARTLY, REPRODUCED, VERIFIED, Claim

CONFIG = config.scaled(smoke={"n": 1}, small={"n": 2}, paper={"n": 3})


def _check(payload):
    return f"gap {payload['gap']:.2f}", REPRODUCED if payload["gap"] < 1 else PARTLY


def _holds(payload):
    return f"gap {payload['gap']:.2f}", VERIFIED if payload["gap"] < 1 else FAILS


def _claim(key, **changes):
    return Claim(**{"key": key, "paper": "chen", "text": "The gap is small.", "result": "summary",
                    "rule": "reproduced if gap < 1, else partly", "check": _check, "source": "paper", **changes})


CLAIMS = [_claim("fake-fixed"), _claim("fake-reworded", rule="reproduced if the gap is below 1, else partly"),
          _claim("fake-rewritten"), _claim("fake-revised"), _claim("fake-later"),
          _claim("fake-relabelled", kind=IDENTITY, check=_holds, rule="verified if gap < 1, else fails")]
'''


def _toy_claims():
    """Today's claims of the toy chapter, against TOY_CHAPTER as its first run's commit held them."""
    return [_claim(key="fake-fixed"), _claim(key="fake-reworded", rule="reproduced if gap < 1 (reworded), else partly"),
            _claim(key="fake-rewritten", check=_refactored), _claim(key="fake-revised", check=_strict),
            _claim(key="fake-later"), _claim(key="fake-relabelled"), _claim(key="fake-new")]


def test_the_rule_status_is_what_the_history_of_the_caches_and_of_the_rules_shows(chapter, tmp_path, monkeypatch,
                                                                                     root):
    """A toy history: the chapter's code committed, then a first paper-scale run of it that recorded no rule hashes,
    then a rerun that recorded today's rules (and another hash for one claim). Each claim's status is the class the
    history shows: fixed before the first run, reworded (same thresholds; a finding once worded as an identity), 
    rewritten with the same verdict, revised (both verdicts shown; also where a later run recorded a rule that is not
    the one its commit holds), and written after the run."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(root / "gmp", repo / "gmp", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "gmp" / "experiments" / "fake_chapter.py").write_text(TOY_CHAPTER)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    monkeypatch.setenv(results.ROOT_ENV, str(repo / "book" / "_results"))
    monkeypatch.setattr(results.files, "repository_root", lambda: repo)
    chapter.CLAIMS = _toy_claims()
    folder = repo / "book" / "_results" / "fake_chapter" / "paper"

    def commit(message, provenance=None):
        if provenance is not None:
            results.atomic_write_json(folder / "summary.json", {"gap": 0.5})
            code = {"digest": "d", "modules": {}, "hash": results.CODE_HASH}
            if "rules" in provenance:
                code.update(rules=provenance.pop("rules"), rule_hash=results.RULE_HASH)
            results.atomic_write_json(folder / "provenance.json", {
                "chapter": "fake_chapter", "config_digest": config.load("fake_chapter", "paper").digest, "code": code,
                **provenance})
        subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
        subprocess.run(git + ["commit", "-qm", message], cwd=repo, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    code_commit = commit("the chapter's code")
    commit("first run", {"commit": code_commit, "date": "2026-11-20 00:00 UTC"})
    today = {claim.key: results.rule_digest(claim) for claim in chapter.CLAIMS}
    commit("rerun", {"commit": code_commit, "date": "2026-11-22 00:00 UTC",
                     "rules": {**today, "fake-later": "0" * 16}})
    rows = {row["key"]: row for row in ledger.ledger_rows()}
    assert {key: row["rule_status"] for key, row in rows.items()} == {
        "fake-fixed": rulestatus.FIXED, "fake-reworded": rulestatus.REWORDED, "fake-rewritten": rulestatus.REFACTORED,
        "fake-revised": rulestatus.REVISED, "fake-later": rulestatus.REVISED, "fake-relabelled": rulestatus.REWORDED,
        "fake-new": rulestatus.WRITTEN_AFTER}
    assert {row["verdict"] for row in rows.values()} == {REPRODUCED, NOT_REPRODUCED}
    assert (rows["fake-revised"]["verdict"], rows["fake-revised"]["earlier"]) == (NOT_REPRODUCED, REPRODUCED)
    assert all(row["earlier"] is None for key, row in rows.items() if key != "fake-revised")  # fake-later: unread
    notes = {key: html.unescape(row["Rule status"]) for key, row in rows.items()}
    assert f"was made at commit {code_commit[:10]}, whose rule is today's" in notes["fake-fixed"]
    assert "Rule fixed before the first run whose results it judges" in notes["fake-fixed"]
    assert "the identity it was there is today's finding" in notes["fake-relabelled"]
    assert "its words differ from today's, what decides (check and test) does not" in notes["fake-reworded"]
    assert f"was made at commit {code_commit[:10]}, which has no such claim" in notes["fake-new"]
    assert "recorded the rule hash 0000000000000000" in notes["fake-later"]


def test_a_changed_design_says_in_one_line_which_way_it_moved_the_verdict(chapter, tmp_path):
    """The row, the verdict box and the page's paragraph (``design_change``) name the earlier design, its verdict at
    the run seen, today's, and whether the change raised or lowered the verdict; the box puts a caveat first."""
    import re

    design = EarlierDesign(design="the old draw", commits="abc1234", changed="2026-11-23 00:00 UTC",
                           why="Chosen after the old draw had been seen.", run="def5678", gave=NOT_REPRODUCED)
    chapter.CLAIMS = [_claim(earlier_design=design, caveat=lambda p: "one seed decides it")]
    _publish(tmp_path, {"gap": 0.5})

    def text(markup):
        return html.unescape(re.sub(r"<[^>]+>", "", markup))

    [row] = ledger.ledger_rows()
    line = ("headline design changed after a run of it was seen on 2026-11-23, which raised the verdict: the earlier "
            "design (the old draw) gave not reproduced, today's gives reproduced")
    box = results.verdict_box("fake_chapter").data
    assert line in text(row["Verdict"]) and line in text(box)
    assert text(box).index("one seed decides it") < text(box).index(line)
    assert "the change raised the verdict" in text(row["Earlier"])
    assert ledger.design_change("fake_chapter") == (
        'Until 2026-11-23 00:00 UTC (abc1234) the headline "The gap is small." was judged on the old draw. The run of '
        'that design that was seen is the cache of commit def5678: "The gap is small.": not reproduced at that run; '
        "reproduced today: the change raised the verdict. Chosen after the old draw had been seen.")
    chapter.CLAIMS = [_claim(earlier_design=dataclasses.replace(design, gave=REPRODUCED), check=_strict)]
    [row] = ledger.ledger_rows()
    assert "which lowered the verdict" in text(row["Verdict"]) and "the change lowered the verdict" in text(row["Earlier"])
    chapter.CLAIMS = [_claim()]
    assert ledger.design_change("fake_chapter") == ""


def test_the_uci_headlines_say_their_early_stopping_reads_the_test_split_and_give_the_clean_verdict():
    entry = results.cached("chen_uci", "table1", "paper")
    if entry.status != "current":
        pytest.skip("no current paper-scale cache of chen_uci here")
    claims = {claim.key: claim for claim in results._claims_of("chen_uci")}
    for headline, clean in (("chen-uci-gmp-best", "chen-uci-gmp-best-clean"),
                            ("chen-uci-naval-near-zero", "chen-uci-naval-near-zero-clean")):
        caveat = claims[headline].caveat(entry.payload)
        assert caveat.startswith("its learning-rate schedule and early stopping read the test split"), headline
        assert caveat.endswith(f"gives {claims[clean].evaluate(entry.payload)[1]}"), headline


def test_the_rules_at_a_commit_are_read_once_per_checkout_and_a_kept_answer_that_does_not_fit_is_recomputed(
        tmp_path, monkeypatch):
    """Reading a commit's rules imports that commit's gmp in a new process (seconds each, 37 of them for the ledger):
    the answer is kept under the repository for every later process, and one that does not answer what was asked is
    not read."""
    from gmp import rulehistory

    ran, keep = [], results.files.atomic_write_json
    monkeypatch.setattr(rulehistory, "_package_at", lambda root, commit: tmp_path / "tree")
    monkeypatch.setattr(rulehistory, "_rules_at", lambda tree, commit, request: ran.append(commit) or {
        key: {"verdicts": [[json.loads(request)["claims"]["ch"][key][0], "reproduced"]]}
        for key in json.loads(request)["claims"]["ch"]})
    first = rulehistory.rules_at(tmp_path, "abc1234", "ch", {"a": [1]}, "hashing", keep)
    assert ran == ["abc1234"] and rulehistory.rules_at(tmp_path, "abc1234", "ch", {"a": [1]}, "hashing", keep) == first
    assert ran == ["abc1234"]                                                  # read from the memo, not recomputed
    assert rulehistory.rules_at(tmp_path, "abc1234", "ch", {"a": [2]}, "hashing", keep)["a"]["verdicts"][0][0] == 2
    assert ran == ["abc1234"] * 2                                              # another payload is another question
    [kept] = [p for p in (tmp_path / rulehistory.MEMO).iterdir() if json.loads(p.read_text())["a"]["verdicts"][0][0] == 1]
    umask = os.umask(0o022)
    os.umask(umask)
    assert kept.stat().st_mode & 0o777 == 0o644 & ~umask  # readable in a shared checkout, as every file written
    kept.write_text(json.dumps({"b": None}))
    assert rulehistory.rules_at(tmp_path, "abc1234", "ch", {"a": [1]}, "hashing", keep) == first and len(ran) == 3
    assert not list((tmp_path / rulehistory.MEMO).glob("*.tmp"))


def test_each_commits_package_runs_in_a_fresh_process_forked_after_torch_is_imported_once(tmp_path, monkeypatch):
    """The scripts that read a commit's rules run one by one in children of one process that imported torch and scipy
    once: each sees its own arguments, input and folder, nothing one left in its modules is seen by the next, a
    failure gives its exit code and message, and one that does not finish in time is stopped and reported as such,
    the next being answered by a new process."""
    from gmp import rulehistory

    script = ("import sys, os; print(sys.argv[1:], sys.stdin.read(), os.getcwd(), 'leak' in sys.modules, "
              "'torch' in sys.modules, 'gmp' in sys.modules); sys.modules['leak'] = sys")
    first = rulehistory._run(script, ["a", "b"], "input", tmp_path)
    assert first == (0, f"['a', 'b'] input {tmp_path} False True False\n", "")
    assert rulehistory._run(script, [], "", tmp_path)[1] == f"[]  {tmp_path} False True False\n"
    code, _, err = rulehistory._run("import sys; sys.exit('the commit has no such claim')", [], "", tmp_path)
    assert (code, err) == (1, "the commit has no such claim\n")
    code, _, err = rulehistory._run("raise ValueError('boom')", [], "", tmp_path)
    assert code == 1 and err.splitlines()[-1] == "ValueError: boom"
    [zygote] = rulehistory._zygote
    monkeypatch.setattr(rulehistory, "TIMEOUT", 1)
    assert rulehistory._run("import time; time.sleep(30)", [], "", tmp_path) == (None, "", "")
    assert not rulehistory._zygote and zygote.poll() is not None          # stopped, its sleeping child with it
    monkeypatch.setattr(rulehistory, "TIMEOUT", 300)
    assert rulehistory._run(script, ["c"], "", tmp_path)[:2] == (0, f"['c']  {tmp_path} False True False\n")


# Verdicts that show their fragility (issue #50, section 3): each comparative claim re-judged by the median of its
# paired differences and by the exact Wilcoxon signed-rank test, with its rule's own mapping.

from gmp.results import fragility  # noqa: E402


def _by_mean(payload):
    """A toy comparative rule: the mean of the paired differences and its 95% t interval (the rule's statistic)."""
    mean, low, high = results.paired_interval(payload["differences"])
    return f"mean {mean:+.3f} [{low:+.3f}, {high:+.3f}]", (REPRODUCED if low > 0 else PARTLY if mean > 0
                                                           else NOT_REPRODUCED)


def _comparative(**changes):
    return _claim(**{"check": _by_mean, "test": PowerTest("t", 10), "rule": "reproduced if the interval lies above 0, "
                     "partly if the mean is above 0, else not reproduced", **changes})


SKEWED = [-0.1] * 7 + [2.0] * 3
"""Ten paired differences whose mean (+0.53) is above 0 and whose median (-0.1) is below it."""


def test_a_verdict_the_median_does_not_share_is_fragile_and_counted(chapter, tmp_path):
    chapter.CLAIMS = [_comparative()]
    _publish(tmp_path, {"differences": SKEWED})
    [row] = ledger.ledger_rows()
    mean, low, high = results.paired_interval(SKEWED)
    assert mean > 0 > low and row["verdict"] == PARTLY  # the rule's verdict, unchanged
    assert row["others"][0] == NOT_REPRODUCED and row["fragile"]
    assert ledger.fragile_counts([row], "finding") == {"Chen &amp; Ge": {PARTLY: 1}}
    page = results.ledger().data
    assert '<small class="gmp-fragile" data-count="1">(1 of them fragile)</small>' in page
    assert "Of the 1 comparative verdicts judged on a run, 1 is fragile" in page
    assert "Spearman" in page
    box = results.verdict_box("fake_chapter").data
    assert 'data-fragile="true"' in box and "by the median" in box and "by the exact Wilcoxon test" in box


def test_a_verdict_every_statistic_shares_is_not_fragile(chapter, tmp_path):
    chapter.CLAIMS = [_comparative()]
    _publish(tmp_path, {"differences": [1.0, 1.1, 0.9, 1.2, 0.8, 1.05, 0.95, 1.1, 1.0, 0.9]})
    [row] = ledger.ledger_rows()
    assert row["verdict"] == REPRODUCED and row["others"] == (REPRODUCED, REPRODUCED) and not row["fragile"]
    assert ledger.fragile_counts([row], "finding") == {}
    assert "(1 of them fragile)" not in results.ledger().data


def test_a_nan_among_the_differences_gives_no_other_verdict_and_says_why(chapter, tmp_path):
    chapter.CLAIMS = [_comparative()]
    _publish(tmp_path, {"differences": [1.0, float("nan"), 0.9, 1.2, 0.8, 1.05, 0.95, 1.1, 1.0, 0.9]})
    [row] = ledger.ledger_rows()
    assert row["verdict"] == INCONCLUSIVE and row["others"] == (None, None) and not row["fragile"]
    assert all("NaN" in why and "no result" in why for why in row["others_why"])


def test_a_claim_that_compares_no_methods_is_not_rejudged(chapter, tmp_path):
    chapter.CLAIMS = [_comparative(key="fake-rank", test=PowerTest("spearman", 15, "less", 0.01, (3,) * 5)),
                      _comparative(key="fake-plain", test=None)]
    _publish(tmp_path, {"differences": SKEWED})
    assert [row["others"] for row in ledger.ledger_rows()] == [None, None]


def test_the_other_intervals_exclude_zero_exactly_when_their_exact_tests_reject():
    """The median's interval is the two-sided sign test's dual, the Hodges-Lehmann interval the exact Wilcoxon
    test's: each excludes 0 exactly when its test gives p < 0.05 (continuous differences: no ties, no zeros)."""
    rng = __import__("numpy").random.default_rng(0)
    agree = {"sign": 0, "wilcoxon": 0}
    for n in (3, 5, 6, 8, 10, 12):
        for _ in range(40):
            x = rng.normal(rng.uniform(-1.5, 1.5), 1.0, n)
            centre, low, high = fragility.median_interval(x)
            assert centre == pytest.approx(float(__import__("numpy").median(x)))
            p = stats.binomtest(int((x > 0).sum()), n, 0.5).pvalue
            assert (low > 0 or high < 0) == (p < 0.05)
            agree["sign"] += p < 0.05
            centre, low, high = fragility.wilcoxon_interval(x)
            p = stats.wilcoxon(x, method="exact").pvalue
            assert (low > 0 or high < 0) == (p < 0.05), (n, x.tolist(), low, high, p)
            agree["wilcoxon"] += p < 0.05
    assert agree["sign"] > 20 and agree["wilcoxon"] > 20  # both outcomes were tried
    assert fragility.median_interval([1.0] * 5)[1:] == (-float("inf"), float("inf"))  # 5 pairs cannot reach 0.05


def test_every_real_comparative_claim_shows_two_other_verdicts_or_why_and_keeps_its_rules_verdict():
    """On the committed caches: each comparative claim shows the median's and the exact Wilcoxon test's verdicts,
    or why each gives none; no other claim is re-judged; the rule's verdict is what its check gives, and the
    helpers the re-judging replaces are restored."""
    rows = ledger.ledger_rows()
    claims = {c.key: (chapter, c) for chapter in results.claims.experiment_chapters()
              for c in results.claims._claims_of(chapter)}
    comparative = [r for r in rows if fragility.comparative(claims[r["key"]][1])]
    assert len(comparative) >= 30 and all(r["others"] is None for r in rows if r not in comparative)
    assert any(claims[r["key"]][1].test is not None and r["others"] is None for r in rows)  # the Spearman claim
    for row in comparative:
        assert len(row["others"]) == 2 and all(v or why for v, why in zip(row["others"], row["others_why"])), row
        assert all(v in (None, REPRODUCED, PARTLY, NOT_REPRODUCED, INCONCLUSIVE) for v in row["others"])
        assert row["fragile"] == any(v is not None and v != row["verdict"] for v in row["others"])
        chapter, claim = claims[row["key"]]
        entry = results.cached(chapter, claim.result, "paper")
        if entry.status == "current" and not row["provisional"]:
            assert claim.evaluate(entry.payload)[1] == row["verdict"], row["key"]
    judged = [r for r in comparative if r["others"] != (None, None)]
    assert judged and any(r["fragile"] for r in judged) and any(not r["fragile"] for r in judged)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("gmp") and hasattr(module, "paired_interval"):
            assert module.paired_interval is results.claims.paired_interval
    assert sum(r["fragile"] for r in rows) == sum(sum(c.values()) for source in SOURCES
                                                  for c in ledger.fragile_counts(rows, "finding", source).values())


def test_the_re_judging_is_no_part_of_any_caches_code():
    """:mod:`gmp.results.fragility` is imported only by the ledger (in RENDERING), so editing it leaves every
    cache current."""
    for chapter in results.claims.experiment_chapters():
        found = results.fingerprint.chapter_modules(chapter)
        assert found is None or ("results/fragility.py" not in found and "results/claims.py" in found), chapter
