"""Experiment of the chapter book/part1/chen_levy_arms.md: the arms that Fig. 2 of Chen & Ge
leaves out, on the 1-D Levy task of :mod:`gmp.experiments.chen_levy`.

The official code trains GmP at learning rate 0.1 and SP, WN and BN at 0.01, and
initialises GmP by converting a Glorot-uniform weight (``r = ||w||``); the paper's text
initialises it with uniform directions and ``r = 1``. The arms here run every method at the
other rate and GmP with the text's initialisation, with every other setting of the chapter,
so that "GmP generalises best" can be judged at equal learning rates and under the
initialisation the paper describes. (The official inverse map's half-sphere quirk has no
effect here: with one input a GmP unit has no angle, only a fixed sign, which the official
code keeps.)

The runs of the chapter's own setting (the reference: each method at its official rate) are
taken from the chapter's cache at the same scale when that is current, so the paper-scale
run is not repeated; otherwise they are computed here. One arm reruns GmP at the chapter's
setting to record what the chapter's payload lacks (the units that end dead, the final rate)
and to check that today's code reproduces the cached run.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gmp import results as _results
from gmp.config import SCALES, Config, load, scaled
from gmp.experiments import chen_levy
from gmp.results import Claim, PowerTest, Store

EARLIER_DRAW = "default_rng"
"""The Levy draw of the chapter's headline until 2026-11-26 (:data:`gmp.data.toy.LEVY_DRAWS`), whose run was seen
before the chapter moved to the official notebook's draw; its arms rerun that design."""

ARMS: dict[str, dict[str, Any]] = {
    "GmP lr 0.01": {"method": "GmP", "lr": 0.01, "init": "glorot", "draw": "notebook"},
    "SP lr 0.1": {"method": "SP", "lr": 0.1, "init": "glorot", "draw": "notebook"},
    "WN lr 0.1": {"method": "WN", "lr": 0.1, "init": "glorot", "draw": "notebook"},
    "BN lr 0.1": {"method": "BN", "lr": 0.1, "init": "glorot", "draw": "notebook"},
    "GmP uniform init": {"method": "GmP", "lr": 0.1, "init": "uniform", "draw": "notebook"},
    "GmP rerun": {"method": "GmP", "lr": 0.1, "init": "glorot", "draw": "notebook"},
    **{f"{method} earlier draw": {"method": method, "lr": lr, "init": "glorot", "draw": EARLIER_DRAW}
       for method, lr in chen_levy.CONFIG["paper"]["lr"].items()},
}
"""The arms, by name: method, learning rate, GmP initialisation ("glorot": the official
conversion; "uniform": the paper text's uniform directions with ``r = 1``) and the Levy draw
("notebook": the official notebook's, as the chapter; :data:`EARLIER_DRAW`: the chapter's earlier
design, every method at its official rate). "GmP rerun" repeats the chapter's GmP setting for its
diagnostics."""

CONFIG = scaled(**{scale: {**chen_levy.CONFIG[scale], "arms": ARMS} for scale in SCALES})

def arm_config(cfg: Config, arm: Mapping[str, Any]) -> Config:
    """The chapter's config of ``cfg`` with the arm's learning rate for its method, its GmP init and its Levy draw."""
    values = {k: v for k, v in cfg.items() if k != "arms"}
    values["lr"] = {**cfg.lr, arm["method"]: arm["lr"]}
    values["gmp_init"] = arm["init"]
    values["levy_draw"] = arm["draw"]
    return Config("chen_levy", cfg.scale, values)


def record(run: Mapping[str, Any]) -> dict[str, Any]:
    """The per-seed numbers of one run of :func:`gmp.experiments.chen_levy.train_one`."""
    h = run["history"]
    return {"test_rmse": run["test_rmse"], "max_move": chen_levy._largest(run["max_move"]),
            "epochs": len(h["train_loss"]), "best_epoch": h["best_epoch"],
            "final_lr": h["lr"][-1] if h["lr"] else None, "diverged": h["diverged"],
            "diverged_epoch": h["diverged_epoch"], "best_train_mae": h["best_value"],
            "dead_units": run["units"]["dead"], "linear_units": run["units"]["linear"], "lr": run["lr"]}


def arm_key(name: str, seed: int) -> str:
    """The journal key of the run of the arm ``name`` on ``seed``."""
    return f"arm/{name}/seed{seed}"


def reference_key(method: str, seed: int) -> str:
    """The journal key of the chapter's run of ``method`` on ``seed``, where :func:`reference` computes it."""
    return f"reference/{method}/seed{seed}"


