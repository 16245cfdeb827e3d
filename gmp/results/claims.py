"""The claims of the papers that the chapters test, the rules that give their verdicts, and the statistics
the rules decide by.

A chapter's experiment lists its ``CLAIMS``; each :class:`Claim` states its rule in words and in code
(``check``), which returns one of :data:`VERDICTS` (a finding) or :data:`IDENTITY_VERDICTS` (an identity).
A run records each rule's :func:`rule_digest`, so that the ledger (:mod:`gmp.results.verdicts`) can tell a
rule fixed before the run from one edited after it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gmp import config as _config
from gmp.results.fingerprint import _tree

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
#: An identity (a theorem or algebraic identity checked numerically) holds within its stated tolerance.
VERIFIED = "verified"
#: An identity does not hold within its stated tolerance.
FAILS = "fails"
#: Shown when no paper-scale cache exists.
NOT_RUN = "not yet run at paper scale"
#: Shown when the paper-scale cache was computed with a different config.
STALE = "stale: config changed since the paper-scale run"
#: Shown when the paper-scale cache fails its checks (a file edited, missing or unreadable).
CORRUPT = "corrupt: the paper-scale cache fails its checks"
#: A comparison that cannot tell the methods apart, because its test's smallest attainable p-value is not
#: below the rule's level (:class:`PowerTest`) or the count it measured is beyond noise in neither
#: direction. Neither a weak reproduction nor a failure.
INCONCLUSIVE = "inconclusive"
#: The verdicts the rule of a finding may give; the ledger adds :data:`NOT_RUN`, :data:`STALE` and :data:`CORRUPT`.
VERDICTS: tuple[str, ...] = (REPRODUCED, PARTLY, NOT_REPRODUCED, INCONCLUSIVE)
#: The verdicts the rule of an identity may give (no "partly", since it holds within its tolerance or not).
IDENTITY_VERDICTS: tuple[str, ...] = (VERIFIED, FAILS)
FINDING = "finding"
IDENTITY = "identity"
#: The kinds of claim and the verdicts each may give. A finding is an empirical claim that could have
#: come out otherwise; an identity is a theorem or algebraic identity checked numerically.
KIND_VERDICTS: dict[str, tuple[str, ...]] = {FINDING: VERDICTS, IDENTITY: IDENTITY_VERDICTS}
#: A claim the paper makes.
PAPER = "paper"
#: A robustness check of ours, an arm the paper never ran.
CHECK = "check"
#: A literal reading of the paper's text that the author's public code rules out.
SUPERSEDED = "superseded"
#: Where a claim comes from, which sets the ledger it is counted in. ``"paper"`` is a claim the paper makes
#: (its verdicts answer "does the paper hold?"), ``"check"`` a robustness check of ours (an arm the paper
#: never ran, such as another learning rate or initialisation), ``"superseded"`` a literal reading of the
#: paper's text that the author's public code rules out, kept for the record.
SOURCES: tuple[str, ...] = (PAPER, CHECK, SUPERSEDED)


class NotYetRun(Exception):
    """What a claim's rule raises on a paper-scale payload that lacks the units it judges because they have not run
    yet (a claim added after the cache, or units waiting for a GPU): the ledger shows :data:`NOT_RUN`, with the
    exception's message as what was measured, not a corrupt cache."""


