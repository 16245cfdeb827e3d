"""What the paper-scale run of Table 2 costs: a measured step here, and an estimate of the whole run."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .paper import PAPER
from .training import build


def step_seconds(width: int, depth: int, in_features: int, batch_size: int, device: torch.device | str = "cpu",
                 steps: int = 3) -> float:
    """Measured seconds per training step (forward, backward, SGD update) of a ReLU-GPN
    network of Section 3.2 (row-normalised weights) after one warm-up step."""
    cfg = {"width": width, "depth": depth, "weights": "row_normalized", "init": "default", "num_classes": 10}
    model = build("ReLU-GPN", False, in_features, cfg, 0).to(device)
    x = torch.randn(batch_size, in_features, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.5, foreach=True)
    elapsed = 0.0
    for i in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        if i:
            elapsed += time.perf_counter() - start
    return elapsed / steps


PAPER_TRAIN_ROWS = {"mnist": 60_000, "cifar10": 50_000}
"""Training-set sizes of MNIST and CIFAR-10."""


def paper_updates() -> dict[str, int]:
    """Mini-batch updates of one paper-scale network per data set: ``ceil(rows / batch) * epochs``."""
    setup = PAPER["setup"]
    return {d: math.ceil(n / setup["batch_size"]) * setup["epochs"][d] for d, n in PAPER_TRAIN_ROWS.items()}


def paper_cost(layer_step_s: float, overhead_layer_step_s: float, gpu_tflops: float = 20.0,
               activations: int = 6) -> dict[str, float]:
    """An estimate of the cost of the paper-scale run of Table 2 (not a measurement of it).

    Steps: training sets of 60,000 (MNIST) and 50,000 (CIFAR-10) images, batch 64
    (``ceil`` steps per epoch), 50 / 100 epochs, 2 x ``activations`` variants x (with,
    without BN) per data set. FLOPs: about ``6 * batch * width^2`` per square layer and step
    (forward 2, backward 4). ``layer_step_s``: measured seconds per square layer and step
    at width 500 on this CPU, giving the CPU time. On a GPU the time is at least the larger
    of the FLOPs at ``gpu_tflops`` (an assumed sustained rate) and the host-side cost of
    launching the layer's operations, taken as ``overhead_layer_step_s``, the measured
    seconds per layer and step of a network so narrow that its arithmetic is negligible.
    Per-epoch evaluation of the test set is not counted.
    """
    setup = PAPER["setup"]
    runs_per_dataset = 2 * activations * 2
    steps = sum(paper_updates().values()) * runs_per_dataset
    layer_steps = steps * setup["depth"]
    step_flops = 6 * setup["batch_size"] * setup["width"] ** 2 * setup["depth"]
    flop_hours = steps * step_flops / (gpu_tflops * 1e12) / 3600
    overhead_hours = layer_steps * overhead_layer_step_s / 3600
    return {"steps": float(steps), "step_gflop": step_flops / 1e9, "total_pflop": steps * step_flops / 1e15,
            "cpu_hours": layer_steps * layer_step_s / 3600, "gpu_flop_hours": flop_hours,
            "gpu_overhead_hours": overhead_hours, "gpu_hours": max(flop_hours, overhead_hours),
            "gpu_tflops": gpu_tflops}


def floor_per_network_step(depth: int = 200, width: int = 500, batch: int = 64, flops_per_s: float = 67e12,
                           bytes_per_s: float = 4.3e12) -> dict[str, float]:
    """The float32 floor of one network's training step (the square layers alone): ``6 batch
    width^2`` FLOPs per layer (forward, input gradient, weight gradient) at ``flops_per_s`` (an
    H200's 67 TFLOP/s without tensor cores), and the bytes of ``V`` read twice and written once and
    of its momentum buffer read and written (``5 width^2`` floats per layer) at ``bytes_per_s``
    (4.3 TB/s, the copy rate measured on an H200 here). The step cannot take less than the larger."""
    flops = 6 * batch * width ** 2 * depth
    moved = 5 * 4 * width ** 2 * depth
    return {"gflop": flops / 1e9, "gbytes": moved / 1e9, "flop_seconds": flops / flops_per_s,
            "byte_seconds": moved / bytes_per_s, "seconds": max(flops / flops_per_s, moved / bytes_per_s)}


LEASE_MINUTES = 15.0
"""A GPU lease's device time, all its commands together, the machine's start included."""
START_AND_MEASURE_MINUTES = 2.5
"""The minutes a lease spends before it trains (the machine's start, about 45 s; the measurement, 60 s; the planner's
probe)."""


def lease_measurements(leases: Path | None = None) -> list[dict[str, Any]]:
    """What each GPU lease kept in the repository (``book/_results/lu_real/leases/``, written by
    ``python -m gmp.gpu merge``) measured of the stacked step, oldest first: the date and GPU, each probe of
    the planner (networks, milliseconds per step, minutes its group's epochs need), the measurement's
    milliseconds per step and kernels per step and per square layer-step for each stack it timed, the
    microseconds a kernel took in a replayed graph of small ones (``kernel_us``), what the lease
    trained, the float32 floor of a step per network (:func:`floor_per_network_step`,
    at the run's depth, width and batch), and ``fits``: the most networks of a probe whose group's epochs fit in
    what a lease has left to train (:data:`LEASE_MINUTES` less :data:`START_AND_MEASURE_MINUTES`), 0 if none."""
    from gmp import results

    if leases is None:
        root = results.results_root()
        leases = root / "lu_real" / "leases" if root is not None else None
    if leases is None or not leases.is_dir():
        return []
    out = []
    for path in sorted(leases.glob("*-summary.json")):
        summary = json.loads(path.read_text())
        measure_path = path.with_name(path.name.replace("-summary.json", "-measure.json"))
        measured = json.loads(measure_path.read_text()) if measure_path.is_file() else {}
        environment, run = summary.get("environment", {}), summary.get("lu_real", {})
        depth, width, batch = (measured.get(k) for k in ("depth", "width", "batch"))
        floor = floor_per_network_step(depth or 200, width or 500, batch or 64)["seconds"]
        probes = [{"networks": p["networks"], "ms_per_step": 1e3 * p["seconds_per_step"],
                   "group_minutes": p["group_minutes"]} for p in run.get("probes", [])]
        out.append({"record": path.name, "date": str(environment.get("date", "")), "gpu": environment.get("gpu"),
                    "probes": probes, "fits": max([p["networks"] for p in probes if p["group_minutes"]
                                                   <= LEASE_MINUTES - START_AND_MEASURE_MINUTES], default=0),
                    "steps": [{"networks": s["networks"], "mode": s["mode"], "ms_per_step": s["ms_per_step"],
                               "kernels_per_step": s["kernels_per_step"],
                               "kernels_per_layer_step": s["kernels_per_step"] / (depth or 200)}
                              for s in measured.get("steps", [])],
                    "kernel_us": measured.get("kernel_us"),
                    "trained": run.get("networks", []) if run.get("finished") else [], "status": run.get("status"),
                    "floor_ms_per_network_step": 1e3 * floor})
    return out
