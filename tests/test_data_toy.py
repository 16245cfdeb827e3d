"""Tests of the Levy and banana tasks (gmp.data.toy)."""

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from gmp.data import banana, levy, levy_function
from gmp.data.toy import BANANA_RELPATH

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _shared_data(monkeypatch):
    if not os.environ.get("GMP_DATA"):
        monkeypatch.setenv("GMP_DATA", str(SHARED))


def _have_banana():
    root = Path(os.environ.get("GMP_DATA") or SHARED)
    return (root / BANANA_RELPATH).is_file()


def test_levy_function_known_values():
    assert levy_function(np.array(1.0)) == pytest.approx(0.0, abs=1e-15)
    assert levy_function(torch.tensor(1.0, dtype=torch.float64)).item() == pytest.approx(0.0, abs=1e-15)
    # x = 5: w = 2, sin^2(2 pi) = 0, (w - 1)^2 (1 + sin^2(4 pi)) = 1
    assert levy_function(np.array(5.0)) == pytest.approx(1.0)
    # x = -1: w = 1/2, sin^2(pi/2) = 1, (1/4)(1 + sin^2(pi)) = 1/4
    assert levy_function(np.array(-1.0)) == pytest.approx(1.25)
    grid = np.linspace(-10, 10, 20001)
    assert grid[np.argmin(levy_function(grid))] == pytest.approx(1.0)


def test_levy_task():
    data = levy(seed=3)
    assert data.x_train.shape == (50, 1) and data.y_train.shape == (50, 1)
    assert data.x_test.shape == (201, 1) and data.x_train.dtype == torch.float64
    assert data.x_test[0, 0].item() == -10.0 and data.x_test[-1, 0].item() == 10.0
    assert torch.allclose(data.x_test[1:] - data.x_test[:-1], torch.full((200, 1), 0.1, dtype=torch.float64))
    assert torch.allclose(data.y_test, levy_function(data.x_test))
    assert data.x_train.abs().max() <= 10
    residual = data.y_train - levy_function(data.x_train)
    assert 0.05 < residual.std().item() < 0.2
    assert torch.equal(levy(seed=3).x_train, data.x_train)
    assert not torch.equal(levy(seed=4).x_train, data.x_train)
    noiseless = levy(seed=3, noise=0.0)
    assert torch.allclose(noiseless.y_train, levy_function(noiseless.x_train))


def test_levy_seed_zero_is_the_official_draw():
    # The official notebook: np.random.seed(0), then 50 uniforms on [-10, 10); np.random.seed(0)
    # makes 0.5488135039273248 and 0.7151893663724195 its first two uniforms on [0, 1).
    x = levy(seed=0).x_train[:, 0]
    assert x[0].item() == pytest.approx(-10 + 20 * 0.5488135039273248, abs=1e-12)
    assert x[1].item() == pytest.approx(-10 + 20 * 0.7151893663724195, abs=1e-12)


def test_levy_earlier_draw_is_default_rng_and_differs_from_the_notebook_draw():
    # NumPy's default_rng(0) makes 0.6369616873214543 and 0.2697867137638703 its first two uniforms on [0, 1):
    # the book's draw until 2026-11-26, which the check arm of chen_levy_arms reruns.
    earlier = levy(seed=0, draw="default_rng")
    assert earlier.x_train[0, 0].item() == pytest.approx(-10 + 20 * 0.6369616873214543, abs=1e-12)
    assert earlier.x_train[1, 0].item() == pytest.approx(-10 + 20 * 0.2697867137638703, abs=1e-12)
    generator = np.random.default_rng(0)
    x = generator.uniform(-10, 10, size=50)
    noise = 0.1 * generator.standard_normal(50)
    assert np.array_equal(earlier.y_train[:, 0].numpy(), levy_function(x) + noise)
    assert not torch.equal(earlier.x_train, levy(seed=0).x_train)
    assert torch.equal(earlier.x_test, levy(seed=0).x_test)


def test_levy_bad_arguments():
    with pytest.raises(ValueError, match="n_train"):
        levy(n_train=0)
    with pytest.raises(ValueError, match="noise"):
        levy(noise=-1.0)
    with pytest.raises(ValueError, match="seed"):
        levy(seed=-1)
    with pytest.raises(ValueError, match="draw must be one of 'notebook', 'default_rng'"):
        levy(draw="legacy")


@pytest.mark.skipif(not _have_banana(), reason="banana data not under GMP_DATA")
def test_banana_task():
    data = banana(seed=0)
    assert data.x_train.shape == (800, 2) and data.x_test.shape == (200, 2)
    assert data.y_train.dtype == torch.int64 and set(data.y_train.unique().tolist()) == {0, 1}
    assert torch.allclose(data.x_train.mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(data.x_train.std(0, unbiased=False), torch.ones(2), atol=1e-5)
    # the file holds 2924 negatives and 2376 positives: a draw of 1000 keeps that balance roughly
    share = torch.cat([data.y_train, data.y_test]).double().mean().item()
    assert abs(share - 2376 / 5300) < 0.05
    # the test points are standardised with the training statistics, not their own
    raw = data.x_test.numpy() * data.scale + data.mean
    assert not np.allclose(data.x_test.numpy().mean(0), 0, atol=1e-6)
    assert np.abs(raw).max() < 3.3
    points = {tuple(np.round(p, 3)) for p in (torch.cat([data.x_train, data.x_test]).double().numpy()
                                              * data.scale + data.mean)}
    assert len(points) >= 995  # without replacement (the file has 8 duplicate rows)


@pytest.mark.skipif(not _have_banana(), reason="banana data not under GMP_DATA")
def test_banana_validation_carve_out_and_seeds():
    data = banana(seed=0, validation_fraction=0.2)
    assert data.x_train.shape == (640, 2) and data.x_val.shape == (160, 2) and data.x_test.shape == (200, 2)
    full = banana(seed=0)
    assert torch.equal(data.y_test, full.y_test)
    assert torch.allclose(data.x_train.mean(0), torch.zeros(2), atol=1e-5)
    assert not torch.equal(banana(seed=1).y_test, full.y_test)
    with pytest.raises(ValueError, match="n must"):
        banana(n=10_000)
    with pytest.raises(ValueError, match="test_fraction"):
        banana(test_fraction=1.5)
    assert math.isclose(banana(n=100).x_test.shape[0], 20)
