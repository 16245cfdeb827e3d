"""Verdicts that show their fragility: each comparative claim re-judged by two other statistics.

A comparative rule (a claim with a :class:`gmp.results.PowerTest` of kind ``"t"`` or ``"sign"``: one method
against another over seeds, or over activations) decides by one statistic: the mean of the paired differences
and its Student-t interval (:func:`gmp.results.paired_interval`), or a count of wins and its sign test
(:func:`gmp.results.sign_test`). Here the same paired differences are judged, with the same mapping, by two
other standard statistics fixed for every such claim (issue #50):

* :data:`MEDIAN`: the median of the paired differences gives the direction, and its distribution-free
  confidence interval (the order statistics ``x_(k)`` and ``x_(n+1-k)``, the sign test's dual interval, at the
  rule's level) says whether it is beyond noise;
* :data:`EXACT`: the exact Wilcoxon signed-rank test, by its dual interval (the Hodges-Lehmann estimate, the
  median of the Walsh averages ``(x_i + x_j) / 2``, i <= j, within their order statistics ``W_(k)`` and
  ``W_(M+1-k)``, M = n(n+1)/2, ``k`` from the exact null distribution of the signed-rank statistic, at the
  rule's level): it rejects exactly when the interval excludes 0 (for differences without ties or zeros). No
  rule of this book decides by the Wilcoxon test; where one did, the other test would be the sign test.

The mapping is the rule's own, applied unchanged: for a rule that calls :func:`gmp.results.paired_interval`,
its ``check`` is run on the cached payload with that helper answering ``(centre, low, high)`` by the other
statistic (the median or the Hodges-Lehmann estimate, and its interval at the level the rule asks for), so
that every use the rule makes of it (right direction and beyond noise -> reproduced; right direction, not
beyond noise -> partly; wrong direction -> not reproduced, or whatever that rule states) is the rule's.
Where a rule also compares the methods' means directly (``np.mean`` of each method's values over the same seeds,
whose difference is the mean of the paired differences), the :data:`MEDIAN` pass reads ``np.mean`` as
``np.median`` in the experiment modules, so it compares their medians there; the :data:`EXACT` pass keeps
those means, and differs from the rule only where the rule asks its interval.
A design that cannot reach the level (too few pairs: the smallest two-sided p of an exact test over 5 pairs is
1/16) gives an unbounded interval, never beyond noise, and the alternative says so. For a rule that decides by
a count of wins (the sign test, one-sided "greater"), the differences are read from the payload by the claim's
extractor (``_COUNTED``) and mapped as its rule maps the count: beyond noise in the claimed direction ->
reproduced; beyond noise the other way -> not reproduced; else inconclusive.

A rule's verdict that either other statistic does not share is *fragile*. No rule's verdict is changed. A NaN
among the differences gives no alternative verdict (a NaN is no result), and says so. Claims whose test is a
rank correlation (``"spearman"``) compare no methods over seeds and are left out.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gmp.results import claims as _claims
from gmp.results.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Claim, NaNCompared, NotYetRun

MEDIAN = "median"
"""The name of the first other statistic, the median of the paired differences with its sign-test interval."""
EXACT = "exact Wilcoxon"
"""The name of the second, the exact Wilcoxon signed-rank test (Hodges-Lehmann estimate and its interval)."""
STATISTICS = {MEDIAN: "median of the paired differences (sign-test interval)",
              EXACT: "exact Wilcoxon signed-rank test (Hodges-Lehmann estimate and interval)"}
COMPARATIVE_TESTS = ("t", "sign", "wilcoxon")
"""The :class:`gmp.results.PowerTest` kinds that compare methods over paired runs; ``"spearman"`` is left out."""
LEFT_OUT = ("Claims whose test is a rank correlation (Spearman) compare no methods over seeds, so they are not "
            "re-judged here.")


class NoAlternative(Exception):
    """Why a claim's differences give no alternative verdict (a NaN among them, say)."""


