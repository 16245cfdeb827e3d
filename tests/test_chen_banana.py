"""The experiment of the chapter chen_banana (Fig. 3 of Chen & Ge): saving the trained networks."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import gmp
from gmp.data.toy import BANANA_RELPATH
from gmp.experiments import chen_banana
from gmp.train import accuracy, predict

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _shared_data(monkeypatch):
    if not os.environ.get("GMP_DATA"):
        monkeypatch.setenv("GMP_DATA", str(SHARED))


def _have_banana():
    root = Path(os.environ.get("GMP_DATA") or SHARED)
    return (root / BANANA_RELPATH).is_file()


@pytest.mark.skipif(not _have_banana(), reason="banana data not under GMP_DATA")
def test_state_arrays_round_trip_rebuilds_the_trained_networks(tmp_path):
    cfg = gmp.load_config("chen_banana", "smoke")
    results = {m: chen_banana.train_one(cfg, m, cfg.official_lr[m], "paper", seed=0) for m in cfg.methods}
    arrays = chen_banana.state_arrays(results)
    path = tmp_path / "fig3.npz"
    np.savez_compressed(path, **arrays)  # as the cache stores them
    with np.load(path, allow_pickle=False) as stored:
        networks = chen_banana.networks_from_arrays(cfg, dict(stored))
    assert set(networks) == set(cfg.methods)
    data = chen_banana.banana_data(cfg, 0, "paper")
    grid = torch.linspace(-3, 3, 41, dtype=torch.float64)
    points = torch.cartesian_prod(grid, grid)
    for method, result in results.items():
        expected = predict(chen_banana.rebuild(cfg, result), points)
        assert torch.equal(predict(networks[method], points), expected), method
        # the trained (best-epoch) network, not a fresh one: it scores the run's test accuracy
        logits = predict(networks[method], data.x_test)
        assert accuracy(logits, data.y_test) == result["test_accuracy"], method
    assert chen_banana.networks_from_arrays(cfg, {"official_GmP": np.zeros((2, 10, 2))}) == {}
