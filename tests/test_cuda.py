"""Tests that need a CUDA GPU (marker ``cuda``; skipped without one). ``python -m gmp.gpu`` runs
them on the GPU machine; the same code paths are tested on the CPU elsewhere."""

import numpy as np
import pytest
import torch

import gmp
from gmp.config import Config
from gmp.experiments import lu_real

pytestmark = pytest.mark.cuda


def _cfg(**changes):
    values = {**gmp.load_config("lu_real", "smoke").as_dict(), "width": 64, "depth": 20, "batch_size": 16,
              "ratio_every": 2, "epochs": {"digits": 2, "mnist1d": 2}, "data": {"mnist": "digits", "cifar10": "digits"},
              "activations": ["ReLU", "SELU"], "lr": 1e-2, **changes}
    return Config("lu_real", "smoke", values)


def _data(rows=100, features=5):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=g)
    return (x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()), (x[:30] + 0.1, (x[:30, 0] > 0).long())


def test_the_captured_step_trains_as_the_eager_step_does_on_the_gpu():
    cfg, (train, test) = _cfg(), _data()
    labels = ["ReLU", "ReLU-GPN", "SELU-BN", "SELU-GPN-BN"]
    graph = lu_real.StackedTraining(labels, 5, cfg, "cuda", graph=True)
    eager = lu_real.StackedTraining(labels, 5, cfg, "cuda", graph=False)
    for epoch in (1, 2):
        a, b = graph.run_epoch(train, test, epoch == 2), eager.run_epoch(train, test, epoch == 2)
        for x, y in zip(a, b):
            assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-4)
            assert x["steps"] == y["steps"] and x["ratio_steps"] == y["ratio_steps"]
            np.testing.assert_allclose(x["ratio"], y["ratio"], rtol=1e-3)
            assert x["device"].startswith("cuda (") and x["precision"] == "float32, TF32 off"
    assert graph.mode == "CUDA graph, stacked kernels" and eager.mode == "eager, stacked kernels"


def _one_step(labels, cfg, device, dtype=torch.float32, kernels=True):
    g = torch.Generator().manual_seed(1)
    xb, yb = torch.randn(16, 5, generator=g).to(dtype), torch.randint(0, 3, (16,), generator=g)
    training = lu_real.StackedTraining(labels, 5, cfg, device, graph=False, kernels=kernels, dtype=dtype)
    training.allocate(1)
    loss = training._train_step(xb.to(device), yb.to(device))[0]
    return loss.double().cpu(), [p.detach().double().cpu() for p in training.model.parameters()]


def test_the_stacked_kernels_err_from_float64_as_the_torch_reference_does_on_the_gpu():
    """One float32 step of four networks (with and without BN) by the Triton kernels on the GPU is as close
    to the float64 step as the torch reference's float32 step on the GPU is: at depth 20 with BN, float32
    rounding alone moves a parameter by about 1e-3 of itself (as on the CPU), so the kernels are held to the
    reference's own error, not to an absolute tolerance."""
    cfg = _cfg()
    labels = ["ReLU", "ELU-GPN", "SELU-BN", "GELU-GPN-BN"]
    exact_loss, exact = _one_step(labels, cfg, "cpu", torch.float64)
    errors = {}
    for kernels in (True, False):
        loss, params = _one_step(labels, cfg, "cuda", kernels=kernels)
        assert float(((loss - exact_loss).abs() / exact_loss).max()) < 1e-5
        errors[kernels] = max(float((p - q).abs().max()) for p, q in zip(params, exact))
    assert 0 < errors[True] <= 4 * errors[False], errors


def test_the_gpu_gives_the_cpus_numbers_within_float32_rounding():
    """An epoch on the GPU ends as far from the float64 epoch on the CPU as the float32 epoch on the CPU does
    (within four times as far): float32 rounding, which BN at depth 20 amplifies to about 1e-3 of the loss."""
    cfg, (train, test) = _cfg(), _data()
    labels = ["Tanh", "SELU-GPN-BN"]
    gpu = lu_real.StackedTraining(labels, 5, cfg, "cuda").run_epoch(train, test, False)
    cpu = lu_real.StackedTraining(labels, 5, cfg, "cpu").run_epoch(train, test, False)
    exact = lu_real.StackedTraining(labels, 5, cfg, "cpu", dtype=torch.float64).run_epoch(
        (train[0].double(), train[1]), (test[0].double(), test[1]), False)
    for x, y, z in zip(gpu, cpu, exact):
        assert abs(x["train_loss"] - z["train_loss"]) <= 4 * abs(y["train_loss"] - z["train_loss"]) + 1e-6 * z["train_loss"]


