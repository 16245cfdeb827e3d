"""What a run of a chapter records of where it ran, and what a run and its verification both read back.

:func:`git_commit` and :func:`describe_device` name the commit and the machine a run's provenance (and a
re-stamp's evidence) records, :func:`device_name` and :func:`precision` the device and arithmetic of a journal
entry; :func:`units_of` is a chapter's split into independent units, which the runner's ``--jobs`` workers
journal and whose values a finished run keeps in its cache as :data:`UNITS_FILE`, for ``gmp.verification`` to
recompute. The runner (:mod:`gmp.runs`) and the verification of its caches (:mod:`gmp.verification`) both
import it, so that neither imports the other but through the command line.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from collections.abc import Collection
from pathlib import Path

import torch

from gmp import config as _config
from gmp import results as _results


def git_commit(root: Path) -> str:
    """``HEAD``'s commit, with ``+dirty`` when tracked files other than ``book/_results`` differ from it.

    The results folder is left out because a resumed run appends to its own committed journal
    there: that is the run's output, not a change to the code that produced it.
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                f":(exclude){_results.RESULTS_PATH}"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def device_name(device: torch.device | str) -> str:
    """The device: ``"cpu"`` or ``"cuda (<GPU name>)"``, as a journal entry records it (its ``device``)."""
    device = torch.device(device)
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type


def precision(dtype: torch.dtype = torch.float32) -> str:
    """The arithmetic: the dtype and whether CUDA's matrix products may use TF32
    (``torch.backends.cuda.matmul.allow_tf32``), ``"float32, TF32 off"``, as a journal entry records it
    (its ``precision``)."""
    return f"{str(dtype).removeprefix('torch.')}, TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}"


def processor() -> str:
    """The processor's model name (Linux's ``/proc/cpuinfo``, else ``platform.processor()``), or ``""``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor()


def describe_device(device: torch.device) -> str:
    """The device as a run's provenance records it: :func:`device_name` with, on a CPU, the processor, the
    machine, its cores and the vector instructions torch's kernels use (two processors can round the same
    sums differently, so a recomputation on another one need not give the same bits), and on CUDA the
    :func:`precision` of float32, naming cuDNN's TF32 where it differs from the matrix products'
    (:func:`gmp.config.resolve_device` turns both off)."""
    if device.type != "cuda":
        named = ", ".join(part for part in (processor(), platform.machine(), f"{os.cpu_count()} cores",
                                            torch.backends.cpu.get_cpu_capability()) if part)
        return f"{device_name(device)} ({named})"
    cudnn = torch.backends.cudnn.allow_tf32
    text = f"{device_name(device)}, {precision()}"
    return text if cudnn == torch.backends.cuda.matmul.allow_tf32 else f"{text}, cuDNN TF32 {'on' if cudnn else 'off'}"


UNITS_FILE = "units.jsonl.gz"
"""The journal of a finished run of a chapter with ``units``, kept in its cache for
:func:`gmp.verification.verify` and :func:`gmp.verification.restamp`."""


def units_of(chapter: str, purpose: str = "for --jobs workers; run it without --jobs", but: Collection[str] = ()):
    """The ``units`` function of the chapter's experiment module (see :func:`gmp.runs.prefill`); a ValueError
    naming the chapters that have one, ``but`` those (which cannot serve ``purpose``), where it has none
    (``purpose``: what the units were wanted for)."""
    units = getattr(_config.experiment(chapter), "units", None)
    if units is None:
        splitting = [c for c in _results.experiment_chapters()
                     if hasattr(_config.experiment(c), "units") and c not in but]
        raise ValueError(f"{chapter} does not split into independent units {purpose} "
                         f"(these split: {', '.join(splitting)})")
    return units
