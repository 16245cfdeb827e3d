"""Table 2 and Figs. 3, 8-13 of Lu et al. beside ours: the table and the figures of the chapter."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from gmp import style
from gmp.results import NOT_RUN

from .paper import ACTIVATIONS, DATASET_LABELS, PAPER, PAPER_DATASETS, percent, run_label, variants
from .runs import epoch_text


def figure_source(dataset: str, live: Mapping[str, Any], paper_run: Mapping[str, Any] | None,
                  scale: str) -> tuple[dict[str, Any], str]:
    """The runs a figure of ``dataset`` (mnist or cifar10) shows, and a title saying what
    they are: the paper-scale run when it has ``dataset`` (the cache, or an unfinished run:
    :func:`~gmp.experiments.lu_real.runs.unfinished`), else this build's runs on the data that
    stood in for ``dataset``."""
    if paper_run is not None and dataset in paper_run["runs"]:
        return paper_run["runs"][dataset], (f"{epoch_text(paper_run, dataset)} (unfinished paper-scale run)"
                                            if paper_run.get("unfinished") else
                                            f"{DATASET_LABELS[dataset]}, depth {paper_run['depth']}, width "
                                            f"{paper_run['width']} (paper-scale run, from the cache)")
    used = live["data"][dataset]
    stand_in = "" if used == dataset else f" standing in for {DATASET_LABELS[dataset]}"
    return live["runs"][used], (f"{DATASET_LABELS[used]}{stand_in}: depth {live['depth']}, width "
                                f"{live['width']}, {live['epochs'][used]} epoch(s), lr {live['lr']:g} "
                                f"({scale} scale; paper-scale run not cached)")


def _cell(plain: Mapping[str, Any] | None, bn: Mapping[str, Any] | None, key: str) -> str:
    def one(result):
        if result is None:
            return "—"
        if result["diverged"]:
            return f"diverged (ep. {result['diverged_epoch'] + 1})"
        return percent(result[key])
    return f"{one(plain)} ({one(bn)})"


SPLITS = (("Train", "train_acc"), ("Train, whole set", "train_acc_eval"), ("Test", "test_acc"))
"""The columns of Table 2 for each data set, with the result key each shows. They are the author's
running training accuracy (Table 2's "Train"), the whole training set in evaluation mode after
the last epoch (ours, beside it) and the test set."""


def table2(live: Mapping[str, Any], paper_run: Mapping[str, Any] | None, scale: str):
    """Table 2 of Lu et al. side by side: the paper's accuracies, ours at this build's scale
    (on the data the build used) and ours at paper scale (the cache, or an unfinished run at
    the epoch it reached, :func:`~gmp.experiments.lu_real.runs.unfinished`; else "not yet run"). Cells read "without BN
    (with BN)", in percent, as in the paper; ours add the whole training set in evaluation
    mode (:data:`SPLITS`)."""
    import pandas as pd

    rows = {}
    for variant in variants(ACTIVATIONS):
        row = {}
        for dataset in PAPER_DATASETS:
            paper = PAPER["table2"][variant][dataset]
            name = DATASET_LABELS[dataset]
            for split in ("train", "test"):
                row[("Paper", name, split.capitalize())] = f"{paper[split][0]:.2f} ({paper[split][1]:.2f})"
        for used in dict.fromkeys(live["data"].values()):
            runs = live["runs"].get(used, {})
            stands_for = [DATASET_LABELS[d] for d, u in live["data"].items() if u == used and d != used]
            name = DATASET_LABELS[used] + (f" (stand-in for {' and '.join(stands_for)})" if stands_for else "")
            for split, key in SPLITS:
                row[(f"Ours, {scale} scale", name, split)] = _cell(
                    runs.get(variant), runs.get(run_label(variant, True)), key)
        top = "Ours, paper scale (unfinished run)" if paper_run and paper_run.get("unfinished") else \
            "Ours, paper scale (cache)"
        for dataset in PAPER_DATASETS:
            ran = paper_run is not None and dataset in paper_run["runs"]
            name = epoch_text(paper_run, dataset) if ran and paper_run.get("unfinished") else DATASET_LABELS[dataset]
            for split, key in SPLITS:
                runs = paper_run["runs"][dataset] if ran else {}
                text = _cell(runs.get(variant), runs.get(run_label(variant, True)), key) if ran else NOT_RUN
                row[(top, name, split)] = text
        rows[variant] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return frame


# ---------------------------------------------------------------- figures

def _family_runs(runs: Mapping[str, Any], activation: str) -> list[tuple[str, Mapping[str, Any]]]:
    return [(label, runs[label]) for label in (activation, f"{activation}-GPN", f"{activation}-BN",
                                               f"{activation}-GPN-BN") if label in runs]


_STYLES = {"": ("C0", "-"), "-GPN": ("C1", "-"), "-BN": ("C0", ":"), "-GPN-BN": ("C1", ":")}


def _style(label: str, activation: str) -> tuple[str, str]:
    return _STYLES[label[len(activation):]]


def plot_test_accuracy(runs: Mapping[str, Any], title: str, activations: list[str] | None = None):
    """Test accuracy (percent) after each epoch, one panel per activation with its GPN and
    BN variants (Figs. 3, 8 and 9 of Lu et al.); a diverged run ends with a cross."""
    from matplotlib.ticker import MaxNLocator

    activations = [a for a in (activations or ACTIVATIONS) if a in runs]
    cols = min(3, len(activations))
    rows = math.ceil(len(activations) / cols)
    fig, axes = style.subplots(rows, cols, figsize=(10, 3.0 * rows), sharey=True, squeeze=False)
    for ax, activation in zip(axes.flat, activations):
        for label, result in _family_runs(runs, activation):
            color, line = _style(label, activation)
            curve = np.array([np.nan if v is None else 100 * v for v in result["test_curve"]])
            epochs = np.arange(1, len(curve) + 1)
            ax.plot(epochs, curve, color=color, linestyle=line, marker="o", markersize=3, label=label)
            if result["diverged"]:
                ax.plot(epochs[-1], 10, marker="x", color=color, markersize=8)
        ax.set_title(activation)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 100)
        ax.legend()
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy (%)")
    for ax in list(axes.flat)[len(activations):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_gradient_ratio(runs: Mapping[str, Any], activations: list[str], title: str):
    """Gradient norm ratio ``max_l ||dE/dV^(l)|| / min_l ||dE/dV^(l)||`` (Eq. (56)) against
    the mini-batch update, one panel per activation (Figs. 10-13 of Lu et al.). Steps where
    the ratio is undefined (a gradient norm of exactly 0, or not finite) leave gaps, as
    the paper's empty plots do."""
    activations = [a for a in activations if a in runs]
    fig, axes = style.subplots(1, len(activations), figsize=(10, 3.4), squeeze=False)
    for ax, activation in zip(axes[0], activations):
        for label, result in _family_runs(runs, activation):
            color, line = _style(label, activation)
            ratio = np.array([np.nan if v is None else v for v in result["ratio"]], dtype=float)
            ax.plot(result["ratio_steps"], ratio, color=color, linestyle=line, linewidth=1, label=label)
        ax.set_yscale("log")
        ax.set_title(activation)
        ax.set_xlabel("mini-batch update")
        ax.legend()
    axes[0, 0].set_ylabel("gradient norm ratio")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_drift(runs: Mapping[str, Any], title: str):
    """How far the row-normalised weights (Eq. (55)) drift from orthogonal during training:
    left, ``max_l max_ij |W^(l) W^(l)T - I|_ij`` (:func:`gmp.orthogonality_drift`) after each
    epoch, per network without BN; right, the drift of every layer after the last epoch.
    At initialisation every ``W`` is exactly orthogonal (drift 0)."""
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = style.subplots(1, 2, figsize=(10, 3.4))
    for i, activation in enumerate(ACTIVATIONS):
        for label, line in ((activation, "-"), (f"{activation}-GPN", "--")):
            result = runs.get(label)
            if result is None or not any(d is not None for d in result["drift_max"]):
                continue
            drift = np.array([np.nan if d is None else d for d in result["drift_max"]])
            left.plot(np.arange(1, len(drift) + 1), drift, color=f"C{i}", linestyle=line, marker="o", markersize=3,
                      label=label)
            last = next(d for d in reversed(result["drift"]) if d is not None)
            right.plot(np.arange(1, len(last) + 1), last, color=f"C{i}", linestyle=line, linewidth=1)
    left.set_xlabel("epoch")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_ylabel(r"largest $|W W^T - I|$ over layers")
    right.set_xlabel("layer $l$")
    right.set_ylabel(r"largest $|W W^T - I|$, last epoch")
    for ax in (left, right):
        ax.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    style.legend_below(fig)
    return fig