@dataclasses.dataclass(frozen=True)
class Alternative:
    """The verdict of one other statistic, or ``""`` with ``why`` there is none."""

    statistic: str
    verdict: str
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Fragility:
    """The two other verdicts of a comparative claim beside its rule's ``verdict``."""

    verdict: str
    median: Alternative
    exact: Alternative
    comparisons: int = 0
    """How many paired comparisons the rule made (calls of its interval, or 1 for a count)."""

    @property
    def alternatives(self) -> tuple[Alternative, Alternative]:
        return self.median, self.exact

    @property
    def fragile(self) -> bool:
        """Whether an other statistic that gives a verdict gives another one than the rule."""
        return any(a.verdict and a.verdict != self.verdict for a in self.alternatives)


def _finite(differences: Sequence[float], where: str = "") -> np.ndarray:
    values = np.asarray([float(d) for d in differences], dtype=np.float64)
    if values.size == 0:
        raise NoAlternative(f"no paired differences{where}")
    if not np.all(np.isfinite(values)):
        raise NoAlternative(f"a paired difference{where} is NaN or infinite ({values.tolist()}); a NaN is no result, "
                            f"so no other statistic judges it")
    return values


def sign_k(n: int, alpha: float) -> int:
    """The largest ``k`` with ``P(B <= k - 1) <= alpha``, B ~ Binomial(n, 1/2); 0 where none."""
    from scipy import stats

    k = 0
    while k < n and stats.binom.cdf(k, n, 0.5) <= alpha * (1 + 1e-12):
        k += 1
    return k


