"""Thin-margin verdicts decided over seeds, the rules that this chapter's claims and those of
:mod:`gmp.experiments.sbsnn_author_figs` share.

Where a verdict's margin lies within the spread of single runs of one network, it is decided over at least
:data:`SEEDS_TO_DECIDE` seeds: per seed the margin ``m_s`` is a best PSNR minus the target, at least 0 exactly
when that seed passes it; the margins' mean with its two-sided 95% Student-t interval
``mean ± t_{0.975, n-1} sd / sqrt(n)`` (``gmp.results.paired_interval``) says whether the network
reaches the target (interval above 0), falls short (below 0) or is undecided. With fewer seeds the one-seed
rule stands, marked :data:`ONE_SEED`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gmp.results import INCONCLUSIVE, NOT_REPRODUCED, PARTLY, REPRODUCED, PowerTest, paired_interval


ONE_SEED = "provisional: one seed"
"""How a verdict says that it rests on one seed while its margin lies within the spread of single runs of one
network; it stands until decided over at least :data:`SEEDS_TO_DECIDE` seeds."""


SEEDS_TO_DECIDE = 5
"""The seeds over which a thin-margin verdict is to be decided before it loses :data:`ONE_SEED`."""


THIN_MARGIN = (f"{ONE_SEED.capitalize()}: the margin lies within the spread of single runs of one network, so the "
               f"verdict stands provisionally until decided over at least {SEEDS_TO_DECIDE} seeds.")
"""The sentence a thin-margin claim's rule ends with."""


ONE_SEED_REASON = (f"one seed; the margin lies within the spread of single runs of one network, so the verdict waits "
                   f"for at least {SEEDS_TO_DECIDE} seeds")
"""Why the ledger counts a thin-margin verdict as provisional (:attr:`gmp.results.Claim.provisional`)."""


def one_seed(judged: tuple[str, str]) -> tuple[str, str]:
    """A check's ``(measured, verdict)`` marked :data:`ONE_SEED`."""
    measured, verdict = judged
    return f"{ONE_SEED}; {measured}", verdict


SEED_T = PowerTest("t", SEEDS_TO_DECIDE)
"""A Student-t interval over :data:`SEEDS_TO_DECIDE` seeds, the test of a thin-margin rule decided over seeds."""


SEED_POWER = ("With 5 seeds the 95% interval excludes 0 only when the mean margin exceeds 1.24 standard deviations "
              "of the seeds' margins (t = 2.78 with 4 degrees of freedom, over the square root of 5)")
"""What a rule decided over :data:`SEEDS_TO_DECIDE` seeds can separate."""


def seed_margins(payload: Mapping[str, Any], row: str, key: str, db: float) -> list[float] | None:
    """Per seed of ``row``'s seed rows (``payload["seeds"]``), its ``key`` (a best PSNR) minus ``db``: at least 0
    exactly when that seed passes ``db`` within its run; None with fewer than :data:`SEEDS_TO_DECIDE` seeds."""
    rows = payload.get("seeds", {}).get(row, [])
    return [r[key] - db for r in rows] if len(rows) >= SEEDS_TO_DECIDE else None


def over_seeds(payload: Mapping[str, Any], rows: list[str], key: str, db: float,
                one: Callable[[Mapping[str, Any]], tuple[str, str]]) -> tuple[str, str]:
    """A thin-margin rule decided over seeds (see :func:`seed_rule`); ``one``, the one-seed rule, marked
    :data:`ONE_SEED` while any of ``rows`` has fewer than :data:`SEEDS_TO_DECIDE` seeds."""
    margins = {row: seed_margins(payload, row, key, db) for row in rows}
    if any(m is None for m in margins.values()):
        return one_seed(one(payload))
    status, parts = {}, []
    for row, values in margins.items():
        mean, low, high = paired_interval(values)
        status[row] = "above" if low > 0 else "below" if high < 0 else "undecided"
        parts.append(f"{row.split('/')[0]} {mean:+.1f} dB (95% interval {low:+.1f} to {high:+.1f}; "
                     f"{sum(v >= 0 for v in values)}/{len(values)} seeds reach it)")
    count = len(next(iter(margins.values())))
    measured = f"{count} seeds, best {'epoch-mean' if key == 'best_epoch_psnr' else 'whole-image'} PSNR minus " \
               f"{db:.1f} dB: " + ", ".join(parts)
    states = set(status.values())
    if states == {"above"}:
        return measured, REPRODUCED
    if len(rows) == 1:
        if states == {"below"}:
            mean = float(np.mean(next(iter(margins.values()))))
            return measured, PARTLY if mean >= -10 else NOT_REPRODUCED
        return measured, INCONCLUSIVE
    if states == {"below"}:
        return measured, NOT_REPRODUCED
    return measured, PARTLY if {"above", "below"} <= states else INCONCLUSIVE


def seed_rule(what: str, family: bool) -> str:
    """The words of a thin-margin rule decided over seeds, for ``what`` (whose best PSNR, against what)."""
    head = (f"Over at least {SEEDS_TO_DECIDE} seeds (seed 0's run and the chapter's more_seeds, same settings): per "
            f"seed, the margin is {what}, at least 0 exactly when that seed passes the target within the run; the "
            f"margins' mean with its 95% Student-t interval (gmp.results.paired_interval)")
    if family:
        tail = ("per network: it reaches the target if its interval lies above 0, falls short if below 0, else is "
                "undecided. Reproduced if all three reach it; not reproduced if all three fall short; partly if at "
                "least one reaches it and one falls short; else inconclusive")
    else:
        tail = ("reproduced if the interval lies above 0; if it lies below 0, partly when the mean is within 10 dB of "
                "the target, else not reproduced; inconclusive if it contains 0")
    return f"{head}: {tail}. {SEED_POWER}. With fewer seeds, the one-seed rule: "


def seeds_provisional(rows: list[str]) -> Callable[[Mapping[str, Any]], str]:
    """The ``provisional`` of a thin-margin claim on ``rows``: :data:`ONE_SEED_REASON` until every row has
    :data:`SEEDS_TO_DECIDE` seeds, then none."""
    return lambda p: ONE_SEED_REASON if any(len(p.get("seeds", {}).get(r, [])) < SEEDS_TO_DECIDE for r in rows) else ""
