"""Experiment of the chapter book/part1/chen_uci_arms.md: the arms that Table 1 of Chen & Ge
leaves out, on the UCI benchmarks of :mod:`gmp.experiments.chen_uci`.

The official code trains GmP at learning rate 0.1, SP, WN and BN at 0.01, and converts a
Glorot-uniform weight for GmP with an inverse map that folds every direction into the
half-sphere ``u_n >= 0`` (the chapter's ``gmp_init="glorot_half"``). The arms: GmP at 0.01; SP,
WN and BN at 0.1; GmP with the paper text's initialisation (uniform directions, ``r = 1``); GmP
with the book's exact conversion of the same Glorot draw (``"glorot"``, no fold).

Cost: Naval and Power take most of the chapter's run time (its page gives the hours and the share,
from the chapter's cache). The arms therefore run on the clean protocol only (the one the chapter's
claims are judged on), with the chapter's ten seeds, on the six data sets of the claim "GmP best
on every data set but Naval"; Naval, which that claim leaves out, is left out; the scales below
say so. The chapter's runs at the official rates are read from its cache at the same scale when
that is current, else computed here.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gmp import results as _results
from gmp.config import SCALES, Config, load, scaled
from gmp.experiments import chen_uci
from gmp.progress import bar
from gmp.results import Claim, PowerTest, Store

ARMS: dict[str, dict[str, Any]] = {
    "GmP lr 0.01": {"method": "GmP", "lr": 0.01, "init": "glorot_half"},
    "SP lr 0.1": {"method": "SP", "lr": 0.1, "init": "glorot"},
    "WN lr 0.1": {"method": "WN", "lr": 0.1, "init": "glorot"},
    "BN lr 0.1": {"method": "BN", "lr": 0.1, "init": "glorot"},
    "GmP uniform init": {"method": "GmP", "lr": 0.1, "init": "uniform"},
    "GmP exact conversion": {"method": "GmP", "lr": 0.1, "init": "glorot"},
}
"""The arms, by name: method, learning rate and GmP initialisation."""

_RESTRICT = {
    "smoke": dict(datasets=["yacht"], seeds=[0]),
    "small": dict(datasets=["yacht", "energy"], seeds=[0, 1]),
    "paper": dict(datasets=["boston", "concrete", "energy", "power", "wine", "yacht"], seeds=list(range(10))),
}
CONFIG = scaled(**{scale: {**chen_uci.CONFIG[scale], **_RESTRICT[scale], "protocols": ["clean"], "arms": ARMS}
                   for scale in SCALES})


def arm_config(cfg: Config, arm: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of :func:`gmp.experiments.chen_uci.run_one` for one arm."""
    values = {k: v for k, v in cfg.items() if k != "arms"}
    values["lr"] = {**cfg.lr, arm["method"]: arm["lr"]}
    values["gmp_init"] = arm["init"]
    return values


def arm_key(name: str, dataset: str, method: str, seed: int) -> str:
    """The journal key of the run of the arm ``name`` (of ``method``) on ``dataset`` and ``seed``."""
    return f"{name}/{chen_uci.run_key('clean', dataset, method, seed)}"


def reference_key(dataset: str, method: str, seed: int) -> str:
    """The journal key of the chapter's run of ``method`` on ``dataset`` and ``seed``, where :func:`reference`
    computes it."""
    return f"reference/{chen_uci.run_key('clean', dataset, method, seed)}"