def signed_rank_null(n: int) -> np.ndarray:
    """The exact null distribution of the Wilcoxon signed-rank statistic on ``n`` pairs: ``P(T+ = t)``, t = 0..M."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts / 2.0 ** n


def wilcoxon_k(n: int, alpha: float) -> int:
    """The largest ``k`` with ``P(T+ <= k - 1) <= alpha`` under the exact null; 0 where none."""
    cdf = np.cumsum(signed_rank_null(n))
    return int(np.sum(cdf <= alpha * (1 + 1e-12)))


def median_interval(differences: Sequence[float], level: float = _claims.CONFIDENCE) -> tuple[float, float, float]:
    """``(median, low, high)``: the median of ``differences`` and its two-sided distribution-free interval at
    ``level`` (order statistics, the sign test's dual); unbounded where ``n`` pairs cannot reach it."""
    values = np.sort(_finite(differences))
    k = sign_k(values.size, (1 - level) / 2)
    centre = float(np.median(values))
    if k < 1:
        return centre, -math.inf, math.inf
    return centre, float(values[k - 1]), float(values[values.size - k])


def wilcoxon_interval(differences: Sequence[float], level: float = _claims.CONFIDENCE
                      ) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the Hodges-Lehmann estimate of ``differences`` and the exact Wilcoxon
    signed-rank test's dual interval at ``level`` (Walsh averages' order statistics); unbounded where ``n``
    pairs cannot reach it."""
    values = _finite(differences)
    i, j = np.triu_indices(values.size)
    walsh = np.sort((values[i] + values[j]) / 2)
    k = wilcoxon_k(values.size, (1 - level) / 2)
    centre = float(np.median(walsh))
    if k < 1:
        return centre, -math.inf, math.inf
    return centre, float(walsh[k - 1]), float(walsh[walsh.size - k])


_INTERVALS = {MEDIAN: median_interval, EXACT: wilcoxon_interval}


@contextlib.contextmanager
def _replaced(name: str, replacement: Callable):
    """``gmp.results.claims.<name>`` replaced by ``replacement`` in every loaded gmp module that holds it."""
    original = getattr(_claims, name)
    holders = [m for key, m in list(sys.modules.items())
               if (key == "gmp" or key.startswith("gmp.")) and m is not None and getattr(m, name, None) is original]
    for module in holders:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module in holders:
            setattr(module, name, original)


class _MedianNumpy:
    """numpy, but for ``mean``, which is ``median``: what a rule's own comparison of the methods' means becomes in
    the :data:`MEDIAN` pass."""

    def __getattr__(self, name: str) -> Any:
        return np.median if name == "mean" else getattr(np, name)


@contextlib.contextmanager
def _means_as_medians():
    """``np.mean`` read as ``np.median`` in every loaded experiment module (its global ``np``)."""
    holders = [m for key, m in list(sys.modules.items())
               if key.startswith("gmp.experiments") and m is not None and getattr(m, "np", None) is np]
    proxy = _MedianNumpy()
    for module in holders:
        module.np = proxy
    try:
        yield
    finally:
        for module in holders:
            module.np = np


def _unreachable(n: int, level: float, statistic: str) -> str:
    alpha = (1 - level) / 2
    k = sign_k(n, alpha) if statistic == MEDIAN else wilcoxon_k(n, alpha)
    if k >= 1:
        return ""
    floor = 2 * (0.5 ** n)
    test = "sign test" if statistic == MEDIAN else "exact Wilcoxon test"
    return (f"over {n} pairs the two-sided {test} cannot reach p < {1 - level:g} (its smallest p is {floor:.3g}), "
            f"so it never calls a difference beyond noise")


def _judge(claim: Claim, payload: Mapping[str, Any]) -> str:
    """The verdict of ``claim``'s check on ``payload`` as :meth:`gmp.results.Claim.evaluate` gives it, raising
    :class:`NoAlternative` where the check compares a NaN or its statistics refuse the payload (no result)."""
    try:
        _, verdict = claim.check(_claims._strict(payload, "payload"))
    except NaNCompared as err:
        raise NoAlternative(f"the rule compares {err.where}, which is NaN; a NaN is no result, so no other statistic "
                            f"judges it") from None
    except NotYetRun as err:
        raise NoAlternative(f"the payload lacks units the rule judges ({err})") from None
    except ValueError as err:
        raise NoAlternative(f"the rule's statistics refuse the payload ({err})") from None
    if claim.test is not None and not claim.test.can_separate:
        return INCONCLUSIVE
    return verdict


def _by_intervals(claim: Claim, payload: Mapping[str, Any], verdict: str) -> Fragility | None:
    """The two other verdicts of a rule that calls :func:`gmp.results.paired_interval`, or None where it calls
    none on this payload."""
    seen: list[tuple[int, float]] = []

    def recording(differences, level=_claims.CONFIDENCE):
        seen.append((len(list(differences)), level))
        return original(differences, level)

    original = _claims.paired_interval
    with _replaced("paired_interval", recording):
        try:
            _judge(claim, payload)
        except NoAlternative:
            pass
    if not seen:
        return None
    out = {}
    for statistic, interval in _INTERVALS.items():
        try:
            with _replaced("paired_interval", interval), (
                    _means_as_medians() if statistic == MEDIAN else contextlib.nullcontext()):
                alternative = _judge(claim, payload)
        except NoAlternative as err:
            out[statistic] = Alternative(statistic, "", str(err))
            continue
        notes = sorted({n for n in (_unreachable(n, level, statistic) for n, level in seen) if n})
        out[statistic] = Alternative(statistic, alternative, "; ".join(notes))
    return Fragility(verdict, out[MEDIAN], out[EXACT], len(seen))


def _fig6_gains(payload: Mapping[str, Any]) -> list[float]:
    rows = payload["rows"]
    return [rows[f"{n}/rotated"]["final_psnr"] - rows[f"{n}/nerf"]["final_psnr"] for n in payload["activations"]]


def _rotated_gains(payload: Mapping[str, Any]) -> list[float]:
    from gmp import config  # the chapter's module by name, as the ledger reads every chapter's claims

    pairs, *_ = config.experiment("sbsnn_author_figs")._rotated_wins(payload)
    return [rotated - nerf for _, nerf, rotated in pairs]


_COUNTED: dict[str, Callable[[Mapping[str, Any]], list[float]]] = {
    "sbsnn-fig6-rotated": _fig6_gains,
    "sbsnn-fig6-rotated-author": _rotated_gains,
}
"""The paired differences that a claim deciding by a count of wins (:func:`gmp.results.sign_test`) counts, read
from its payload by key of claim (each positive for the claimed direction)."""


def _by_count(claim: Claim, payload: Mapping[str, Any], verdict: str) -> Fragility:
    """The two other verdicts of a rule deciding by a one-sided count of wins (see the module's mapping)."""
    from scipy import stats

    level = claim.test.level
    try:
        gains = _finite(_strip(_COUNTED[claim.key](payload)), " of the count")
    except NoAlternative as err:
        return Fragility(verdict, Alternative(MEDIAN, "", str(err)), Alternative(EXACT, "", str(err)), 1)

    def mapped(up: bool, down: bool) -> str:
        return REPRODUCED if up else NOT_REPRODUCED if down else INCONCLUSIVE

    median = float(np.median(gains))
    wins, losses, trials = int(np.sum(gains > 0)), int(np.sum(gains < 0)), int(np.sum(gains != 0))
    sign = (lambda w: _claims.sign_test(w, trials) < level) if trials else (lambda w: False)
    by_median = Alternative(MEDIAN, mapped(median > 0 and sign(wins), median < 0 and sign(losses)),
                            f"median {median:+.3g}")
    if not np.any(gains):
        return Fragility(verdict, by_median, Alternative(EXACT, INCONCLUSIVE, "every difference is 0"), 1)
    greater = stats.wilcoxon(gains, alternative="greater", method="exact").pvalue
    less = stats.wilcoxon(gains, alternative="less", method="exact").pvalue
    by_exact = Alternative(EXACT, mapped(greater < level, less < level),
                           f"one-sided p {greater:.2g} (greater), {less:.2g} (less)")
    return Fragility(verdict, by_median, by_exact, 1)


def _strip(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values]


def comparative(claim: Claim) -> bool:
    """Whether ``claim`` compares methods over paired runs (a test of kind t, sign or Wilcoxon)."""
    return claim.test is not None and claim.test.test in COMPARATIVE_TESTS


def fragility(claim: Claim, payload: Mapping[str, Any] | None, verdict: str, measured: str = ""
              ) -> Fragility | None:
    """The two other verdicts of comparative ``claim`` on ``payload`` beside its rule's ``verdict`` (None for a
    claim that is not comparative); each other verdict is ``""`` with the reason where there is none (no run, a
    rule that reads no differences, a NaN)."""
    if not comparative(claim):
        return None
    if payload is None or verdict not in _claims.KIND_VERDICTS[claim.kind]:
        why = f"no run judged by the rule ({verdict})"
        return Fragility(verdict, Alternative(MEDIAN, "", why), Alternative(EXACT, "", why))
    if claim.key in _COUNTED:
        try:
            return _by_count(claim, payload, verdict) if _counts_decide(claim, payload) else (
                _by_intervals(claim, payload, verdict) or _by_count(claim, payload, verdict))
        except (KeyError, TypeError) as err:
            why = f"the differences cannot be read from the payload ({type(err).__name__}: {err})"
            return Fragility(verdict, Alternative(MEDIAN, "", why), Alternative(EXACT, "", why))
    found = _by_intervals(claim, payload, verdict)
    if found is None:
        why = "the rule computes no paired interval on this payload, so no paired differences are at hand"
        if measured.startswith("provisional: one seed"):
            why = ("the rule judges a single seed on this payload (too few seeds for its rule over seeds), so there "
                   "are no paired differences over seeds to re-judge")
        return Fragility(verdict, Alternative(MEDIAN, "", why), Alternative(EXACT, "", why))
    return found


def _counts_decide(claim: Claim, payload: Mapping[str, Any]) -> bool:
    """Whether the rule decides by its count (it calls :func:`gmp.results.sign_test`) rather than by intervals."""
    calls = []
    original = _claims.sign_test

    def recording(wins, trials):
        calls.append((wins, trials))
        return original(wins, trials)

    with _replaced("sign_test", recording), _replaced("paired_interval", _refuse):
        try:
            _judge(claim, payload)
        except _Refused:
            return False
        except NoAlternative:
            pass
    return bool(calls)


class _Refused(Exception):
    pass


def _refuse(*args, **kwargs):
    raise _Refused()
