"""Experiment of the chapter book/part1/chen_banana_arms.md: GmP's initialisation arms on the
banana task of :mod:`gmp.experiments.chen_banana`.

The chapter initialises GmP as the official code does (``gmp_init="glorot_half"``): a
Glorot-uniform weight converted to angles by an inverse map that folds every direction into the
half-sphere ``u_n >= 0``. Two arms change only that: the paper text's initialisation (Sec. 3.3:
uniform directions, ``lam = 0``, ``r = 1``) and the book's exact conversion of the same Glorot
draw (``"glorot"``: the initial network equals the Glorot one, so its runs pair with the
chapter's seed by seed). Each arm runs at both learning rates and under both protocols of the
chapter; the learning-rate arms of every method are the chapter's own.

The chapter's runs are read from its cache at the same scale when that is current (the
paper-scale run is not repeated), else computed here.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gmp import results as _results
from gmp.config import SCALES, Config, load, scaled
from gmp.experiments import chen_banana
from gmp.results import Claim, PowerTest, Store, paired_interval

INITS: dict[str, str] = {"uniform": "paper text: uniform directions, r = 1",
                         "glorot": "the book's exact conversion of the same Glorot draw (no half-sphere fold)"}
"""GmP's initialisation arms (``gmp_init`` of the chapter's config), with what each is."""

CONFIG = scaled(**{scale: {**chen_banana.CONFIG[scale], "arm_inits": list(INITS)} for scale in SCALES})


def _main_cfg(cfg: Config, init: str | None = None) -> Config:
    """The chapter's config (GmP initialised by ``init`` when given, else as the chapter does)."""
    values = {k: v for k, v in cfg.items() if k != "arm_inits"}
    values["gmp_init"] = init or cfg.gmp_init
    return Config("chen_banana", cfg.scale, values)


def _cell(run: Mapping[str, Any]) -> dict[str, Any]:
    """The per-seed numbers of one run, as the chapter's ``fig3`` payload holds them."""
    h = run["history"]
    return {"test_accuracy": run["test_accuracy"], "train_accuracy": run["train_accuracy"],
            "max_move": run["max_move"], "median_move": run["median_move"], "path_length": run["path_length"],
            "epochs": len(h["train_loss"]), "best_epoch": h["best_epoch"], "diverged": h["diverged"]}


