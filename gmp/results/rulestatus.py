"""Whether a claim's rule was fixed before the runs whose results it judges, as the history of the caches and of the
rules shows it (:func:`status`): the ledger's rule status, read from git by :mod:`gmp.rulehistory`.

The classes (:data:`STATUSES`) follow the first committed paper-scale run of the claim's chapter whose results today's
rule judges, and every later run that recorded another hash of the rule: fixed before the run, reworded after it
(same thresholds), rewritten after it with the same verdicts, written after it, revised (both verdicts shown), or
unknown where the history cannot tell.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gmp import rulehistory
from gmp.results import cache as _cache
from gmp.results import claims as _claims
from gmp.results import files as _files
from gmp.results import fingerprint as _fingerprint
from gmp.results.claims import KIND_VERDICTS, Claim, NotYetRun, rule_digest

MALFORMED = (KeyError, IndexError, TypeError, AttributeError)
"""What a claim's rule raises on a payload that lacks what it reads or holds it in another form."""

FIXED = "rule fixed before the run"
"""The first paper-scale run whose results the rule judges was made with today's rule (the hash it recorded, or the
rule at its commit read from git), and no later run recorded another."""
REVISED = "rule revised after the run"
"""The rule as it was at a run whose results it judges (read from git, or kept in code as
:attr:`gmp.results.Claim.earlier`) decides otherwise than today's on them, or the run recorded another hash of it
and what that rule decided cannot be told; for a check keeping a headline's earlier design, the headline's rule at
the run of that design that was seen decides otherwise on the check's runs."""
UNKNOWN = "rule before the run: unknown"
"""The history cannot tell (no commit to read the rule at, units resumed from journals that no committed run dates, a
check keeping the runs of a headline's earlier design where the rule that judged the run of it that was seen is not
kept, a run with uncommitted changes whose commit lacks the rule)."""
REFACTORED = "rule refactored since the run (same verdict)"
"""The rule's hash recorded with the run differs from today's, but the rule as it was at the run's commit,
read from git (:func:`gmp.rulehistory.judge_at`), gives the same verdict on the run's results; also a rule rewritten
after the first run whose results it judges that gives the same verdict as today's on that run's results and on
today's."""
REWORDED = "rule reworded after the run (same thresholds)"
"""The rule at the first run whose results it judges, read from git, decides as today's rule (the same check and
test, hashed by today's :func:`gmp.results.rule_digest` without its words and kind), or differs only in being a
finding worded as an identity or back, with the same verdicts under that relabelling, on that run's results and on
today's."""
WRITTEN_AFTER = "rule written after the run"
"""The first paper-scale run whose results the rule judges was made without it: the run recorded no rule of the
claim, or the package at its commit (read from git) has no such claim."""
STATUSES = (FIXED, REWORDED, REFACTORED, WRITTEN_AFTER, REVISED, UNKNOWN)
"""Every rule status, from the firmest: what the history of the caches and of the rules (git) shows."""
RELABELLED = {"reproduced": "verified", "not reproduced": "fails", "verified": "reproduced", "fails": "not reproduced"}
"""A finding's verdict and the identity's that says the same, both ways."""


def todays_hashing() -> str:
    """The source of today's :func:`gmp.results.rule_digest` and what it calls, to run beside an earlier package."""
    return "\n\n".join(["from __future__ import annotations\nimport ast, contextlib, functools, hashlib, json",
                        *(inspect.getsource(f) for f in (_fingerprint._tree, _claims._function_parts,
                                                         _claims.rule_digest))])


def _decision_digest(claim: Any) -> str:
    """:func:`gmp.results.rule_digest` of what decides ``claim``'s verdict: its check and test, not its words or kind."""
    return rule_digest(types.SimpleNamespace(rule="", kind="", test=claim.test, check=claim.check))


@functools.cache
def _claims_at(root: str, commit: str, chapter: str, run_commit: str) -> dict[str, Any]:
    """:func:`gmp.rules_at` of every claim of ``chapter`` as ``commit`` held it, each judging the payload
    of its result as the cache of ``run_commit`` held it and as today's cache holds it; once per process."""
    asked = {}
    for claim in _claims._claims_of(chapter):
        today = _cache.cached(chapter, claim.result, "paper")
        asked[claim.key] = [rulehistory.payload_at(root, run_commit, chapter, claim.result) if run_commit else None,
                            today.payload if today.status == "current" else None]
    return rulehistory.rules_at(Path(root), commit, chapter, asked, todays_hashing(), _files.atomic_write_json)


