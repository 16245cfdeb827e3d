"""``python -m gmp.gpu lease OUT``: the prepared command of a lease for ``lu_real`` (Table 2).

One lease is at most 15 minutes of device time in all, one command at most 10; the machine keeps
the checkout's ignored folders between two commands while it is warm. So, in one command:

1. ``OUT/gpu.json``: the machine, torch, the precision flags (TF32 off).
2. The next group of ``lu_real``'s run (:func:`~gmp.gpu.lu_real.load_group`) and its data; when a
   state folder holds that group's state (``--state``, default ``_gpu_state/`` in the checkout,
   ignored by git), this command continues it and measures nothing.
3. ``OUT/measure.json`` (:mod:`~gmp.gpu.measure`, at most ``--measure-seconds``): the time per kernel
   of a replayed graph, the products at the step's shapes, the step for 12 and 24 networks with the
   profiler's kernels, and the kernels' difference from the torch reference.
4. The group trained (:func:`~gmp.gpu.lu_real.train_group`): probed, cut to what the lease's measured
   time allows, its state saved at this command's deadline when the lease has time for a second
   command (``--lease-seconds``: the device time the lease has left when this command starts).
5. With the time left, the chapters' smoke run and the ``cuda`` tests, unless a lease kept in the
   repository (``book/_results/lu_real/leases/``, written by ``merge``) has shown them passing.
6. ``OUT/summary.json``: what ran, the mode and why each faster one fell back (whole tracebacks),
   the probes and the measured milliseconds per step.

The command for the lease's second call is the same command again: it finds the state and goes on.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from .chapters import smoke
from .files import ROOT, environment, return_problems, within_return_limits, write_json
from .lu_real import load_group, state_path, train_group
from .measure import measure

LEASES = ROOT / "book" / "_results" / "lu_real" / "leases"
"""Where ``merge`` keeps each lease's ``summary.json`` and ``measure.json`` (as ``<stamp>-summary.json``)."""

STATE = ROOT / "_gpu_state"
"""The default state folder, ignored by git, so that it stays on a warm GPU machine between two commands."""


def smoke_shown_passing(leases: Path = LEASES) -> str | None:
    """The kept lease summary whose smoke run passed every chapter and the ``cuda`` tests, or ``None``."""
    for path in sorted(leases.glob("*-summary.json")):
        smoke_run = json.loads(path.read_text()).get("smoke") or {}
        if smoke_run.get("chapters") and not smoke_run.get("failed") and smoke_run.get("cuda_tests_rc") == 0 \
                and smoke_run.get("chapters_ok") == smoke_run.get("chapters"):
            return path.name
    return None


def lease(out: Path, seconds: float, lease_seconds: float | None, state: Path, measure_seconds: float,
          smoke_seconds: float, device: str, scale: str, networks: int | None, seed: int) -> int:
    """The command (see the module); returns its exit status."""
    from gmp import config
    from gmp.experiments import lu_real

    begin = time.monotonic()
    deadline = begin + seconds - 30  # room to write the journal and the summary
    lease_deadline = begin + (seconds if lease_seconds is None else lease_seconds) - 30
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    summary: dict[str, Any] = {"environment": environment(device), "command": {
        "seconds": seconds, "lease_seconds": lease_seconds, "state": str(state), "measure_seconds": measure_seconds,
        "smoke_seconds": smoke_seconds, "scale": scale, "networks": networks}}
    write_json(out / "gpu.json", summary["environment"])
    if device.startswith("cuda") and not torch.cuda.is_available():
        summary["error"] = "no CUDA device: nothing run"
        write_json(out / "summary.json", summary)
        print(summary["error"], flush=True)
        return 2
    try:
        cfg = config.load("lu_real", scale)
        group = load_group(cfg, seed)
        dataset, labels, data = group
        if labels and not state_path(state, cfg, dataset).exists() and measure_seconds > 0 and device.startswith("cuda"):
            start = time.monotonic()
            every = labels + [f"{label}-BN" for label in labels if not label.endswith("-BN")]
            built = lu_real.build_group(every, data[0][0].shape[1], cfg, seed)
            summary["measure"] = measure(built, every, cfg, device, *data[0],
                                         measure_seconds - (time.monotonic() - start))
            summary["measure"]["build_seconds"] = round(time.monotonic() - start - sum(
                summary["measure"].get("seconds", {}).values()), 1)
            del built
            write_json(out / "measure.json", summary.pop("measure"))
            torch.cuda.empty_cache()
        summary["lu_real"] = train_group(out, cfg, device, deadline, seed, networks, group, state, lease_deadline)
    except Exception:
        summary["lu_real"] = {"error": traceback.format_exc()}
    write_json(out / "summary.json", summary)
    passed = smoke_shown_passing()
    left = deadline - time.monotonic()
    if passed:
        summary["smoke"] = {"skipped": f"shown passing by the lease kept in {passed}"}
    elif smoke_seconds <= 0:
        summary["smoke"] = {"skipped": "--smoke-seconds 0"}
    elif left >= smoke_seconds:
        try:
            summary["smoke"] = smoke(out, device, smoke_seconds, workers=min(8, os.cpu_count() or 1))
        except Exception:
            summary["smoke"] = {"error": traceback.format_exc()}
    else:
        summary["smoke"] = {"skipped": f"{left:.0f} s left in this command, {smoke_seconds:.0f} s needed"}
    summary["seconds"] = round(time.monotonic() - begin, 1)
    write_json(out / "summary.json", summary)
    summary["left_out"] = within_return_limits(out, summary)
    summary["return_problems"] = return_problems(out)
    write_json(out / "summary.json", summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "environment"}, indent=1, default=str)[-6000:],
          flush=True)
    return 0 if "error" not in summary["lu_real"] else 1
