"""Benchmark: the cost of geometric parameterization against a standard ReLU layer.

``python -m gmp.bench --deep`` instead times training steps of the depth-200, width-500 network
of Lu et al.'s Section 3.2 before and after the fused row-normalised layer (:func:`deep`).

``python -m gmp.bench --stacked [--device cuda]`` instead times training steps of ``lu_real``'s
depth-200 networks one at a time and stacked (:func:`stacked`), and on a GPU projects the whole
paper-scale run from them. ``python -m gmp.bench --stacked --count`` counts instead, on the CPU, the
kernels and bytes per layer of a stacked step, eager and compiled, and the networks per GPU
command they allow (:func:`count`).

``python -m gmp.bench --minibatch`` instead times mini-batch Adam updates of the SBSNN figure
network under its author's protocol (:func:`minibatch`).

``python -m gmp.bench`` times one forward + backward step of ``GmPLinear(n, n)`` and of
``nn.Linear(n, n)`` + ReLU (float32, CPU unless ``--device`` says otherwise) at several
batch sizes and thread counts, in the same run, and prints their ratio and the share of the
GmP step spent in the hyperspherical map (:func:`gmp.hyperspherical.scaled_directions`,
forward + backward, timed alone), and the same map in torch operations (the implementation
that serves GPUs and machines without a C compiler) beside it. Each timing is the minimum over ``--repeats`` repetitions
(others may share the machine). A GmP layer built on the plain ``cumprod`` formula with
autograd is timed too, to show what the fused map saves (:func:`run`). Not a test: timings
depend on the machine.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch import nn

from gmp import _native
from gmp.hyperspherical import _angles_to_unit_reference, _ScaledUnit, scaled_directions
from gmp.layers import GmPLinear


class _CumprodGmPLinear(GmPLinear):
    """GmPLinear with its direction differentiated by autograd through ``cumprod``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.linear(x, _angles_to_unit_reference(self.theta), self.lam)) * self.r


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""``wall``: elapsed time; ``cpu``: CPU time of this process (all its threads), which a busy
shared machine disturbs less (most meaningful with one thread, ``OMP_NUM_THREADS=1``)."""


def _step_times(steps: dict[str, Callable[[], None]], repeats: int, inner: int, clock: Callable[[], float],
                cuda: bool) -> dict[str, float]:
    """Per step, the minimum over ``repeats`` of the mean time of ``inner`` calls; the steps
    take turns within each repeat so that they share the machine's load."""
    best = {name: float("inf") for name in steps}
    for round_ in range(repeats + 1):  # round 0 warms up
        for name, step in steps.items():
            if cuda:
                torch.cuda.synchronize()
            start = clock()
            for _ in range(inner):
                step()
            if cuda:
                torch.cuda.synchronize()
            elapsed = (clock() - start) / inner
            if round_ > 0:
                best[name] = min(best[name], elapsed)
    return best


