"""Experiment of the chapter book/part1/chen_banana.md (Fig. 3 of Chen & Ge): a one-hidden-layer
network of 10 ReLU units classifying the 2-D banana data under SP, WN, BN and GmP, with the
characteristic points ``phi_i`` of the units recorded after every epoch.

Settings follow the official notebook: 1,000 of the 5,300 points, 800 for training and 200
for testing, standardised with the training statistics; float64; sigmoid output with binary
cross-entropy (computed from the logit); Adam (Keras' epsilon 1e-7), batch 128, up to 5,000
epochs; lr x0.1 after 50 epochs without improvement of the monitored accuracy and early
stopping after 100 restoring the best weights (Keras semantics, :mod:`gmp.train`).

Two protocols:

* ``"paper"``: the monitored accuracy is the test accuracy, as in the official notebook;
* ``"clean"``: it is the accuracy on a validation set carved out of the 800 training points,
  so the test split is used only to report the accuracy.

Each method is trained at learning rate 0.01 and 0.1 (the official notebook uses 0.1 for GmP
and 0.01 for the others), to test the claim that GmP tolerates a 10x larger rate.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gmp.characteristic import CharacteristicTracker, characteristic_points
from gmp.config import Config, scaled
from gmp.data.toy import ToyData, banana
from gmp.models.mlp import mlp
from gmp.results import (NOT_REPRODUCED, PARTLY, REPRODUCED, Claim, EarlierDesign, EarlierRule, PowerTest, Store,
                         paired_interval)
from gmp.train import EarlyStopping, ReduceLROnPlateau, accuracy, evaluate, fit, predict
from gmp import style

METHODS: dict[str, str] = {"SP": "sp", "WN": "wn", "BN": "bn", "GmP": "gmp"}
"""Method names of Fig. 3 -> ``param`` of :func:`gmp.mlp`."""

PROTOCOLS: dict[str, str] = {
    "paper": "schedule and early stopping monitor the test accuracy (official notebook)",
    "clean": "they monitor a validation set carved out of the training points",
}

OFFICIAL_LR: dict[str, float] = {"SP": 0.01, "WN": 0.01, "BN": 0.01, "GmP": 0.1}
"""The learning rates of the official notebook (and of Fig. 3)."""

CONFIG = scaled(
    common=dict(hidden=10, n=1000, test_fraction=0.2, validation_fraction=0.2, methods=list(METHODS),
                lrs=[0.01, 0.1], official_lr=OFFICIAL_LR, gmp_init="glorot_half", batch_size=128,
                adam_eps=1e-7, plateau_factor=0.1, protocols=list(PROTOCOLS), boundary_grid=150),
    smoke=dict(seeds=1, epochs=6, plateau_patience=2, stop_patience=4),
    small=dict(seeds=1, epochs=300, plateau_patience=25, stop_patience=50),
    paper=dict(seeds=10, epochs=5000, plateau_patience=50, stop_patience=100),
)

PAPER = {
    # Test accuracies stored in the outputs of the official notebook 2d_banana/2d_banana.ipynb
    # (Wenlin-Chen/geometric-parameterization), the run behind Fig. 3 of Chen & Ge (seed 0,
    # lr 0.1 for GmP and 0.01 for the others, early stopping on the test accuracy). The
    # paper's text states only that GmP "achieves the highest test accuracy".
    "official_notebook_accuracy": {"SP": 0.80, "WN": 0.81, "BN": 0.875, "GmP": 0.885},
    # Sec. 5 and Fig. 3 of Chen & Ge: GmP "allows us to use a 10x larger learning rate".
    "lr_ratio": 10,
}


def banana_data(cfg: Config, seed: int, protocol: str) -> ToyData:
    """The banana split of ``seed``; the clean protocol also carves out a validation set."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    return banana(seed=seed, n=cfg.n, test_fraction=cfg.test_fraction,
                  validation_fraction=cfg.validation_fraction if protocol == "clean" else None,
                  dtype=torch.float64)


