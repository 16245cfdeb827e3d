"""The stacked layer's operators (gmp.models.stacked_ops): their Triton kernels, run on the CPU in
Triton's interpreter, equal the torch reference; the reference equals autograd and the
one-network trainer; each network computes its own activation only."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gmp
from gmp.config import Config
from gmp.experiments import lu_real
from gmp.models import stacked_ops

ROOT = Path(__file__).resolve().parents[1]


def _inputs(batch=70, width=40, seed=0, dtype=torch.float64):
    """Twelve networks (every kind, plain and GPN), a batch and width that are not multiples of the
    kernels' blocks, BN on for some; one network's input NaN."""
    g = torch.Generator().manual_seed(seed)
    size = 12
    kind = torch.tensor([k % 6 for k in range(size)], dtype=torch.int32)
    a = 1 + 0.5 * torch.rand(size, generator=g, dtype=dtype) * (torch.arange(size) >= 6)
    b = 0.3 * torch.randn(size, generator=g, dtype=dtype) * (torch.arange(size) >= 6)
    u = 2 * torch.randn(size, batch, width, generator=g, dtype=dtype)
    u[3, 5 % batch, 7 % width] = float("nan")
    s = 0.5 + torch.rand(size, 1, width, generator=g, dtype=dtype)
    weight = 1 + 0.2 * torch.randn(size, width, generator=g, dtype=dtype)
    bias = 0.2 * torch.randn(size, width, generator=g, dtype=dtype)
    mean = 0.1 * torch.randn(size, width, generator=g, dtype=dtype)
    var = 1 + torch.rand(size, width, generator=g, dtype=dtype)
    on = torch.tensor([i % 3 != 0 for i in range(size)], dtype=torch.int32)
    dy = torch.randn(size, batch, width, generator=g, dtype=dtype)
    return dict(u=u, s=s, kind=kind, a=a, b=b, weight=weight, bias=bias, mean=mean, var=var, on=on, dy=dy)


def _interpreted_activations(kernels, dtype, tol) -> dict[str, float]:
    """The activation kernels against the reference in ``dtype`` (forward with and without BN, in
    training and evaluation; backward), to ``tol``; their largest differences."""
    report = {}
    for use_bn in (False, True):
        for training in (True, False):
            t = {k: v.to(dtype) if v.is_floating_point() else v for k, v in _inputs(seed=use_bn + 2 * training).items()}
            got_stats = [t["mean"].clone(), t["var"].clone()]
            want_stats = [t["mean"].clone(), t["var"].clone()]
            args = (t["u"], t["s"], t["kind"], t["a"], t["b"], t["weight"], t["bias"])
            got = kernels.activation_forward(*args, *got_stats, t["on"], use_bn, training, 0.1, 1e-5)
            want = stacked_ops.activation_forward(*args, *want_stats, t["on"], use_bn, training, 0.1, 1e-5,
                                                  kernels=False)
            name = f"{dtype} forward bn={use_bn} training={training}"
            for g_, w_ in zip([*got, *got_stats], [*want, *want_stats]):
                torch.testing.assert_close(g_, w_, rtol=tol, atol=tol * 0.1, equal_nan=True, msg=name)
            assert torch.isnan(got[0][3]).any() and not torch.isnan(got[0][torch.arange(12) != 3]).any(), name
            report[name] = float((got[0] - want[0]).nan_to_num().abs().max())
            if training:
                back = (t["dy"], t["u"], t["s"], t["kind"], t["a"], t["weight"], t["bias"], want[1], want[2], t["on"],
                        use_bn)
                got_b = kernels.activation_backward(*back)
                want_b = stacked_ops.activation_backward(*back, kernels=False)
                for g_, w_ in zip(got_b, want_b):
                    torch.testing.assert_close(g_, w_, rtol=tol, atol=tol * 0.1, equal_nan=True,
                                               msg=f"backward {name}")
                report[f"{dtype} backward bn={use_bn}"] = float((got_b[0] - want_b[0]).nan_to_num().abs().max())
    return report


def _interpreted_check() -> None:
    """Run in a process with ``TRITON_INTERPRET=1`` (below): every kernel against the reference, in
    float64 (the formulas, to 1e-10) and float32 (the IEEE-rounded branch, to 2e-4: sums over the batch in another order), printing the largest
    differences as JSON."""
    from gmp.models import _stacked_triton as kernels

    report = {}
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-4)):
        report.update(_interpreted_activations(kernels, dtype, tol))
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        g = torch.Generator().manual_seed(5)
        V, P, buf = (torch.randn(3, 40, 40, generator=g, dtype=dtype) for _ in range(3))
        ds, s = torch.randn(3, 1, 40, generator=g, dtype=dtype), V.norm(dim=-1).reciprocal().unsqueeze(-2)
        states = [[t.clone() for t in (V, buf, s, torch.zeros(3, 40, dtype=dtype), torch.zeros(3, 40, dtype=dtype))]
                  for _ in range(2)]
        kernels.momentum_update_(P, states[0][0], states[0][1], ds, *states[0][2:], 0.05, 0.9)
        stacked_ops.momentum_update_(P, states[1][0], states[1][1], ds, *states[1][2:], 0.05, 0.9, kernels=False)
        for g_, w_ in zip(*states):
            torch.testing.assert_close(g_, w_, rtol=tol, atol=tol * 1e-2, msg=f"{dtype} update")
        report[f"{dtype} update"] = float((states[0][0] - states[1][0]).abs().max())
    print(json.dumps(report))


def test_the_triton_kernels_equal_the_torch_reference_in_trytons_interpreter():
    """Each Triton kernel (forward with and without BN, in training and evaluation; backward; the
    fused update), run on the CPU by Triton's interpreter, equals the torch reference: to 1e-10 in
    float64, to float32 rounding in float32; a NaN input stays within its own network."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", "import tests.test_stacked_ops as t; t._interpreted_check()"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(report) == 14 and all(v < (1e-10 if "float64" in k else 1e-4) for k, v in report.items()), report


