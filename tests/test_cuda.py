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
    assert graph.mode == "CUDA graph" and eager.mode == "eager"


def test_the_gpu_gives_the_cpus_numbers_within_float32_rounding():
    cfg, (train, test) = _cfg(), _data()
    labels = ["Tanh", "SELU-GPN-BN"]
    gpu = lu_real.StackedTraining(labels, 5, cfg, "cuda").run_epoch(train, test, False)
    cpu = lu_real.StackedTraining(labels, 5, cfg, "cpu").run_epoch(train, test, False)
    for x, y in zip(gpu, cpu):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-3)


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

        assert describe_device(torch.device("cuda")).endswith("float32 with TF32 off")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
