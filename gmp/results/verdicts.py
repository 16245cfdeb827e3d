"""The claims ledger: every claim judged on its chapter's paper-scale cache, grouped, tallied and rendered.

The claims are counted in three ledgers by their :attr:`gmp.results.Claim.source`: the papers' claims
(whose verdicts answer "does the paper hold?"), our robustness checks (arms the papers never ran), and
literal readings of a paper's text that the author's public code rules out. Each verdict says whether it
is provisional (judged on an unfinished run) and whether its rule was fixed before the run: a run records
the hash of each of its claims' rules (:func:`gmp.results.rule_digest`), and a claim whose rule was
replaced after its run keeps the earlier rule (:class:`gmp.results.EarlierRule`) so that both verdicts show.

Chapters call :func:`verdict_box`, :func:`claims_table` and :func:`ledger` as ``gmp.results.<name>``.
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
from collections.abc import Mapping
from typing import Any

from gmp import rulehistory
from gmp.results import rulestatus
from gmp.results.rulestatus import FIXED, MALFORMED, REFACTORED, REVISED, UNKNOWN, WRITTEN_AFTER
from gmp.results import cache as _cache
from gmp.results import claims as _claims
from gmp.results import files as _files
from gmp.results import fragility as _fragility
from gmp.results.claims import (CORRUPT, IDENTITY, KIND_VERDICTS, NOT_RUN, PAPERS, SOURCES, STALE, Claim, NotYetRun,
                                rule_digest)

PROVISIONAL = "provisional"
"""How the ledger marks a verdict judged on an unfinished run, which the units still to come may change, or one
that its claim calls provisional (:attr:`gmp.results.Claim.provisional`, such as one seed of a thin margin)."""
UNFINISHED_REASON = "judged on an unfinished run; the units still to come may change it"
"""Why a verdict judged on an unfinished run is provisional."""
TALLY_REASON = "judged on an unfinished run, or on too few seeds for its margin (each claim says which)"
"""What a provisional count in the tallies stands for."""

GROUPS: dict[str, tuple[str, str]] = {
    "paper": ("The papers' claims",
              "What the three papers claim, each judged on our paper-scale runs by its stated rule: these "
              "verdicts answer \"does the paper hold?\"."),
    "check": ("Our robustness checks",
              "Arms the papers never ran: every method at one learning rate (0.01 or 0.1, where the paper "
              "trains GmP at 0.1 and the others at 0.01) and other initialisations of GmP. Each asks whether a "
              "claim survives a change the paper did not make, so a failure here is ours to explain, not the "
              "paper's."),
    "superseded": ("Superseded readings",
                   "Literal readings of a paper's text (an iteration as one full-batch update, today's "
                   "scikit-image photograph) that the author's public code rules out; the chapters that run "
                   "the author's protocol judge the same claims in the papers' ledger. Kept for the record."),
}
"""Title and what it adds, of the ledger of each :data:`gmp.results.SOURCES`."""


@dataclasses.dataclass(frozen=True)
class Judgement:
    """A claim judged on its chapter's paper-scale cache."""

    claim: Claim
    """The claim judged."""
    measured: str
    """What the rule measured, as it says it."""
    verdict: str
    """The verdict of today's rule."""
    provisional: bool = False
    """Judged on an unfinished run (:attr:`gmp.results.Claim.unfinished`), or on a finished one that the
    claim calls provisional (:attr:`gmp.results.Claim.provisional`)."""
    why_provisional: str = ""
    """Why the verdict is provisional."""
    rule_status: str = ""
    """One of ``gmp.results.rulestatus.STATUSES`` (what the history of the caches and of the rules shows, ``gmp.results.rulestatus.status``), or
    empty where no run was judged."""
    rule_note: str = ""
    """The sentence on :attr:`rule_status`."""
    earlier: tuple[str, str] | None = None
    """``(measured, verdict)`` of the earlier rule on the run judged, where it was replaced, which is the one kept
    in code (:attr:`gmp.results.Claim.earlier`) or else the rule at the run's commit, read from git, where its
    hash changed and its verdict with it."""
    earlier_label: str = ""
    """The name of :attr:`earlier`, "rule in force at the run" (kept in code, or read from git at the run's
    commit) or "earlier rule applied to this later run"."""
    earlier_gave: str = ""
    """The verdict an earlier rule applied to a later run gave at its own run (cited), or that it is not recorded."""
    design: tuple[str, str] | None = None
    """``(measured, verdict)`` of today's rule on the runs of the headline design replaced after one of them was
    seen (:attr:`gmp.results.Claim.earlier_design`), where a cache still holds them."""
    caveat: str = ""
    """What the verdict rests on that its measurement does not say (:attr:`gmp.results.Claim.caveat`), or ""."""
    others: _fragility.Fragility | None = None
    """The verdicts of the two other statistics of a comparative claim (:mod:`gmp.results.fragility`), else None."""

    @property
    def fragile(self) -> bool:
        """Whether an other statistic gives another verdict than the rule (:attr:`others`)."""
        return self.others is not None and self.others.fragile

    @property
    def category(self) -> str:
        """Its verdict as the tallies count it, with "(provisional)" when judged on an unfinished run."""
        return f"{self.verdict} ({PROVISIONAL})" if self.provisional else self.verdict