def test_the_triton_kernels_compile_for_an_h200_on_the_cpu():
    """Triton's whole compilation (to PTX and the cubin of compute capability 9.0) of every kernel in
    float32, with and without BN, needs no GPU: a kernel the device's compiler would refuse (a plain
    Python global in a kernel, which the interpreter accepts) fails here, before a lease."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gmp.models import _stacked_triton as kernels

    def signature(fn, ints=(), floats=(), i32_pointers=()):
        names = fn.arg_names
        return {n: ("constexpr" if n.isupper() else "i32" if n in ints else "fp32" if n in floats
                    else "*i32" if n in i32_pointers else "*fp32") for n in names}

    jobs = []
    for use_bn in (False, True):
        for training in (False, True):
            jobs.append((kernels._forward_kernel, signature(kernels._forward_kernel, ("batch", "width"),
                         ("momentum", "eps"), ("kind_ptr", "on_ptr")),
                         {"USE_BN": use_bn, "TRAINING": training, "BB": kernels.ROWS, "BC": kernels.COLUMNS}))
        jobs.append((kernels._backward_kernel, signature(kernels._backward_kernel, ("batch", "width"), (),
                     ("kind_ptr", "on_ptr")), {"USE_BN": use_bn, "BB": kernels.ROWS, "BC": kernels.COLUMNS}))
    jobs.append((kernels._update_kernel, signature(kernels._update_kernel, ("width",), ("lr", "momentum")),
                 {"BLOCK": 512}))
    for fn, sig, constants in jobs:
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constants), target=GPUTarget("cuda", 90, 32))
        ptx = compiled.asm["ptx"]
        assert compiled.asm["cubin"] and "div.full" not in ptx and "sqrt.approx" not in ptx, fn.__name__


@pytest.mark.parametrize("use_bn", [False, True])
def test_the_reference_backward_is_autograds(use_bn):
    """The operators' backward (``dE/du``, ``dE/ds``, BN's parameter gradients) equals autograd's
    through the reference forward, for every kind, in training mode."""
    t = _inputs(batch=9, width=5, seed=7)
    t["u"][3, 5, 2] = 0.5  # no NaN: autograd's gradients would be NaN too
    u, s, weight, bias = (t[k].clone().requires_grad_() for k in ("u", "s", "weight", "bias"))
    y, mean, rstd = stacked_ops.activation_forward(u, s, t["kind"], t["a"], t["b"], weight, bias, t["mean"].clone(),
                                                   t["var"].clone(), t["on"], use_bn, True, 0.1, 1e-5, kernels=False)
    want = torch.autograd.grad((y * t["dy"]).sum(), (u, s, weight, bias), allow_unused=True)
    got = stacked_ops.activation_backward(t["dy"], u.detach(), s.detach(), t["kind"], t["a"], weight.detach(),
                                          bias.detach(), mean, rstd, t["on"], use_bn, kernels=False)
    for g_, w_, name in zip(got, want, ("du", "ds", "dweight", "dbias")):
        if use_bn or name in ("du", "ds"):
            torch.testing.assert_close(g_, w_, rtol=1e-10, atol=1e-12, msg=name)


def test_each_network_computes_its_own_activation_only(monkeypatch):
    """The reference applies each kind to the networks of that kind alone: with six kinds over twelve
    networks, each activation sees two networks' values, never all twelve under a mask."""
    seen = []
    real = stacked_ops.phi_reference
    monkeypatch.setattr(stacked_ops, "phi_reference", lambda kind, z: seen.append((kind, z.shape[0])) or real(kind, z))
    t = _inputs()
    stacked_ops.activation_forward(t["u"], t["s"], t["kind"], t["a"], t["b"], t["weight"], t["bias"], t["mean"],
                                   t["var"], t["on"], False, True, 0.1, 1e-5, kernels=False)
    assert sorted(seen) == [(k, 2) for k in range(6)]


