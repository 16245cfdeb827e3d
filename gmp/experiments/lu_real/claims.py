"""The claims of Section 3.2 of Lu et al. that the chapter tests, each with the rule that judges it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gmp.results import NOT_REPRODUCED, PARTLY, REPRODUCED, Claim

from .paper import ACTIVATIONS, DATASET_LABELS, PAPER, PAPER_DATASETS, UNTRAINABLE, percent, variants
from .runs import epoch_text, unfinished


def _datasets(payload: Mapping[str, Any]) -> list[str]:
    """The data sets the payload has runs on (an unfinished run may lack some)."""
    return [d for d in dict.fromkeys(payload["data"].values()) if d in payload["runs"]]


def _on_paper_data(payload: Mapping[str, Any]) -> bool:
    setup = PAPER["setup"]
    return (set(payload["runs"]) >= set(PAPER_DATASETS) and payload["depth"] == setup["depth"]
            and payload["width"] == setup["width"])


def _cap(verdict: str, payload: Mapping[str, Any]) -> str:
    """A verdict from stand-in data or a reduced depth is at most "partly"."""
    return PARTLY if verdict == REPRODUCED and not _on_paper_data(payload) else verdict


def _where(payload: Mapping[str, Any]) -> str:
    if payload.get("unfinished"):
        return "; ".join(epoch_text(payload, d) for d in payload["runs"]) + " (unfinished paper-scale run)"
    names = ", ".join(DATASET_LABELS[d] for d in _datasets(payload))
    return f"{names}, depth {payload['depth']}, width {payload['width']}"


CHANCE = 1 / 10
"""Accuracy of guessing one of the 10 classes, what a diverged run counts as in every claim."""


def _acc(result: Mapping[str, Any], key: str = "train_acc") -> float:
    """The run's accuracy, or :data:`CHANCE` if it diverged (or recorded none)."""
    value = result.get(key)
    return CHANCE if value is None or result["diverged"] else value


def _diverged_text(payload: Mapping[str, Any], labels: list[str]) -> str:
    """Which networks diverged, each with the epoch it diverged in, counted from 1 as the tables count them (a
    result's ``diverged_epoch`` counts from 0)."""
    runs = [f"{DATASET_LABELS[d]} {label} at epoch {payload['runs'][d][label]['diverged_epoch'] + 1}"
            for d in _datasets(payload) for label in labels
            if label in payload["runs"][d] and payload["runs"][d][label]["diverged"]]
    return f"; diverged, counted as chance (10%): {', '.join(runs)}" if runs else ""


CHANCE_MARGIN = 0.05
TRAINABLE_MARGIN = 0.10
BETTER_MARGIN = 0.01
"""A GPN network trains better than its plain twin if its training accuracy is higher by more
than this (one point); within it, the two are even (one seed: no noise estimate)."""


def _untrainable(payload):
    cases = [(d, a) for d in _datasets(payload) for a in UNTRAINABLE if a in payload["runs"][d]]
    accs = {(d, a): _acc(payload["runs"][d][a]) for d, a in cases}
    stuck = [k for k, v in accs.items() if v <= CHANCE + CHANCE_MARGIN]
    text = (f"{len(stuck)}/{len(cases)} of (ReLU, LeakyReLU, GELU) x data at <= 15% train accuracy; "
            + "; ".join(f"{DATASET_LABELS[d]} {a}: {percent(v)}%" for (d, a), v in accs.items())
            + _diverged_text(payload, list(UNTRAINABLE)) + f" ({_where(payload)})")
    verdict = REPRODUCED if cases and len(stuck) == len(cases) else PARTLY if stuck else NOT_REPRODUCED
    return text, _cap(verdict, payload)