def _rule_status(claim: Claim, provenance: Mapping[str, Any], refactored: bool = False) -> tuple[str, str, bool]:
    """``(status, sentence, earlier)``: whether ``claim``'s rule was fixed before the run of ``provenance``,
    and whether :attr:`Claim.earlier` is the rule that was in force at it. With ``refactored`` (the rule at the
    run's commit decides as today's, :func:`_judged_at_run`) a recorded hash that differs from today's counts
    as today's rule's."""
    code = provenance.get("code") if isinstance(provenance.get("code"), dict) else {}
    rules = code.get("rules") if isinstance(code.get("rules"), dict) else None
    date = str(provenance.get("date", "?"))
    if rules is not None and claim.key in rules and rules[claim.key] != rule_digest(claim) and not refactored:
        return REVISED, ("RULE REVISED after the run: the hash of the rule recorded with the run differs from "
                         "today's rule's; the verdict is today's rule's."), False
    if claim.earlier is not None:  # revised after a run of this design: shown even beside a later run
        why = f" {claim.earlier.why}" if claim.earlier.why else ""
        if date < claim.earlier.replaced:
            return REVISED, (f"RULE REVISED after the run ({date}) by {claim.earlier.commits} "
                             f"({claim.earlier.replaced}).{why}"), True
        return REVISED, (f"RULE REVISED after an earlier paper-scale run of this experiment; this run ({date}) came "
                         f"after the revision by {claim.earlier.commits} ({claim.earlier.replaced}), so the earlier "
                         f"rule shown beside today's is applied to this run; {_earlier_gave(claim)}.{why}"), True
    carried = provenance.get("carried_units") if isinstance(provenance.get("carried_units"), dict) else {}
    n_carried = sum(c.get("units", 0) for c in carried.values() if isinstance(c, dict))
    if rules is not None and claim.key in rules and n_carried:
        return UNKNOWN, (f"The hash of the rule recorded with the run ({date}) matches today's rule, but {n_carried} of "
                         f"the run's units were carried over from earlier runs ({'; '.join(carried)}), computed "
                         f"before it: whether the rule was fixed before those is unknown."), False
    resumed = provenance.get("resumed_code") if isinstance(provenance.get("resumed_code"), dict) else {}
    n_other = resumed.get("other_code_units", 0) + resumed.get("code_not_recorded_units", 0)
    if rules is not None and claim.key in rules and n_other:
        changed = ", ".join(resumed.get("changed_modules", [])) or "not recorded"
        return UNKNOWN, (f"The hash of the rule recorded with the run ({date}) matches today's rule, but the run "
                         f"resumed {n_other} units that earlier code computed (modules changed since: {changed}), "
                         f"and a run records the rules only when it is assembled: whether the rule was fixed "
                         f"before those units is unknown."), False
    if rules is not None and claim.key in rules:
        return FIXED, "The hash of the rule recorded with the run matches today's rule.", False
    if rules is not None:
        return WRITTEN_AFTER, ("The run recorded no rule of this claim: the claim or its rule was written after the "
                               "run."), False
    return UNKNOWN, (f"Unknown whether the rule was fixed before the run ({date}): the run recorded no rule "
                     f"hashes (it predates them), and no replaced rule is known."), False


def _earlier_gave(claim: Claim) -> str:
    """What the earlier rule of ``claim`` gave at its own run, as cited from history, or that it is not recorded."""
    if claim.earlier.gave:
        return (f"at its own run (the cache of commit {claim.earlier.at_run}) it gave {claim.earlier.gave}, cited "
                f"from the history")
    return "what it gave at its own run is not recorded here"


def _design(claim: Claim) -> tuple[str, str] | None:
    """``(measured, verdict)`` of today's rule on the cached runs of ``claim``'s earlier headline design (the check
    it was kept as, judged as the ledger judges it), or None where it was not kept."""
    design = claim.earlier_design
    if design is None or not design.kept_as:
        return None
    found = [c for c in _claims._claims_of(design.chapter) if c.key == design.kept_as]
    if not found:
        raise ValueError(f"claim {claim.key!r}: its earlier design is kept as {design.kept_as!r}, which chapter "
                         f"{design.chapter!r} does not hold; name the check that judges the earlier design's runs")
    kept = judge(design.chapter, found[0])
    return kept.measured, kept.verdict


def _evaluate(claim: Claim, payload: Mapping[str, Any], where: str,
              earlier: bool = False) -> tuple[str, str, tuple[str, str] | None]:
    """``(measured, verdict, earlier)`` of ``claim`` on ``payload``, with ``(measured, verdict)`` of the rule
    in force at the run when ``earlier``; :data:`CORRUPT` where the rule cannot read the payload (``where``
    names it); :data:`gmp.results.INCONCLUSIVE`, saying why, where a finding's rule refuses (ValueError) a
    payload holding an infinite number, such as a perfect fit's PSNR: a result, not damage."""
    try:
        measured, verdict = claim.evaluate(payload)
        old = claim.evaluate(payload, claim.earlier.check) if earlier else None
    except NotYetRun as err:
        return str(err), NOT_RUN, None
    except MALFORMED as err:
        return (f"{where} malformed: the rule cannot read it ({type(err).__name__}: {err}); rerun the chapter "
                "or restore the cache from git"), CORRUPT, None
    except ValueError as err:  # a finding's statistics refusing an infinity, which is a result, not damage
        if claim.kind == _claims.FINDING and _nan(payload) and not _infinite(payload):
            return (f"no verdict: the rule's statistics refuse a NaN of {where.rsplit(' ', 1)[0]} (a network that "
                    f"diverged, say), which is no result ({type(err).__name__}: {err})"), _claims.INCONCLUSIVE, None
        if claim.kind != _claims.FINDING or not _infinite(payload):
            raise
        subject, verb = where.rsplit(" ", 1)
        return (f"{subject} {'holds' if verb == 'is' else 'hold'} an infinite number (a perfect fit's PSNR, say), a "
                f"result this rule's statistics cannot take ({type(err).__name__}: {err})"), _claims.INCONCLUSIVE, None
    return measured, verdict, old