def run(width: int = 1024, batches: Sequence[int] = (64, 512, 4096), repeats: int = 7,
        device: str = "cpu", clock: str = "wall", threads: Sequence[int] = (1, 2),
        print_fn: Callable[[str], None] = print) -> list[dict[str, float]]:
    """Time a forward + backward step of ``nn.Linear`` + ReLU, :class:`gmp.GmPLinear` and a GmP
    layer differentiated through ``cumprod`` at each thread count and batch size, and the
    hyperspherical map of the GmP layer alone (``r u(theta)`` forward, then backward with a
    random upstream gradient: the part of the GmP step that ``nn.Linear`` does not pay).
    Returns one row per thread count and batch size; ``map_share`` is the map's time over the
    GmP step's."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    if not threads or any(t < 1 for t in threads):
        raise ValueError(f"threads must be counts >= 1, got {list(threads)}")
    torch.manual_seed(0)
    dev = torch.device(device)
    models = {
        "linear_relu": nn.Sequential(nn.Linear(width, width), nn.ReLU()).to(dev),
        "gmp": GmPLinear(width, width, init="glorot").to(dev),
        "gmp_cumprod": _CumprodGmPLinear(width, width, init="glorot").to(dev),
    }
    theta, r = models["gmp"].theta, models["gmp"].r
    grad = torch.randn(width, width, device=dev)

    def map_step() -> None:
        theta.grad = r.grad = None
        scaled_directions(theta, r).backward(grad)

    def torch_map_step() -> None:
        theta.grad = r.grad = None
        _ScaledUnit.apply(theta, r).backward(grad)

    rows = []
    initial_threads = torch.get_num_threads()
    why_not = _native.unavailable() if dev.type == "cpu" else "not on the CPU"
    print_fn(f"forward+backward, {width}x{width}, float32, {dev}, torch {torch.__version__}; "
             f"{clock} clock, min over {repeats} repeats; map: "
             + (f"compiled (gmp._native, {'OpenMP threads' if _native.threaded() else 'one thread'})"
                if why_not is None else f"torch ops (no compiled map: {why_not})"))
    print_fn(f"{'threads':>7} {'batch':>6} {'Linear+ReLU ms':>15} {'GmPLinear ms':>13} {'ratio':>6} "
             f"{'map ms':>7} {'map share':>9} {'torch map ms':>12} {'cumprod ms':>11} {'ratio':>6}")
    try:
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            for batch in batches:
                x = torch.randn(batch, width, device=dev)
                steps = {name: functools.partial(_train_step, model, x) for name, model in models.items()}
                steps["map"] = map_step
                steps["torch_map"] = torch_map_step
                t = _step_times(steps, repeats, max(1, 2048 // batch), CLOCKS[clock], dev.type == "cuda")
                row = {"threads": n_threads, "batch": batch, **{f"{k}_ms": v * 1e3 for k, v in t.items()},
                       "ratio": t["gmp"] / t["linear_relu"], "map_share": t["map"] / t["gmp"],
                       "ratio_cumprod": t["gmp_cumprod"] / t["linear_relu"]}
                rows.append(row)
                print_fn(f"{n_threads:>7} {batch:>6} {row['linear_relu_ms']:>15.2f} {row['gmp_ms']:>13.2f} "
                         f"{row['ratio']:>6.2f} {row['map_ms']:>7.2f} {row['map_share']:>9.0%} "
                         f"{row['torch_map_ms']:>12.2f} {row['gmp_cumprod_ms']:>11.2f} {row['ratio_cumprod']:>6.2f}")
    finally:
        torch.set_num_threads(initial_threads)
    return rows


def _train_step(model: nn.Module, x: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()


def minibatch(stacks: Sequence[int] = (1, 2, 4), width: int = 192, updates: int = 300, compile: bool = True,
              print_fn: Callable[[str], None] = print) -> list[dict[str, float]]:
    """Mini-batch Adam updates per second of the SBSNN figures' network under the author's protocol.

    The network of Figs. 6-7 (encoder features of ``width`` -> five layers of ``width`` with
    ``sqrt(2) sin(x + pi/4)`` -> output, no biases), batches of 32 pixels. Timed: a PyTorch
    baseline (``nn.Sequential`` of bias-free ``nn.Linear`` trained by ``torch.optim.Adam``,
    one network) and :func:`gmp.minibatch.fit_stack` training ``stack`` networks at once, eager
    and (with ``compile``) through ``torch.compile``; each over ``updates`` updates after a warm-up
    epoch. Prints ms per update of one network, the rate of network-updates per second and
    GFLOP/s of the five square layers (``6 * 32 * width^2`` FLOPs each per update: forward 2,
    backward 4); the last row times only those layers' three bare matrix products per update,
    the floor no update of one network can go below on this machine's matrix-product rate.
    """
    from gmp.activations import activation
    from gmp.minibatch import fit_stack, layers

    torch.manual_seed(0)
    pixels = 32 * updates
    x, y = torch.randn(pixels, width), torch.rand(pixels, 1)
    spec = {"model": "sbsnn", "sizes": [2] + [width] * 6 + [1], "activation": "sin", "first_layer": "encoder"}
    print_fn(f"mini-batch Adam updates (batch 32) of the {width}-wide SBSNN figure network, float32, cpu, "
             f"torch {torch.__version__}, {torch.get_num_threads()} threads; {updates} updates after a warm-up")
    net = nn.Sequential(*[m for _ in range(5) for m in (nn.Linear(width, width, bias=False), activation("sin"))],
                        nn.Linear(width, 1, bias=False))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    for warm in (True, False):
        start = time.perf_counter()
        for batch in torch.randperm(pixels).split(32):
            opt.zero_grad(set_to_none=True)
            ((net(x[batch]) - y[batch]) ** 2).mean().backward()
            opt.step()
    base = (time.perf_counter() - start) / updates
    rows = [{"what": "PyTorch nn.Sequential + torch.optim.Adam", "stack": 1, "ms_per_update": base * 1e3}]
    a, w = torch.randn(32, width), torch.randn(width, width)
    start = time.perf_counter()
    for _ in range(updates):
        for _ in range(5):  # forward x W^T, backward g W and g^T x of each square layer
            a @ w.T, a @ w, a.T @ a
    floor = (time.perf_counter() - start) / updates
    for use_compile in (False, True) if compile else (False,):
        for stack in stacks:
            fit = fit_stack(layers(spec), list(range(stack)), x, y, epochs=2, lr=1e-4, compile=use_compile)[0]
            per = float(fit.seconds[1] - fit.seconds[0]) / updates  # the second epoch: no compilation in it
            rows.append({"what": f"gmp.minibatch.fit_stack{' (torch.compile)' if use_compile else ''}",
                         "stack": stack, "ms_per_update": per * 1e3})
    rows.append({"what": "bare matrix products (ceiling)", "stack": 1, "ms_per_update": floor * 1e3})
    flops = 6 * 32 * 5 * width * width
    print_fn(f"{'what':<44} {'networks':>8} {'ms/update/network':>18} {'updates/s':>10} {'GFLOP/s':>8} "
             f"{'vs PyTorch':>10}")
    for row in rows:
        row["updates_per_s"] = 1e3 / row["ms_per_update"]
        row["gflops"] = flops / row["ms_per_update"] / 1e6
        row["ratio"] = base * 1e3 / row["ms_per_update"]
        print_fn(f"{row['what']:<44} {row['stack']:>8} {row['ms_per_update']:>18.3f} {row['updates_per_s']:>10.0f} "
                 f"{row['gflops']:>8.1f} {row['ratio']:>9.2f}x")
    return rows


def deep(depth: int = 200, width: int = 500, batch: int = 64, in_features: int = 784, repeats: int = 5,
         steps: int = 3, activation: str = "ReLU-GPN", clock: str = "wall", print_fn: Callable[[str], None] = print) -> list[dict[str, float]]:
    """Training steps (forward, backward, SGD with momentum 0.5) of the network of Section 3.2
    of Lu et al.: ``in_features -> width``, ``depth`` row-normalised square layers (Eq. (55)),
    ``width -> 10``, softmax cross-entropy, batch ``batch``.

    Timed in the same run, taking turns: the reference (``nn.Linear`` with the
    :class:`gmp.models.deep.RowNormalized` parametrization and ``torch.optim.SGD``'s default
    per-tensor loop), the fused layers (:class:`gmp.models.deep.RowNormalizedLinear`) with the
    same optimiser, and the fused layers with ``foreach`` SGD (one multi-tensor update; what
    :mod:`gmp.experiments.lu_real` trains with). Each time is the minimum over ``repeats``
    of the mean of ``steps`` steps. GFLOP/s counts the square layers' ``6 * batch * width^2``
    FLOPs per step (forward 2, backward 4); three bare ``batch x width`` by ``width x width``
    products per layer, timed beside them, are the ceiling of that rate. ``clock`` as in :func:`run`.
    """
    from gmp.models.deep import deep_mlp

    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    now = CLOCKS[clock]
    torch.manual_seed(0)
    x, y = torch.randn(batch, in_features), torch.randint(0, 10, (batch,))

    def network(fused: bool) -> nn.Module:
        return deep_mlp(width, depth, activation, weights="row_normalized", in_features=in_features,
                        out_features=10, generator=torch.Generator().manual_seed(0), fused=fused)

    ref, fused = network(False), network(True)
    setups = {"reference: parametrize + SGD": (ref, torch.optim.SGD(ref.parameters(), lr=1e-4, momentum=0.5)),
              "fused layer + SGD": (fused, torch.optim.SGD(fused.parameters(), lr=1e-4, momentum=0.5)),
              "fused layer + foreach SGD": (fused, torch.optim.SGD(fused.parameters(), lr=1e-4, momentum=0.5,
                                                                   foreach=True))}
    a, w = torch.randn(batch, width), torch.randn(width, width)
    flops = 6 * batch * width ** 2 * depth
    best = dict.fromkeys([*setups, "bare product"], float("inf"))
    for round_ in range(repeats + 1):  # round 0 warms up
        for name, (model, opt) in setups.items():
            start = now()
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            if round_:
                best[name] = min(best[name], (now() - start) / steps)
        start = now()
        for _ in range(3 * depth * steps):
            a @ w
        if round_:
            best["bare product"] = min(best["bare product"], (now() - start) / steps)
    print_fn(f"training step of depth {depth}, width {width}, batch {batch}, {activation}, float32, cpu, torch "
             f"{torch.__version__}, {torch.get_num_threads()} threads; {clock} clock, min over {repeats} repeats of {steps} steps")
    print_fn(f"{'what':<30} {'ms/step':>9} {'ms/layer-step':>14} {'GFLOP/s':>8} {'speed-up':>9}")
    rows = []
    for name, seconds in best.items():
        row = {"what": name, "ms_per_step": 1e3 * seconds, "ms_per_layer_step": 1e3 * seconds / depth,
               "gflops": flops / seconds / 1e9, "speedup": best["reference: parametrize + SGD"] / seconds}
        rows.append(row)
        print_fn(f"{name:<30} {row['ms_per_step']:>9.1f} {row['ms_per_layer_step']:>14.2f} {row['gflops']:>8.1f} "
                 f"{row['speedup']:>8.2f}x")
    return rows


def stacked(depth: int = 200, width: int = 500, batch: int = 64, in_features: int = 784, stacks: Sequence[int] = (1, 4),
            steps: int = 5, device: str = "cpu", print_fn: Callable[[str], None] = print) -> list[dict[str, float]]:
    """Training steps of the depth-``depth`` networks of ``lu_real`` (the first author's protocol)
    one at a time and stacked, measured in one run on ``device``.

    Rows: the one-network trainer (:class:`gmp.experiments.lu_real.training.Training`: ``torch.optim.SGD``
    foreach) and :class:`gmp.experiments.lu_real.stacked.StackedTraining` with each number of networks
    in ``stacks`` (on CUDA with the step captured in a CUDA graph, fused SGD and the stacked
    kernels of :mod:`gmp.models.stacked_ops`, falling back to fewer of these when one fails; the
    row says which ran). Each
    time is the mean of ``steps`` steps after two warm-up steps. GFLOP/s counts the square
    layers' ``6 * batch * width^2`` FLOPs per network-step. On CUDA it also prints the projected
    time of the whole paper run (24 MNIST networks for 50 epochs of 938 steps, and 24 CIFAR-10
    networks for 100 epochs of 782 steps) from the fastest rate per network, evaluation not counted.
    """
    from gmp import config
    from gmp.experiments import lu_real

    base = config.load("lu_real", "paper")
    cfg = config.Config("lu_real", "paper", {**base.as_dict(), "depth": depth, "width": width, "batch_size": batch})
    dev = torch.device(device)
    labels = lu_real.variants(lu_real.ACTIVATIONS)
    count = max(stacks)
    if count > len(labels):
        raise ValueError(f"at most {len(labels)} networks (the six activations, plain and GPN), got {count}")
    networks = [lu_real.build(label, False, in_features, cfg, 0) for label in labels[:count]]
    torch.manual_seed(0)
    x, y = torch.randn(batch, in_features, device=dev), torch.randint(0, 10, (batch,), device=dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    one = lu_real.Training(labels[0], False, in_features, cfg, dev)
    one.model.load_state_dict(networks[0].state_dict())
    for i in range(steps + 2):
        if i == 2:
            sync()
            start = time.perf_counter()
        one.opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(one.model(x), y).backward()
        one.opt.step()
    sync()
    rows = [{"what": "one network (Training, foreach SGD)", "networks": 1,
             "ms_per_network_step": 1e3 * (time.perf_counter() - start) / steps}]
    del one
    modes = ((True, True), (False, True), (False, False)) if dev.type == "cuda" else ((False, True),)
    for n in stacks:
        for graph, kernels in modes:
            try:
                training = lu_real.StackedTraining(labels[:n], in_features, cfg, dev, graph=graph, kernels=kernels,
                                                   networks=networks[:n])
                seconds = training.seconds_per_step(x, y, steps)
            except Exception as err:  # capture or a kernel failed on this machine: say so whole, try the next mode
                print_fn(f"  {n} networks, graph={graph}, kernels={kernels}: {type(err).__name__}: {err}")
                continue
            rows.append({"what": f"StackedTraining ({training.mode})", "networks": n,
                         "ms_per_network_step": 1e3 * seconds / n})
            del training
            break
    flops = 6 * batch * width ** 2 * depth
    first = rows[0]["ms_per_network_step"]
    print_fn(f"training steps of lu_real's network (the author's protocol): depth {depth}, width {width}, batch {batch}, "
             f"float32, TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}, {device}"
             + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else
                f", {torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}")
             + f", torch {torch.__version__}; mean of {steps} steps after 2 warm-up steps")
    print_fn(f"{'what':<56} {'networks':>8} {'ms/network-step':>16} {'GFLOP/s':>8} {'vs one':>7}")
    for row in rows:
        row["gflops"] = flops / row["ms_per_network_step"] / 1e6
        row["speedup"] = first / row["ms_per_network_step"]
        print_fn(f"{row['what']:<56} {row['networks']:>8} {row['ms_per_network_step']:>16.2f} {row['gflops']:>8.1f} "
                 f"{row['speedup']:>6.2f}x")
    if dev.type == "cuda" and depth == 200 and width == 500 and batch == 64:
        best = min(row["ms_per_network_step"] for row in rows) / 1e3
        network_steps = 24 * (50 * 938 + 100 * 782)
        print_fn(f"projected paper run (24 networks x 50 MNIST epochs + 24 x 100 CIFAR-10 epochs, "
                 f"{network_steps:,} network-steps, evaluation not counted) at {1e3 * best:.2f} ms per network-step: "
                 f"{network_steps * best / 3600:.2f} hours; one group of 12 MNIST networks: "
                 f"{12 * 50 * 938 * best / 60:.1f} minutes")
    return rows


_NO_KERNEL = frozenset({"empty", "empty_strided", "empty_like", "lift_fresh", "_local_scalar_dense", "detach",
                        "alias", "_unsafe_view", "set_", "resize_", "_to_copy_meta"})
"""ATen operators that launch no kernel on a GPU (allocation, aliasing, reading a scalar back)."""

STACKED_OPERATORS = frozenset({"stacked_activation_forward", "stacked_activation_backward", "stacked_momentum_update"})
"""The operators of :mod:`gmp.models.stacked_ops`: one Triton kernel each on CUDA (whatever the
torch reference they run on the CPU launches), so each counts as one kernel."""


class _KernelCounter(TorchDispatchMode):
    """Counts the operators a computation runs at the dispatcher (after autograd and composite
    operators have been decomposed, as ``torch.utils.flop_counter`` counts), except views and
    :data:`_NO_KERNEL`: each is one kernel on a GPU (an operator of :data:`STACKED_OPERATORS`
    runs one Triton kernel there; what its CPU reference runs inside it is not seen). Its bytes
    are those of its distinct tensor inputs (read; an ``out=`` argument is not read) and of its
    outputs and the arguments it writes in place (written), each once;
    ``square_bytes`` the part of them in tensors whose last two sizes are equal and at least 32
    (a square layer's ``V``, its momentum buffer or the product buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels, self.bytes, self.square_bytes = 0, 0, 0
        self.names: dict[str, int] = {}

    def _add_bytes(self, tensors: Sequence[torch.Tensor]) -> None:
        self.bytes += sum(t.nbytes for t in tensors)
        self.square_bytes += sum(t.nbytes for t in tensors if t.dim() >= 2 and t.shape[-1] == t.shape[-2] >= 32)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        returns = func._schema.returns
        view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if not view and name not in _NO_KERNEL:
            self.kernels += 1
            self.names[name] = self.names.get(name, 0) + 1
            read, written = [], [out]
            for i, argument in enumerate(func._schema.arguments):
                value = args[i] if i < len(args) else (kwargs or {}).get(argument.name)
                if not getattr(argument, "is_out", False):
                    read.append(value)
                if argument.alias_info is not None and argument.alias_info.is_write:
                    written.append(value)
            for tree in (read, written):
                tensors = {(t.data_ptr(), t.nbytes): t for t in torch.utils._pytree.tree_leaves(tree)
                           if isinstance(t, torch.Tensor)}
                self._add_bytes(list(tensors.values()))
        return out


def count_stacked(labels: Sequence[str], batchnorm: bool = False, depths: tuple[int, int] = (2, 6), width: int = 500,
                  batch: int = 64, in_features: int = 784, kernels: bool = True) -> dict[str, Any]:
    """Kernels and bytes of one training step of ``lu_real``'s networks ``labels`` (with BN when
    ``batchnorm``) stacked by :class:`gmp.experiments.lu_real.stacked.StackedTraining`, counted on
    the CPU by :class:`_KernelCounter`, per square layer: the difference between the counts at the
    two ``depths``, divided by their difference (the bottom and top layers, the loss and the
    bookkeeping cancel out). ``kernels``: the stacked operators (one kernel each on CUDA), else
    their torch reference. Float32; the step after two warm-up steps."""
    from gmp import config
    from gmp.experiments import lu_real

    base = config.load("lu_real", "paper").as_dict()
    names = [f"{label}-BN" if batchnorm else label for label in labels]
    torch.manual_seed(0)
    x, y = torch.randn(batch, in_features), torch.randint(0, 10, (batch,))
    counts = []
    for depth in depths:
        cfg = config.Config("lu_real", "paper", {**base, "depth": depth, "width": width, "batch_size": batch})
        training = lu_real.StackedTraining(names, in_features, cfg, "cpu", graph=False, kernels=kernels)
        training.seconds_per_step(x, y, steps=1)  # the bookkeeping set up, two warm-up steps
        with _KernelCounter() as counter:
            training._full_step(x, y)
        counts.append(counter)
    layers = depths[1] - depths[0]
    return {"networks": len(names), "batchnorm": batchnorm, "kernels": kernels,
            "kernels_per_layer_step": (counts[1].kernels - counts[0].kernels) / layers,
            "bytes_per_layer_step": (counts[1].bytes - counts[0].bytes) / layers,
            "square_bytes_per_layer_step": (counts[1].square_bytes - counts[0].square_bytes) / layers,
            "kernels_per_step_at_depth": {d: c.kernels for d, c in zip(depths, counts)},
            "operators_per_layer_step": {k: (counts[1].names.get(k, 0) - counts[0].names.get(k, 0)) / layers
                                         for k in sorted(set(counts[1].names) | set(counts[0].names))
                                         if counts[1].names.get(k, 0) != counts[0].names.get(k, 0)}}


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


def count(print_fn: Callable[[str], None] = print, labels: Sequence[str] | None = None, as_json: bool = False,
          **kwargs: Any) -> dict[str, Any]:
    """``python -m gmp.bench --stacked --count [--json]``: :func:`count_stacked` for a group of
    ``lu_real``'s networks (default the twelve: six activations, plain and GPN) without and with
    BN, in each mode the GPU command can run (the stacked kernels, or their torch reference when
    Triton fails), and for one network alone; with the float32 floor of a step
    (:func:`floor_per_network_step`). ``as_json`` prints one JSON object instead of a table.
    ``kwargs`` go to :func:`count_stacked` (a smaller width, batch or depths for a quick run)."""
    import json

    from gmp.experiments import lu_real

    labels = list(labels or lu_real.variants(lu_real.ACTIVATIONS))
    width, batch = kwargs.get("width", 500), kwargs.get("batch", 64)
    rows = []
    for batchnorm in (False, True):
        for kernels in (True, False):
            rows.append({"mode": "stacked kernels" if kernels else "torch reference",
                         **count_stacked(labels, batchnorm, kernels=kernels, **kwargs)})
        rows.append({"mode": "stacked kernels, one network", **count_stacked(labels[:1], batchnorm, **kwargs)})
    for row in rows:
        row["bytes_per_layer_network_step"] = row["bytes_per_layer_step"] / row["networks"]
    floor = floor_per_network_step(width=width, batch=batch)
    result = {"torch": torch.__version__, "width": width, "batch": batch, "dtype": "float32", "rows": rows,
              "floor_per_network_step": floor}
    if as_json:
        print_fn(json.dumps(result, indent=1))
        return result
    print_fn(f"one training step of stacked lu_real networks (width {width}, batch {batch}, float32), counted on the "
             f"CPU per square layer: each operator one kernel (a stacked operator one Triton kernel on CUDA), views "
             f"and allocations left out; torch {torch.__version__}")
    print_fn(f"{'':<44} {'kernels/layer-step':>18} {'MB/layer/network-step':>22} {'of which in n x n tensors':>26}")
    for row in rows:
        what = f"{row['networks']} networks, {'with' if row['batchnorm'] else 'without'} BN, {row['mode']}"
        print_fn(f"{what:<44} {row['kernels_per_layer_step']:>18.0f} {row['bytes_per_layer_network_step'] / 1e6:>22.2f} "
                 f"{row['square_bytes_per_layer_step'] / row['networks'] / 1e6:>26.2f}")
    for row in rows:
        print_fn(f"  operators per layer-step, {row['networks']} networks, {'with' if row['batchnorm'] else 'without'} "
                 f"BN, {row['mode']}: " + ", ".join(f"{k} {v:g}" for k, v in row["operators_per_layer_step"].items()))
    print_fn(f"float32 floor of one network's step at depth 200 (H200: 67 TFLOP/s, 4.3 TB/s): {floor['gflop']:.1f} "
             f"GFLOP in {1e3 * floor['flop_seconds']:.2f} ms, {floor['gbytes']:.2f} GB in "
             f"{1e3 * floor['byte_seconds']:.2f} ms: {1e3 * floor['seconds']:.2f} ms per network-step")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 512, 4096])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts of the GmPLinear benchmark (torch.set_num_threads)")
    parser.add_argument("--minibatch", action="store_true",
                        help="instead: mini-batch updates per second of the SBSNN figure network (Part III)")
    parser.add_argument("--deep", action="store_true",
                        help="instead: training steps of Lu et al.'s depth-200 network, before and after the fused layer")
    parser.add_argument("--depth", type=int, default=200, help="with --deep: square layers (fewer for a quick run)")
    parser.add_argument("--stacks", type=int, nargs="+", default=None,
                        help="with --minibatch (default 1 2 4) or --stacked (default 1 4 12): how many networks train at once")
    parser.add_argument("--stacked", action="store_true",
                        help="instead: lu_real's depth-200 networks one at a time and stacked, on --device")
    parser.add_argument("--steps", type=int, default=5, help="with --stacked: timed steps")
    parser.add_argument("--count", action="store_true",
                        help="with --stacked: count kernels and bytes per layer-step on the CPU instead of timing")
    parser.add_argument("--json", action="store_true", help="with --stacked --count: print one JSON object")
    args = parser.parse_args(argv)
    if args.minibatch:
        minibatch(args.stacks or [1, 2, 4])
    elif args.stacked and args.count:
        count(as_json=args.json)
    elif args.stacked:
        stacked(args.depth, stacks=args.stacks or [1, 4, 12], steps=args.steps, device=args.device)
    elif args.deep:
        deep(args.depth, repeats=args.repeats, clock=args.clock)
    else:
        run(args.width, args.batches, args.repeats, args.device, args.clock, args.threads)


if __name__ == "__main__":
    main()
