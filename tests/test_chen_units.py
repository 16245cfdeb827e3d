"""The Part I chapters' units (chen_banana, chen_levy, chen_uci and their arms): the journal keys their runs use,
kept in the cache so that ``python -m gmp.runs CHAPTER --restamp`` can re-verify it after a refactor."""

import gzip
import json

import pytest

from conftest import ROOT
from gmp import config, results, runs, verification
from gmp.experiments import chen_levy, chen_levy_arms, chen_uci, chen_uci_arms

SEED = 0

SMOKE_KEYS = {
    "chen_banana": [f"{m}-lr{lr}-{p}-seed0" for p in ("paper", "clean") for m in ("SP", "WN", "BN", "GmP")
                    for lr in ("0.01", "0.1")],
    "chen_banana_arms": [f"{init}/GmP-lr{lr}-{p}-seed0" for init in ("uniform", "glorot") for p in ("paper", "clean")
                         for lr in ("0.01", "0.1")],
    "chen_levy": ["SP-seed0", "WN-seed0", "BN-seed0", "GmP-seed0"],
    "chen_levy_arms": [f"arm/{name}/seed0" for name in chen_levy_arms.ARMS],
    "chen_uci": [f"{p}/{d}/{m}/seed0" for d in ("yacht", "naval") for m in ("SP", "WN", "BN", "GmP")
                 for p in ("clean", "paper")],
    "chen_uci_arms": [f"{name}/clean/yacht/{arm['method']}/seed0" for name, arm in chen_uci_arms.ARMS.items()],
}
"""The journal keys of each chapter's own runs at smoke scale, in the order it runs them: those of the
journals its runs wrote before the chapters had ``units`` (a cache keeps units under these keys)."""

REFERENCE_KEYS = {
    "chen_banana_arms": SMOKE_KEYS["chen_banana"],
    "chen_levy_arms": [f"reference/{m}/seed0" for m in ("SP", "WN", "BN", "GmP")],
    "chen_uci_arms": [f"reference/clean/yacht/{m}/seed0" for m in ("SP", "WN", "BN", "GmP")],
}
"""The keys of the chapter's own runs that an arms chapter computes where the chapter's cache does not serve them."""


class Recording:
    """A store whose ``memo`` records the keys it is asked for and returns a stand-in without computing."""

    def __init__(self):
        self.keys = []

    def memo(self, key, compute, wait=True):
        assert callable(compute)
        self.keys.append(key)
        return {"key": key}


def _journalled(chapter, cfg, store):
    """What the chapter's notebook asks ``store.memo`` for (the arms' reference only where it computes it)."""
    seeds = [SEED + k for k in range(cfg.seeds)] if isinstance(cfg.seeds, int) else None
    if chapter in ("chen_banana", "chen_levy"):
        config.experiment(chapter).run(cfg, store, seeds, "cpu")
    elif chapter == "chen_uci":
        chen_uci.run_grid(cfg, store, "cpu")
    elif chapter == "chen_uci_arms":
        chen_uci_arms.run_arms(cfg, store, "cpu")
        chen_uci_arms.reference(cfg, store, "cpu")
    else:
        config.experiment(chapter).run_arms(cfg, store, seeds, "cpu")
        if chapter == "chen_levy_arms":  # chen_banana_arms' reference summarises chen_banana.run's, whose keys are above
            chen_levy_arms.reference(cfg, store, seeds, "cpu")
    return store.keys


@pytest.mark.parametrize("chapter", list(SMOKE_KEYS))
def test_the_units_are_the_runs_the_chapter_journals_under_their_keys(chapter, tmp_path, monkeypatch):
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))  # no cache of the chapter: the arms compute their reference
    cfg = config.load(chapter, "smoke")
    named = list(config.experiment(chapter).units(cfg, None, SEED, "cpu"))
    assert named == SMOKE_KEYS[chapter] + REFERENCE_KEYS.get(chapter, [])
    if chapter != "chen_banana_arms":
        assert _journalled(chapter, cfg, Recording()) == named
    else:
        assert _journalled(chapter, cfg, Recording()) == SMOKE_KEYS[chapter]


@pytest.mark.parametrize("chapter, main, name", [("chen_banana_arms", "chen_banana", "fig3"),
                                                 ("chen_levy_arms", "chen_levy", "fig2"),
                                                 ("chen_uci_arms", "chen_uci", "table1")])