def _infinite(value: Any) -> bool:
    """Whether ``value`` (a payload: JSON's dicts, lists and numbers) holds +inf or -inf."""
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, Mapping):
        return any(_infinite(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_infinite(v) for v in value)


def _nan(value: Any) -> bool:
    """Whether ``value`` (a payload: JSON's dicts, lists and numbers) holds a NaN."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, Mapping):
        return any(_nan(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_nan(v) for v in value)


def judge(chapter: str, claim: Claim) -> Judgement:
    """``claim`` of ``chapter`` judged on the chapter's paper-scale cache (or its unfinished run's units,
    where the claim says how: provisional)."""
    entry = _cache.cached(chapter, claim.result, "paper")
    if entry.status == "absent":
        payload = None
        try:
            payload = claim.unfinished(entry.units) if claim.unfinished is not None and entry.journalled else None
        except MALFORMED as err:
            return Judgement(claim, f"the journalled units are malformed: the rule cannot read them "
                                    f"({type(err).__name__}: {err})", CORRUPT,
                             others=_fragility.fragility(claim, None, CORRUPT))
        if payload is None:
            return Judgement(claim, "—", NOT_RUN, others=_fragility.fragility(claim, None, NOT_RUN))
        measured, verdict, _ = _evaluate(claim, payload, "the journalled units are")
        return Judgement(claim, f"unfinished run: {measured}", verdict, provisional=verdict != CORRUPT,
                         why_provisional=UNFINISHED_REASON, rule_status=UNKNOWN,
                         rule_note="An unfinished run records no rule hashes.",
                         others=_fragility.fragility(claim, payload, verdict, measured))
    if entry.status in ("stale", "corrupt"):
        verdict = STALE if entry.status == "stale" else CORRUPT
        return Judgement(claim, "—", verdict, others=_fragility.fragility(claim, None, verdict))
    status, note, earlier = _rule_status(claim, entry.provenance or {})
    measured, verdict, old = _evaluate(claim, entry.payload, f"the cached {claim.result}.json is", earlier)
    if verdict == NOT_RUN:  # the cache predates the claim's units: no run of them to state a rule status for
        return Judgement(claim, measured, NOT_RUN, others=_fragility.fragility(claim, None, NOT_RUN))
    recorded = ((entry.provenance or {}).get("code") or {}).get("rules") or {}
    found = (rulestatus.status(chapter, claim, entry.provenance or {}, entry.payload, verdict)
             if claim.earlier is None and verdict in KIND_VERDICTS[claim.kind] else None)
    if found is not None:  # what the history of the caches and of the rule shows
        status, note, old = found
    elif status == REVISED and recorded.get(claim.key, rule_digest(claim)) != rule_digest(claim) \
            and verdict in KIND_VERDICTS[claim.kind]:
        status, note, old = _judged_at_run(chapter, claim, entry.provenance, entry.payload, recorded[claim.key], verdict)
        if status == REFACTORED:  # the rule decides as at the run: what else is known of it still holds
            refactor_note = note
            status, note, measured, verdict, old = _as_todays_rule(claim, entry)
            status, note = ((REFACTORED, refactor_note) if status == FIXED else
                            (status, f"{note} {refactor_note.replace('Rule refactored', 'Also refactored', 1)}"))
        elif old is None and claim.earlier is not None:  # the rule at the run is unreadable; the earlier one is kept
            _, earlier_note, measured, verdict, old = _as_todays_rule(claim, entry)
            note = f"{note} {earlier_note}"
    why, caveat = "", ""
    if verdict in KIND_VERDICTS[claim.kind]:  # a payload the rule could read
        why = claim.provisional(entry.payload) if callable(claim.provisional) else claim.provisional
        caveat = claim.caveat(entry.payload) if claim.caveat is not None else ""
    label, gave = "", ""
    if old is not None and claim.earlier is None:  # the rule at the run's commit, read from git
        label = "rule in force at the run"
    elif old is not None:
        date = str((entry.provenance or {}).get("date", "?"))
        after = date >= claim.earlier.replaced
        label = "earlier rule applied to this later run" if after else "rule in force at the run"
        gave = _earlier_gave(claim) if after else ""
    return Judgement(claim, measured, verdict, provisional=bool(why), why_provisional=why,
                     rule_status=status, rule_note=note, earlier=old, earlier_label=label,
                     earlier_gave=gave, design=_design(claim), caveat=caveat,
                     others=_fragility.fragility(claim, entry.payload, verdict, measured))


def _as_todays_rule(claim: Claim, entry: _cache.Cached) -> tuple[str, str, str, str, tuple[str, str] | None]:
    """``(status, sentence, measured, verdict, earlier)`` with the run's recorded rule hash counted as today's."""
    status, note, earlier = _rule_status(claim, entry.provenance or {}, refactored=True)
    return status, note, *_evaluate(claim, entry.payload, f"the cached {claim.result}.json is", earlier)


def _judged_at_run(chapter: str, claim: Claim, provenance: Mapping[str, Any], payload: Mapping[str, Any],
                   recorded: str, verdict: str) -> tuple[str, str, tuple[str, str] | None]:
    """``(status, sentence, earlier)`` of a claim whose rule's hash differs from the one ``recorded`` with the
    run: :data:`REFACTORED` where the rule as it was at the run's commit gives today's ``verdict`` on
    ``payload``, else :data:`REVISED` with that rule's ``(measured, verdict)``, or without it where it cannot
    be told (and why)."""
    commit = str(provenance.get("commit", ""))
    root = _files.repository_root()
    try:
        if root is None:
            raise rulehistory.Unavailable("no repository is beside this copy of gmp")
        then = rulehistory.judge_at(root, commit, chapter, claim.key, payload, recorded)
    except rulehistory.Unavailable as err:
        return REVISED, (f"RULE REVISED after the run: the hash of the rule recorded with the run differs from "
                         f"today's rule's, and what the rule at the run decides cannot be told ({err}); the verdict "
                         f"is today's rule's."), None
    if then[1] == verdict:
        return REFACTORED, (f"Rule refactored since the run (same verdict): its hash differs from the one recorded "
                            f"with the run, and the rule as it was at the run's commit {commit[:10]} (read from git, "
                            f"hashing as recorded) gives the same verdict on the run's results."), None
    return REVISED, (f"RULE REVISED after the run: the rule as it was at the run's commit {commit[:10]} (read from "
                     f"git, hashing as recorded) gives {then[1]}; the verdict is today's rule's."), then


def judged(chapter: str) -> list[Judgement]:
    """:func:`judge` of each claim of ``chapter``."""
    return [judge(chapter, claim) for claim in _claims._claims_of(chapter)]


def _judged(chapter: str) -> list[tuple[Claim, str, str]]:
    """``(claim, measured, verdict)`` for each claim of ``chapter`` (:func:`judged` without the rest)."""
    return [(j.claim, j.measured, j.verdict) for j in judged(chapter)]


SHORT = 110
"""How many characters :func:`short_text` keeps at most."""

_QUALIFIER = re.compile(r"^([^:()]{1,40}) \([^()]{20,}\): (?=\S)")
_LAST_REFERENCE = re.compile(r"\s*\((?=[^()]*(?:\(|Fig|Table|Sec|Eq|Theorem|Proposition|abstract))"
                             r"(?:[^()]|\([^()]*\))*\)\.?$")


def short_text(claim: Claim, limit: int = SHORT) -> str:
    """The claim's :attr:`gmp.results.Claim.short` if it has one, else its text made to fit ``limit`` characters.

    A text too long loses the long parenthesis of a leading qualifier ("Text reading (an
    iteration is ...): X" becomes "Text reading: X") and a final parenthesis that cites the paper
    ("(Sec. 5, Fig. 3)"), then is cut at a word, before any parenthesis left open, and ends with "…".
    """
    if claim.short:
        return claim.short
    text = claim.text.strip()
    if len(text) > limit:
        text = _LAST_REFERENCE.sub(".", _QUALIFIER.sub(r"\1: ", text))
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0]
    depth, opened = 0, None
    for i, char in enumerate(cut):
        if char == "(":
            opened = i if depth == 0 else opened
            depth += 1
        elif char == ")" and depth:
            depth -= 1
    if depth:
        cut = cut[:opened]
    return cut.rstrip(" ,;:-(") + "…"


def _table(rows: list[dict[str, str]]):
    from IPython.display import HTML

    if not rows:
        return HTML("<p>No claims recorded.</p>")
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in row.values()) + "</tr>" for row in rows)
    return HTML(f'<table class="table gmp-claims"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def _claim_html(claim: Claim) -> str:
    """The claim's text; an identity, a robustness check or a superseded reading says so beneath it."""
    notes = {"check": "(our robustness check, not a claim of the paper)",
             "superseded": "(a reading of the text that the author's code rules out)"}
    note = "<br><small>(identity checked numerically)</small>" if claim.kind == IDENTITY else ""
    if claim.source in notes:
        note += f"<br><small>{notes[claim.source]}</small>"
    if claim.baseline:
        note += f"<br><small>({html.escape(_baseline_label(claim))}, not about the paper's own method)</small>"
    return html.escape(claim.text) + note


