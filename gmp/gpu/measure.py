"""The lease's measurement of the stacked step (``OUT/measure.json``), within a time budget, before
``lu_real``'s group trains: what bounds the step on this card, measured rather than assumed.

1. ``kernel_us``: the time per kernel of a replayed CUDA graph of 2,000 small kernels (the cost of a
   launch inside a graph, which bounds a step of many small kernels).
2. ``bmm``: the float32 ``bmm`` at the step's exact shapes (forward ``x V^T``, input gradient ``A V``,
   weight gradient ``A^T X``; batch, width and depth of the run) for 1, 12 and 24 networks: milliseconds
   per product and GFLOP/s, so that the step's floor on this card is known.
3. ``steps``: the stacked step for 12 and 24 networks in each mode that runs, milliseconds per step,
   with the kernels a profiler saw in one uncaptured step (names and counts).
4. ``difference``: each of 12 networks' largest relative loss difference over 20 float32 steps from the
   same weights and batches, the stacked kernels against the torch reference, beside the reference
   against itself with every mini-batch's rows reversed (what rounding alone moves).

Each item is skipped, and says so, once the budget is spent; a failure is kept whole.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch


def _events_ms(fn: Callable[[], Any], repeats: int, device: str) -> float:
    """Median milliseconds of ``fn`` over ``repeats`` runs, timed by CUDA events after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(begin.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def kernel_microseconds(device: str, kernels: int = 2000) -> float:
    """Microseconds per kernel of a replayed CUDA graph of ``kernels`` in-place additions to 256 floats."""
    x = torch.zeros(256, device=device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        x.add_(1.0)
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            x.add_(1.0)
    return 1e3 * _events_ms(graph.replay, 10, device) / kernels


def bmm_rates(device: str, batch: int, width: int, counts: Sequence[int] = (1, 12, 24),
              repeats: int = 50) -> list[dict[str, Any]]:
    """The three products of a square layer for each number of networks in ``counts`` (float32, TF32
    as set): each timed as ``repeats`` products captured in one CUDA graph and replayed, so that the
    time is the products', not their launches' from Python."""
    rows = []
    g = torch.Generator(device=device).manual_seed(0)
    for n in counts:
        x = torch.randn(n, batch, width, device=device, generator=g)
        V = torch.randn(n, width, width, device=device, generator=g)
        A = torch.randn(n, batch, width, device=device, generator=g)
        out = torch.empty(n, width, width, device=device)
        forward, gradient = torch.empty(n, batch, width, device=device), torch.empty(n, batch, width, device=device)
        products = {"forward x V^T": lambda: torch.bmm(x, V.transpose(-1, -2), out=forward),
                    "input gradient A V": lambda: torch.bmm(A, V, out=gradient),
                    "weight gradient A^T X": lambda: torch.bmm(A.transpose(-1, -2), x, out=out)}
        flops = 2 * n * batch * width * width
        for what, fn in products.items():
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(repeats):
                    fn()
            ms = _events_ms(graph.replay, 10, device) / repeats
            rows.append({"networks": n, "product": what, "ms": ms, "gflops": flops / ms / 1e6})
        del x, V, A, out, forward, gradient
    return rows


def _kernel_names(training: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, dict[str, float]]:
    """The CUDA kernels a profiler sees in one uncaptured step of ``training``, by name: how many, and
    their device time in all (microseconds), the costliest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        training._train_step(x, y)
        torch.cuda.synchronize(training.device)
    kernels: dict[str, dict[str, float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = kernels.setdefault(event.name[:160], {"count": 0, "us": 0.0})
            row["count"] += 1
            row["us"] += float(getattr(event, "device_time", 0.0) or getattr(event, "cuda_time", 0.0) or 0.0)
    return dict(sorted(kernels.items(), key=lambda item: -item[1]["us"]))


def measure(networks: Sequence[Any], labels: Sequence[str], cfg: Any, device: str, x: torch.Tensor, y: torch.Tensor,
            budget: float) -> dict[str, Any]:
    """The measurement of the module, for ``networks`` (built as ``labels``, up to 24) on ``device``
    with the mini-batch ``(x, y)``, within ``budget`` seconds."""
    from gmp.experiments import lu_real

    from .lu_real import mode_options

    end = time.monotonic() + budget
    report: dict[str, Any] = {"budget_seconds": budget, "depth": int(cfg["depth"]), "width": int(cfg["width"]),
                              "batch": int(cfg["batch_size"]), "skipped": [], "failed": {}}
    width, batch = int(cfg["width"]), int(cfg["batch_size"])
    x, y = x[:batch].to(device), y[:batch].to(device)

    def item(name: str, fn: Callable[[], Any], seconds: float) -> None:
        if time.monotonic() + seconds > end:
            report["skipped"].append(f"{name}: the budget's {end - time.monotonic():.0f} s left are less than the "
                                     f"{seconds:.0f} s it takes")
            return
        try:
            started = time.monotonic()
            report[name] = fn()
            report.setdefault("seconds", {})[name] = round(time.monotonic() - started, 2)
        except Exception:
            report["failed"][name] = traceback.format_exc()
        finally:
            torch.cuda.empty_cache()

    def step(count: int, mode: str) -> dict[str, Any]:
        training = lu_real.StackedTraining(list(labels[:count]), x.shape[1], cfg, device,
                                           networks=list(networks[:count]), **mode_options(mode))
        ms = 1e3 * training.seconds_per_step(x, y, 20 if "stacked" in mode else 3)
        kernels = _kernel_names(training, x, y)
        return {"networks": count, "mode": mode, "ms_per_step": ms,
                "kernels_per_step": sum(row["count"] for row in kernels.values()), "kernels_by_name": kernels}

    def difference() -> dict[str, Any]:
        """Each network's largest relative loss difference over 20 steps: the kernels against the torch
        reference, and, as the scale that rounding alone reaches, the reference against itself with every
        mini-batch's rows reversed (a change of summation order only)."""
        batches = [(x.roll(7 * k, 0), y.roll(7 * k, 0)) for k in range(20)]
        losses = {}
        for name, kernels, flip in (("kernels", True, False), ("reference", False, False),
                                    ("reference, rows reversed", False, True)):
            training = lu_real.StackedTraining(list(labels[:12]), x.shape[1], cfg, device, graph=False,
                                               networks=list(networks[:12]), kernels=kernels)
            training.allocate(20)
            losses[name] = torch.stack([training._train_step(xb.flip(0) if flip else xb, yb.flip(0) if flip else yb)[0]
                                        for xb, yb in batches])
            del training
        reference = losses["reference"]

        def largest(other: torch.Tensor) -> dict[str, float]:
            change = ((other - reference).abs() / reference.abs()).amax(0)
            return {label: float(v) for label, v in zip(labels[:12], change)}

        return {"steps": 20, "kernels_vs_reference": largest(losses["kernels"]),
                "reference_rows_reversed": largest(losses["reference, rows reversed"])}

    item("kernel_us", lambda: kernel_microseconds(device), 2)
    item("bmm", lambda: bmm_rates(device, batch, width), 4)
    report["steps"] = []
    for count, mode, seconds in ((12, "CUDA graph, stacked kernels", 8), (24, "CUDA graph, stacked kernels", 14),
                                 (12, "torch reference", 10)):
        if count > len(networks):
            continue
        name = f"step: {count} networks, {mode}"
        item(name, lambda: step(count, mode), seconds)
        if name in report:
            report["steps"].append(report.pop(name))
    item("difference", difference, 25)
    return report
