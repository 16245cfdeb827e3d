"""Experiment of the chapter book/part2/lu_real.md (Section 3.2, Table 2 and Figs. 3, 8-13
of Lu et al.): depth-200, width-500 networks trained on MNIST and CIFAR-10 with six
activations, their GPN versions, with and without batch normalisation.

Set-up of Section 3.2: row-normalised square weights ``W = (v_i/||v_i||)_i`` (Eq. (55)),
one unconstrained layer at the bottom and one at the top, SGD with momentum 0.5, batch 64,
learning rate 1e-4, 50 epochs (MNIST) / 100 epochs (CIFAR-10), no augmentation; "-BN"
puts batch normalisation before the activation. What the paper leaves open follows the
first author's code (``protocol="author"``, see :func:`~gmp.experiments.lu_real.training.build`): ``V`` starts as a
Haar-random orthogonal matrix (so ``W`` starts exactly orthogonal, the setting of the
theory, Assumption 2); the square layers have no bias, the bottom and top layers have
biases and orthogonal weights, and the activation also follows the bottom layer; the GPN
constants are the author's typed ones; softmax cross-entropy; inputs standardised per
channel (:mod:`gmp.data.classification`); the "Train" accuracy of Table 2 is the author's
running count of correct predictions over the epoch's mini-batches, in training mode
(``train_acc``), with the accuracy on the whole training set after the last epoch, in
evaluation mode, beside it (``train_acc_eval``); one seed, whose initial weights and
shuffled order every network shares. The gradient norm ratio of Figs. 10-13 is
``max_l ||dE/dV^(l)||_F / min_l ||dE/dV^(l)||_F`` over the square layers (Eq. (56)).

MNIST and CIFAR-10 are not available offline and the paper's networks need a GPU, so the
book's default (small) scale runs the same code on stand-in data that ship with the
project (MNIST-1D, scikit-learn's 8x8 digits) at a reduced depth, width and length of
training. Results on stand-in data are reported as such and never as MNIST/CIFAR-10 ones.

The package, in the order a reader meets it (each module imports only those before it):

- :mod:`~gmp.experiments.lu_real.paper`: what the paper sets and reports, the book's scales of it
  (``CONFIG``), the names of the runs;
- :mod:`~gmp.experiments.lu_real.training`: one network, built and trained one epoch at a time,
  resumed from its checkpoint or replayed from the journal;
- :mod:`~gmp.experiments.lu_real.stacked`: several networks trained at once (the GPU command's trainer);
- :mod:`~gmp.experiments.lu_real.runs`: the run as journalled units, and the payload assembled from them;
- :mod:`~gmp.experiments.lu_real.cost`: what the paper-scale run costs;
- :mod:`~gmp.experiments.lu_real.figures`: Table 2 and the figures beside the paper's;
- :mod:`~gmp.experiments.lu_real.claims`: the claims tested and their rules;
- :mod:`~gmp.experiments.lu_real.sensitivity`: how much one run is one draw (the chapter imports it
  by itself).
"""

from .claims import CLAIMS
from .cost import PAPER_TRAIN_ROWS, paper_cost, paper_updates, step_seconds
from .figures import figure_source, plot_drift, plot_gradient_ratio, plot_test_accuracy, table2
from .paper import (ACTIVATIONS, CONFIG, DATASET_LABELS, FIGURE_FAMILIES, PAPER, PAPER_COMMAND, PAPER_DATASETS,
                    UNTRAINABLE, epoch_key, network_key, percent, run_label, variants)
from .runs import (EARLIER_READING, assemble, earlier_reading, earlier_text, epoch_text, join_curves,
                   network_result, progress, run, schedule, split_curves, unfinished, units)
from .stacked import StackedTraining
from .training import ForeignJournal, ReplayMismatch, Training, build, build_group, load_split, train_epoch

__all__ = ["ACTIVATIONS", "CLAIMS", "CONFIG", "DATASET_LABELS", "EARLIER_READING", "FIGURE_FAMILIES", "PAPER",
           "PAPER_COMMAND", "PAPER_DATASETS", "PAPER_TRAIN_ROWS", "UNTRAINABLE", "ForeignJournal", "ReplayMismatch",
           "StackedTraining", "Training", "assemble", "build", "build_group", "earlier_reading", "earlier_text", "epoch_key",
           "epoch_text", "figure_source", "join_curves", "load_split", "network_key", "network_result", "paper_cost",
           "paper_updates", "percent", "plot_drift", "plot_gradient_ratio", "plot_test_accuracy", "progress", "run",
           "run_label", "schedule", "split_curves", "step_seconds", "table2", "train_epoch", "unfinished", "units",
           "variants"]