def _gpn_trainable(payload):
    cases = [(d, a) for d in _datasets(payload) for a in UNTRAINABLE
             if a in payload["runs"][d] and f"{a}-GPN" in payload["runs"][d]]
    gains = {(d, a): _acc(payload["runs"][d][f"{a}-GPN"]) - _acc(payload["runs"][d][a]) for d, a in cases}
    trained = [k for k, g in gains.items() if g >= TRAINABLE_MARGIN]
    text = (f"{len(trained)}/{len(cases)} GPN versions beat the plain one by >= 10 points of train accuracy; "
            + "; ".join(f"{DATASET_LABELS[d]} {a}-GPN {100 * g:+.1f}" for (d, a), g in gains.items())
            + _diverged_text(payload, variants(list(UNTRAINABLE))) + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and len(trained) == len(cases)
               else PARTLY if 2 * len(trained) >= len(cases) and trained else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


def _gpn_train_acc(payload):
    cases = [(d, a) for d in _datasets(payload) for a in ACTIVATIONS
             if a in payload["runs"][d] and f"{a}-GPN" in payload["runs"][d]]
    gains = {(d, a): _acc(payload["runs"][d][f"{a}-GPN"]) - _acc(payload["runs"][d][a]) for d, a in cases}
    better = [k for k, g in gains.items() if g > BETTER_MARGIN]
    worse = [k for k, g in gains.items() if g < -BETTER_MARGIN]
    even = [k for k in cases if k not in better and k not in worse]

    def name(keys):
        return ", ".join(f"{DATASET_LABELS[d]} {a}" for d, a in keys) or "none"

    text = (f"GPN train accuracy higher by > {100 * BETTER_MARGIN:g} point in {len(better)}/{len(cases)} "
            f"comparisons; within {100 * BETTER_MARGIN:g} point: {name(even)}; lower: {name(worse)}"
            + _diverged_text(payload, variants(ACTIVATIONS)) + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and not worse and 4 * len(better) >= 3 * len(cases)
               else PARTLY if 4 * (len(better) + len(even)) >= 3 * len(cases) else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


EXPLOSION_FACTOR = 10.0


def _peak(result: Mapping[str, Any]) -> float:
    """Largest gradient norm ratio over the run; inf if the run diverged or the ratio was
    undefined (a gradient norm of 0 or not finite) at some step."""
    if result["diverged"] or result["ratio_undefined"]:
        return math.inf
    return result["ratio_peak"] if result["ratio_peak"] is not None else math.nan


def _bn_explodes(payload):
    cases = [(d, v) for d in _datasets(payload) for v in variants(ACTIVATIONS)
             if v in payload["runs"][d] and f"{v}-BN" in payload["runs"][d]]
    plain = {k: _peak(payload["runs"][k[0]][k[1]]) for k in cases}
    with_bn = {k: _peak(payload["runs"][k[0]][f"{k[1]}-BN"]) for k in cases}
    comparable = [k for k in cases if math.isfinite(plain[k]) and not math.isnan(with_bn[k])]
    worse = [k for k in comparable if with_bn[k] >= EXPLOSION_FACTOR * plain[k]]
    text = (f"peak ratio with BN >= {EXPLOSION_FACTOR:g} x the peak without BN in {len(worse)}/{len(comparable)} "
            f"variants with a defined ratio without BN (median peak with BN "
            f"{np.median([with_bn[k] for k in comparable]) if comparable else math.nan:.3g})"
            + _diverged_text(payload, [f"{v}-BN" for v in variants(ACTIVATIONS)]).replace(
                "counted as chance (10%)", "counted as an explosion") + f" ({_where(payload)})")
    verdict = (REPRODUCED if comparable and len(worse) == len(comparable)
               else PARTLY if worse and 2 * len(worse) >= len(comparable) else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


def _gpn_stable(payload):
    """Figs. 10-13's contrast: each GPN network without BN against the same GPN network with BN."""
    runs = payload["runs"]
    cases = [(d, v) for d in _datasets(payload) for v in variants(ACTIVATIONS)
             if v.endswith("-GPN") and v in runs[d] and f"{v}-BN" in runs[d]]
    plain = {k: _peak(runs[k[0]][k[1]]) for k in cases}
    with_bn = {k: _peak(runs[k[0]][f"{k[1]}-BN"]) for k in cases}
    stable = [k for k in cases if math.isfinite(plain[k]) and EXPLOSION_FACTOR * plain[k] <= with_bn[k]]
    text = (f"{len(stable)}/{len(cases)} GPN networks without BN have a peak gradient norm ratio at least "
            f"{EXPLOSION_FACTOR:g} x below the same network's with BN; peaks without / with BN: "
            + ", ".join(f"{DATASET_LABELS[d]} {v} {plain[d, v]:.3g} / {with_bn[d, v]:.3g}" for d, v in cases)
            + " (inf: diverged, or a gradient norm of 0 at some step)" + f" ({_where(payload)})")
    verdict = (REPRODUCED if cases and len(stable) == len(cases)
               else PARTLY if 2 * len(stable) >= len(cases) and stable else NOT_REPRODUCED)
    return text, _cap(verdict, payload)


_STAND_IN = (" Runs on stand-in data or at a reduced depth count at most as partly; only MNIST and "
             "CIFAR-10 at depth 200 can reproduce it.")
_UNFINISHED = (" Before the paper-scale run has finished, it is judged on the networks its journal holds, each "
               "group cut to the epoch that all its journalled networks have reached (the GPU command journals "
               "a few networks' 50 epochs at a time, so some may be missing); the networks still to come may "
               "change the verdict, and without CIFAR-10 it is at most partly.")
def _judged_unfinished(groups: tuple[str, ...]) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    """The payload an unfinished run's journal gives a claim that needs the networks ``groups``
    ("no BN", "BN") on MNIST to have reached an epoch; None until they have."""
    def payload(units: Mapping[str, Any]) -> dict[str, Any] | None:
        out = unfinished(units)
        if out is None or "mnist" not in out["runs"]:
            return None
        return out if all(out["epochs_reached"]["mnist"][g] > 0 for g in groups) else None
    return payload

CLAIMS = [
    Claim(key="lu-real-untrainable", paper="lu", source="paper", result="runs",
          text="Table 2: depth-200 networks with ReLU, LeakyReLU or GELU (no GPN, no BN) are not "
               "trainable on MNIST and CIFAR-10 (accuracy at chance).",
          rule="reproduced if every such run ends with a training accuracy <= 15% (chance is 10%; a diverged "
               "run counts as chance); partly if some do; else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_untrainable, unfinished=_judged_unfinished(("no BN",))),
    Claim(key="lu-real-gpn-trainable", paper="lu", source="paper", result="runs",
          text="Table 2: once ReLU, LeakyReLU and GELU are GPN, the depth-200 networks can be trained.",
          rule="reproduced if each GPN version's training accuracy exceeds its plain version's by >= 10 "
               "points on every data set (a diverged run counts as chance, 10%); partly if at least half do; "
               "else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_gpn_trainable, unfinished=_judged_unfinished(("no BN",))),
    Claim(key="lu-real-gpn-train-accuracy", paper="lu", source="paper", result="runs",
          text="Table 2: GPN activations consistently outperform their unnormalised counterparts in "
               "training accuracy (without BN).",
          rule="a diverged run counts as chance (10%). A GPN version trains better if its training accuracy "
               "exceeds the plain one's by more than 1 point, worse if it falls short by more than 1 point, "
               "even otherwise (one seed per run, so no noise estimate; 1 point is the margin). Reproduced if "
               "no GPN version is worse and at least 3/4 of the comparisons (six activations x data sets) are "
               "better (the rest even: near 100% both train to the ceiling); partly if at least 3/4 are "
               "better or even; else not reproduced." + _STAND_IN,
          check=_gpn_train_acc),
    Claim(key="lu-real-bn-explodes", paper="lu", source="paper", result="runs",
          text="Figs. 10-13: batch normalisation leads to gradient explosion with every activation.",
          rule="reproduced if, for every activation and GPN version whose ratio without BN is defined "
               "throughout training (no gradient norm of exactly 0), the peak gradient norm ratio (Eq. (56)) "
               "with BN is >= 10 x the peak without BN (a diverged BN run counts as an explosion); partly "
               "if for at least half; else not reproduced." + _STAND_IN + _UNFINISHED,
          check=_bn_explodes, unfinished=_judged_unfinished(("no BN", "BN"))),
    Claim(key="lu-real-gpn-stable", paper="lu", source="paper", result="runs",
          text="Figs. 10-13: without BN, every GPN network keeps a stable gradient magnitude throughout "
               "training.",
          rule="judged as the paper states it, against batch normalisation (the paper gives no bound of its "
               "own): a GPN network without BN is stable if its peak gradient norm ratio (Eq. (56)) over "
               "training is at most 1/10 of the peak of the same GPN network with BN (a diverged run, or one "
               "with a gradient norm of 0 at some step, has an unbounded peak: unstable without BN, an "
               "explosion with it). Reproduced if every GPN network is; partly if at least half are; else not "
               "reproduced. One network per cell, as in the paper: no test over seeds, the factor 10 is the "
               "margin." + _STAND_IN + _UNFINISHED,
          check=_gpn_stable, unfinished=_judged_unfinished(("no BN", "BN"))),
]