def _baseline_label(claim: Claim) -> str:
    """``"a claim about the baseline SIREN"``, for a claim about a baseline (:attr:`gmp.results.Claim.baseline`)."""
    return f"a claim about {_baseline_words(claim)}"


def _baseline_words(claim: Claim) -> str:
    """``"the baseline SIREN"`` or ``"the baselines SP and WN"``: what a claim about a baseline is about."""
    return f"the baseline{'s' * (' and ' in claim.baseline)} {claim.baseline}"


def _rule_html(claim: Claim) -> str:
    """The rule, with its test's power and the claim's note (a structural half, a scale)."""
    parts = [html.escape(claim.rule)]
    if claim.test is not None:
        parts.append(f"<small>Test: {html.escape(claim.test.describe())}.</small>")
    if claim.note:
        parts.append(f"<small>{html.escape(claim.note)}</small>")
    return "<br>".join(parts)


DESIGN_CHANGED = "headline design changed after a run of it was seen"
"""How the ledger marks a claim whose headline design was replaced after a run of it was seen
(:attr:`gmp.results.Claim.earlier_design`)."""


_RANK = {_claims.NOT_REPRODUCED: 0, _claims.PARTLY: 1, _claims.REPRODUCED: 2}
"""The findings' verdicts that say how far a claim holds, from the least."""


def design_direction(judgement: Judgement) -> str:
    """Which way the change of headline design moved the verdict: from the earlier design's verdict at the run of it
    that was seen to today's, as ``"raised the verdict"``, ``"lowered the verdict"``, ``"left the verdict as it was"``
    or ``"changed the verdict"`` (between verdicts that are not ranked, such as inconclusive)."""
    before, after = judgement.claim.earlier_design.gave, judgement.verdict
    if before == after:
        return "left the verdict as it was"
    if before in _RANK and after in _RANK:
        return "raised the verdict" if _RANK[after] > _RANK[before] else "lowered the verdict"
    return "changed the verdict"


def _design_line_html(judgement: Judgement) -> str:
    """The change of headline design in one line: what the earlier design was, its verdict at the run seen, today's,
    and which way the change moved it."""
    design = judgement.claim.earlier_design
    return (f"{DESIGN_CHANGED} on {html.escape(design.changed[:10])}, which {design_direction(judgement)}: the earlier "
            f"design ({html.escape(design.design)}) gave {_verdict_html(design.gave)}, today's gives "
            f"{_verdict_html(judgement.verdict)}"
            + ("" if judgement.design is None else
               f"; its runs kept as a check give {_verdict_html(judgement.design[1])}"))