def _arm_units(cfg: Config, seeds: Sequence[int], device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """The :func:`record` of every arm of ``cfg.arms`` on every seed of ``seeds``, by :func:`arm_key`."""
    out = {}
    for name, arm in cfg.arms.items():
        arm_cfg = arm_config(cfg, arm)
        out |= {arm_key(name, seed): (lambda c=arm_cfg, m=arm["method"], s=seed: record(chen_levy.train_one(c, m, s,
                                                                                                             device)))
                for seed in seeds}
    return out


def _reference_config(cfg: Config) -> Config:
    """The config of the chapter's own runs under ``cfg``: each method at its rate of ``cfg.lr``, GmP initialised
    by ``cfg.gmp_init``, on the official notebook's draw."""
    return arm_config(cfg, {"method": "GmP", "lr": cfg.lr["GmP"], "init": cfg.gmp_init, "draw": "notebook"})


def _reference_units(cfg: Config, seeds: Sequence[int], device: torch.device | str
                     ) -> dict[str, Callable[[], dict[str, Any]]]:
    """The :func:`record` of the chapter's run of every method (at its official rate) on every seed of ``seeds``,
    by :func:`reference_key`."""
    main_cfg = _reference_config(cfg)
    return {reference_key(m, seed): (lambda m=m, s=seed: record(chen_levy.train_one(main_cfg, m, s, device)))
            for m in cfg.methods for seed in seeds}


def _cached_reference(cfg: Config, seeds: Sequence[int]) -> dict[str, Any] | None:
    """:func:`reference` from the chapter's ``fig2`` cache at ``cfg.scale`` when that is current, holds ``seeds`` and
    was computed with the settings that ``cfg`` gives the chapter's runs, else None (an arms config with other
    epochs, say, computes its own reference rather than reading runs of another setting)."""
    entry = _results.cached("chen_levy", "fig2", cfg.scale)
    wanted = {str(s) for s in seeds}
    if (entry.current and _reference_config(load("chen_levy", cfg.scale)).digest == _reference_config(cfg).digest
            and all(wanted <= set(entry.payload["runs"][m]) for m in cfg.methods)):
        p = entry.provenance or {}
        return {"source": f"the chapter's {cfg.scale}-scale cache (run of {p.get('date', '?')}, "
                          f"config digest {p.get('config_digest', '?')})",
                "runs": {m: {s: entry.payload["runs"][m][s] for s in sorted(wanted, key=int)} for m in cfg.methods}}
    return None


def units(cfg: Config, store: Store, seed: int, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every run of the chapter by journal key (on :func:`gmp.experiments.chen_levy.run_seeds`): the arms', and the
    chapter's own where its cache does not serve them, as :func:`reference` decides. What ``python -m gmp.runs``
    keeps in the cache and ``--restamp`` recomputes."""
    seeds = chen_levy.run_seeds(cfg, seed)
    own = {} if _cached_reference(cfg, seeds) is not None else _reference_units(cfg, seeds, device)
    return _arm_units(cfg, seeds, device) | own


def run_arms(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
             ) -> dict[str, dict[str, dict[str, Any]]]:
    """``runs[arm][str(seed)]``: every arm of ``cfg.arms`` on every seed, resumable through ``store.memo``."""
    done = {key: store.memo(key, compute) for key, compute in _arm_units(cfg, seeds, device).items()}
    return {name: {str(seed): done[arm_key(name, seed)] for seed in seeds} for name in cfg.arms}


def reference(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
              ) -> dict[str, Any]:
    """The chapter's own runs (each method at its official rate) on ``seeds``.

    From the chapter's ``fig2`` cache at ``cfg.scale`` when it is current, holds these seeds and was computed with
    the settings ``cfg`` gives them; otherwise computed here through ``store.memo``. ``source`` says which.
    """
    cached = _cached_reference(cfg, seeds)
    if cached is not None:
        return cached
    done = {key: store.memo(key, compute) for key, compute in _reference_units(cfg, seeds, device).items()}
    return {"source": "computed here (no current cache of the chapter at this scale)",
            "runs": {m: {str(seed): done[reference_key(m, seed)] for seed in seeds} for m in cfg.methods}}


def summary(cfg: Config, arms: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of the result ``arms``."""
    return {"methods": list(cfg.methods), "official_lr": dict(cfg.lr), "seeds": sorted({int(s) for r in arms.values()
                                                                                        for s in r}),
            "arm_settings": dict(cfg.arms), "arms": dict(arms), "reference": dict(ref)}


def comparison(payload: Mapping[str, Any], gmp_from: str, others_from: str | None) -> dict[str, Any]:
    """A payload of :mod:`chen_levy`'s shape (``methods``, ``runs``) for one comparison.

    GmP's runs come from the arm ``gmp_from`` (or the reference when it is "reference"); the
    other methods' from the arms ``"<method> <others_from>"`` (or the reference when None).
    """
    ref = payload["reference"]["runs"]
    runs = {}
    for method in payload["methods"]:
        if method == "GmP":
            runs[method] = ref["GmP"] if gmp_from == "reference" else payload["arms"][gmp_from]
        else:
            runs[method] = ref[method] if others_from is None else payload["arms"][f"{method} {others_from}"]
    return {"methods": list(payload["methods"]), "runs": runs}


COMPARISONS: dict[str, tuple[str, str | None, str]] = {
    "lr 0.01": ("GmP lr 0.01", None, "every method at learning rate 0.01"),
    "lr 0.1": ("reference", "lr 0.1", "every method at learning rate 0.1"),
    "uniform init": ("GmP uniform init", None,
                     "GmP initialised as the paper's text says (uniform directions, r = 1), every method at its "
                     "official rate"),
    "earlier draw": ("GmP earlier draw", "earlier draw",
                     "the chapter's design until 2026-11-26: the Levy data drawn by NumPy's default_rng(seed), every "
                     "method at its official rate"),
}
"""The comparisons the claims judge: (GmP's runs, the others' runs, what is compared) as in :func:`comparison`."""


def _as_headline(name: str):
    """The arms payload as :mod:`chen_levy`'s for the comparison ``name`` of :data:`COMPARISONS`."""
    gmp_from, others_from, _ = COMPARISONS[name]

    def view(payload: Mapping[str, Any]) -> dict[str, Any]:
        return comparison(payload, gmp_from, others_from)
    return view


def _check(kind: str, name: str):
    gmp_from, others_from, _ = COMPARISONS[name]
    judge = chen_levy._gmp_best_rmse if kind == "rmse" else chen_levy._gmp_moves_less

    def check(payload: Mapping[str, Any]) -> tuple[str, str]:
        return judge(comparison(payload, gmp_from, others_from))
    return check


_RMSE_RULE = ("GmP's test RMSE minus each other method's, paired by seed (same data, same initial weights), "
              "with its 95% Student-t interval over the seeds; a diverged run counts as chance, the RMSE of "
              "predicting the test targets' mean. Reproduced if all three intervals lie below 0 (GmP better "
              "beyond noise); partly if GmP has the lowest mean test RMSE, not beyond noise, and the lowest "
              "RMSE of the four in a majority of the seeds; else not reproduced (the rule of the chapter's claim "
              "at the official rates)")
_STABLE_RULE = ("reproduced if GmP's largest move is below 1 in every seed and each of SP, WN and BN reaches at "
                "least 10 in every seed; partly if GmP's largest move is below each other method's in every seed; "
                "else not reproduced (the rule of the chapter's claim at the official rates)")

_T = PowerTest("t", chen_levy.CONFIG["paper"]["seeds"])
"""GmP minus each other method's RMSE, over the chapter's seeds."""

CLAIMS = [
    Claim(key="chen-levy-rmse-lr001", paper="chen", source="check",
          text="GmP has the lowest test RMSE of the four on the Levy task (Fig. 2d-g), with every method at "
               "learning rate 0.01 (the paper trains GmP at 0.1).",
          short="Levy: GmP has the lowest test RMSE, every method at lr 0.01",
          result="arms", rule=_RMSE_RULE, check=_check("rmse", "lr 0.01"), test=_T),
    Claim(key="chen-levy-rmse-lr01", paper="chen", source="check",
          text="GmP has the lowest test RMSE of the four on the Levy task (Fig. 2d-g), with every method at "
               "learning rate 0.1 (the paper trains SP, WN and BN at 0.01).",
          short="Levy: GmP has the lowest test RMSE, every method at lr 0.1",
          result="arms", rule=_RMSE_RULE, check=_check("rmse", "lr 0.1"), test=_T),
    Claim(key="chen-levy-rmse-uniform", paper="chen", source="check",
          text="GmP has the lowest test RMSE of the four on the Levy task (Fig. 2d-g), with GmP initialised as "
               "the paper's text says (Sec. 3.3: uniform directions, r = 1) instead of the official Glorot "
               "conversion.",
          short="Levy: GmP has the lowest test RMSE, GmP with the text's initialisation",
          result="arms", rule=_RMSE_RULE, check=_check("rmse", "uniform init"), test=_T),
    Claim(key="chen-levy-rmse-earlier-draw", paper="chen", source="check",
          text="GmP has the lowest test RMSE of the four on the Levy task (Fig. 2d-g), on the chapter's design "
               "until 2026-11-26: the Levy data drawn by NumPy's default_rng(seed) instead of the official "
               "notebook's draw, every method at its official rate.",
          short="Levy: GmP has the lowest test RMSE, on the earlier data draw",
          result="arms", rule=_RMSE_RULE, check=_check("rmse", "earlier draw"), test=_T,
          as_headline=_as_headline("earlier draw")),
    Claim(key="chen-levy-stable-lr001", paper="chen", source="check",
          text="Under GmP the largest per-epoch move of a characteristic point stays below 1 while SP, WN and BN "
               "reach far larger values (Sec. 2.4, Fig. 2c), with every method at learning rate 0.01.",
          short="Levy: GmP's characteristic points move least, every method at lr 0.01",
          result="arms", rule=_STABLE_RULE, check=_check("stable", "lr 0.01")),
    Claim(key="chen-levy-stable-lr01", paper="chen", source="check",
          text="Under GmP the largest per-epoch move of a characteristic point stays below 1 while SP, WN and BN "
               "reach far larger values (Sec. 2.4, Fig. 2c), with every method at learning rate 0.1.",
          short="Levy: GmP's characteristic points move least, every method at lr 0.1",
          result="arms", rule=_STABLE_RULE, check=_check("stable", "lr 0.1")),
]


def _fmt(values: Sequence[float | None], fmt: str) -> str:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "diverged"
    text = f"{np.mean(finite):{fmt}}" + (f" ± {np.std(finite, ddof=1):{fmt}}" if len(finite) > 1 else "")
    return text + (f" ({len(values) - len(finite)} diverged)" if len(finite) < len(values) else "")


def table(payload: Mapping[str, Any]):
    """Every run group: method, rate, initialisation, test RMSE, largest move, best training MAE,
    final learning rate and dead units (mean ± standard deviation over the seeds)."""
    from IPython.display import HTML

    rows = []
    ref = payload["reference"]["runs"]
    groups = [(f"{m} (chapter)", m, payload["official_lr"][m], "glorot", "notebook", ref[m]) for m in payload["methods"]]
    groups += [(name, s["method"], s["lr"], s["init"], s.get("draw", "notebook"), payload["arms"][name])
               for name, s in payload["arm_settings"].items()]
    for name, method, lr, init, draw, runs in groups:
        values = list(runs.values())
        dead = [r.get("dead_units") for r in values]
        linear = [r.get("linear_units") for r in values]
        rows.append([name, method, f"{lr:g}", init if method == "GmP" else "glorot", draw,
                     _fmt([r["test_rmse"] for r in values], ".3f"), _fmt([r["max_move"] for r in values], ".3g"),
                     _fmt([r["best_train_mae"] for r in values], ".3f"),
                     _fmt([r["final_lr"] for r in values], ".2g"),
                     "not recorded" if any(d is None for d in dead) else _fmt(dead, ".1f"),
                     "not recorded" if any(d is None for d in linear) else _fmt(linear, ".1f")])
    head = ["Runs", "Method", "Learning rate", "GmP init", "Levy draw", "Test RMSE", "Largest move", "Best training MAE",
            "Final learning rate", "Dead units (of 100)", "Units active on every training input"]
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


def stalls(payload: Mapping[str, Any], arm: str = "GmP rerun", threshold: float = 0.3) -> dict[str, Any]:
    """The runs of ``arm`` whose best training MAE stays above ``threshold``, with their dead units
    and final learning rate, and how well the arm reproduces the reference's test RMSE."""
    runs = payload["arms"][arm]
    ref = payload["reference"]["runs"]["GmP"]
    stalled = {s: r for s, r in runs.items() if r["best_train_mae"] is not None and r["best_train_mae"] > threshold}
    gaps = [abs(r["test_rmse"] - ref[s]["test_rmse"]) for s, r in runs.items()
            if s in ref and r["test_rmse"] is not None and ref[s]["test_rmse"] is not None]
    return {"stalled": len(stalled), "seeds": len(runs), "threshold": threshold,
            "stalled_seeds": sorted(stalled, key=int),
            "stalled_dead": [stalled[s]["dead_units"] for s in sorted(stalled, key=int)],
            "stalled_mae": [stalled[s]["best_train_mae"] for s in sorted(stalled, key=int)],
            "stalled_final_lr": [stalled[s]["final_lr"] for s in sorted(stalled, key=int)],
            "stalled_linear": [stalled[s].get("linear_units") for s in sorted(stalled, key=int)],
            "other_dead": [r["dead_units"] for s, r in runs.items() if s not in stalled],
            "other_linear": [r.get("linear_units") for s, r in runs.items() if s not in stalled],
            "largest_rmse_gap_to_reference": max(gaps) if gaps else None}