def test_a_gpu_network_resumes_its_checkpoint(tmp_path):
    cfg, (train, test) = _cfg(), _data()
    whole = lu_real.Training("Tanh", True, 5, cfg, "cuda")
    whole.run_epoch(train, test, False)
    whole.save(tmp_path / "net.pt")
    resumed = lu_real.Training("Tanh", True, 5, cfg, "cuda")
    resumed.resume(tmp_path / "net.pt")
    a, b = whole.run_epoch(train, test, False), resumed.run_epoch(train, test, False)
    assert a["train_loss"] == b["train_loss"] and a["test_acc"] == b["test_acc"]


def test_a_diverged_network_changes_no_other_on_the_gpu():
    cfg, (train, test) = _cfg(), _data()
    labels = ["ReLU", "SELU-GPN"]
    clean, broken = (lu_real.StackedTraining(labels, 5, cfg, "cuda") for _ in range(2))
    with torch.no_grad():
        broken.model.V[3][1].fill_(float("nan"))
    a, b = clean.run_epoch(train, test, False), broken.run_epoch(train, test, False)
    assert a[0]["train_loss"] == b[0]["train_loss"] and b[1]["diverged"] and not a[1]["diverged"]


def test_resolving_a_cuda_device_turns_tf32_off(monkeypatch):
    monkeypatch.delenv("GMP_TF32", raising=False)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        assert gmp.resolve_device("cuda").type == "cuda"
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        from gmp.runs import describe_device

        assert describe_device(torch.device("cuda")).endswith("), float32, TF32 off")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True


def test_the_captured_stacked_queue_trains_each_fit_as_it_trains_alone_on_the_gpu(monkeypatch):
    """gmp.minibatch_queue's step, captured as a CUDA graph (compiled and not), gives each fit the curves that
    ``fit_stack`` gives it alone on the GPU, to float32 rounding; the capture works (no eager fallback)."""
    from gmp.minibatch import fit_stack, layers
    from gmp.minibatch_queue import FitJob, fit_jobs

    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    grid = torch.linspace(-1, 1, 16)
    coords = torch.stack(torch.meshgrid(grid, grid, indexing="xy"), -1).reshape(-1, 2)
    pixels = 0.5 + 0.4 * torch.sin(3 * coords[:, :1]) * torch.cos(2 * coords[:, 1:])
    features = torch.cat([torch.sin((k + 1) * coords) for k in range(6)], 1)
    sizes = [2, 12, 12, 12, 1]
    calls = [dict(spec_layers=layers({"model": "sbsnn", "sizes": sizes, "activation": "sin", "first_layer": "siren"}),
                  seeds=[1, 2], inputs=coords, targets=pixels, epochs=3, lr=2e-3,
                  plateau={"factor": 0.5, "patience": 1, "rule": "keras"}),
             dict(spec_layers=layers({"model": "sbsnn", "sizes": sizes, "activation": "gpn_relu",
                                      "first_layer": "encoder"}), seeds=[3], inputs=features, targets=pixels, epochs=2,
                  lr=1e-3)]
    alone = [fit_stack(**call, device="cuda") for call in calls]
    for mode in ("CUDA graph, compiled", "CUDA graph"):
        notes = []
        stacked = fit_jobs([FitJob.of_call(**call) for call in calls], "cuda", mode, notes=notes)
        assert notes == [f"mode: {mode}"]
        for fits, own in zip(stacked, alone):
            for a, b in zip(fits, own):
                assert len(a.train_mse) == len(b.train_mse)
                np.testing.assert_allclose(a.train_mse, b.train_mse, rtol=1e-4)
                np.testing.assert_allclose(a.epoch_loss, b.epoch_loss, rtol=1e-4)


def test_a_held_out_render_runs_on_the_models_device():
    # Before: the grid stayed on the CPU and the first GPU lease's smoke run of sbsnn_author failed in torch.bmm.
    from gmp.data.images import coordinate_grid
    from gmp.experiments.sbsnn_author import runs

    cfg = gmp.load_config("sbsnn_author", "smoke")
    model = torch.nn.Linear(2, 1)
    grid = coordinate_grid(cfg.render_side, indexing="xy")
    on_cpu = np.array(runs.render_crop(model, grid, cfg))
    np.testing.assert_allclose(np.array(runs.render_crop(model.cuda(), grid, cfg)), on_cpu, atol=1e-4)