def design_change(chapter: str) -> str:
    """In words, for the page where ``chapter``'s set-up is described: each headline design of the chapter replaced
    after a run of it was seen, when and why, the verdicts of its headlines at that run (cited from the history) and on
    its runs kept as a check (computed), today's, and which way the change moved each; "" where none was replaced."""
    groups: dict[tuple[str, str], list[Judgement]] = {}
    for judgement in judged(chapter):
        design = judgement.claim.earlier_design
        if design is not None:
            groups.setdefault((design.design, design.changed), []).append(judgement)
    parts = []
    for group in groups.values():
        design = group[0].claim.earlier_design
        named = " and ".join(f'"{short_text(j.claim)}"' for j in group)
        verdicts = []
        for j in group:
            kept = "" if j.design is None else f", {j.design[1]} on its runs kept as the check {j.claim.earlier_design.kept_as}"
            now = (f"{j.verdict} today: the change {design_direction(j)}" if j.verdict in KIND_VERDICTS[j.claim.kind]
                   else f"no verdict today in this copy ({j.verdict})")
            verdicts.append(f'"{short_text(j.claim)}": {j.claim.earlier_design.gave} at that run{kept}; {now}')
        parts.append(f"Until {design.changed} ({design.commits}) the headline{'s' * (len(group) > 1)} {named} "
                     f"{'were' if len(group) > 1 else 'was'} judged on {design.design}. The run of that design that "
                     f"was seen is the cache of commit {design.run}: {'; '.join(verdicts)}. {design.why}")
    return " ".join(parts)


def design_sentence(judgement: Judgement) -> str:
    """In words (HTML): the headline design that was replaced after a run of it was seen, what it gave at that run
    (cited from the history) and what today's rule gives on its runs where a cache keeps them (computed)."""
    design = judgement.claim.earlier_design
    kept = ("" if judgement.design is None else
            f" Today's rule on the earlier design's runs, kept as the check {html.escape(design.kept_as)} of "
            f"{html.escape(design.chapter)}, gives "
            f"{_verdict_html(judgement.design[1])}: {html.escape(judgement.design[0])}.")
    return (f"{DESIGN_CHANGED.upper()}: until {html.escape(design.commits)} ({html.escape(design.changed)}) the "
            f"headline was {html.escape(design.design)}. The run of it seen before the change (the cache of commit "
            f"{html.escape(design.run)}) gave {_verdict_html(design.gave)} by today's rule (cited from the history; "
            f"tests/test_ledger.py recomputes it where the history is at hand).{kept} {html.escape(design.why)} "
            f"Today's verdict is the current design's: {_verdict_html(judgement.verdict)}; the change "
            f"{design_direction(judgement)}.")


OTHER_NAMES = {_fragility.MEDIAN: "by the median", _fragility.EXACT: "by the exact Wilcoxon test"}
"""How the ledger names the two other statistics of :mod:`gmp.results.fragility`."""
FRAGILE = "fragile"
"""How the ledger marks a comparative verdict that one of the two other statistics does not share."""


def _others_html(judgement: Judgement, full: bool = False) -> str:
    """The verdicts of the two other statistics of a comparative claim (marked fragile where one differs from
    the rule's), each with why it gives none where it gives none; "" for a claim that is not comparative, or (unless
    ``full``) for one whose rule judged no run."""
    found = judgement.others
    if found is None or not (full or judgement.verdict in KIND_VERDICTS[judgement.claim.kind]):
        return ""
    parts = []
    for other in found.alternatives:
        if other.verdict:
            note = f' <small title="{html.escape(other.why, quote=True)}">({html.escape(other.why)})</small>' \
                if full and other.why else ""
            parts.append(f"{OTHER_NAMES[other.statistic]} {_verdict_html(other.verdict)}{note}")
        else:
            parts.append(f"{OTHER_NAMES[other.statistic]} no verdict ({html.escape(other.why)})")
    mark = f'<strong class="gmp-fragile-mark">{FRAGILE}</strong>: ' if found.fragile else ""
    return (f'<small class="gmp-fragility" data-fragile="{str(found.fragile).lower()}">{mark}other statistics: '
            f'{"; ".join(parts)}</small>')


def _judgement_html(judgement: Judgement) -> str:
    """The verdict (marked provisional where it is), its caveat, the rule's status, the earlier
    rule's verdict and the earlier design's."""
    out = _verdict_html(judgement.verdict, judgement.provisional, judgement.why_provisional)
    if judgement.caveat:
        out += f'<br><small class="gmp-caveat">{html.escape(judgement.caveat)}</small>'
    if _others_html(judgement):
        out += f'<br>{_others_html(judgement)}'
    if judgement.rule_status:
        out += f'<br><small class="gmp-rule-status">{html.escape(judgement.rule_status)}</small>'
    if judgement.earlier is not None:
        gave = f"; {html.escape(judgement.earlier_gave)}" if judgement.earlier_gave else ""
        out += (f'<br><small class="gmp-rule-earlier">{html.escape(judgement.earlier_label)}: '
                f'{_verdict_html(judgement.earlier[1])}{gave}</small>')
    if judgement.claim.earlier_design is not None:
        out += f'<br><small class="gmp-design-earlier">{_design_line_html(judgement)}</small>'
    return out


def claims_table(chapter: str, live: Mapping[str, Mapping[str, Any]], scale: str):
    """The chapter's claims: our measurement at this build's scale and at paper scale.

    ``live`` maps result names to the payloads computed in this build at ``scale``.
    """
    rows = []
    for judgement in judged(chapter):
        claim = judgement.claim
        if claim.result not in live:
            raise ValueError(f"claim {claim.key!r} needs the live result {claim.result!r}; "
                             f"got results {sorted(live)}")
        try:
            live_measured, live_verdict = claim.evaluate(live[claim.result])
        except NotYetRun as err:  # units this scale does not run (queued for a GPU at paper scale only)
            live_measured, live_verdict = str(err), NOT_RUN
        rows.append({
            "Claim": _claim_html(claim),
            "Rule": _rule_html(claim),
            f"Ours at this build's scale ({scale})": f"{html.escape(live_measured)}<br>{_verdict_html(live_verdict)}",
            "Ours at paper scale (cache)": f"{html.escape(judgement.measured)}<br>{_judgement_html(judgement)}",
        })
    return _table(rows)


def _chapter_link(chapter: str, link_prefix: str) -> str:
    part = _chapter_folder(chapter)
    return f'<a href="{link_prefix}{part}/{chapter}.html">{chapter}</a>' if part else chapter