def run_key(method: str, lr: float, protocol: str, seed: int) -> str:
    """The key of one run in the dict returned by :func:`run` (and in the resumable journal)."""
    return f"{method}-lr{lr:g}-{protocol}-seed{seed}"


def _clean(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _init(cfg: Config, method: str) -> str:
    """The initialisation of ``method``'s network: GmP's is ``cfg.gmp_init``, every other a Glorot draw."""
    return cfg.gmp_init if method == "GmP" else "glorot"


def train_one(cfg: Config, method: str, lr: float, protocol: str, seed: int,
              device: torch.device | str = "cpu") -> dict[str, Any]:
    """Train one network; return its history, accuracies and characteristic-point trajectories.

    ``trajectory[k][i]`` is ``phi`` of unit ``i`` (two coordinates) at record ``k``: record 0
    is the initialisation, record ``e`` the end of epoch ``e - 1``. ``max_move[t]`` is
    ``max_i ||phi_{i,t+1} - phi_{i,t}||`` between consecutive records.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    data = banana_data(cfg, seed, protocol)
    validation = (data.x_test, data.y_test) if protocol == "paper" else (data.x_val, data.y_val)
    torch.manual_seed(seed)
    model = mlp([2, cfg.hidden, 1], param=METHODS[method], dtype=torch.float64, init=_init(cfg, method)).to(device)
    tracker = CharacteristicTracker(lambda m: m[0], bn=(lambda m: m[1]) if method == "BN" else None)
    tracker(0, model)
    history = fit(model, (data.x_train, data.y_train), epochs=cfg.epochs, lr=lr, loss="bce_logits",
                  optimizer_options={"eps": cfg.adam_eps}, batch_size=cfg.batch_size, seed=seed,
                  validation=validation, metrics={"accuracy": accuracy},
                  plateau=ReduceLROnPlateau(monitor="val_accuracy", mode="max", factor=cfg.plateau_factor,
                                            patience=cfg.plateau_patience),
                  early_stopping=EarlyStopping(monitor="val_accuracy", mode="max", patience=cfg.stop_patience,
                                               restore_best_weights=True),
                  callbacks=[lambda epoch, m: tracker(epoch + 1, m)], dtype=torch.float64, device=device,
                  description=f"banana {method} lr {lr:g} {protocol} seed {seed}")
    phi = tracker.history
    with np.errstate(invalid="ignore"):
        moves = np.linalg.norm(np.diff(phi, axis=0), axis=-1)
        max_move = np.where(np.isnan(moves).all(axis=1), np.nan,
                            np.max(np.where(np.isnan(moves), -np.inf, moves), axis=1))
    test = evaluate(model, (data.x_test, data.y_test), loss="bce_logits", metrics={"accuracy": accuracy},
                    device=device)
    train = evaluate(model, (data.x_train, data.y_train), loss="bce_logits", metrics={"accuracy": accuracy},
                     device=device)
    finite_moves = max_move[np.isfinite(max_move)]
    return {
        "method": method, "lr": lr, "protocol": protocol, "seed": int(seed), "history": history.to_dict(),
        "test_accuracy": _clean(test["accuracy"]), "train_accuracy": _clean(train["accuracy"]),
        "max_move": float(finite_moves.max()) if finite_moves.size else None,
        "median_move": float(np.median(finite_moves)) if finite_moves.size else None,
        "path_length": _clean(float(np.nansum(moves))),
        "trajectory": [[[_clean(v) for v in point] for point in record] for record in phi],
        "state": {k: v.detach().cpu().reshape(-1).tolist() for k, v in model.state_dict().items()
                  if v.is_floating_point()},
    }


def run_seeds(cfg: Config, seed: int) -> list[int]:
    """The seeds of a run of the chapter with seed ``seed``: ``cfg.seeds`` of them from ``seed`` on."""
    return [seed + k for k in range(cfg.seeds)]


def _units(cfg: Config, seeds: Sequence[int], device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """One :func:`train_one` per protocol, method, learning rate and seed of ``seeds``, by :func:`run_key`."""
    return {run_key(method, lr, protocol, seed): (lambda m=method, l=lr, p=protocol, s=seed:
                                                  train_one(cfg, m, l, p, s, device))
            for protocol in cfg.protocols for method in cfg.methods for lr in cfg.lrs for seed in seeds}


def units(cfg: Config, store: Store, seed: int, device: torch.device | str) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every run of the chapter (on :func:`run_seeds`), by journal key: what ``python -m gmp.runs`` keeps in the
    cache and ``--restamp`` recomputes. Deterministic on the CPU with the recorded thread count."""
    return _units(cfg, run_seeds(cfg, seed), device)


def run(cfg: Config, store: Store, seeds: Sequence[int], device: torch.device | str = "cpu"
        ) -> dict[str, dict[str, Any]]:
    """Every protocol, method, learning rate and seed, resumable through ``store.memo``.

    Returns ``runs[key]`` with keys ``"<method>-lr<lr>-<protocol>-seed<seed>"``.
    """
    return {key: store.memo(key, compute) for key, compute in _units(cfg, seeds, device).items()}


def rebuild(cfg: Config, result: Mapping[str, Any]) -> torch.nn.Module:
    """The trained network of a result of :func:`train_one` (from its saved state)."""
    model = mlp([2, cfg.hidden, 1], param=METHODS[result["method"]], dtype=torch.float64,
                init=_init(cfg, result["method"]))
    state = model.state_dict()
    for name, values in result["state"].items():
        state[name] = torch.tensor(values, dtype=state[name].dtype).reshape(state[name].shape)
    model.load_state_dict(state)
    return model.eval()


STATE_PREFIX = "state_"
"""The prefix of the names of the arrays of :func:`state_arrays`, ``state_<method>_<parameter>``
(``state_GmP_0.theta`` for instance; the method names hold no underscore)."""


def state_arrays(results: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The trained states of results of :func:`train_one`, keyed by method, as flat float64
    arrays named ``state_<method>_<parameter>`` (a result's ``"state"``: the floating-point
    entries of the network's ``state_dict``), for the arrays of a saved result.
    :func:`networks_from_arrays` is the inverse."""
    return {f"{STATE_PREFIX}{method}_{name}": np.asarray(values, dtype=np.float64)
            for method, result in results.items() for name, values in result["state"].items()}


def networks_from_arrays(cfg: Config, arrays: Mapping[str, np.ndarray]) -> dict[str, torch.nn.Module]:
    """The trained network of each method whose state ``arrays`` hold (see :func:`state_arrays`);
    an empty dict when they hold none (a cache saved before the states were kept)."""
    states: dict[str, dict[str, np.ndarray]] = {}
    for key, values in arrays.items():
        if key.startswith(STATE_PREFIX):
            method, name = key[len(STATE_PREFIX):].split("_", 1)
            states.setdefault(method, {})[name] = values
    return {method: rebuild(cfg, {"method": method, "state": state}) for method, state in states.items()}


def summary(cfg: Config, runs: Mapping[str, Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """Numbers behind the tables and claims (payload of the result ``fig3``):
    ``results[protocol][method][lr][seed]`` with accuracies, moves and stopping epochs."""
    out: dict[str, Any] = {"methods": list(cfg.methods), "lrs": list(cfg.lrs), "protocols": list(cfg.protocols),
                           "seeds": [int(s) for s in seeds], "official_lr": dict(cfg.official_lr),
                           "gmp_init": cfg.gmp_init, "results": {}}
    for protocol in cfg.protocols:
        out["results"][protocol] = {}
        for method in cfg.methods:
            out["results"][protocol][method] = {}
            for lr in cfg.lrs:
                cell = {}
                for seed in seeds:
                    r = runs[run_key(method, lr, protocol, seed)]
                    h = r["history"]
                    cell[str(seed)] = {
                        "test_accuracy": r["test_accuracy"], "train_accuracy": r["train_accuracy"],
                        "max_move": r["max_move"], "median_move": r["median_move"],
                        "path_length": r["path_length"], "epochs": len(h["train_loss"]),
                        "best_epoch": h["best_epoch"], "diverged": h["diverged"],
                    }
                out["results"][protocol][method][f"{lr:g}"] = cell
    return out


def trajectories(cfg: Config, runs: Mapping[str, Mapping[str, Any]], protocol: str, seed: int,
                 lrs: Mapping[str, float]) -> dict[str, np.ndarray]:
    """``phi`` trajectories (records, units, 2) of each method at its learning rate in ``lrs``."""
    return {method: np.array([[[np.nan if v is None else v for v in p] for p in record]
                              for record in runs[run_key(method, lrs[method], protocol, seed)]["trajectory"]],
                             dtype=float) for method in cfg.methods}


def _values(payload: Mapping[str, Any], protocol: str, method: str, lr: float, key: str) -> list[float | None]:
    return [r[key] for r in payload["results"][protocol][method][f"{lr:g}"].values()]


def _mean(values: Sequence[float | None]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _fmt(values: Sequence[float | None], fmt: str = ".3f") -> str:
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return "diverged"
    if finite.size == 1:
        return format(finite[0], fmt)
    return f"{finite.mean():{fmt}} ± {finite.std(ddof=1):{fmt}} (n={finite.size})"


def accuracy_table(live: Mapping[str, Any], cached: Mapping[str, Any] | None, scale: str):
    """Test accuracy per method and learning rate: official notebook, this build, paper-scale cache."""
    from IPython.display import HTML

    head = ["Method", "lr", "Official notebook (paper protocol)"]
    for protocol in live["protocols"]:
        head += [f"Ours ({scale}), {protocol} protocol", f"Ours (paper scale, cache), {protocol} protocol"]
    rows = []
    for method in live["methods"]:
        for lr in live["lrs"]:
            official = live["official_lr"][method] == lr
            row = [method, f"{lr:g}" + (" (official)" if official else ""),
                   f"{PAPER['official_notebook_accuracy'][method]:.3f}" if official else "not run"]
            for protocol in live["protocols"]:
                row.append(_fmt(_values(live, protocol, method, lr, "test_accuracy")))
                row.append(_fmt(_values(cached, protocol, method, lr, "test_accuracy"))
                           if cached is not None and protocol in cached["results"] else "—")
            rows.append(row)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


def stability_table(live: Mapping[str, Any], cached: Mapping[str, Any] | None, scale: str,
                    protocol: str = "paper"):
    """Largest and median per-epoch move of the characteristic points per method and rate."""
    from IPython.display import HTML

    head = ["Method", "lr", f"Largest move ({scale})", f"Median move ({scale})",
            "Largest move (paper scale, cache)", "Median move (paper scale, cache)"]
    rows = []
    for method in live["methods"]:
        for lr in live["lrs"]:
            row = [method, f"{lr:g}", _fmt(_values(live, protocol, method, lr, "max_move"), ".3g"),
                   _fmt(_values(live, protocol, method, lr, "median_move"), ".3g")]
            if cached is not None and protocol in cached["results"]:
                row += [_fmt(_values(cached, protocol, method, lr, "max_move"), ".3g"),
                        _fmt(_values(cached, protocol, method, lr, "median_move"), ".3g")]
            else:
                row += ["—", "—"]
            rows.append(row)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return HTML('<table class="table"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + f"</tr></thead><tbody>{body}</tbody></table>")


CHANCE_ACCURACY = 0.5
"""What a diverged run counts as in the claims, the accuracy of guessing one of two classes."""


def claim_accuracies(payload: Mapping[str, Any], protocol: str, method: str, lr: float) -> list[float]:
    """Test accuracy per seed, a diverged run (or one with no accuracy) counted as chance."""
    cells = payload["results"][protocol][method][f"{lr:g}"]
    return [CHANCE_ACCURACY if r["diverged"] or r["test_accuracy"] is None else r["test_accuracy"]
            for r in (cells[str(s)] for s in payload["seeds"])]


def _diverged_text(payload: Mapping[str, Any], protocol: str, lrs: Mapping[str, float]) -> str:
    counts = {m: sum(r["diverged"] for r in payload["results"][protocol][m][f"{lr:g}"].values())
              for m, lr in lrs.items()}
    return "".join(f"; {m}: {n} diverged run(s) counted as chance ({CHANCE_ACCURACY:g})" for m, n in counts.items() if n)


def _gmp_most_accurate(payload: Mapping[str, Any], rate: float | None = None) -> tuple[str, str]:
    """The accuracy claim on the paper protocol: at the official rates (``rate`` None) or with
    every method at ``rate``."""
    rates = dict(payload["official_lr"]) if rate is None else dict.fromkeys(payload["methods"], rate)
    where = "official rates" if rate is None else f"every method at lr {rate:g}"
    seeds = payload["seeds"]
    acc = {m: claim_accuracies(payload, "paper", m, rates[m]) for m in payload["methods"]}
    means = {m: float(np.mean(v)) for m, v in acc.items()}
    others = [m for m in acc if m != "GmP"]
    wins = sum(all(acc["GmP"][k] > acc[m][k] for m in others) for k in range(len(seeds)))
    intervals = {m: paired_interval([g - o for g, o in zip(acc["GmP"], acc[m])]) for m in others}
    text = (f"paper protocol, {where}: mean test accuracy " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
            + f"; GmP strictly highest in {wins} of {len(seeds)} seed(s); GmP minus each, 95% interval: "
            + ", ".join(f"{m} {mean:+.3f} [{low:+.3f}, {high:+.3f}]" for m, (mean, low, high) in intervals.items())
            + _diverged_text(payload, "paper", rates))
    if "clean" in payload["results"]:
        clean_means = {m: float(np.mean(claim_accuracies(payload, "clean", m, rates[m]))) for m in acc}
        text += "; clean protocol: " + ", ".join(f"{m} {v:.3f}" for m, v in clean_means.items())
    if all(low > 0 for _, low, _ in intervals.values()):
        return text, REPRODUCED
    if all(means["GmP"] > means[m] for m in others):
        return text, PARTLY
    return text, NOT_REPRODUCED


def _at_rate(rate: float):
    def check(payload: Mapping[str, Any]) -> tuple[str, str]:
        return _gmp_most_accurate(payload, rate)
    return check


_ACCURACY_RULE = ("a diverged run counts as chance (0.5). GmP's test accuracy minus each other method's, paired by "
                  "seed (same data, same initial weights), with its 95% Student-t interval over the seeds: "
                  "reproduced if all three intervals lie above 0 (GmP more accurate beyond noise); partly if GmP "
                  "has the highest mean test accuracy but not beyond noise; else not reproduced (the clean "
                  "protocol is reported beside it)")


def _gmp_tolerates_large_lr(payload: Mapping[str, Any]) -> tuple[str, str]:
    results = payload["results"]["paper"]
    seeds = [str(s) for s in payload["seeds"]]
    high_lr, low_lr = max(payload["lrs"]), min(payload["lrs"])
    high, low = f"{high_lr:g}", f"{low_lr:g}"
    others = [m for m in payload["methods"] if m != "GmP"]

    def move(m: str, s: str) -> float:
        v = results[m][high][s]["max_move"]
        return math.inf if v is None or results[m][high][s]["diverged"] else v

    smoother = sum(1 for s in seeds if all(move("GmP", s) < move(m, s) for m in others))
    acc_high = {m: float(np.mean(claim_accuracies(payload, "paper", m, high_lr))) for m in payload["methods"]}
    acc_low = {m: float(np.mean(claim_accuracies(payload, "paper", m, low_lr))) for m in payload["methods"]}
    moves = {m: _mean([move(m, s) for s in seeds]) for m in payload["methods"]}
    text = (f"at lr {high}: mean largest per-epoch move " + ", ".join(f"{m} {v:.3g}" for m, v in moves.items())
            + f" (GmP smallest in {smoother} of {len(seeds)} seed(s)); mean test accuracy at lr {high} / {low}: "
            + ", ".join(f"{m} {acc_high[m]:.3f} / {acc_low[m]:.3f}" for m in payload["methods"])
            + _diverged_text(payload, "paper", dict.fromkeys(payload["methods"], high_lr)))
    stable = smoother > len(seeds) / 2
    keeps_accuracy = acc_high["GmP"] >= max(acc_high[m] for m in others) and acc_high["GmP"] >= acc_low["GmP"] - 0.01
    if stable and keeps_accuracy:
        return text, REPRODUCED
    if stable or keeps_accuracy:
        return text, PARTLY
    return text, NOT_REPRODUCED


def _earlier_gmp_most_accurate(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``chen-banana-accuracy`` in force when its first paper-scale run was made (replaced by dca65ed),
    as it was, kept so that the ledger shows its verdict beside today's."""
    official = payload["official_lr"]
    results = payload["results"]["paper"]
    seeds = [str(s) for s in payload["seeds"]]
    acc = {m: [results[m][f"{official[m]:g}"][s]["test_accuracy"] for s in seeds] for m in payload["methods"]}
    means = {m: _mean(v) for m, v in acc.items()}
    others = [m for m in acc if m != "GmP"]
    wins = sum(1 for k in range(len(seeds)) if acc["GmP"][k] is not None and all(
        acc[m][k] is None or acc["GmP"][k] > acc[m][k] for m in others))
    text = ("paper protocol, official rates: mean test accuracy " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
            + f"; GmP strictly highest in {wins} of {len(seeds)} seed(s)")
    best = all(means["GmP"] > means[m] for m in others)
    majority = wins > len(seeds) / 2
    if best and majority:
        return text, REPRODUCED
    if best or majority:
        return text, PARTLY
    return text, NOT_REPRODUCED


def _earlier_gmp_tolerates_large_lr(payload: Mapping[str, Any]) -> tuple[str, str]:
    """The rule of ``chen-banana-lr`` in force when its first paper-scale run was made (replaced by dca65ed, which
    counts a diverged run's accuracy as chance where this one leaves it out of the mean), as it was."""
    results = payload["results"]["paper"]
    seeds = [str(s) for s in payload["seeds"]]
    high, low = f"{max(payload['lrs']):g}", f"{min(payload['lrs']):g}"
    others = [m for m in payload["methods"] if m != "GmP"]

    def move(m: str, s: str) -> float:
        v = results[m][high][s]["max_move"]
        return math.inf if v is None or results[m][high][s]["diverged"] else v

    smoother = sum(1 for s in seeds if all(move("GmP", s) < move(m, s) for m in others))
    acc_high = {m: _mean([results[m][high][s]["test_accuracy"] for s in seeds]) for m in payload["methods"]}
    acc_low = {m: _mean([results[m][low][s]["test_accuracy"] for s in seeds]) for m in payload["methods"]}
    text = (f"GmP smallest largest move in {smoother} of {len(seeds)} seed(s); mean test accuracy at lr {high} / "
            f"{low}: " + ", ".join(f"{m} {acc_high[m]:.3f} / {acc_low[m]:.3f}" for m in payload["methods"]))
    stable = smoother > len(seeds) / 2
    keeps_accuracy = acc_high["GmP"] >= max(acc_high[m] for m in others) and acc_high["GmP"] >= acc_low["GmP"] - 0.01
    if stable and keeps_accuracy:
        return text, REPRODUCED
    if stable or keeps_accuracy:
        return text, PARTLY
    return text, NOT_REPRODUCED


_REWRITTEN = ("dca65ed, after the first paper-scale run (2026-11-22), judged the comparison over seeds by 95% paired "
              "Student-t intervals and counted a diverged run as chance.")

CLAIMS = [
    Claim(key="chen-banana-accuracy", paper="chen", source="paper",
          text="On the banana data GmP (lr 0.1) achieves the highest test accuracy of SP, WN, BN and GmP "
               "(Sec. 5, Fig. 3; official notebook: "
               + ", ".join(f"{m} {a:g}" for m, a in PAPER["official_notebook_accuracy"].items()) + ").",
          result="fig3",
          rule="judged on the paper's protocol (early stopping on the test accuracy) at the official learning "
               "rates; " + _ACCURACY_RULE,
          check=_gmp_most_accurate, test=PowerTest("t", CONFIG["paper"]["seeds"]),
          earlier=EarlierRule(
              rule="judged on the paper's protocol (early stopping on the test accuracy) at the official learning "
                   "rates: reproduced if GmP has the highest mean test accuracy over the seeds and is strictly the "
                   "most accurate in a majority of seeds; partly if only one of the two holds; else not reproduced "
                   "(the clean protocol is reported beside it)",
              check=_earlier_gmp_most_accurate, commits="dca65ed", replaced="2026-11-25 02:42 UTC", why=_REWRITTEN,
              at_run="cc0e08a", gave=NOT_REPRODUCED),
          earlier_design=EarlierDesign(
              design="GmP initialised by the book's exact conversion of the Glorot draw (gmp_init 'glorot', no "
                     "half-sphere fold), over 5 seeds",
              commits="20f8fad", changed="2026-11-26 16:21 UTC", run="1df213d", gave=NOT_REPRODUCED,
              why="The change follows the book's principle (the official code where the text is silent: its inverse "
                  "map folds every direction into a half-sphere), but it was made after that run had been seen, "
                  "and after the half-sphere arm had shown a higher GmP accuracy; the exact conversion stays as "
                  "a check.",
              kept_as="chen-banana-accuracy-glorot", chapter="chen_banana_arms")),
    *[Claim(key=f"chen-banana-accuracy-lr{rate:g}".replace(".", ""), paper="chen", source="check",
            text=f"On the banana data GmP achieves the highest test accuracy of SP, WN, BN and GmP (Sec. 5, "
                 f"Fig. 3), with every method at learning rate {rate:g} (the paper trains GmP at 0.1 and the "
                 f"others at 0.01).",
            short=f"Banana: GmP has the highest test accuracy, every method at lr {rate:g}",
            result="fig3",
            rule=f"judged on the paper's protocol (early stopping on the test accuracy) with every method at "
                 f"learning rate {rate:g}; " + _ACCURACY_RULE,
            check=_at_rate(rate), test=PowerTest("t", CONFIG["paper"]["seeds"]))
      for rate in CONFIG["paper"]["lrs"]],
    Claim(key="chen-banana-lr", paper="chen", source="paper",
          text="GmP allows a 10x larger learning rate while keeping a smooth evolution of the "
               "characteristic boundaries (Sec. 5, Fig. 3).",
          result="fig3",
          rule="at lr 0.1 (paper protocol): reproduced if GmP's largest per-epoch move of a characteristic "
               "point is smaller than each of SP's, WN's and BN's in a majority of seeds, and GmP's mean test "
               "accuracy at lr 0.1 is at least each baseline's at lr 0.1 and at most 0.01 below its own at "
               "lr 0.01; partly if one of the two holds; else not reproduced (a diverged run counts as an "
               "unbounded move and chance accuracy, 0.5)",
          check=_gmp_tolerates_large_lr,
          earlier=EarlierRule(
              rule="at lr 0.1 (paper protocol): reproduced if GmP's largest per-epoch move of a characteristic "
                   "point is smaller than each of SP's, WN's and BN's in a majority of seeds, and GmP's mean test "
                   "accuracy at lr 0.1 is at least each baseline's at lr 0.1 and at most 0.01 below its own at "
                   "lr 0.01; partly if one of the two holds; else not reproduced",
              check=_earlier_gmp_tolerates_large_lr, commits="dca65ed", replaced="2026-11-25 02:42 UTC",
              why=_REWRITTEN, at_run="cc0e08a", gave=PARTLY)),
]


def _view(data: ToyData) -> tuple[float, float, float, float]:
    x = torch.cat([data.x_train, data.x_test]).numpy()
    lo, hi = x.min(axis=0) - 0.5, x.max(axis=0) + 0.5
    return float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1])


def plot_trajectories(data: ToyData, paths: Mapping[str, np.ndarray], lrs: Mapping[str, float]):
    """Fig. 3 of Chen & Ge, top rows: trajectories of the units' characteristic points ``phi``
    during training, one colour per unit (a dot at the start, a star at the end), over the
    training data."""
    import matplotlib.pyplot as plt

    x0, x1, y0, y1 = _view(data)
    fig, axes = style.subplots(1, len(paths), figsize=(10, 3.2), squeeze=False)
    colours = plt.get_cmap("tab10")
    points = data.x_train.numpy()
    for ax, (method, path) in zip(axes[0], paths.items()):
        ax.scatter(points[:, 0], points[:, 1], s=2, color="0.8", zorder=0)
        outside = 0
        for i in range(path.shape[1]):
            xy = path[:, i, :]
            ax.plot(np.clip(xy[:, 0], x0, x1), np.clip(xy[:, 1], y0, y1), lw=0.8, color=colours(i % 10))
            ax.plot(*np.clip(xy[0], [x0, y0], [x1, y1]), "o", ms=3, color=colours(i % 10))
            ax.plot(*np.clip(xy[-1], [x0, y0], [x1, y1]), "*", ms=7, color=colours(i % 10))
            outside += int(np.any((xy[:, 0] < x0) | (xy[:, 0] > x1) | (xy[:, 1] < y0) | (xy[:, 1] > y1)))
        ax.set(xlim=(x0, x1), ylim=(y0, y1), xlabel="$x_1$", aspect="equal",
               title=f"{method}, lr {lrs[method]:g}" + (f"\n{outside} unit(s) leave the view" if outside else ""))
    axes[0][0].set_ylabel("$x_2$")
    fig.tight_layout()
    return fig


def plot_boundaries(cfg: Config, data: ToyData, models: Mapping[str, torch.nn.Module],
                    accuracies: Mapping[str, float | None]):
    """Fig. 3 of Chen & Ge, last row: predicted probability of class 1, the decision boundary
    (black), the test points and the characteristic points (red stars) of the network drawn,
    the one early stopping restored (not the last epoch's, which a trajectory ends on)."""
    x0, x1, y0, y1 = _view(data)
    gx, gy = np.meshgrid(np.linspace(x0, x1, cfg.boundary_grid), np.linspace(y0, y1, cfg.boundary_grid))
    grid = torch.tensor(np.stack([gx.ravel(), gy.ravel()], axis=1), dtype=torch.float64)
    fig, axes = style.subplots(1, len(models), figsize=(10, 3.2), squeeze=False)
    test, labels = data.x_test.numpy(), data.y_test.numpy()
    for ax, (method, model) in zip(axes[0], models.items()):
        prob = torch.sigmoid(predict(model, grid)).reshape(gx.shape).numpy()
        ax.contourf(gx, gy, prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.5)
        ax.contour(gx, gy, prob, levels=[0.5], colors="k", linewidths=2)
        ax.scatter(test[:, 0], test[:, 1], c=labels, cmap="RdBu_r", s=6, edgecolors="k", linewidths=0.2)
        phi = characteristic_points(model[0], model[1] if method == "BN" else None).cpu().numpy()
        ax.plot(np.clip(phi[:, 0], x0, x1), np.clip(phi[:, 1], y0, y1), "*", ms=9, color="red", mec="k", mew=0.5)
        acc = accuracies[method]
        ax.set(xlim=(x0, x1), ylim=(y0, y1), xlabel="$x_1$", aspect="equal",
               title=f"{method}: test acc. " + ("diverged" if acc is None else f"{acc:.3f}"))
    axes[0][0].set_ylabel("$x_2$")
    fig.tight_layout()
    return fig