def _rule_then(root: str, chapter: str, commit: str, claim: Claim, run: rulehistory.Run) -> dict[str, Any] | None:
    """``claim`` as ``commit`` held it, judging the results of ``run`` and today's (:func:`_claims_at`), or None
    where that commit holds no such claim."""
    return _claims_at(root, commit, chapter, run.commit).get(claim.key)


def _relation(root: str, chapter: str, claim: Claim, run: rulehistory.Run, run_payload: Any, run_verdict: str,
              payload: Any, verdict: str) -> tuple[str, str, tuple[str, str] | None]:
    """``(status, why, earlier)``: how ``claim``'s rule today stands to the rule of ``run`` (whose results
    ``run_payload`` today's rule judges ``run_verdict``; ``payload`` and ``verdict``: the run judged today), from
    the digest it recorded or, where it recorded none or another, from the rule at its commit read from git.
    ``earlier`` is that rule's ``(measured, verdict)`` on ``payload`` where its verdicts differ from today's."""
    rules = dict(run.rules) if run.rules is not None else None
    today = rule_digest(claim)
    if rules is not None and rules.get(claim.key) == today:
        return FIXED, "recorded today's rule", None
    if rules is not None and claim.key not in rules:
        return WRITTEN_AFTER, "recorded no rule of this claim", None
    other = (REVISED, f"recorded a rule hash ({rules[claim.key]}) that is not today's rule's") if rules else None
    if not run.base:
        return (*other, None) if other else (
            UNKNOWN, "recorded no rule hashes (it predates them) and no commit to read the rule at", None)
    try:
        then = _rule_then(root, chapter, run.base, claim, run)
        if then is None and run.dirty and run.commit:  # the uncommitted changes may have held it: ask the cache's commit
            then = _rule_then(root, chapter, run.commit, claim, run)
            if then is not None:
                return UNKNOWN, (f"was made at commit {run.base[:10]} with uncommitted changes, which has no such "
                                 f"claim, while the commit that holds its cache ({run.commit[:10]}) has it: whether "
                                 f"the uncommitted changes held it cannot be told"), None
    except rulehistory.Unavailable as err:
        return (other[0] if other else UNKNOWN), (f"{other[1]}, and " if other else "") + (
            f"its rule cannot be read back ({err})"), None
    at = f"commit {run.base[:10]}" + (" (the run had uncommitted changes besides)" if run.dirty else "")
    if then is None:
        return WRITTEN_AFTER, f"was made at {at}, which has no such claim", None
    if rules is not None and then["recorded_as"] != rules[claim.key]:
        return REVISED, (f"recorded the rule hash {rules[claim.key]}, but the rule at {at} hashes as "
                         f"{then['recorded_as'] or 'nothing'}: the rule it ran with cannot be read back"), None
    if then["digest"] == today:
        return FIXED, f"was made at {at}, whose rule is today's (the same hash by today's hashing)", None
    old = [v for _, v in then["verdicts"]][0 if run.commit else 1:]  # the run judged today holds today's results
    if None in old:
        failed = next(m for m, v in then["verdicts"][0 if run.commit else 1:] if v is None)
        return (other[0] if other else UNKNOWN), (f"was made at {at}, whose rule differs from today's and cannot "
                                                  f"judge the results ({failed})"), None
    relabel = then["kind"] != claim.kind
    same = [RELABELLED.get(v, v) if relabel else v for v in old] == [run_verdict, verdict][0 if run.commit else 1:]
    if same and (relabel or then["decision"] == _decision_digest(claim)):
        how = (f"the {then['kind']} it was there is today's {claim.kind}" if relabel else
               "its words differ from today's, what decides (check and test) does not")
        return REWORDED, (f"was made at {at}, where {how}; it gives today's verdicts on that run's results and on "
                          f"today's ({', '.join(old)})"), None
    if same:
        return REFACTORED, (f"was made at {at}, whose rule was rewritten since; it gives today's verdicts on that "
                            f"run's results and on today's ({', '.join(old)})"), None
    if run.dirty and rules is None:
        return UNKNOWN, (f"was made at {at}; the rule committed there gives {' and '.join(map(str, old))} on that "
                         f"run's results and today's, where today's gives {run_verdict} and {verdict}, and whether "
                         f"the run's uncommitted changes held today's rule cannot be told"), None
    return REVISED, (f"was made at {at}, whose rule gives {' and '.join(map(str, old))} on that run's results and "
                     f"today's, where today's gives {run_verdict} and {verdict}"), tuple(then["verdicts"][1])