def ledger_rows(link_prefix: str = "") -> list[dict[str, Any]]:
    """One row per claim of every chapter, with the verdict from the paper-scale cache.

    Each row holds the HTML cells of the ledger ("Paper", "Claim", "Short", "Rule",
    "Measured at paper scale", "Verdict", "Chapter") and, in plain text, the ``"verdict"``, the
    ``"kind"`` of claim (``"finding"`` or ``"identity"``), its ``"source"`` (the ledger it is counted
    in), whether it is ``"provisional"``, the tally ``"category"`` (:attr:`Judgement.category`), the
    ``"rule_status"``, the ``"earlier"`` verdict (of the earlier rule on the run, where replaced since,
    else None), the ``"paper"`` key, the claim's ``"key"``, its ``"caveat"`` (what the verdict rests on that its
    measurement does not say, or ""), the ``"baseline"`` it is about (or ""), whether it is ``"fragile"``
    (:attr:`Judgement.fragile`), the ``"others"`` (the verdicts of the median and of the exact Wilcoxon test,
    each None where it gives none, :mod:`gmp.results.fragility`; None for a claim that is not comparative) and
    ``"others_why"`` (what each says beside its verdict, or why it gives none), and its ``"earlier_design"`` (``(verdict of its runs kept in a cache or None, verdict at the run
    seen)`` where the headline design was replaced after a run of it was seen, else None).
    """
    rows = []
    for chapter in _claims.experiment_chapters():
        link = _chapter_link(chapter, link_prefix)
        for j in judged(chapter):
            claim = j.claim
            then = (f"(replaced since, kept in code): {html.escape(claim.earlier.rule)}" if claim.earlier is not None
                    else "(as at the run's commit, read from git)")
            earlier = "" if j.earlier is None else (
                f'<p><strong>{html.escape(j.earlier_label[0].upper() + j.earlier_label[1:])}</strong> {then}<br>'
                f'On this run it gives {_verdict_html(j.earlier[1])}: {html.escape(j.earlier[0])}'
                + (f'<br>{html.escape(j.earlier_gave[0].upper() + j.earlier_gave[1:])}.' if j.earlier_gave else "")
                + '</p>')
            if claim.earlier_design is not None:
                earlier += f'<p><strong>Earlier design.</strong> {design_sentence(j)}</p>'
            rows.append({"Paper": html.escape(PAPERS.get(claim.paper, claim.paper)),
                         "Claim": _claim_html(claim), "Short": html.escape(short_text(claim)) + (
                             f' <small class="gmp-baseline">(about {html.escape(_baseline_words(claim))})</small>'
                             if claim.baseline else ""),
                         "Rule": _rule_html(claim), "Rule status": html.escape(j.rule_note), "Earlier": earlier,
                         "Note": html.escape(claim.note),
                         "Measured at paper scale": html.escape(j.measured), "Verdict": _judgement_html(j),
                         "Chapter": link, "verdict": j.verdict, "kind": claim.kind, "source": claim.source,
                         "provisional": j.provisional, "category": j.category, "rule_status": j.rule_status,
                         "earlier": None if j.earlier is None else j.earlier[1], "paper": claim.paper,
                         "key": claim.key, "caveat": j.caveat, "baseline": claim.baseline,
                         "Others": (f'<p><strong>Other statistics.</strong> {_others_html(j, full=True)}</p>'
                                    if j.others is not None else ""),
                         "fragile": j.fragile, "others": None if j.others is None else
                         tuple(a.verdict or None for a in j.others.alternatives),
                         "others_why": None if j.others is None else tuple(a.why for a in j.others.alternatives),
                         "earlier_design": None if claim.earlier_design is None else (
                             j.design[1] if j.design is not None else None, claim.earlier_design.gave)})
    return rows


_KIND_TITLES = {"finding": "Findings: empirical claims that could have come out otherwise",
                IDENTITY: "Identities: theorems and algebraic identities checked numerically"}


def categories(kind: str) -> list[str]:
    """The tally categories of claims of ``kind``: its verdicts, the same judged on an unfinished run
    (provisional, counted apart), then not run, stale and corrupt."""
    verdicts = KIND_VERDICTS[kind]
    return [*verdicts, *(f"{v} ({PROVISIONAL})" for v in verdicts), NOT_RUN, STALE, CORRUPT]


def ledger_counts(rows: list[dict[str, Any]], kind: str, source: str | None = None) -> dict[str, dict[str, int]]:
    """Per paper, how many claims of ``kind`` (and of ``source``, the ledger they are counted in, when
    given) in :func:`ledger_rows` ``rows`` fall in each of :func:`categories`."""
    mine = [row for row in rows if row["kind"] == kind and source in (None, row["source"])]
    counts = {paper: dict.fromkeys(categories(kind), 0) for paper in dict.fromkeys(r["Paper"] for r in mine)}
    for row in mine:
        counts[row["Paper"]][row["category"]] += 1
    return counts