def _cfg(**changes):
    values = {**gmp.load_config("lu_real", "smoke").as_dict(), "width": 12, "depth": 4, "batch_size": 16,
              "ratio_every": 1, "lr": 0.05, "momentum": 0.9, **changes}
    return Config("lu_real", "smoke", values)


@pytest.mark.parametrize("batchnorm", [False, True])
def test_twenty_steps_of_twelve_stacked_networks_equal_the_one_network_trainer_in_float64(batchnorm):
    """Twelve networks (six activations, plain and GPN; all with BN or none) trained 20 steps as one
    stack at the paper's rate and momentum give each network's losses of the one-network trainer
    (``torch.optim.SGD`` with momentum on autograd's gradients, ``nn.BatchNorm1d``) to 1e-12 in
    float64, and its weights' changes to 1e-9."""
    cfg = _cfg(lr=1e-4, momentum=0.5)
    labels = [f"{label}-BN" if batchnorm else label for label in lu_real.variants(lu_real.ACTIVATIONS)]
    stack = lu_real.StackedTraining(labels, 5, cfg, dtype=torch.float64)
    stack.allocate(20)
    singles = [lu_real.Training(label.removesuffix("-BN"), batchnorm, 5, cfg) for label in labels]
    for one in singles:
        one.model.double()
    initial = [[layer.V.detach().clone() for layer in one.model.layers] for one in singles]
    g = torch.Generator().manual_seed(4)
    for step in range(20):
        xb, yb = torch.randn(16, 5, generator=g, dtype=torch.float64), torch.randint(0, 10, (16,), generator=g)
        losses = stack._train_step(xb, yb)[0]
        for i, one in enumerate(singles):
            one.opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(one.model(xb), yb)
            loss.backward()
            one.opt.step()
            np.testing.assert_allclose(float(losses[i]), loss.item(), rtol=1e-12, err_msg=f"{labels[i]} step {step}")
    for i, one in enumerate(singles):
        for l, layer in enumerate(one.model.layers):
            change = layer.V.detach() - initial[i][l]
            assert change.abs().max() > 1e-6
            torch.testing.assert_close(stack.model.V[l][i] - initial[i][l], change, rtol=1e-9, atol=1e-9 * change.abs().max())