@dataclasses.dataclass(frozen=True)
class PowerTest:
    """The significance test a comparative rule decides by, and the smallest p-value its design can reach.

    ``test`` is ``"sign"`` (wins of ``n`` paired comparisons), ``"wilcoxon"`` (the exact signed-rank
    test of ``n`` paired differences), ``"t"`` (a paired Student-t test or interval over ``n`` pairs) or
    ``"spearman"`` (the exact permutation test of a rank correlation over ``n`` points, ``ties`` the sizes
    of their groups of tied x-values); ``alternative`` is ``"two-sided"`` or one-sided (``"greater"``);
    the rule calls a result beyond noise when ``p < level``. A design whose :attr:`min_p` is not below
    ``level`` cannot separate the methods whatever the data: its verdict is :data:`INCONCLUSIVE`.
    """

    test: str
    n: int
    alternative: str = "two-sided"
    level: float = 0.05
    ties: tuple[int, ...] = ()

    def __post_init__(self):
        if self.test not in ("sign", "wilcoxon", "t", "spearman") or self.n < 1:
            raise ValueError(f"unknown test {self.test!r} or n = {self.n} < 1")
        if self.alternative not in ("two-sided", "greater", "less"):
            raise ValueError(f"alternative {self.alternative!r}: expected 'two-sided', 'greater' or 'less'")

    @property
    def min_p(self) -> float:
        """The smallest p-value the test can give on ``n`` pairs.

        It is 2^-n one-sided for the sign and exact Wilcoxon tests (every pair the same way; twice that
        two-sided), 0 for a t test with two pairs or more (1 with one), and prod(ties!) / n! one-sided for
        Spearman's permutation test (the one ordering of the y-values that matches x, among the distinct
        ones)."""
        sides = 1 if self.alternative != "two-sided" else 2
        if self.test in ("sign", "wilcoxon"):
            return min(1.0, sides * 0.5 ** self.n)
        if self.test == "t":
            return 0.0 if self.n >= 2 else 1.0
        arrangements = math.factorial(self.n) / math.prod(math.factorial(t) for t in self.ties or (1,))
        return min(1.0, sides / arrangements)

    @property
    def can_separate(self) -> bool:
        return self.min_p < self.level

    def describe(self) -> str:
        """The design in words, with its smallest attainable p against the level."""
        names = {"sign": "sign test", "wilcoxon": "exact Wilcoxon signed-rank test", "t": "paired Student-t test",
                 "spearman": "Spearman permutation test"}
        sided = "two-sided" if self.alternative == "two-sided" else "one-sided"
        floor = f"{self.min_p:.2g}" if self.min_p else "0 (no floor)"
        verdict = "can" if self.can_separate else "cannot"
        return (f"{sided} {names[self.test]} over {self.n} {'points' if self.test == 'spearman' else 'pairs'}: "
                f"smallest attainable p {floor}, so it {verdict} "
                f"reach p < {self.level:g}")


@dataclasses.dataclass(frozen=True)
class EarlierRule:
    """The rule a claim had when its paper-scale run was made, replaced since (kept so that the ledger
    shows its verdict beside today's): its ``rule`` text and ``check``, the ``commits`` that replaced it
    and the ``replaced`` date of the first of them (``"YYYY-MM-DD HH:MM UTC"``, as a provenance's date),
    and ``why`` it was replaced."""

    rule: str
    check: Callable[[Mapping[str, Any]], tuple[str, str]]
    commits: str
    replaced: str
    why: str = ""
    at_run: str = ""
    """The commit whose paper-scale cache was the earlier rule's own run, the last before ``replaced``, where a
    later run is the one judged today."""
    gave: str = ""
    """The verdict the earlier rule gave at ``at_run``, cited from history (``tests/test_ledger.py`` recomputes it
    from ``git show`` of that cache where the history is at hand)."""


