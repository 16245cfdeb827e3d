"""The book's one prepared GPU command: ``python -m gmp.gpu OUT``.

A GPU is lent to this project for minutes at a time, on a machine with no package registry
and no papermill (torch and Python only, with numpy, scipy, matplotlib, pandas and pytest).
This command is built for one such lease, within one command's limit, and writes what it did
under ``OUT`` even when a step fails:

1. ``OUT/gpu.json``: the GPU, the torch version and the precision flags (TF32 off: the paper's
   GPUs computed in fp32).
2. ``OUT/smoke.jsonl``: every chapter's code executed at smoke scale on the device (its
   notebook's code cells in order, ``SCALE="smoke"`` and ``DEVICE`` set after the parameters
   cell), in parallel worker processes with one time budget, then the tests marked ``cuda``.
3. The paper-scale run of ``lu_real`` continued: the next networks without a journalled run
   (in the chapter's schedule order) trained at once by
   :class:`gmp.experiments.lu_real.stacked.StackedTraining` for all their epochs, as many as the time
   left allows by a measured step time. Their journal goes to
   ``OUT/lu_real/_partial/<scale>-<config digest>.jsonl`` (the chapter's journal format, one
   entry per network and epoch, device and precision in each) only once every network of the
   group has finished; epochs of a group cut short by the deadline go to
   ``OUT/lu_real/unfinished-<scale>.jsonl``, labelled, and never into the journal (their
   checkpoints do not come back, so they could not be continued).
4. With the time the group leaves (and ``--units-seconds`` kept for it), a second job: the
   units of Part III's paper-scale runs that neither the repository's journal nor its current
   cache holds (``UNIT_CHAPTERS``, in its order; the seeds, masks and ablation arms the CPU cannot
   afford, including those a chapter's ``QUEUED`` settings add: :func:`~gmp.gpu.units.unit_config`).
   First the full-batch fits (``fit_spec``) of ``sbsnn_gap``, ``sbsnn_fitting`` and ``sbsnn_encoders``,
   whose caches record no code fingerprint, unit by unit as below. Then, of
   :data:`~gmp.gpu.units.STACKED_CHAPTERS`, all the units that fit with ``fit_stack`` as one stacked
   fit (:func:`~gmp.gpu.units.compute_units_stacked`, in a
   child process: one queue per image and protocol, trained when its probe predicts that it ends
   in time), each unit journalled whole under ``OUT/<chapter>/_partial/`` once its fits end; then
   the rest (or all of them, when the stacked fit fails or ``--unit-by-unit`` is given), each
   computed whole by the chapter's ``units`` in its order, in a child process stopped at the
   deadline, journalled there too. A unit cut short there leaves its last checkpoint to come
   back (``<scale>-<digest>.<unit>.pt``), and resumes from it in a later lease (:func:`~gmp.gpu.returned.merge`).
5. ``OUT/summary.json``: what ran, in which mode (CUDA graph or eager), the measured step
   times and the minutes per group, the stacked fit's probes and prediction
   (``units_stacked``), and the units computed; where ``OUT`` would otherwise hold more files than
   come back, ``smoke.jsonl`` and ``gpu.json`` folded into it (:data:`~gmp.gpu.files.FOLDED`).

``python -m gmp.gpu merge OUT`` adds the networks of a returned ``lu_real`` journal and the
units of the other returned journals to the repository's journals
(``book/_results/<chapter>/_partial/``), each unit with the device that computed it, and a returned
checkpoint beside them, refusing another config's. The same command
runs on a CPU at smoke scale (``--device cpu --scale smoke``), which the test suite does.

The package, one module per job, each importing only those before it:

- :mod:`~gmp.gpu.files`: the repository, what goes under ``OUT`` and what of it comes back;
- :mod:`~gmp.gpu.chapters`: the chapters at smoke scale and the ``cuda`` tests (step 2);
- :mod:`~gmp.gpu.lu_real`: the ``lu_real`` group (step 3), and a stack of it trained whole for a task of
  ``--executor`` (:func:`~gmp.gpu.lu_real.train_stack`);
- :mod:`~gmp.gpu.units`: the Part III units (step 4);
- :mod:`~gmp.gpu.returned`: ``merge``;
- :mod:`~gmp.gpu.measure`: the measurement of the stacked step (``OUT/measure.json``);
- :mod:`~gmp.gpu.lease`: ``python -m gmp.gpu lease OUT``, the prepared command of a lease for
  ``lu_real`` (measure, train the group, state across two commands, smoke with the time left);
- :mod:`~gmp.gpu.command`: the command itself (steps 1 and 5), run by ``python -m gmp.gpu``.
"""

from .chapters import chapter_code, run_chapter, smoke, without_ipython
from .command import main
from .files import FOLDED, environment, RETURN_BYTES, RETURN_DEPTH, RETURN_FILES, ROOT, return_problems
from .lu_real import (MODES, group_seconds, load_group, mode_options, next_group, pending_groups, probe, state_path,
                      train_group, train_stack)
from .returned import merge, returned_device
from .units import (STACKED_CHAPTERS, UNIT_CHAPTERS, compute_units, compute_units_stacked, missing_units,
                    stacked_units_job, unit_config, unit_keys, units_job)

__all__ = ["main", "environment", "chapter_code", "run_chapter", "smoke", "without_ipython", "next_group", "pending_groups", "load_group",
           "train_group", "train_stack", "probe", "group_seconds", "mode_options", "state_path", "MODES", "unit_config", "unit_keys", "missing_units", "compute_units",
           "compute_units_stacked", "stacked_units_job", "units_job", "merge", "returned_device", "return_problems",
           "UNIT_CHAPTERS", "STACKED_CHAPTERS", "FOLDED", "RETURN_FILES", "RETURN_BYTES", "RETURN_DEPTH", "ROOT"]