def test_an_arms_chapter_names_the_chapters_runs_only_where_its_cache_does_not_serve_them(chapter, main, name):
    """At paper scale the arms read the chapter's own runs from its cache (committed, current), so those are no
    units of theirs; the keys are the arms' alone."""
    cfg = config.load(chapter, "paper")
    assert results.cached(main, name, "paper").current
    keys = list(config.experiment(chapter).units(cfg, None, SEED, "cpu"))
    assert keys and not any(key.startswith("reference/") or "/" not in key for key in keys)


@pytest.mark.parametrize("chapter", ["chen_banana_arms", "chen_levy_arms", "chen_uci_arms"])
def test_an_arms_config_of_other_settings_computes_its_own_reference_rather_than_read_the_chapters(chapter):
    """The chapter's paper cache is current, but an arms config whose runs would train for half the epochs is not
    served by it: the reference runs are then units of the arms' own run, which computes them."""
    cfg = config.load(chapter, "paper")
    halved = config.Config(chapter, "paper", {**cfg.as_dict(), "epochs": cfg.epochs // 2})
    module = config.experiment(chapter)
    keys = list(module.units(halved, None, SEED, "cpu"))
    assert set(keys) > set(module.units(cfg, None, SEED, "cpu"))
    assert any(key.startswith("reference/") or "/" not in key for key in keys)


@pytest.mark.chapter
def test_a_smoke_run_of_chen_levy_is_re_stamped_and_a_perturbed_unit_is_refused_and_named(tmp_path, monkeypatch,
                                                                                          capsys):
    """gmp.runs keeps chen_levy's units; a re-stamp recomputes them bitwise equal and records the evidence; a unit
    that today's code computes otherwise (a perturbation of one fit's RMSE) refuses it and is named."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    folder = runs.run("chen_levy", "smoke", device="cpu", root=ROOT)
    kept = [json.loads(line)["key"] for line in gzip.decompress((folder / runs.UNITS_FILE).read_bytes()).splitlines()]
    assert kept == SMOKE_KEYS["chen_levy"]
    assert runs.main(["chen_levy", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 0
    evidence = json.loads((folder / "provenance.json").read_text())[verification.RESTAMPS][-1]
    assert evidence["units"] == evidence["of"] == 4 and evidence["largest_difference"] is None
    capsys.readouterr()
    train_one = chen_levy.train_one

    def perturbed(cfg, method, seed, device="cpu"):
        out = train_one(cfg, method, seed, device)
        return {**out, "test_rmse": out["test_rmse"] * (1 + 1e-15)} if method == "WN" else out

    monkeypatch.setattr(chen_levy, "train_one", perturbed)
    before = (folder / "provenance.json").read_bytes()
    assert runs.main(["chen_levy", "--scale", "smoke", "--restamp", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "REFUSED: unit 'WN-seed0' of chen_levy recomputed with today's code differs" in err
    assert "value['test_rmse']" in err
    assert (folder / "provenance.json").read_bytes() == before


def test_a_uci_unit_recomputed_on_another_processor_passes_at_rounding_and_is_refused_beyond_it():
    """chen_uci's units are re-verified to a relative 1e-9 (rounding of float64 sums on another processor),
    not bitwise; a test RMSE moved by 1e-6 or a fit stopped one epoch later is still refused."""
    rtol, atol = verification.unit_tolerance("chen_uci", "clean/boston/WN/seed0")
    assert (rtol, atol) == verification.unit_tolerance("chen_uci_arms", "GmP lr 0.01/clean/boston/GmP/seed0") == (1e-9, 0.0)
    cached = {"test_rmse": 2.4827429021142087, "test_mae": 1.999856706884366, "epochs": 721, "diverged": False,
              "wall_s": 9.9}
    rounding = {**cached, "test_rmse": 2.482742902114205, "test_mae": 1.9998567068843631, "wall_s": 12.0}
    assert verification.compare(cached, rounding, rtol, atol) == []
    assert verification.compare(cached, {**cached, "test_rmse": cached["test_rmse"] * (1 + 1e-6)}, rtol, atol)
    assert verification.compare(cached, {**cached, "epochs": 722}, rtol, atol)
    assert verification.unit_tolerance("chen_levy", "GmP-seed0") == (0.0, 0.0)  # computed here: bitwise
