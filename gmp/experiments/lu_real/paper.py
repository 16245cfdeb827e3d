"""What Section 3.2 of Lu et al. sets and reports, the scales the book runs it at, and the names of its runs.

The paper's set-up (``PAPER``, ``"setup"``): depth-200, width-500 networks with row-normalised square
weights ``W = (v_i/||v_i||)_i`` (Eq. (55)), one unconstrained layer at the bottom and one at the top, SGD
with momentum 0.5, batch 64, learning rate 1e-4, 50 epochs (MNIST) / 100 epochs (CIFAR-10), six activations
and their GPN versions, each with and without batch normalisation ("-BN"). Table 2's accuracies are typed
here once, as the paper's (``PAPER``, ``"table2"``). ``CONFIG`` gives the book's scales of that
set-up: the paper's at ``paper``, stand-in data (MNIST-1D, scikit-learn's 8x8 digits) and a reduced depth,
width and length of training below it.
"""

from __future__ import annotations

from gmp.config import scaled

ACTIVATIONS = ["Tanh", "ReLU", "LeakyReLU", "ELU", "SELU", "GELU"]
PAPER_DATASETS = ("mnist", "cifar10")
DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10", "mnist1d": "MNIST-1D", "digits": "sklearn digits"}
UNTRAINABLE = ("ReLU", "LeakyReLU", "GELU")
"""The activations Table 2 of Lu et al. reports as untrainable at depth 200 without GPN."""

CONFIG = scaled(
    common=dict(activations=ACTIVATIONS, weights="row_normalized", init="orthogonal",
                momentum=0.5, batch_size=64, num_classes=10, protocol="author", edge_bias=True,
                first_activation=True, edge_init="orthogonal", gpn_constants="author"),
    smoke=dict(data={"mnist": "digits", "cifar10": "mnist1d"}, width=16, depth=8,
               epochs={"digits": 1, "mnist1d": 1}, lr=2e-2, max_train=256, ratio_every=1,
               activations=["ReLU", "GELU"], cost_probe_depth=2, cost_probe_steps=1),
    small=dict(data={"mnist": "mnist", "cifar10": "mnist"}, width=64, depth=20,
               epochs={"mnist": 2}, lr=2e-2, max_train=1024, max_test=2000, ratio_every=1,
               cost_probe_depth=20, cost_probe_steps=3),
    paper=dict(data={"mnist": "mnist", "cifar10": "cifar10"}, width=500, depth=200,
               epochs={"mnist": 50, "cifar10": 100}, lr=1e-4, max_train=None, ratio_every=10,
               cost_probe_depth=20, cost_probe_steps=3),
)

PAPER = {
    # Table 2 of Lu et al.: accuracy (percent) of depth-200 networks, train / test, on MNIST
    # and CIFAR-10; the second number of each pair is the paper's value in parentheses
    # (batch normalisation before the activation).
    "table2": {
        "Tanh": {"mnist": {"train": (99.05, 87.39), "test": (96.57, 89.32)},
                 "cifar10": {"train": (80.84, 27.90), "test": (42.71, 29.32)}},
        "Tanh-GPN": {"mnist": {"train": (99.81, 84.93), "test": (95.54, 87.11)},
                     "cifar10": {"train": (96.39, 25.13), "test": (40.95, 26.58)}},
        "ReLU": {"mnist": {"train": (11.24, 11.24), "test": (11.35, 11.42)},
                 "cifar10": {"train": (10.00, 10.00), "test": (10.00, 10.00)}},
        "ReLU-GPN": {"mnist": {"train": (33.28, 11.42), "test": (28.13, 11.34)},
                     "cifar10": {"train": (46.60, 10.09), "test": (34.96, 9.96)}},
        "LeakyReLU": {"mnist": {"train": (11.24, 11.24), "test": (11.35, 11.63)},
                      "cifar10": {"train": (10.00, 10.21), "test": (10.00, 10.06)}},
        "LeakyReLU-GPN": {"mnist": {"train": (43.17, 11.19), "test": (49.28, 11.66)},
                          "cifar10": {"train": (51.85, 9.89), "test": (39.38, 10.00)}},
        "ELU": {"mnist": {"train": (99.06, 98.24), "test": (95.41, 97.48)},
                "cifar10": {"train": (80.73, 42.39), "test": (45.76, 44.16)}},
        "ELU-GPN": {"mnist": {"train": (100.00, 97.86), "test": (96.56, 96.69)},
                    "cifar10": {"train": (99.37, 43.35), "test": (43.12, 44.36)}},
        "SELU": {"mnist": {"train": (99.86, 97.82), "test": (97.33, 97.38)},
                 "cifar10": {"train": (29.23, 46.47), "test": (29.55, 45.88)}},
        "SELU-GPN": {"mnist": {"train": (99.92, 97.91), "test": (96.97, 97.39)},
                     "cifar10": {"train": (98.24, 47.74), "test": (45.90, 45.52)}},
        "GELU": {"mnist": {"train": (11.24, 12.70), "test": (11.35, 10.28)},
                 "cifar10": {"train": (10.00, 10.43), "test": (10.00, 10.00)}},
        "GELU-GPN": {"mnist": {"train": (97.67, 11.22), "test": (95.82, 9.74)},
                     "cifar10": {"train": (90.51, 10.00), "test": (36.94, 10.00)}},
    },
    # Section 3.2: the set-up of Table 2 and Figs. 3, 8-13.
    "setup": {"width": 500, "depth": 200, "momentum": 0.5, "batch_size": 64, "lr": 1e-4,
              "epochs": {"mnist": 50, "cifar10": 100}},
}

PAPER_COMMAND = ("`python -m gmp.gpu OUT` on a GPU and `python -m gmp.gpu merge OUT` here (the README's "
                 "\"Running on a GPU\")")
"""The command that runs this chapter's paper scale, which its notes name in place of ``gmp.runs``
(that trains one network at a time, days of a GPU at depth 200)."""

FIGURE_FAMILIES = {"10": ["Tanh", "ReLU", "LeakyReLU"], "11": ["ELU", "SELU", "GELU"],
                   "12": ["Tanh", "ReLU", "LeakyReLU"], "13": ["ELU", "SELU", "GELU"]}
"""Activations of each gradient-ratio figure, read from the captions of Figs. 10-13 (the
figures themselves are not in our copy of the paper): Figs. 10 and 12 name ReLU and
LeakyReLU, Figs. 11 and 13 name GELU."""


def variants(activations: list[str]) -> list[str]:
    """``["Tanh", "Tanh-GPN", "ReLU", ...]``: each activation and its GPN version."""
    return [name for act in activations for name in (act, f"{act}-GPN")]


def run_label(variant: str, batchnorm: bool) -> str:
    """The paper's name of a run: "-BN" appended when batch normalisation is used."""
    return f"{variant}-BN" if batchnorm else variant


def network_key(dataset: str, label: str, seed: int) -> str:
    """The name of one network of Table 2 (its checkpoint is ``store.scratch`` of it)."""
    return f"{dataset}/{label}/seed{seed}"


def epoch_key(dataset: str, label: str, seed: int, epoch: int) -> str:
    """The journal key of epoch ``epoch`` (from 1) of one network."""
    return f"{network_key(dataset, label, seed)}/epoch{epoch}"


def percent(value: float | None) -> str:
    """An accuracy (a fraction) in percent with two decimals, as Table 2 prints it; "—" for None."""
    return "—" if value is None else f"{100 * value:.2f}"