def _arm_units(cfg: Config, seeds: Sequence[int], device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """GmP under every arm init, protocol, learning rate and seed of ``seeds``, keyed ``<init>/<the chapter's run
    key>``; each unit is the :func:`_cell` of a run."""
    out = {}
    for init in cfg.arm_inits:
        arm_cfg = _main_cfg(cfg, init)
        out |= {f"{init}/{chen_banana.run_key('GmP', lr, p, s)}": (lambda c=arm_cfg, l=lr, p=p, s=s: _cell(
            chen_banana.train_one(c, "GmP", l, p, s, device))) for p in cfg.protocols for lr in cfg.lrs for s in seeds}
    return out


def _cached_reference(cfg: Config, seeds: Sequence[int]) -> dict[str, Any] | None:
    """:func:`reference` from the chapter's cache at ``cfg.scale`` when that is current, holds ``seeds`` and was
    computed with the settings that ``cfg`` gives the chapter's runs, else None (an arms config with other epochs, say,
    computes its own reference rather than reading runs of another setting)."""
    entry = _results.cached("chen_banana", "fig3", cfg.scale)
    if (entry.current and _main_cfg(cfg).digest == load("chen_banana", cfg.scale).digest
            and [int(s) for s in seeds] == entry.payload["seeds"]):
        p = entry.provenance or {}
        return {"source": f"the chapter's {cfg.scale}-scale cache (run of {p.get('date', '?')}, "
                          f"config digest {p.get('config_digest', '?')})", "payload": entry.payload}
    return None


def units(cfg: Config, store: Store, seed: int, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every run of the chapter by journal key (on :func:`gmp.experiments.chen_banana.run_seeds`): the arms', and the
    chapter's own (:func:`gmp.experiments.chen_banana.units`, same keys) where its cache does not serve them, as
    :func:`reference` decides. What ``python -m gmp.runs`` keeps in the cache and ``--restamp`` recomputes."""
    seeds = chen_banana.run_seeds(cfg, seed)
    own = {} if _cached_reference(cfg, seeds) is not None else chen_banana.units(_main_cfg(cfg), store, seed, device)
    return _arm_units(cfg, seeds, device) | own


def run_arms(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
             ) -> dict[str, Any]:
    """``arms[init][protocol][lr][str(seed)]``: GmP under every arm init, resumable through ``store.memo``."""
    cells = {key: store.memo(key, compute) for key, compute in _arm_units(cfg, seeds, device).items()}
    return {init: {p: {f"{lr:g}": {str(s): cells[f"{init}/{chen_banana.run_key('GmP', lr, p, s)}"] for s in seeds}
                       for lr in cfg.lrs} for p in cfg.protocols} for init in cfg.arm_inits}


def reference(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
              ) -> dict[str, Any]:
    """The chapter's ``fig3`` payload on ``seeds``: from its cache at ``cfg.scale`` when current and computed with the
    settings ``cfg`` gives the chapter's runs, else computed."""
    cached = _cached_reference(cfg, seeds)
    if cached is not None:
        return cached
    main = _main_cfg(cfg)
    runs = chen_banana.run(main, store, seeds, device)
    return {"source": "computed here (no current cache of the chapter at this scale)",
            "payload": chen_banana.summary(main, runs, seeds)}


def summary(arms: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of the result ``arms``."""
    return {"inits": dict(INITS), "arms": dict(arms), "reference": dict(ref)}


def with_gmp(payload: Mapping[str, Any], init: str) -> dict[str, Any]:
    """The chapter's payload with GmP's runs replaced by those of the arm ``init``."""
    main = payload["reference"]["payload"]
    results = {p: {**by_method, "GmP": payload["arms"][init][p]} for p, by_method in main["results"].items()}
    return {**main, "results": results}


def init_effect(payload: Mapping[str, Any], init: str, protocol: str, lr: float) -> tuple[float, float, float]:
    """Mean and 95% interval of GmP's test accuracy under ``init`` minus under the chapter's
    (official) initialisation, paired by seed (a diverged run counts as chance)."""
    arm = chen_banana.claim_accuracies(with_gmp(payload, init), protocol, "GmP", lr)
    official = chen_banana.claim_accuracies(payload["reference"]["payload"], protocol, "GmP", lr)
    return paired_interval([a - o for a, o in zip(arm, official)])


def table(payload: Mapping[str, Any]):
    """GmP's test accuracy and largest move per initialisation, protocol and rate, with the paired
    difference from the chapter's (official) initialisation."""
    from IPython.display import HTML

    main = payload["reference"]["payload"]
    rows = []
    for protocol in main["protocols"]:
        for lr in main["lrs"]:
            for init in [main["gmp_init"], *payload["arms"]]:
                source = main if init == main["gmp_init"] else with_gmp(payload, init)
                acc = chen_banana.claim_accuracies(source, protocol, "GmP", lr)
                moves = chen_banana._values(source, protocol, "GmP", lr, "max_move")
                diff = "—" if init == main["gmp_init"] else "{:+.3f} [{:+.3f}, {:+.3f}]".format(
                    *init_effect(payload, init, protocol, lr))
                rows.append([protocol, f"{lr:g}", init, f"{np.mean(acc):.3f} ± {np.std(acc, ddof=1):.3f}"
                             if len(acc) > 1 else f"{acc[0]:.3f}", chen_banana._fmt(moves, ".3g"), diff])
    head = ["Protocol", "Learning rate", "GmP init", "Test accuracy", "Largest move",
            "Minus the official initialisation (95% interval)"]
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


def _check(init: str):
    def check(payload: Mapping[str, Any]) -> tuple[str, str]:
        return chen_banana._gmp_most_accurate(with_gmp(payload, init))
    return check


CLAIMS = [
    Claim(key=f"chen-banana-accuracy-{init.replace('_', '-')}", paper="chen", source="check",
          text="On the banana data GmP (lr 0.1) achieves the highest test accuracy of SP, WN, BN and GmP "
               f"(Sec. 5, Fig. 3), with GmP initialised by the {what}.",
          short=f"Banana: GmP has the highest test accuracy, GmP init '{init}'",
          result="arms",
          rule="the rule of the chapter's claim at the official rates, with GmP's runs of this initialisation: "
               "judged on the paper's protocol (early stopping on the test accuracy) at the official learning "
               "rates; " + chen_banana._ACCURACY_RULE,
          check=_check(init), test=PowerTest("t", chen_banana.CONFIG["paper"]["seeds"]))
    for init, what in {"uniform": "paper text (uniform directions, r = 1)",
                       "glorot": "book's exact conversion of a Glorot weight (no half-sphere fold)"}.items()
]
