"""Experiment of the chapter book/part1/chen_levy.md (Fig. 2 of Chen & Ge): a one-hidden-layer
network of 100 ReLU units fitted to the 1-D Levy function under SP, WN, BN and GmP, with the
characteristic point ``phi_i`` of every unit recorded after every epoch.

Settings follow the official code: float64, inputs not normalised, MAE loss, full batch,
Adam (lr 0.1 for GmP, 0.01 for the others; Keras' epsilon 1e-7), up to 10,000 epochs, lr x0.1
after 500 epochs without improvement of the training loss, early stopping after 1,000
restoring the best weights (Keras semantics, :mod:`gmp.train`). The official code trains one
seed; the paper-scale run here trains several and reports their spread.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gmp.characteristic import CharacteristicTracker
from gmp.config import Config, scaled
from gmp.data.toy import LEVY_DOMAIN, ToyData, levy, levy_function
from gmp.models.mlp import mlp
from gmp.results import (NOT_REPRODUCED, PARTLY, REPRODUCED, Claim, EarlierDesign, EarlierRule, PowerTest, Store,
                         paired_interval)
from gmp.train import EarlyStopping, ReduceLROnPlateau, evaluate, fit, predict, rmse
from gmp import style

METHODS: dict[str, str] = {"SP": "sp", "WN": "wn", "BN": "bn", "GmP": "gmp"}
"""Method names of Fig. 2 -> ``param`` of :func:`gmp.mlp`, in the order of panels (d)-(g)."""

PANELS: dict[str, str] = {"SP": "d", "WN": "e", "BN": "f", "GmP": "g"}
"""Sub-panel of Fig. 2 showing each method (the order of the methods in the caption)."""

CONFIG = scaled(
    common=dict(hidden=100, n_train=50, noise=0.1, methods=list(METHODS),
                lr={"SP": 0.01, "WN": 0.01, "BN": 0.01, "GmP": 0.1}, gmp_init="glorot", loss="mae",
                adam_eps=1e-7, plateau_factor=0.1, spectrum_rows=120, far_factor=10.0),
    smoke=dict(seeds=1, epochs=20, plateau_patience=5, stop_patience=10),
    small=dict(seeds=1, epochs=1000, plateau_patience=50, stop_patience=100),
    paper=dict(seeds=10, epochs=10_000, plateau_patience=500, stop_patience=1000),
)

PAPER = {
    # Sec. 2.4 and Fig. 2c of Chen & Ge: under GmP, max_i |phi_{i,t+1} - phi_{i,t}| "is always
    # smaller than 1 throughout training", under the other parameterizations "the changes can
    # be up to 2^16 at some epochs".
    "gmp_max_move_below": 1.0,
    "others_max_move_up_to": 2.0 ** 16,
    # The test RMSEs of Fig. 2d-g are printed only in the panel titles, which the text
    # extraction of the paper lost; the paper's text gives no number for them.
    "test_rmse": None,
}


def levy_data(cfg: Config, seed: int) -> ToyData:
    """The Levy data of one seed (the same seed also initialises the network, as officially), drawn as the official
    notebook draws them unless ``cfg`` names another ``levy_draw`` (:data:`gmp.data.toy.LEVY_DRAWS`; only the check
    arms of ``gmp.experiments.chen_levy_arms`` do)."""
    return levy(n_train=cfg.n_train, noise=cfg.noise, seed=seed, draw=cfg.get("levy_draw", "notebook"))


def _spectrum_rows(n_records: int, rows: int) -> np.ndarray:
    """Indices of ``rows`` records spread evenly from the first to the last (all if fewer)."""
    return np.unique(np.linspace(0, n_records - 1, min(rows, n_records)).round().astype(int))


def train_one(cfg: Config, method: str, seed: int, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Train one network and return what Fig. 2 needs, JSON-serialisable.

    ``max_move[t]`` is ``max_i |phi_{i,t+1} - phi_{i,t}|`` between the end of epoch ``t`` and
    the end of the previous one (``t = 0``: from the initialisation), Fig. 2c.
    ``spectrum`` holds ``phi`` of all units at ``spectrum_epochs`` (0 = initialisation,
    ``e`` = after epoch ``e``), Fig. 2d-g bottom row. Predictions are on the test grid.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    data = levy_data(cfg, seed)
    torch.manual_seed(seed)
    model = mlp([1, cfg.hidden, 1], param=METHODS[method], dtype=torch.float64, init=cfg.gmp_init).to(device)
    tracker = CharacteristicTracker(lambda m: m[0], bn=(lambda m: m[1]) if method == "BN" else None)
    tracker(0, model)
    x_test = data.x_test.to(device)
    pred_init = predict(model, x_test).reshape(-1).cpu().tolist()
    history = fit(model, (data.x_train, data.y_train), epochs=cfg.epochs, lr=cfg.lr[method], loss=cfg.loss,
                  optimizer_options={"eps": cfg.adam_eps},
                  plateau=ReduceLROnPlateau(monitor="loss", factor=cfg.plateau_factor,
                                            patience=cfg.plateau_patience),
                  early_stopping=EarlyStopping(monitor="loss", patience=cfg.stop_patience,
                                               restore_best_weights=True),
                  callbacks=[lambda epoch, m: tracker(epoch + 1, m)], dtype=torch.float64, device=device,
                  description=f"Levy {method} seed {seed}")
    phi = tracker.history[:, :, 0]
    with np.errstate(invalid="ignore"):
        moves = np.abs(np.diff(phi, axis=0))
        max_move = np.where(np.isnan(moves).all(axis=1), np.nan,
                            np.nanmax(np.where(np.isnan(moves), -np.inf, moves), axis=1))
    rows = _spectrum_rows(len(phi), cfg.spectrum_rows)
    test = evaluate(model, (data.x_test, data.y_test), loss="mse", metrics={"rmse": rmse}, device=device)
    return {
        "method": method, "seed": int(seed), "lr": cfg.lr[method], "history": history.to_dict(),
        "test_rmse": test["rmse"] if math.isfinite(test["rmse"]) else None,
        "max_move": [None if not math.isfinite(v) else float(v) for v in max_move],
        "spectrum_epochs": [int(tracker.epochs[i]) for i in rows],
        "spectrum": [[None if not math.isfinite(v) else float(v) for v in phi[i]] for i in rows],
        "pred_init": pred_init,
        "pred_final": predict(model, x_test).reshape(-1).cpu().tolist(),
        "units": unit_activity(model, data.x_train),
    }


def unit_activity(model: torch.nn.Sequential, x: torch.Tensor) -> dict[str, int]:
    """How many hidden units of ``model`` (every module but the output layer, in evaluation mode)
    output zero on every input of ``x`` (``dead``: no gradient reaches them through the data, so
    no step revives them) and how many are active on every input (``linear``: on the data they
    add no kink, only a straight line)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        parameter = next(model.parameters())
        hidden = model[:-1](x.to(device=parameter.device, dtype=parameter.dtype))
    model.train(was_training)
    return {"dead": int((hidden == 0).all(dim=0).sum()), "linear": int((hidden != 0).all(dim=0).sum())}


