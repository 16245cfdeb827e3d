import sys
import types

import pytest
import torch

import gmp
from gmp import config


@pytest.fixture
def fake_chapter(monkeypatch):
    module = types.ModuleType("gmp.experiments.fake_chapter")
    module.CONFIG = config.scaled(common={"lr": 0.1, "hidden": 10},
                                  smoke={"epochs": 2}, small={"epochs": 20}, paper={"epochs": 200, "lr": 0.01})
    monkeypatch.setitem(sys.modules, "gmp.experiments.fake_chapter", module)
    return module


def test_scaled_merges_common_and_per_scale(fake_chapter):
    paper = config.load("fake_chapter", "paper")
    assert (paper.epochs, paper.lr, paper.hidden) == (200, 0.01, 10)
    small = config.load("fake_chapter", "small")
    assert (small.epochs, small.lr) == (20, 0.1)
    assert small["hidden"] == 10 and dict(small) == {"lr": 0.1, "hidden": 10, "epochs": 20}


def test_scaled_requires_every_scale_and_json_values():
    with pytest.raises(ValueError, match="exactly the scales"):
        config.scaled(smoke={}, small={})
    with pytest.raises(ValueError, match="JSON"):
        config.scaled(smoke={"f": object()}, small={}, paper={})
    with pytest.raises(ValueError, match="JSON"):
        config.scaled(smoke={"x": float("nan")}, small={}, paper={})


def test_digest_identifies_values(fake_chapter):
    a, b = config.load("fake_chapter", "small"), config.load("fake_chapter", "small")
    assert a.digest == b.digest
    assert a.digest != config.load("fake_chapter", "paper").digest
    fake_chapter.CONFIG["small"]["epochs"] = 21
    assert config.load("fake_chapter", "small").digest != a.digest


def test_config_is_read_only_and_names_missing_settings(fake_chapter):
    cfg = config.load("fake_chapter", "smoke")
    with pytest.raises(AttributeError, match="no setting 'momentum'"):
        cfg.momentum
    with pytest.raises(TypeError):
        cfg["lr"] = 1.0
    cfg.as_dict()["lr"] = 5.0
    assert cfg.lr == 0.1


def test_scale_comes_from_environment(fake_chapter, monkeypatch):
    monkeypatch.setenv("GMP_SCALE", "smoke")
    assert config.load("fake_chapter").scale == "smoke"
    monkeypatch.delenv("GMP_SCALE")
    assert config.resolve_scale() == "small"
    with pytest.raises(ValueError, match="unknown scale 'huge'"):
        config.resolve_scale("huge")


def test_unknown_chapter_is_a_clear_error():
    with pytest.raises(ValueError, match="no experiment config for chapter 'no_such_chapter'"):
        config.load("no_such_chapter", "small")
    with pytest.raises(ValueError, match="identifiers"):
        config.load("../etc", "small")


def test_devices():
    assert gmp.resolve_device("cpu") == torch.device("cpu")
    assert gmp.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        gmp.resolve_device("gpu0")
    with pytest.raises(ValueError, match="cannot train or evaluate a network"):
        gmp.resolve_device("meta")


def test_seed_everything_repeats_draws():
    gmp.seed_everything(3)
    first = torch.randn(4)
    gmp.seed_everything(3)
    assert torch.equal(first, torch.randn(4))