def _keeps_design_of(chapter: str, claim: Claim) -> Claim | None:
    """The headline whose earlier design ``claim`` of ``chapter`` keeps as a check
    (:attr:`gmp.results.EarlierDesign.kept_as`), or None."""
    for other in _claims.experiment_chapters():
        for headline in _claims._claims_of(other):
            design = headline.earlier_design
            if design is not None and design.kept_as == claim.key and design.chapter == chapter:
                return headline
    return None


def _kept_design(claim: Claim, kept: Claim, payload: Mapping[str, Any], verdict: str,
                 runs: str) -> tuple[str, str, tuple[str, str] | None]:
    """``(status, sentence, earlier)`` of ``claim``, a check keeping the runs of the earlier design of the headline
    ``kept``, whose run of that design was seen (``runs``: what the check's own runs show). Where the headline's
    rule at that run is known (its :attr:`gmp.results.Claim.earlier` is the rule of that very run) and the check
    reads its payload as the headline's (:attr:`gmp.results.Claim.as_headline`), that rule judges the check's runs:
    :data:`REVISED` with its ``(measured, verdict)`` where it decides otherwise than today's, else
    :data:`REFACTORED`; otherwise :data:`UNKNOWN`."""
    design, earlier = kept.earlier_design, kept.earlier
    seen = (f"this check keeps the runs of the design that the headline {kept.key} had until {design.changed}, and a "
            f"run of that design was seen (the cache of commit {design.run})")
    if earlier is None or earlier.at_run != design.run or claim.as_headline is None:
        return UNKNOWN, (f"Unknown whether the rule was fixed before the results it judges: {seen} before this check "
                         f"was judged on its own runs. {runs}."), None
    try:
        measured, then = claim.evaluate(payload, lambda p: earlier.check(claim.as_headline(p)))
    except (ValueError, *MALFORMED) as err:
        return UNKNOWN, (f"Unknown whether the rule was fixed before the results it judges: {seen}, and the headline's "
                         f"rule of then cannot judge this check's runs ({type(err).__name__}: {err}). {runs}."), None
    gave = f"gave {earlier.gave} there" if earlier.gave else "what it gave there is not recorded"
    judged = (f"{seen}, judged by the headline's rule of then (replaced by {earlier.commits}, {earlier.replaced}), "
              f"which {gave}")
    if then == verdict:
        return REFACTORED, (f"Rule rewritten after the run, same verdict: {judged}; on this check's runs that rule "
                            f"gives today's verdict ({verdict}). {runs}."), None
    return REVISED, (f"RULE REVISED after the run: {judged}; on this check's runs that rule gives {then}, where "
                     f"today's gives {verdict}. {runs}."), (measured, then)


def _rule_was(root: str, chapter: str, claim: Claim, run: rulehistory.Run) -> bool:
    """Whether ``run`` was made with today's rule of ``claim``: the rule hash it recorded, or else the rule at its
    commit read from git (hashed as today)."""
    if run.rules is not None:
        return dict(run.rules).get(claim.key) == rule_digest(claim)
    try:
        then = _rule_then(root, chapter, run.base, claim, run) if run.base else None
    except rulehistory.Unavailable:
        return False
    return then is not None and then["digest"] == rule_digest(claim)