def run_seeds(cfg: Config, seed: int) -> list[int]:
    """The seeds of a run of the chapter with seed ``seed``: ``cfg.seeds`` of them from ``seed`` on."""
    return [seed + k for k in range(cfg.seeds)]


def run_key(method: str, seed: int) -> str:
    """The journal key of the run of ``method`` on ``seed``."""
    return f"{method}-seed{seed}"


def _units(cfg: Config, seeds: Sequence[int], device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """One :func:`train_one` per method and seed of ``seeds``, by :func:`run_key`."""
    return {run_key(method, seed): (lambda m=method, s=seed: train_one(cfg, m, s, device))
            for method in cfg.methods for seed in seeds}


def units(cfg: Config, store: Store, seed: int, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every run of the chapter (on :func:`run_seeds`), by journal key: what ``python -m gmp.runs`` keeps in the
    cache and ``--restamp`` recomputes. Deterministic on the CPU with the recorded thread count."""
    return _units(cfg, run_seeds(cfg, seed), device)


def run(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
        ) -> dict[str, dict[int, dict[str, Any]]]:
    """Every method and seed, resumable through ``store.memo``: ``runs[method][seed]``."""
    done = {key: store.memo(key, compute) for key, compute in _units(cfg, seeds, device).items()}
    return {method: {seed: done[run_key(method, seed)] for seed in seeds} for method in cfg.methods}


def _largest(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def summary(runs: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """The numbers behind the table and the claims (payload of the result ``fig2``)."""
    out: dict[str, Any] = {"methods": list(runs), "seeds": sorted({int(s) for r in runs.values() for s in r}),
                           "runs": {}}
    for method, by_seed in runs.items():
        out["runs"][method] = {}
        for seed, r in by_seed.items():
            h = r["history"]
            out["runs"][method][str(seed)] = {
                "test_rmse": r["test_rmse"], "max_move": _largest(r["max_move"]),
                "epochs": len(h["train_loss"]), "stopped_epoch": h["stopped_epoch"], "best_epoch": h["best_epoch"],
                "final_lr": h["lr"][-1] if h["lr"] else None, "diverged": h["diverged"],
                "diverged_epoch": h["diverged_epoch"],
                "best_train_mae": h["best_value"],
            }
    return out


def arrays(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], seed: int) -> dict[str, np.ndarray]:
    """Curves of one seed for the paper-scale cache: ``max_move_<method>``, ``spectrum_<method>``, ..."""
    out: dict[str, np.ndarray] = {}
    for method, by_seed in runs.items():
        r = by_seed[seed]
        out[f"max_move_{method}"] = np.array([np.nan if v is None else v for v in r["max_move"]], dtype=float)
        out[f"spectrum_{method}"] = np.array([[np.nan if v is None else v for v in row] for row in r["spectrum"]],
                                             dtype=float)
        out[f"spectrum_epochs_{method}"] = np.array(r["spectrum_epochs"])
        out[f"pred_init_{method}"] = np.array(r["pred_init"])
        out[f"pred_final_{method}"] = np.array(r["pred_final"])
    return out


def _stats(values: Sequence[float | None]) -> tuple[float, float, int]:
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return math.nan, math.nan, 0
    return float(finite.mean()), float(finite.std(ddof=1)) if finite.size > 1 else 0.0, int(finite.size)


def _cell(payload: Mapping[str, Any] | None, method: str, key: str, fmt: str) -> str:
    if payload is None:
        return "—"
    values = [r[key] for r in payload["runs"][method].values()]
    mean, sd, n = _stats(values)
    if n == 0:
        return "diverged"
    if n == 1:
        return format(mean, fmt)
    return f"{mean:{fmt}} ± {sd:{fmt}} (n={n})"


def table(live: Mapping[str, Any], cached: Mapping[str, Any] | None, scale: str):
    """Test RMSE and largest per-epoch move per method: paper, this build, paper-scale cache."""
    from IPython.display import HTML

    head = ["Method", "Paper: test RMSE", f"Ours ({scale}): test RMSE", "Ours (paper scale, cache): test RMSE",
            "Paper: largest move", f"Ours ({scale}): largest move", "Ours (paper scale, cache): largest move"]
    rows = []
    for method in live["methods"]:
        paper_move = (f"< {PAPER['gmp_max_move_below']:g}" if method == "GmP"
                      else f"up to 2<sup>{math.log2(PAPER['others_max_move_up_to']):.0f}</sup>")
        rows.append([method, "not in the text", _cell(live, method, "test_rmse", ".3f"),
                     _cell(cached, method, "test_rmse", ".3f"), paper_move,
                     _cell(live, method, "max_move", ".3g"), _cell(cached, method, "max_move", ".3g")])
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


STALL_MAE = 0.3
"""A fit whose best training MAE stays above this has stalled (the noise's MAE is about 0.08;
the paper-scale GmP fits end either below 0.15 or near 0.5)."""


def stalled(payload: Mapping[str, Any], method: str = "GmP", threshold: float = STALL_MAE) -> str:
    """The runs of ``method`` whose best training MAE stays above ``threshold``, in words, with
    the learning rate the plateau schedule had left them at the end."""
    runs = payload["runs"][method]
    found = [(s, r) for s, r in runs.items() if r["best_train_mae"] is not None and r["best_train_mae"] > threshold]
    listed = "; ".join(f"seed {s}: best training MAE {r['best_train_mae']:.3f}, final learning rate "
                       f"{r['final_lr']:.0e}, test RMSE {r['test_rmse']:.3f}" for s, r in found)
    return f"{len(found)} of {len(runs)} ({listed or 'none'})"


def chance_rmse() -> float:
    """The test RMSE of predicting the mean of the test targets (the noiseless grid -10, -9.9,
    ..., 10): what a diverged run counts as in the claims."""
    return float(np.std(levy_function(np.linspace(LEVY_DOMAIN[0], LEVY_DOMAIN[1], 201))))


def _diverged(payload: Mapping[str, Any], method: str) -> list[str]:
    return [f"seed {s} at epoch {r['diverged_epoch']}" for s, r in payload["runs"][method].items() if r["diverged"]]


def _gmp_moves_less(payload: Mapping[str, Any]) -> tuple[str, str]:
    runs = payload["runs"]
    seeds = list(runs["GmP"])
    gmp_max = [runs["GmP"][s]["max_move"] for s in seeds]
    others = {m: [math.inf if runs[m][s]["diverged"] else runs[m][s]["max_move"] for s in seeds]
              for m in payload["methods"] if m != "GmP"}
    factor = CONFIG["paper"]["far_factor"]
    if any(v is None for v in gmp_max) or _diverged(payload, "GmP"):
        return f"GmP diverged or recorded no move ({', '.join(_diverged(payload, 'GmP')) or 'no move'})", \
            NOT_REPRODUCED
    worst_gmp = max(gmp_max)
    least_other = {m: min(math.inf if v is None else v for v in vals) for m, vals in others.items()}
    text = (f"largest GmP move {worst_gmp:.3g} over {len(seeds)} seed(s); smallest largest move of the others: "
            + ", ".join(f"{m} {v:.3g}" + (f" (diverged, unbounded: {', '.join(gone)})" if (gone := _diverged(payload, m))
                                          else "") for m, v in least_other.items()))
    if worst_gmp < PAPER["gmp_max_move_below"] and all(v >= factor for v in least_other.values()):
        return text, REPRODUCED
    if all(worst_gmp < v for v in least_other.values()):
        return text, PARTLY
    return text, NOT_REPRODUCED


def _gmp_best_rmse(payload: Mapping[str, Any]) -> tuple[str, str]:
    runs = payload["runs"]
    seeds = list(runs["GmP"])
    chance = chance_rmse()
    rmse_of = {m: [chance if runs[m][s]["diverged"] or runs[m][s]["test_rmse"] is None else runs[m][s]["test_rmse"]
                   for s in seeds] for m in payload["methods"]}
    means = {m: float(np.mean(v)) for m, v in rmse_of.items()}
    others = [m for m in payload["methods"] if m != "GmP"]
    wins = sum(all(rmse_of["GmP"][k] < rmse_of[m][k] for m in others) for k in range(len(seeds)))
    intervals = {m: paired_interval([g - o for g, o in zip(rmse_of["GmP"], rmse_of[m])]) for m in others}
    diverged = {m: _diverged(payload, m) for m in payload["methods"]}
    text = ("mean test RMSE " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
            + f"; GmP lowest in {wins} of {len(seeds)} seed(s); GmP minus each, 95% interval: "
            + ", ".join(f"{m} {mean:+.3f} [{low:+.3f}, {high:+.3f}]" for m, (mean, low, high) in intervals.items())
            + "".join(f"; {m} diverged ({', '.join(d)}), counted as chance RMSE {chance:.3f}"
                      for m, d in diverged.items() if d))
    if all(high < 0 for _, _, high in intervals.values()):
        return text, REPRODUCED
    if all(means["GmP"] < means[m] for m in others) and 2 * wins > len(seeds):
        return text, PARTLY
    return text, NOT_REPRODUCED


def _majority_margin(payload: Mapping[str, Any]) -> str:
    """Where one seed decides the majority that ``chen-levy-rmse``'s "partly" needs: says so, with the count."""
    runs = payload["runs"]
    seeds = list(runs["GmP"])
    chance = chance_rmse()
    rmse = {m: [chance if runs[m][s]["diverged"] or runs[m][s]["test_rmse"] is None else runs[m][s]["test_rmse"]
                for s in seeds] for m in payload["methods"]}
    wins = sum(all(rmse["GmP"][k] < rmse[m][k] for m in payload["methods"] if m != "GmP") for k in range(len(seeds)))
    if 2 * wins > len(seeds) >= 2 * (wins - 1):
        return (f"one seed decides it: GmP is lowest in {wins} of {len(seeds)} seeds, and {wins - 1} of "
                f"{len(seeds)} would fail the majority test")
    return ""


def _earlier_gmp_moves_less(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``chen-levy-stable`` in force when its paper-scale run was made (replaced by dca65ed), kept to be
    applied to the later run the chapter caches (the rule at that run's commit, which the ledger can read from git,
    is today's): today's rule except that a run that diverged was judged by how far it had moved, a GmP run not
    failed and another method's not counted as an unbounded move. It decides as the rule did at commit 1cc9952,
    where a GmP run without a move also failed the claim."""
    runs = {method: {seed: {**run, "diverged": False} for seed, run in by_seed.items()}
            for method, by_seed in payload["runs"].items()}
    return _gmp_moves_less({**payload, "runs": runs})


def adam_step_bound(beta1: float = 0.9, beta2: float = 0.999) -> float:
    """The largest ``|m_t| / sqrt(v_t)`` of Adam's moment averages over any gradients, in units of the learning
    rate: by Cauchy-Schwarz, (1 - beta1) / sqrt((1 - beta2) (1 - beta1^2 / beta2)) (bias corrections
    and epsilon only make a step smaller). With torch's defaults, 0.9 and 0.999, about 7.3."""
    return (1 - beta1) / math.sqrt((1 - beta2) * (1 - beta1 ** 2 / beta2))


def _earlier_gmp_best_rmse(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``chen-levy-rmse`` in force when its paper-scale run was made (replaced by dca65ed and
    aea818d), as it was, kept so that the ledger shows its verdict beside today's."""
    runs = payload["runs"]
    seeds = list(runs["GmP"])
    means = {m: _stats([runs[m][s]["test_rmse"] for s in seeds])[0] for m in payload["methods"]}
    wins = sum(1 for s in seeds if runs["GmP"][s]["test_rmse"] is not None and all(
        runs[m][s]["test_rmse"] is None or runs["GmP"][s]["test_rmse"] < runs[m][s]["test_rmse"]
        for m in payload["methods"] if m != "GmP"))
    text = ("mean test RMSE " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
            + f"; GmP lowest in {wins} of {len(seeds)} seed(s)")
    best_mean = all(means["GmP"] < v or math.isnan(v) for m, v in means.items() if m != "GmP")
    majority = wins > len(seeds) / 2
    if best_mean and majority:
        return text, REPRODUCED
    if best_mean or majority:
        return text, PARTLY
    return text, NOT_REPRODUCED


CLAIMS = [
    Claim(key="chen-levy-stable", paper="chen", source="paper",
          text="Under GmP the largest per-epoch move of any characteristic point, max_i |Δφ_i|, stays "
               f"below {PAPER['gmp_max_move_below']:g} throughout training, while under SP, WN and BN it "
               f"reaches far larger values (up to 2^{math.log2(PAPER['others_max_move_up_to']):.0f}) "
               "(Sec. 2.4, Fig. 2c).",
          result="fig2",
          rule="reproduced if GmP's largest move is below 1 in every seed and each of SP, WN and BN "
               "reaches at least 10 in every seed; partly if GmP's largest move is below each other "
               "method's in every seed; else not reproduced (a diverged GmP run fails the claim; a diverged "
               "run of another method counts as an unbounded move)",
          check=_gmp_moves_less,
          earlier=EarlierRule(
              rule="reproduced if GmP's largest move is below 1 in every seed and each of SP, WN and BN reaches at "
                   "least 10 in every seed; partly if GmP's largest move is below each other method's in every "
                   "seed; else not reproduced",
              check=_earlier_gmp_moves_less, commits="dca65ed", replaced="2026-11-25 02:42 UTC",
              why="dca65ed, after the run, made a diverged GmP run fail the claim and counted a diverged run of "
                  "another method as an unbounded move.", at_run="1cc9952", gave=REPRODUCED),
          note="The GmP half is structural: in 1-D a characteristic point moves only through lambda, training is "
               f"full batch (one Adam step an epoch), and an Adam step moves lambda by at most {adam_step_bound():.1f} "
               f"x lr = {adam_step_bound() * CONFIG['paper']['lr']['GmP']:.2f} at GmP's lr, below 1 whatever the "
               "data; only the other methods' half can fail."),
    Claim(key="chen-levy-rmse", paper="chen", source="paper",
          text="The stable evolution of the characteristic points under GmP gives the best "
               "generalisation on the Levy task: the lowest test RMSE of the four (Fig. 2d-g).",
          result="fig2",
          rule="GmP's test RMSE minus each other method's, paired by seed (same data, same initial weights), "
               "with its 95% Student-t interval over the seeds; a diverged run counts as chance, the RMSE of "
               "predicting the test targets' mean. Reproduced if all three intervals lie below 0 (GmP better "
               "beyond noise); partly if GmP has the lowest mean test RMSE, not beyond noise, and the lowest "
               "RMSE of the four in a majority of the seeds (a lower mean carried by a minority of seeds is one "
               "or two runs of the others gone wrong, not GmP fitting better); else not reproduced",
          check=_gmp_best_rmse, test=PowerTest("t", CONFIG["paper"]["seeds"]),
          earlier=EarlierRule(
              rule="reproduced if GmP has the lowest mean test RMSE over the seeds and the lowest RMSE in a "
                   "majority of seeds; partly if only one of the two holds; else not reproduced",
              check=_earlier_gmp_best_rmse, commits="dca65ed and aea818d", replaced="2026-11-25 02:42 UTC",
              why="dca65ed, after the run, judged the claim by 95% paired intervals, with 'partly' for the "
                  "lowest mean alone; aea818d then made 'partly' need GmP lowest in a majority of the seeds as "
                  "well (its message names the verdict this gave).", at_run="1cc9952", gave=PARTLY),
          earlier_design=EarlierDesign(
              design="the Levy data drawn by NumPy's default_rng(seed), not as the official notebook draws them, "
                     "over 5 seeds",
              commits="20f8fad", changed="2026-11-26 16:21 UTC", run="1cc9952", gave=NOT_REPRODUCED,
              why="The change follows the book's principle (the official code where the text is silent: seed 0 is "
                  "now Fig. 2's data), but it was made after that run had been seen. The earlier draw runs again "
                  "as a check arm of the next chapter, on the headline's seeds.",
              kept_as="chen-levy-rmse-earlier-draw", chapter="chen_levy_arms"),
          caveat=_majority_margin),
]


def plot_characteristic_point(sign: int, lam: float = 1.0):
    """Fig. 2a-b of Chen & Ge: ``z = relu(u x + lam)`` for ``u = sign``; its characteristic point
    ``B = phi = -lam u`` where the unit switches on, with the active (green) and inactive (red)
    sides marked."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1 (the direction u on the real line), got {sign!r}")
    phi = -lam * sign
    x = np.linspace(-4, 4, 401)
    fig, ax = style.subplots(figsize=(5, 3.2))
    ax.axhline(0, color="0.6", lw=0.8)
    ax.plot(x, np.maximum(sign * x + lam, 0), color="tab:blue", lw=2, label=f"z = ReLU({'' if sign > 0 else '-'}x + {lam:g})")
    ax.axvline(phi, color="saddlebrown", lw=1.5, label=r"characteristic point $\mathcal{B} = \phi$")
    ax.plot([phi], [0], "o", color="saddlebrown")
    active, inactive = (phi + 2.5 * sign, phi - 2.5 * sign)
    ax.annotate("", xy=(active, -0.35), xytext=(phi, -0.35),
                arrowprops=dict(arrowstyle="->", color="tab:green", lw=2))
    ax.annotate("", xy=(inactive, -0.35), xytext=(phi, -0.35),
                arrowprops=dict(arrowstyle="->", color="tab:red", lw=2))
    ax.text(active, -0.6, "active", color="tab:green", ha="center", va="top")
    ax.text(inactive, -0.6, "inactive", color="tab:red", ha="center", va="top")
    ax.set(xlabel="x", ylabel="z", ylim=(-1.2, 5), title=f"u = {sign:+d}, λ = {lam:g}: φ = {phi:+g}")
    ax.legend(loc="upper center" if sign > 0 else "upper right", frameon=False)
    fig.tight_layout()
    return fig


def plot_max_move(curves: Mapping[str, Sequence[float | None]], cached: Mapping[str, np.ndarray] | None = None,
                  scale: str = "small"):
    """Fig. 2c of Chen & Ge: ``max_i |Δφ_i|`` per epoch, log scale; a second panel for the
    paper-scale cache when one is given."""
    panels = [(f"this build ({scale} scale)", {m: np.array([np.nan if v is None else v for v in c], dtype=float)
                                               for m, c in curves.items()})]
    if cached is not None:
        panels.append(("paper scale (cached run)", cached))
    fig, axes = style.subplots(1, len(panels), figsize=(10 if len(panels) > 1 else 6, 4), squeeze=False)
    for ax, (title, data) in zip(axes[0], panels):
        for method, values in data.items():
            epochs = np.arange(1, len(values) + 1)
            ax.plot(epochs, np.where(values > 0, values, np.nan), lw=0.7, label=method)
        ax.axhline(PAPER["gmp_max_move_below"], color="k", ls="--", lw=0.8, label="1")
        ax.set(xlabel="epoch", ylabel=r"$\max_i |\Delta\phi_i|$", title=title)
        ax.set_yscale("log", base=2)
        ax.legend(ncol=5, loc="lower center")
    fig.tight_layout()
    return fig


def plot_fit_and_spectrum(data: ToyData, method: str, pred_init: Sequence[float], pred_final: Sequence[float],
                          spectrum: Sequence[Sequence[float | None]], spectrum_epochs: Sequence[int],
                          test_rmse: float | None):
    """Fig. 2d-g of Chen & Ge for one method: predictions at initialisation and after training
    with the data and the Levy function (left), and the spectrum of the characteristic points
    over training, initialisation at the bottom (right)."""
    grid = data.x_test.reshape(-1).numpy()
    fig, (left, right) = style.subplots(1, 2, figsize=(10, 4))
    left.plot(grid, levy_function(grid), color="k", lw=1.2, label="Levy function")
    left.scatter(data.x_train.reshape(-1).numpy(), data.y_train.reshape(-1).numpy(), s=12, color="tab:gray",
                 label="training data")
    left.plot(grid, pred_init, color="tab:orange", ls="--", lw=1.2, label="at initialisation")
    left.plot(grid, pred_final, color="tab:blue", lw=1.5, label="after training")
    rmse_text = "diverged" if test_rmse is None else f"test RMSE {test_rmse:.3f}"
    left.set(xlabel="x", ylabel="y", title=f"{method}: {rmse_text}")
    left.legend(loc="upper center")
    phi = np.array([[np.nan if v is None else v for v in row] for row in spectrum], dtype=float)
    lo, hi = LEVY_DOMAIN
    margin = 0.25 * (hi - lo)
    view = (lo - margin, hi + margin)
    outside = int(np.sum(~np.isnan(phi[-1]) & ((phi[-1] < view[0]) | (phi[-1] > view[1]))))
    rows = np.repeat(np.asarray(spectrum_epochs, dtype=float)[:, None], phi.shape[1], axis=1)
    right.scatter(np.clip(phi, *view), rows, s=8, marker="|", color="tab:purple", alpha=0.6)
    right.axvspan(lo, hi, color="0.93", zorder=0)
    right.set(xlim=view, xlabel=r"characteristic point $\phi_i$", ylabel="epoch",
              title=f"{method}: spectrum of φ ({outside} of {phi.shape[1]} beyond the view at the end)")
    fig.tight_layout()
    return fig