@dataclasses.dataclass(frozen=True)
class EarlierDesign:
    """A headline design (data draw, initialisation, protocol, which arm is the headline) that was replaced after
    a paper-scale run of it had been seen, kept so that the ledger shows its verdict beside today's.

    ``design`` says what it was; ``commits`` replaced it on ``changed`` (``"YYYY-MM-DD HH:MM UTC"``), ``why``.
    ``run`` is the commit whose cache held the run of it that was seen, and ``gave`` the verdict of today's rule
    on that run (``check_run`` judges the cache of ``run``, default the claim's check), cited from history and
    recomputed by ``tests/test_ledger.py`` from ``git show`` where the history is at hand. Where the earlier design
    was kept as a check, the claim ``kept_as`` of ``chapter`` judges its runs by today's rule on today's cache, so
    that verdict is computed, not cited."""

    design: str
    commits: str
    changed: str
    why: str
    run: str
    gave: str
    check_run: Callable[[Mapping[str, Any]], tuple[str, str]] | None = None
    kept_as: str = ""
    chapter: str = ""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim of a paper that a chapter tests.

    ``check(payload)`` receives the payload of the result ``result`` and returns
    ``(measurement, verdict)``: a short text of what we measured and a verdict decided by the
    stated ``rule``: one of :data:`VERDICTS` for a finding (``kind="finding"``, an empirical
    claim that could have come out otherwise), one of :data:`IDENTITY_VERDICTS` for an
    identity (``kind="identity"``, a theorem or algebraic identity checked numerically).
    ``source`` (one of :data:`SOURCES`) says whose claim it is, and so which ledger counts it.
    """

    key: str
    paper: str
    text: str
    result: str
    rule: str
    check: Callable[[Mapping[str, Any]], tuple[str, str]]
    kind: str = FINDING
    short: str = ""
    """A one-line form of ``text`` for the ledger's rows and a chapter's verdict box (optional:
    without it :func:`gmp.results.verdicts.short_text` shortens ``text``)."""
    unfinished: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    """For a claim that an unfinished paper-scale run can already judge (its ``rule`` says how):
    the payload ``check`` judges from the units the run has journalled (key to value), or None
    while they do not suffice. Without it, a claim waits for the finished run. Such a verdict is
    provisional."""
    source: str = ""
    """Whose claim it is, one of :data:`SOURCES` (required)."""
    test: PowerTest | None = None
    """The significance test of a comparative rule; where its design cannot reach the rule's level, the
    verdict is :data:`INCONCLUSIVE` whatever ``check`` says."""
    note: str = ""
    """What the ledger line says beside the verdict, such as the half of the rule that holds by
    construction (structural) or the scale the claim holds at."""
    earlier: EarlierRule | None = None
    """The rule in force when the paper-scale run was made, where it was replaced after the run."""
    provisional: str = ""
    """Why a verdict on a finished run is still provisional (such as one seed, where the margin lies within
    the spread of single runs): the ledger marks it so, with this reason, and counts it apart. It may also be a
    function of the cached payload giving the reason, or "" once the payload decides the verdict (such as
    when more seeds have run)."""
    earlier_design: EarlierDesign | None = None
    """The headline design replaced after a paper-scale run of it was seen."""
    caveat: Callable[[Mapping[str, Any]], str] | None = None
    """What the verdict rests on that its measurement does not say, computed from the cached payload (how narrowly
    it is decided, such as one seed deciding a majority; what a reference saw): a sentence shown beside the verdict,
    or "" where there is nothing to add."""
    baseline: str = ""
    """The baseline the claim is about (such as SIREN, or SP and WN), where the paper claims something of a method
    it compares against rather than of its own: the ledger labels it so, and its tallies count it apart."""
    as_headline: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    """How a check that keeps the runs of a headline's earlier design (``EarlierDesign.kept_as``) reads its payload
    in the shape of the headline's result, so that the headline's earlier rule (:attr:`earlier`), where that rule
    judged the run of the design that was seen, judges the kept runs too. Without it such a check's rule status is
    unknown."""

    def __post_init__(self):
        if self.kind not in KIND_VERDICTS:
            raise ValueError(f"claim {self.key!r} has kind {self.kind!r}, expected one of {tuple(KIND_VERDICTS)}")
        if self.source not in SOURCES:
            raise ValueError(f"claim {self.key!r} has source {self.source!r}, expected one of {SOURCES}")

    def evaluate(self, payload: Mapping[str, Any], check: Callable[[Mapping[str, Any]], tuple[str, str]] | None = None
                 ) -> tuple[str, str]:
        """``(measurement, verdict)`` of ``check`` (default: the claim's) on ``payload``; a comparative
        rule whose :attr:`test` cannot reach its level gives :data:`INCONCLUSIVE`, saying why.

        A rule never compares a NaN of the payload (a diverged network's best PSNR, say): each NaN is handed to
        the rule as a ``_PayloadNaN``, whose comparisons raise; a finding's rule that compares one is then
        :data:`INCONCLUSIVE`, saying where the NaN is, and an identity's raises :class:`NaNCompared`."""
        try:
            measured, verdict = (check or self.check)(_strict(payload, "payload"))
        except NaNCompared as err:
            if self.kind != FINDING:
                raise
            return (f"no verdict: the rule would compare {err.where}, which is NaN (a network that diverged or "
                    f"never produced a finite value); a NaN is no result, so the comparison is not made"), INCONCLUSIVE
        allowed = KIND_VERDICTS[self.kind]
        if verdict not in allowed:
            raise ValueError(f"claim {self.key!r} ({self.kind}) returned verdict {verdict!r}, expected one of {allowed}")
        if self.test is not None and not self.test.can_separate:
            return f"{measured}; {self.test.describe()}", INCONCLUSIVE
        return measured, verdict


class NaNCompared(ValueError):
    """A rule compared a NaN of its payload (``_PayloadNaN``); ``where`` names it (``payload['rows']['x']``)."""

    def __init__(self, where: str):
        super().__init__(f"a claim's rule compared {where}, which is NaN: refuse the payload or rerun what produced it")
        self.where = where


class _PayloadNaN(float):
    """A NaN read from a claim's payload at ``where``: comparing it raises :class:`NaNCompared` (a plain NaN
    compares False both ways, which a rule would read as a loss or a miss), and arithmetic on it gives another,
    so that ``rotated - nerf > 0`` raises too."""

    def __new__(cls, where: str):
        value = super().__new__(cls, math.nan)
        value.where = where
        return value

    def _compare(self, other: Any) -> bool:
        raise NaNCompared(self.where)

    def _arithmetic(self, *other: Any) -> "_PayloadNaN":
        return _PayloadNaN(self.where)

    __lt__ = __le__ = __gt__ = __ge__ = _compare
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _arithmetic
    __hash__ = float.__hash__


def _strict(value: Any, where: str) -> Any:
    """``value`` (a payload: JSON's dicts, lists and numbers) with each float NaN replaced by a ``_PayloadNaN``
    naming where it is."""
    if isinstance(value, float) and math.isnan(value):
        return _PayloadNaN(where)
    if isinstance(value, Mapping):
        return {k: _strict(v, f"{where}[{k!r}]") for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_strict(v, f"{where}[{i}]") for i, v in enumerate(value))
    return value


RULE_HASH = "rule-syntax"
"""How :func:`rule_digest` hashes a claim's rule, by its text, kind and test, and the syntax tree of its check
function with those of the gmp functions and the values of the plain constants it names (transitively)."""


def _function_parts(fn: Any, seen: set[int]) -> list[Any]:
    """The syntax tree of ``fn`` (a function, method or :func:`functools.partial`) without its docstrings,
    with those of the gmp functions and plain constants it names, through its globals and closure."""
    import inspect
    import textwrap

    if isinstance(fn, functools.partial):
        return ["partial", _function_parts(fn.func, seen), repr(fn.args), repr(sorted(fn.keywords.items()))]
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return [getattr(fn, "__qualname__", repr(fn))]
    seen.add(id(fn))
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree: Any = _tree(ast.parse(source))
    except (OSError, TypeError, SyntaxError):  # a lambda inside an expression: its bytecode names and constants
        tree = [repr(code.co_names), repr([c for c in code.co_consts if not hasattr(c, "co_code")])]
    names, todo = set(), [code]
    while todo:
        current = todo.pop()
        names |= set(current.co_names)
        todo += [c for c in current.co_consts if hasattr(c, "co_code")]
    values = {name: fn.__globals__[name] for name in sorted(names) if name in fn.__globals__}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):
            values[name] = cell.cell_contents
    parts = [tree]
    for name, value in sorted(values.items()):
        if isinstance(value, (bool, int, float, str, tuple)) and len(repr(value)) < 1000:
            parts.append([name, repr(value)])
        elif callable(value) and str(getattr(value, "__module__", "")).startswith("gmp"):
            parts.append([name, _function_parts(value, seen)])
    return parts


def rule_digest(claim: Claim) -> str:
    """SHA-256 (16 hex digits) of ``claim``'s rule (:data:`RULE_HASH`): recorded with a paper-scale run, it
    tells the ledger whether the rule was fixed before the run or edited since."""
    parts = [claim.rule, claim.kind, repr(claim.test), _function_parts(claim.check, set())]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def rule_digests(chapter: str) -> dict[str, str]:
    """:func:`rule_digest` of each claim of ``chapter``, by key (empty for a chapter without claims)."""
    try:
        module = _config.experiment(chapter)
    except ValueError:  # no experiment module of that name (a Store's chapter has imported its own already)
        return {}
    return {claim.key: rule_digest(claim) for claim in getattr(module, "CLAIMS", [])}


CONFIDENCE = 0.95
"""The level of the confidence intervals of :func:`paired_interval` that comparative rules use."""


def paired_interval(differences: Sequence[float], level: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of paired differences (one per seed) and its two-sided
    Student-t confidence interval at ``level``; with a single difference the interval is
    unbounded. A comparative rule calls a difference "beyond noise" when the interval excludes 0.
    """
    from scipy import stats

    values = np.asarray(differences, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"paired_interval needs one or more finite differences, got {values.tolist()}")
    mean = float(values.mean())
    if values.size == 1:
        return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.5 + level / 2, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size))
    return mean, mean - half, mean + half


SIGN_LEVEL = 0.05
"""The level of :func:`sign_test` below which a rule calls a count of wins beyond noise."""


def sign_test(wins: int, trials: int) -> float:
    """One-sided p-value of ``wins`` or more wins in ``trials`` paired comparisons when each is
    a fair coin: ``P(Binomial(trials, 1/2) >= wins)``. The test a comparative rule uses when
    its comparisons are paired over activations (one seed each) rather than over seeds; 5 of 5
    is the fewest that reaches 0.05 (p = 1/32)."""
    from scipy import stats

    if not (isinstance(wins, int) and isinstance(trials, int) and 0 <= wins <= trials and trials >= 1):
        raise ValueError(f"sign_test needs 0 <= wins <= trials and trials >= 1, got wins={wins!r}, trials={trials!r}")
    return float(stats.binomtest(wins, trials, 0.5, alternative="greater").pvalue)


PAPERS = {"chen": "Chen & Ge", "lu": "Lu et al.", "sbsnn": "SBSNN"}


def _claims_of(chapter: str) -> list[Claim]:
    return list(getattr(_config.experiment(chapter), "CLAIMS", []))


def experiment_chapters() -> list[str]:
    """Every chapter with an experiment module, in alphabetical order."""
    import gmp.experiments

    return sorted(m.name for m in pkgutil.iter_modules(gmp.experiments.__path__))