def fragile_counts(rows: list[dict[str, Any]], kind: str, source: str | None = None) -> dict[str, dict[str, int]]:
    """Per paper and tally category (as :func:`ledger_counts`), how many of those claims are fragile (a verdict
    that the median or the exact Wilcoxon test does not share, :mod:`gmp.results.fragility`); categories
    without any are left out."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        if row["kind"] == kind and source in (None, row["source"]) and row.get("fragile"):
            paper = counts.setdefault(row["Paper"], {})
            paper[row["category"]] = paper.get(row["category"], 0) + 1
    return counts


def fragility_sentence(rows: list[dict[str, Any]]) -> str:
    """What the ledger says of its comparative verdicts: what the two other statistics are, how many verdicts
    they re-judge, how many are fragile, and which claims are left out."""
    judged_rows = [r for r in rows if r.get("others") is not None and r["verdict"] in KIND_VERDICTS[r["kind"]]]
    fragile = [r for r in judged_rows if r["fragile"]]
    without = [r for r in judged_rows if None in r["others"]]
    return (f"Each comparative verdict (one method against another over paired runs) is re-judged, with its rule's "
            f"own mapping, by the median of the paired differences (with its distribution-free interval; where a "
            f"rule compares the methods' means, their medians) and by "
            f"the exact Wilcoxon signed-rank test, at the rule's level; a verdict either does not share is marked "
            f"{FRAGILE}, and no rule's verdict changes. Of the {len(judged_rows)} comparative verdicts judged on a "
            f"run, {len(fragile)} {'is' if len(fragile) == 1 else 'are'} {FRAGILE}"
            + (f"; {len(without)} lack an other verdict, each saying why" if without else "")
            + f". {_fragility.LEFT_OUT}")


def _slug(text: str) -> str:
    """The CSS name of a verdict or paper: ``"not reproduced"`` -> ``"not-reproduced"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.split(":")[0].lower()).strip("-")


def _verdict_html(verdict: str, provisional: bool = False, why: str = UNFINISHED_REASON) -> str:
    mark = (f' <small class="gmp-provisional" title="{html.escape(why, quote=True)}">({PROVISIONAL})</small>'
            if provisional else "")
    return f'<span class="verdict verdict-{_slug(verdict)}">{html.escape(verdict)}</span>{mark}'


def claim_anchor(claim_key: str) -> str:
    """The id of a claim's entry on the ledger page."""
    return "claim-" + _slug(claim_key)


def _summary_html(rows: list[dict[str, Any]], kind: str, source: str) -> str:
    """Per paper: a bar of its tally (one segment per category) and the counts in words."""
    lines = []
    paper_keys = {row["Paper"]: row["paper"] for row in rows}
    for paper, counts in ledger_counts(rows, kind, source).items():
        total = sum(counts.values())
        present = [(category, n) for category, n in counts.items() if n]
        bar = "".join(f'<span class="gmp-bar-segment verdict-{_slug(c)}{" gmp-provisional" * (PROVISIONAL in c)}" '
                      f'style="flex-grow: {n}" data-verdict="{_slug(c)}" data-count="{n}" '
                      f'title="{html.escape(c)}: {n}"></span>' for c, n in present)
        about = {c: sum(1 for r in rows if r["kind"] == kind and r["source"] == source and r["Paper"] == paper
                        and r["category"] == c and r.get("baseline")) for c, _ in present}
        fragile = fragile_counts(rows, kind, source).get(paper, {})
        words = ", ".join(f'{n} {_verdict_html(c.removesuffix(f" ({PROVISIONAL})"), PROVISIONAL in c, TALLY_REASON)}'
                          + (f' <small class="gmp-baseline" data-count="{about[c]}">({about[c]} of them about a '
                             f'baseline, not the paper\'s own method)</small>' if about[c] else "")
                          + (f' <small class="gmp-fragile" data-count="{fragile[c]}">({fragile[c]} of them '
                             f'{FRAGILE})</small>' if fragile.get(c) else "")
                          for c, n in present)
        lines.append(f'<tr data-paper="{_slug(paper_keys[paper])}" data-total="{total}"><th>{paper}</th>'
                     f'<td class="gmp-bar-cell"><span class="gmp-bar">{bar}</span></td>'
                     f'<td class="gmp-bar-words">{total} claim{"s" if total != 1 else ""}: {words}</td></tr>')
    return f'<table class="gmp-ledger-summary"><tbody>{"".join(lines)}</tbody></table>'


def _claim_entry_html(row: dict[str, Any]) -> str:
    """One claim of the ledger: a one-line summary (paper, short claim, verdict, deciding number)
    that opens onto the full claim, its rule, whether the rule was fixed before the run (and the
    earlier rule's verdict where it was replaced) and the full measurement."""
    note = f'<br><small class="gmp-claim-note">{row["Note"]}</small>' if row["Note"] else ""
    return (f'<details class="gmp-claim" id="{claim_anchor(row["key"])}" data-paper="{_slug(row["paper"])}" '
            f'data-verdict="{_slug(row["verdict"])}" data-source="{row["source"]}"'
            f'{" data-provisional" * row["provisional"]}{" data-fragile" * bool(row.get("fragile"))}>'
            f'<summary><span class="gmp-claim-paper">{row["Paper"]}<br><small>{row["Chapter"]}</small></span>'
            f'<span class="gmp-claim-short">{row["Short"]}{note}</span>'
            f'<span class="gmp-claim-verdict">{row["Verdict"]}</span>'
            f'<span class="gmp-claim-measured" title="{row["Measured at paper scale"]}">'
            f'{row["Measured at paper scale"]}</span></summary>'
            f'<div class="gmp-claim-body"><p><strong>Claim.</strong> {row["Claim"]}</p>'
            f'<p><strong>Rule.</strong> {row["Rule"]}</p>'
            + (f'<p><strong>Rule and run.</strong> {row["Rule status"]}</p>' if row["Rule status"] else "")
            + row["Earlier"] + row.get("Others", "")
            + f'<p><strong>Measured at paper scale.</strong> {row["Measured at paper scale"]}</p>'
            f'<p><small>Chapter {row["Chapter"]}, claim <code>{html.escape(row["key"])}</code></small></p>'
            f'</div></details>')