def status(chapter: str, claim: Claim, provenance: Mapping[str, Any], payload: Mapping[str, Any],
                  verdict: str) -> tuple[str, str, tuple[str, str] | None] | None:
    """``(status, sentence, earlier)`` of ``claim``'s rule from every committed paper-scale run of ``chapter`` whose
    results today's rule judges (:func:`gmp.runs`) and the run judged today (``provenance``,
    ``payload``, ``verdict``): one of :data:`STATUSES`, judged against the first of them and checked against each
    later one that recorded another rule; None where no repository is beside this copy of gmp. A later run that
    recorded no rules is not read back (each costs a Python process importing the package as it was)."""
    root = _files.repository_root()
    if root is None:
        return None
    date = str(provenance.get("date", "?"))
    code = provenance.get("code") if isinstance(provenance.get("code"), dict) else {}
    rules = code.get("rules") if isinstance(code.get("rules"), dict) else None
    current = rulehistory.Run("", str(provenance.get("commit", "")), date,
                              tuple(sorted(rules.items())) if rules is not None else None)
    judged_runs = []
    for run in [r for r in rulehistory.runs(str(root), chapter) if r.date < date] + [current]:
        then = payload if run is current else rulehistory.payload_at(str(root), run.commit, chapter, claim.result)
        if then is None:
            continue
        try:
            run_verdict = verdict if run is current else claim.evaluate(then)[1]
        except (NotYetRun, ValueError, *MALFORMED):  # a run that does not hold what the rule reads
            continue
        if run_verdict in KIND_VERDICTS[claim.kind]:
            judged_runs.append((run, then, run_verdict))
    today = rule_digest(claim)  # a later run that recorded today's rule, or none, adds nothing to the first's
    asked = [judged_runs[0], *(r for r in judged_runs[1:] if r[0].rules is not None and dict(r[0].rules).get(
        claim.key) != today)]
    relations = [(run, *_relation(str(root), chapter, claim, run, then, run_verdict, payload, verdict))
                 for run, then, run_verdict in asked]
    first = relations[0][0]
    what = "Of the paper-scale runs whose results this rule judges, "
    later = sum(1 for run, _, _ in judged_runs[1:] if run.rules is not None)
    unread = len(judged_runs) - 1 - later
    status_of = [status for _, status, _, _ in relations]
    if WRITTEN_AFTER in status_of[1:]:  # a later run without the claim's rule: it was replaced or renamed in between
        status_of = [UNKNOWN if s == WRITTEN_AFTER and i else s for i, s in enumerate(status_of)]
    why = "; ".join(f"the run of {run.date}" + (f" (cache of commit {run.commit[:10]})" if run.commit else "")
                    + f" {text}" for (run, _, text, _), status in zip(relations, status_of)
                    if status != FIXED or run is first)
    for status in (REVISED, WRITTEN_AFTER):
        if status in status_of:
            earlier = next(rel[3] for rel, s in zip(relations, status_of) if s == status) if status == REVISED else None
            head = ("RULE REVISED after the run: " if status == REVISED else "Rule written after the run: ")
            return status, f"{head}{why}.", earlier
    carried = provenance.get("carried_units") if isinstance(provenance.get("carried_units"), dict) else {}
    untraced = [name for name in carried if not any(run.date in name and _rule_was(str(root), chapter, claim, run)
                                                    for run in rulehistory.runs(str(root), chapter))]
    resumed = provenance.get("resumed_code") if isinstance(provenance.get("resumed_code"), dict) else {}
    n_other = resumed.get("other_code_units", 0) + resumed.get("code_not_recorded_units", 0) - sum(
        c.get("units", 0) for c in carried.values() if isinstance(c, dict))
    if untraced or n_other > 0:
        n_carried = sum(carried[name].get("units", 0) for name in untraced if isinstance(carried[name], dict))
        changed = ", ".join(resumed.get("changed_modules", [])) or "not recorded"
        return UNKNOWN, (f"Unknown whether the rule was fixed before all the results it judges: "
                         + (f"{n_carried} of the run's units were carried over from earlier runs ({'; '.join(untraced)}"
                            f"), which the history does not show were made with today's rule"
                            if untraced else f"the run ({date}) resumed {n_other} units that earlier code computed "
                                             f"(modules changed since: {changed}), which no committed run dates")
                         + f". {what}{why}."), None
    kept = _keeps_design_of(chapter, claim)
    if kept is not None:
        return _kept_design(claim, kept, payload, verdict, f"{what}{why}")
    for status in (UNKNOWN, REFACTORED, REWORDED):
        if status in status_of:
            head = {UNKNOWN: "Unknown whether the rule was fixed before the run",
                    REFACTORED: "Rule rewritten after the run, same verdict",
                    REWORDED: "Rule reworded after the run, same thresholds"}[status]
            return status, f"{head}. {what}{why}.", None
    return FIXED, (f"Rule fixed before the first run whose results it judges: {why[0].upper()}{why[1:]}"
                   + (f"; the {later} later run{'s' * (later != 1)} recorded today's rule" if later else "")
                   + (f"; {unread} later run{'s' * (unread != 1)} recorded no rules and {'were' if unread != 1 else 'was'}"
                      f" not read back" if unread else "") + "."), None