def _arm_units(cfg: Config, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every arm's runs on the clean protocol, arm by arm, then seed by seed, by :func:`arm_key`."""
    out = {}
    for name, arm in cfg.arms.items():
        settings = arm_config(cfg, arm)
        out |= {arm_key(name, d, arm["method"], s): (lambda c=settings, d=d, m=arm["method"], s=s:
                                                     chen_uci.run_one(c, d, m, "clean", s, device))
                for s in cfg.seeds for d in cfg.datasets}
    return out


def _run_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`gmp.experiments.chen_uci.run_one` reads of ``cfg``: all but the arms and the grid's choice of runs
    (``_RESTRICT``'s data sets and seeds, and the protocols)."""
    return {k: v for k, v in cfg.items() if k not in ("arms", "datasets", "seeds", "protocols")}


def _reference_units(cfg: Config, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """The chapter's clean-protocol runs on the arms' data sets and seeds, by :func:`reference_key`."""
    settings = {k: v for k, v in cfg.items() if k != "arms"}
    return {reference_key(d, m, s): (lambda d=d, m=m, s=s: chen_uci.run_one(settings, d, m, "clean", s, device))
            for s in cfg.seeds for d in cfg.datasets for m in cfg.methods}


def _cached_reference(cfg: Config) -> dict[str, Any] | None:
    """:func:`reference` from the chapter's ``table1`` cache at ``cfg.scale`` when that is current, complete for
    the arms' data sets and seeds and computed with the settings that ``cfg`` gives each run, else None (an arms
    config with other epochs, say, computes its own reference rather than reading runs of another setting)."""
    wanted = {(d, m, s) for d in cfg.datasets for m in cfg.methods for s in cfg.seeds}
    entry = _results.cached("chen_uci", "table1", cfg.scale)
    if entry.current and _run_settings(cfg) == _run_settings(load("chen_uci", cfg.scale)):
        runs = [r for r in entry.payload["runs"] if r["protocol"] == "clean"
                and (r["dataset"], r["method"], r["seed"]) in wanted]
        if len(runs) == len(wanted):
            p = entry.provenance or {}
            return {"source": f"the chapter's {cfg.scale}-scale cache (run of {p.get('date', '?')}, "
                              f"config digest {p.get('config_digest', '?')})", "runs": runs}
    return None


def unit_tolerance(key: str) -> tuple[float, float]:
    """``(rtol, atol)`` for re-verifying the unit ``key``: as for the chapter's own fits
    (:data:`gmp.experiments.chen_uci.UNIT_RTOL`)."""
    return chen_uci.unit_tolerance(key)


def units(cfg: Config, store: Store, seed: int = 0, device: torch.device | str = "cpu"
          ) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every run of the chapter by journal key: the arms', and the chapter's own where its cache does not serve
    them, as :func:`reference` decides. The seeds are ``cfg.seeds``, whatever the run's ``seed``. What
    ``python -m gmp.runs`` keeps in the cache and ``--restamp`` recomputes."""
    own = {} if _cached_reference(cfg) is not None else _reference_units(cfg, device)
    return _arm_units(cfg, device) | own


def run_arms(cfg: Config, store: Store, device: torch.device | str = "cpu") -> dict[str, list[dict[str, Any]]]:
    """``runs[arm]``: the arm's runs (each through ``store.memo``), arm by arm so that an
    interrupted run has finished whole arms first."""
    todo = _arm_units(cfg, device)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in cfg.arms}
    with bar(total=len(todo), desc=f"chen_uci_arms {cfg.scale}", unit="run") as progress:
        for key, compute in todo.items():
            out[key.partition("/")[0]].append(store.memo(key, compute))  # arm_key: the arm's name, then "/"
            progress.update()
    return out


def reference(cfg: Config, store: Store, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The chapter's clean-protocol runs on the arms' data sets and seeds: from its ``table1``
    cache at ``cfg.scale`` when current, complete for them and computed with the settings ``cfg`` gives each run,
    else computed here."""
    cached = _cached_reference(cfg)
    if cached is not None:
        return cached
    runs = [store.memo(key, compute) for key, compute in _reference_units(cfg, device).items()]
    return {"source": "computed here (no current cache of the chapter at this scale)", "runs": runs}


def summary(cfg: Config, arms: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of the result ``arms``."""
    return {"datasets": list(cfg.datasets), "seeds": list(cfg.seeds), "methods": list(cfg.methods),
            "official_lr": dict(cfg.lr), "arm_settings": dict(cfg.arms), "arms": dict(arms),
            "reference": dict(ref), "target_std": {d: float(np.std(chen_uci.uci_arrays(d)[1])) for d in cfg.datasets}}


def comparison(payload: Mapping[str, Any], replace: Sequence[str]) -> dict[str, Any]:
    """A ``table1``-shaped payload: the chapter's runs with those of each method named by an arm
    in ``replace`` swapped for the arm's."""
    swapped = {payload["arm_settings"][name]["method"]: name for name in replace}
    runs = [r for r in payload["reference"]["runs"] if r["method"] not in swapped]
    runs += [r for name in replace for r in payload["arms"][name]]
    return {"runs": runs, "summary": chen_uci.summarize(runs), "target_std": payload["target_std"]}


COMPARISONS: dict[str, tuple[str, ...]] = {
    "lr 0.01": ("GmP lr 0.01",),
    "lr 0.1": ("SP lr 0.1", "WN lr 0.1", "BN lr 0.1"),
    "uniform init": ("GmP uniform init",),
    "exact conversion": ("GmP exact conversion",),
}
"""Which arms replace the chapter's runs in each comparison."""


def table(payload: Mapping[str, Any]):
    """Mean test RMSE (± standard error over the seeds) per data set of the chapter's runs and of each arm."""
    from IPython.display import HTML

    groups = {f"{m} lr {payload['official_lr'][m]:g} (chapter)": [r for r in payload["reference"]["runs"]
                                                                  if r["method"] == m] for m in payload["methods"]}
    groups.update(payload["arms"])
    head = ["Runs"] + [chen_uci.LABELS[d] for d in payload["datasets"]]
    rows = []
    for name, runs in groups.items():
        cells = []
        for d in payload["datasets"]:
            values = [r["test_rmse"] for r in runs if r["dataset"] == d and not r["diverged"]]
            diverged = sum(r["diverged"] for r in runs if r["dataset"] == d)
            text = (f"{np.mean(values):.3f} ± {np.std(values, ddof=1) / np.sqrt(len(values)):.3f}"
                    if len(values) > 1 else f"{values[0]:.3f}" if values else "all diverged")
            cells.append(text + (f" ({diverged} diverged)" if diverged else ""))
        rows.append([name] + cells)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


def _check(name: str):
    def check(payload: Mapping[str, Any]) -> tuple[str, str]:
        return chen_uci._gmp_best_except_naval(comparison(payload, COMPARISONS[name]), "clean")
    return check


_SCOPE = ("clean protocol, the chapter's seeds 0-9, the six data sets of the claim: Boston, Concrete, Energy, "
          "Power, Wine and Yacht (Naval, which the claim leaves out, is not run)")
_RULE = ("The rule of the chapter's claim on the arms' runs ({scope}): a diverged run counts as chance, the RMSE "
         "of predicting the targets' mean. Per data set, GmP's test RMSE minus each other method's, paired by seed "
         "(same split, same initial weights), with its 95% Student-t interval over the seeds. Reproduced if on every "
         "data set run each of GmP's three intervals lies below 0; partly if GmP has the lowest mean test RMSE on at "
         "least half of them; else not reproduced.").format(scope=_SCOPE)

CLAIMS = [
    Claim(key=f"chen-uci-gmp-best-{name.replace(' ', '-').replace('.', '')}", paper="chen", source="check", result="arms",
          text="On the UCI regression benchmarks GmP achieves the lowest mean test RMSE among SP, WN, BN and GmP on "
               f"all benchmarks except Naval (Table 1), {what}.",
          short=f"UCI: GmP has the lowest RMSE, {short}",
          rule=_RULE, check=_check(name), test=PowerTest("t", len(CONFIG["paper"]["seeds"])))
    for name, what, short in (
        ("lr 0.01", "with every method at learning rate 0.01 (the paper trains GmP at 0.1)", "every method at lr 0.01"),
        ("lr 0.1", "with every method at learning rate 0.1 (the paper trains SP, WN and BN at 0.01)",
         "every method at lr 0.1"),
        ("uniform init", "with GmP initialised as the paper's text says (uniform directions, r = 1)",
         "GmP with the text's initialisation"),
        ("exact conversion", "with GmP initialised by the book's exact conversion of the Glorot weight (the "
                             "official code's inverse folds every direction into the half-sphere u_n >= 0)",
         "GmP with the exact Glorot conversion"),
    )
]