def _filters_html(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """The hidden radio buttons and their labels that filter the ledger by paper and by verdict
    (CSS only: the rules are in ``book/_static/gmp.css``)."""
    groups = [("paper", [("all", "All papers")]
               + [(_slug(key), html.escape(PAPERS.get(key, key))) for key in dict.fromkeys(r["paper"] for r in rows)]),
              ("verdict", [("all", "All verdicts")]
               + [(_slug(v), html.escape(v.split(":")[0])) for v in dict.fromkeys(r["verdict"] for r in rows)])]
    inputs, labels = [], []
    for group, options in groups:
        words = []
        for value, text in options:
            ident = f"gmp-ledger-{group}-{value}"
            inputs.append(f'<input type="radio" class="gmp-ledger-filter" name="gmp-ledger-{group}" id="{ident}"'
                          f'{" checked" if value == "all" else ""}>')
            words.append(f'<label for="{ident}">{text}</label>')
        labels.append(f'<span class="gmp-ledger-filter-group"><span>{group.capitalize()}:</span> {" ".join(words)}</span>')
    return "".join(inputs), f'<div class="gmp-ledger-filters">{"".join(labels)}</div>'


def ledger(link_prefix: str = ""):
    """The claims ledger of the whole book: one ledger per :data:`gmp.results.SOURCES` (the papers'
    claims, our robustness checks, superseded readings), each titled with what it adds and with its
    findings and identities apart, each of those with its own tally per paper (a bar and the counts;
    provisional verdicts counted apart), then one line per claim that opens onto its full text, its rule
    (and whether it was fixed before the run) and its measurement; radio buttons filter the claims by
    paper and verdict."""
    from IPython.display import HTML

    rows = ledger_rows(link_prefix)
    if not rows:
        return _table(rows)
    inputs, filters = _filters_html(rows)
    filters += f'<p class="gmp-fragility-note">{html.escape(fragility_sentence(rows))}</p>'
    head = ('<div class="gmp-claim-head"><span>Paper</span><span>Claim (click to open: full text and rule)</span>'
            '<span>Verdict</span><span>Deciding number (paper scale)</span></div>')
    parts = []
    for source in SOURCES:
        ours = [row for row in rows if row["source"] == source]
        if not ours:
            continue
        title, adds = GROUPS[source]
        parts.append(f'<div class="gmp-ledger-group" data-source="{source}"><p class="gmp-ledger-group-title">'
                     f'<strong>{html.escape(title)}</strong> ({len(ours)} claims)</p><p>{html.escape(adds)}</p></div>')
        for kind, kind_title in _KIND_TITLES.items():
            mine = [row for row in ours if row["kind"] == kind]
            if mine:
                parts.append(f'<section class="gmp-ledger-kind" data-kind="{kind}" data-source="{source}">'
                             f'<p class="gmp-ledger-title"><strong>{html.escape(kind_title)}</strong></p>'
                             + _summary_html(mine, kind, source)
                             + f'<div class="gmp-claim-list">{head}{"".join(_claim_entry_html(r) for r in mine)}</div>'
                             + '</section>')
    return HTML(f'<div class="gmp-ledger">{inputs}{filters}{"".join(parts)}</div>')


def verdict_box(chapter: str, ledger_href: str = "../claims.html"):
    """An admonition for the top of a chapter: each of its claims (short form), its verdict on the
    paper-scale cache (as the claims ledger judges it, marked provisional on an unfinished run, with the
    earlier rule's verdict where the rule was replaced after the run) and the deciding number, with links
    to the claim's entry in the ledger (``ledger_href``, relative to the chapter's page) and to the
    chapter's own "Claims" section. None for a chapter without claims."""
    from IPython.display import HTML

    if not _claims._claims_of(chapter):
        return None
    if _files.results_root() is None:
        items = "".join(f'<li>{html.escape(short_text(claim))}</li>' for claim in _claims._claims_of(chapter))
        return HTML('<div class="admonition note gmp-verdicts"><p class="admonition-title">What this chapter '
                    f'tests</p><ul>{items}</ul><p>No paper-scale cache is beside this copy, so no verdict is shown: '
                    f'the book\'s <a href="{ledger_href}">claims ledger</a> has them.</p></div>')
    items = []
    labels = {"check": " <small>(our robustness check)</small>",
              "superseded": " <small>(superseded reading)</small>"}
    about = {claim.key: f" <small>({html.escape(_baseline_label(claim))})</small>"
             for claim in _claims._claims_of(chapter) if claim.baseline}
    for j in judged(chapter):
        number = f'<span class="gmp-verdict-measured">{html.escape(j.measured)}</span>' if j.measured != "—" else ""
        gave = f"; {html.escape(j.earlier_gave)}" if j.earlier_gave else ""
        earlier = "" if j.earlier is None else (f'<small> (rule revised after a run; '
                                                f'{html.escape(j.earlier_label)}: {_verdict_html(j.earlier[1])}{gave})'
                                                f'</small>')
        if j.claim.earlier_design is not None:
            earlier += f'<small> ({_design_line_html(j)})</small>'
        caveat = f'<small class="gmp-caveat"> ({html.escape(j.caveat)})</small>' if j.caveat else ""
        others = f' {_others_html(j)}' if _others_html(j) else ""
        items.append(f'<li data-verdict="{_slug(j.verdict)}"><span class="gmp-verdict-cell">'
                     f'{_verdict_html(j.verdict, j.provisional, j.why_provisional)}</span>'
                     f'<span><a href="{ledger_href}#{claim_anchor(j.claim.key)}">{html.escape(short_text(j.claim))}</a>'
                     f'{caveat}{labels.get(j.claim.source, "")}{about.get(j.claim.key, "")}{earlier}{others}{number}</span></li>')
    return HTML('<div class="admonition note gmp-verdicts"><p class="admonition-title">Verdicts of this chapter '
                f'(paper scale)</p><ul class="gmp-verdict-list">{"".join(items)}</ul>'
                '<p class="gmp-verdict-links">Each verdict follows the claim\'s stated rule from the cached '
                'paper-scale run (a chapter built at a smaller scale shows its own numbers beside them). '
                'The rules and both scales are in <a href="#claims">the chapter\'s Claims section</a>; every '
                f'claim of the book is in the <a href="{ledger_href}">claims ledger</a>.</p></div>')


def _chapter_folder(chapter: str) -> str | None:
    root = _files.repository_root()
    if root is None:
        return None
    found = sorted((root / "book").glob(f"*/{chapter}.md"))
    return found[0].parent.name if found else None
