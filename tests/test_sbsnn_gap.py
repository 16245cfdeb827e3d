"""Facts behind the chapter on the gap to the SBSNN paper's fitting speed."""

import math

import pytest
import torch

from gmp import config
from gmp.data.images import cameraman
from gmp.experiments import sbsnn_gap


def test_band_limited_psnr_removes_exactly_the_frequencies_above_the_cut():
    side = 64
    i = torch.arange(side, dtype=torch.float64)
    wave = 0.5 * torch.cos(2 * math.pi * 3 * i / side)[:, None].expand(side, side)  # 3 cycles along axis 0
    assert sbsnn_gap.band_limited_psnr(wave, 3) > 200  # kept: the low-pass is the image
    # cut below 3 cycles: the error is the wave itself, mean square (0.5 / 2)^2 / 2 on [0, 1] values
    assert sbsnn_gap.band_limited_psnr(wave, 2) == pytest.approx(10 * math.log10(32), abs=1e-9)
    with pytest.raises(ValueError, match="2-D image"):
        sbsnn_gap.band_limited_psnr(wave[0], 2)


def test_band_limit_of_the_cameraman_grows_with_the_cut_and_is_exact_at_nyquist():
    curve = sbsnn_gap.band_limit_curve(64)
    assert curve["cycles"] == [1, 2, 4, 8, 16, 32]
    assert all(b > a for a, b in zip(curve["psnr"], curve["psnr"][1:]))
    assert curve["psnr"][-1] > 200 and curve["psnr"][-2] < 40
    assert sbsnn_gap.band_limited_psnr(cameraman(64), 32) == curve["psnr"][-1]


def test_variants_differ_from_the_papers_networks_only_in_what_they_test():
    cfg = config.load("sbsnn_gap", "paper")
    specs = sbsnn_gap.specs(cfg)
    assert list(specs) == list(sbsnn_gap.LABELS)
    assert (specs["default"]["levels"], specs["full"]["levels"]) == (6, 8)  # SIREN's rule; 2^7 = Nyquist of 256
    assert specs["default+gain"]["first_gain"] == pytest.approx(math.sqrt(192 / 72))
    assert specs["full+gain"]["first_gain"] == pytest.approx(math.sqrt(2))
    assert specs["siren+omega"]["omega_0"] == cfg.wide_omega_0 > 30
    for name, base in (("default+gain", "default"), ("full+gain", "full"), ("siren+scale", "siren"),
                       ("siren+omega", "siren")):
        extra = set(specs[name]) - set(specs[base])
        assert len(extra) == 1 and {k: v for k, v in specs[name].items() if k not in extra} == specs[base]
    for name in ("default+gain", "full+gain", "siren+scale"):
        stats = sbsnn_gap.first_layer_statistics(specs[name], 32, seed=0)
        assert stats["z_mean_square"] == pytest.approx(1.0, abs=0.01)
    assert sbsnn_gap.first_layer_statistics(specs["default"], 32, seed=0)["z_mean_square"] == pytest.approx(72 / 192)
    with pytest.raises(ValueError, match="power-of-two"):
        sbsnn_gap.full_levels(100)


def test_effects_sentence_names_the_extreme_changes_and_the_shortfall():
    best = {"default": 20.0, "default+gain": 23.0, "full": 19.0, "full+gain": 21.0, "siren": 15.0, "siren+scale": 15.5,
            "siren+omega": 16.0}
    payload = {"rows": {name: {"best_psnr": value} for name, value in best.items()}}
    text = sbsnn_gap.effects_sentence(payload, 1e-5)
    assert text == ("the changes move the best PSNR by -1.0 dB (Nyquist L instead of SIREN's) to +3.0 dB "
                    "(unit first layer), while the best fit stays 33.0 dB short of an MSE of 1e-05")


def test_the_table_gives_each_scales_own_statistics_and_bound_beside_its_best_psnr():
    """The initial statistics and the low-pass bound depend on the image's side and the encoder's L: a build's are
    shown beside paper scale's, each under its own scale, not one scale's beside the other's best PSNR."""
    import copy
    import json

    from gmp import results

    paper = json.loads((results.results_root() / "sbsnn_gap" / "paper" / "variants.json").read_text())
    live = copy.deepcopy(paper)
    row = live["rows"]["default"]
    row["band_limit_psnr"], row["z_mean_square"], row["varying_share"] = 19.25, 0.125, 0.75
    cells = sbsnn_gap.table(live, paper, "current").data.set_index("network (√2 sin(x + π/4))").loc[
        sbsnn_gap.LABELS["default"]]
    bound = paper["rows"]["default"]["band_limit_psnr"]
    assert cells["low-pass bound, dB (this build / paper)"] == f"19.2 / {bound:.1f}"
    assert cells["mean square of first pre-activation (this build / paper)"].startswith("0.125 / ")
    assert cells["pixel-dependent share of first activation (this build / paper)"].startswith("0.750 / ")
