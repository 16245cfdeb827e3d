"""VGG-6 (Table 2 of Chen & Ge) and ResNet-34 (Table 3) in their parameterizations, and the
experiments of the chapters chen_vgg and chen_resnet."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import gmp
from gmp.conv import GmPConv2d
from gmp.experiments import chen_resnet, chen_vgg
from gmp.results import NOT_REPRODUCED, PARTLY, REPRODUCED, PowerTest
from gmp.models.resnet import GmPBasicBlock
from gmp.models.vgg import VGG6_WIDTHS

CONV_WEIGHTS = 9 * (3 * 128 + 128 * 128 + 128 * 256 + 256 * 256 + 256 * 512 + 512 * 512)
FILTERS = 2 * (128 + 256 + 512)


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_vgg6_parameter_counts_of_the_six_variants():
    head = 512 * 1000 + 1000
    expected = {
        "sp": CONV_WEIGHTS + FILTERS + head,
        "bn": CONV_WEIGHTS + FILTERS + 2 * FILTERS + head,  # BN's scale and shift
        "wn": CONV_WEIGHTS + FILTERS + FILTERS + head + 1000,  # one g per filter and per output
        "wn_mbn": CONV_WEIGHTS + FILTERS + FILTERS + head + 1000,  # MN has no parameters
        "gmp": CONV_WEIGHTS + FILTERS + head,  # (n - 1) angles + lam + r per filter of n weights
        "gmp_mn": CONV_WEIGHTS + FILTERS + head,
    }
    assert set(expected) == set(gmp.models.VGG_PARAMS)
    for param, n in expected.items():
        assert count(gmp.models.vgg6(param)) == n, param


def test_vgg6_layout_and_output_shape_on_imagenet32_and_small_inputs():
    model = gmp.models.vgg6("gmp_mn")
    units = [m for m in model if isinstance(m, GmPConv2d)]
    assert [u.out_channels for u in units] == [w for w in VGG6_WIDTHS for _ in range(2)]
    modules = list(model)
    assert all(isinstance(modules[modules.index(u) + 1], gmp.MeanNorm) for u in units)
    assert sum(isinstance(m, nn.MaxPool2d) for m in model) == 3 and not any(isinstance(m, nn.Dropout) for m in model)
    assert units[-1].theta.shape == (512, 512 * 9 - 1)  # 4,607 angles per unit
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 1000)
    mbn = list(gmp.models.vgg6("wn_mbn"))
    assert isinstance(mbn[1], gmp.MeanNorm) and isinstance(mbn[2], nn.ReLU)  # MN before the ReLU
    small = gmp.models.vgg6("bn", num_classes=10, in_channels=1, widths=(8, 8, 16))
    assert small(torch.randn(4, 1, 8, 8)).shape == (4, 10)


def test_vgg6_standard_layers_start_glorot_with_zero_bias():
    torch.manual_seed(0)
    conv = gmp.models.vgg6("sp")[2]
    bound = (6 / (128 * 9 + 128 * 9)) ** 0.5
    assert conv.weight.abs().max() <= bound and conv.weight.abs().max() > 0.95 * bound
    assert torch.equal(conv.bias, torch.zeros(128))


def test_vgg6_rejects_bad_arguments():
    with pytest.raises(ValueError, match="param"):
        gmp.models.vgg6("gn")
    with pytest.raises(ValueError, match="widths"):
        gmp.models.vgg6("sp", widths=(8, 8))


def filters(model: nn.Module) -> int:
    return sum(m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d))


def test_resnet34_is_imported_only_when_first_asked_for():
    """torchvision's models import torch._dynamo (seconds): ``import gmp`` does not load them, ``gmp.resnet34`` and
    ``gmp.models``' ResNet names do."""
    import subprocess
    import sys
    script = ("import sys, gmp; loaded = lambda: sorted({'torchvision', 'torch._dynamo'} & set(sys.modules)); "
              "print(loaded()); f = gmp.resnet34; print(loaded()); from gmp.models import GmPBasicBlock, RESNET_PARAMS;"
              "import gmp.models.resnet as r; print(f is gmp.models.resnet34 is r.resnet34, "
              "(GmPBasicBlock, RESNET_PARAMS) == (r.GmPBasicBlock, r.RESNET_PARAMS))")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300,
                           cwd=Path(gmp.__file__).parent.parent).stdout.splitlines()
    assert shown == ["[]", "['torch._dynamo', 'torchvision']", "True True"]
    assert gmp.resnet34 is gmp.models.resnet34 is gmp.models.resnet.resnet34
    with pytest.raises(AttributeError, match="no attribute 'resnet35'"):
        gmp.models.resnet35  # noqa: B018
    with pytest.raises(AttributeError, match="module 'gmp' has no attribute 'resnet35'"):
        gmp.resnet35  # noqa: B018


def test_resnet34_parameter_counts():
    torch.manual_seed(0)
    bn = gmp.models.resnet34("bn")
    assert count(bn) == 21_797_672  # torchvision's ResNet-34
    n_filters = filters(bn)
    # WN+MBN: each BN (2 per filter) gives way to one g per filter and a parameter-free MN.
    assert count(gmp.models.resnet34("wn_mbn")) == 21_797_672 - n_filters
    # GmP+MN: n weights + 2 BN parameters per filter become n - 1 angles, lam and r.
    gmp_mn = gmp.models.resnet34("gmp_mn")
    assert count(gmp_mn) == 21_797_672 - n_filters
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gmp_mn.modules())
    assert sum(isinstance(m, GmPBasicBlock) for m in gmp_mn.modules()) == 16


def test_resnet34_variants_run_at_reduced_width_on_small_inputs():
    for param in gmp.models.RESNET_PARAMS:
        model = gmp.models.resnet34(param, num_classes=10, width=8, in_channels=1)
        assert model(torch.randn(3, 1, 16, 16)).shape == (3, 10)
    narrow = gmp.models.resnet34("bn", num_classes=10, width=8)
    assert [narrow.layer1[0].conv1.out_channels, narrow.layer4[2].conv2.out_channels, narrow.fc.in_features] == [8, 64, 64]
    assert [len(narrow.layer1), len(narrow.layer2), len(narrow.layer3), len(narrow.layer4)] == [3, 4, 6, 3]


def test_gmp_mn_blocks_compute_the_bn_block_function_at_conversion():
    torch.manual_seed(1)
    block = gmp.models.resnet34("bn", width=8).layer2[0].double()  # a down-sampling block
    with torch.no_grad():
        for bn in (block.bn1, block.bn2, block.downsample[1]):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_()
            bn.bias.normal_()
    block.eval()
    converted = GmPBasicBlock(block).eval()
    assert converted.conv1.activation == "relu" and converted.conv2.activation == "identity"
    assert all(u.mean_norm is not None for u in (converted.conv1, converted.conv2, converted.downsample))
    x = torch.randn(2, 8, 8, 8, dtype=torch.float64)
    assert torch.allclose(converted(x), block(x), atol=1e-12)
    with pytest.raises(ValueError, match="BasicBlock"):
        GmPBasicBlock(nn.Conv2d(2, 2, 3))


def test_resnet34_wn_mbn_places_mean_norm_where_bn_was():
    model = gmp.models.resnet34("wn_mbn", width=8)
    block = model.layer2[0]
    assert isinstance(block.bn1, gmp.MeanNorm) and isinstance(block.downsample[1], gmp.MeanNorm)
    assert hasattr(block.conv1, "parametrizations")  # weight-normalized
    with pytest.raises(ValueError, match="param"):
        gmp.models.resnet34("sp")


# ---------------------------------------------------------------- the chapters' experiments


def _claim(module, key):
    return next(c for c in module.CLAIMS if c.key == key)


def test_claim_rules_on_the_papers_own_tables_are_partly_and_cap_stand_ins():
    """The paper's tables give one mean per cell and no seeds: the means order as claimed, but a single
    value cannot be beyond noise, so every table rule says "partly" (and so on a stand-in data set)."""
    table = chen_vgg.paper_payload()
    for claim in chen_vgg.CLAIMS:
        if claim.result == "table2":
            assert claim.evaluate(table)[1] == PARTLY, claim.key
            assert claim.evaluate({**table, "dataset": "digits"})[1] == PARTLY, claim.key
    assert chen_vgg.margins(table, "top1") == pytest.approx([43.14 - 42.79, 43.62 - 41.90, 42.70 - 41.39])
    (resnet_claim,) = chen_resnet.CLAIMS
    assert resnet_claim.evaluate(chen_resnet.paper_payload())[1] == PARTLY


def test_every_comparative_rule_states_its_paired_t_design_over_the_paper_scale_seeds():
    seeds = len(chen_vgg.CONFIG["paper"]["seeds"])
    assert seeds == len(chen_resnet.CONFIG["paper"]["seeds"]) == 3
    for claim in [*chen_vgg.CLAIMS, *chen_resnet.CLAIMS]:
        assert claim.test == PowerTest("t", seeds) and claim.test.can_separate, claim.key
        assert "paired by seed" in claim.rule, claim.key
        assert f"95% Student-t interval over the {seeds} paper-scale seeds" in claim.rule, claim.key


def vgg_table(shift=None):
    """The paper's Table 2 with three seeds per cell: the paper's mean plus a jitter of the variant
    (its index k) and batch size (its index j), 0.01 k (j + 1) x (1, -2, 1), so that every paired
    difference has a spread; ``shift[(variant, batch, metric)]`` replaces a cell's seeds."""
    table = chen_vgg.paper_payload()
    for k, (variant, row) in enumerate(table["summary"].items()):
        for j, (batch, cell) in enumerate(row.items()):
            for metric in ("top1", "top5"):
                seeds = [cell[metric] + 0.01 * k * (j + 1) * d for d in (1, -2, 1)]
                cell[f"{metric}_seeds"] = seeds
    for (variant, batch, metric), seeds in (shift or {}).items():
        table["summary"][variant][str(batch)][f"{metric}_seeds"] = seeds
    return table


def seeds_of(table, variant, batch, metric):
    return table["summary"][variant][str(batch)][f"{metric}_seeds"]


def test_vgg_best_rule_needs_every_cell_beyond_noise_and_a_straddling_interval_is_partly():
    best = _claim(chen_vgg, "chen-vgg-gmpmn-best")
    clear = vgg_table()
    assert best.evaluate(clear)[1] == REPRODUCED
    bn = seeds_of(clear, "BN", 256, "top1")
    # GmP+MN above BN on average (+0.17) at batch 256, top-1, but below it in one of the three seeds.
    straddles = vgg_table({("GmP+MN", 256, "top1"): [b + d for b, d in zip(bn, (2.0, 2.0, -3.5))]})
    assert chen_vgg.best_method(straddles, 256) == "GmP+MN"
    mean, low, high = chen_vgg.paired_gap(seeds_of(straddles, "GmP+MN", 256, "top1"), bn)
    assert mean == pytest.approx(0.5 / 3) and low < 0 < high
    measured, verdict = best.evaluate(straddles)
    assert verdict == PARTLY and f"GmP+MN minus BN {mean:+.2f} [{low:+.2f}, {high:+.2f}]" in measured
    behind = vgg_table({("GmP+MN", 256, "top1"): [b - 0.1 for b in bn]})
    assert best.evaluate(behind)[1] == NOT_REPRODUCED
    assert best.evaluate({**clear, "dataset": "digits"})[1] == PARTLY


def test_vgg_batch_advantage_rule_tests_the_growth_of_the_margin_paired_by_seed():
    grows = _claim(chen_vgg, "chen-vgg-batch-advantage")
    clear = vgg_table()
    assert grows.evaluate(clear)[1] == REPRODUCED
    growth = chen_vgg.margin_growth(clear, "top1")
    assert growth[0] == pytest.approx(chen_vgg.margins(clear, "top1")[-1] - chen_vgg.margins(clear, "top1")[0])
    assert growth[0] == pytest.approx((42.70 - 41.39) - (43.14 - 42.79)) and growth[1] > 0

    def with_growth(steps):
        """GmP+MN's top-1 at batch 1024 set so that each seed's margin grows by ``steps`` from batch 256."""
        margin = [g - b for g, b in zip(seeds_of(clear, "GmP+MN", 256, "top1"), seeds_of(clear, "BN", 256, "top1"))]
        bn = seeds_of(clear, "BN", 1024, "top1")
        return vgg_table({("GmP+MN", 1024, "top1"): [b + m + d for b, m, d in zip(bn, margin, steps)]})

    straddles = with_growth((2.0, 2.0, -3.5))
    mean, low, high = chen_vgg.margin_growth(straddles, "top1")
    assert mean == pytest.approx(0.5 / 3) and low < 0 < high
    assert grows.evaluate(straddles)[1] == PARTLY
    assert grows.evaluate(with_growth((-0.5, -1.0, -0.2)))[1] == NOT_REPRODUCED


def test_vgg_mean_normalization_rule_needs_every_batch_size_beyond_noise():
    helps = _claim(chen_vgg, "chen-vgg-mn-helps")
    assert helps.evaluate(vgg_table())[1] == REPRODUCED
    gmp_alone = seeds_of(vgg_table(), "GmP", 1024, "top1")
    straddles = vgg_table({("GmP+MN", 1024, "top1"): [g + d for g, d in zip(gmp_alone, (2.0, 2.0, -3.5))]})
    measured, verdict = helps.evaluate(straddles)
    assert verdict == PARTLY and "b1024 +0.17 [" in measured
    assert helps.evaluate(vgg_table({("GmP+MN", 1024, "top1"): [g - 0.3 for g in gmp_alone]}))[1] == NOT_REPRODUCED


def vgg_curves(levels):
    """A Fig. 4 payload whose seed s of a variant has the constant top-5 curve ``levels[variant][s]`` over
    8 epochs (both curves), so that its early area is that level."""
    curves = {}
    for variant in chen_vgg.VARIANTS:
        per_seed = [[float(a)] * 8 for a in levels[variant]]
        mean = [float(np.mean(levels[variant]))] * 8
        curves[variant] = {f"{name}{suffix}": value for name in ("train_top5", "val_top5")
                           for suffix, value in (("", mean), ("_se", [0.0] * 8), ("_seeds", per_seed))}
    return {"dataset": "imagenet32", "scale": "paper", "batch_size": 1024, "fast_fraction": 0.25, "curves": curves}


def test_vgg_fastest_rule_compares_each_seeds_early_accuracy_paired_by_seed():
    fastest = _claim(chen_vgg, "chen-vgg-fastest")
    others = {v: [20.0 + k, 21.0 + k, 19.5 + k] for k, v in enumerate(("SP", "WN", "WN+MBN", "BN"))}
    clear = vgg_curves({**others, "GmP": [40.0, 41.0, 39.0], "GmP+MN": [30.0, 31.0, 29.5]})
    assert chen_vgg.early_areas(clear)["GmP"] == [40.0, 41.0, 39.0]
    assert fastest.evaluate(clear)[1] == REPRODUCED
    # GmP ahead of BN (the fastest of the others) on average, but behind it in one seed.
    straddles = vgg_curves({**others, "GmP": [b + d for b, d in zip(others["BN"], (10.0, 10.0, -18.0))],
                            "GmP+MN": [10.0, 10.0, 10.0]})
    measured, verdict = fastest.evaluate(straddles)
    assert verdict == PARTLY and "GmP minus SP" in measured
    behind = vgg_curves({**others, "GmP": [22.0, 23.0, 21.5], "GmP+MN": [10.0, 10.0, 10.0]})
    assert fastest.evaluate(behind)[1] == NOT_REPRODUCED  # BN (23, 24, 22.5) is faster on both curves
    # A GmP seed that diverged in its first epoch counts as chance (0.5% top-5) over the first epochs,
    # and the window stays a quarter of the 8 epochs the other runs ran.
    gone = vgg_curves({**others, "GmP": [40.0, 41.0, 39.0], "GmP+MN": [10.0, 10.0, 10.0]})
    for name in ("train_top5", "val_top5"):
        gone["curves"]["GmP"][f"{name}_seeds"][0] = [None]
    assert chen_vgg.early_areas(gone)["GmP"] == [0.5, 41.0, 39.0]
    measured, verdict = fastest.evaluate(gone)
    assert verdict == PARTLY and "GmP: 1 diverged run(s)" in measured  # ahead on average, not beyond noise


def test_vgg_curves_payload_keeps_each_seeds_whole_curve():
    cfg = gmp.load_config("chen_vgg", "smoke")
    batch = max(cfg["batch_sizes"])
    train, val = [[0.1, 0.2, 0.3], [0.3, 0.4]], [[0.2, None, 0.4], [0.2, None]]
    runs = [{"variant": v, "batch_size": batch, "seed": s, "history": {"train_top5": train[s], "val_top5": val[s]}}
            for v in cfg["variants"] for s in (0, 1)]
    curves = chen_vgg.curves_payload(cfg, runs)["curves"]["GmP"]
    assert curves["train_top5"] == pytest.approx([20.0, 30.0])  # the mean over the epochs both seeds ran
    assert curves["train_top5_seeds"] == [pytest.approx([10.0, 20.0, 30.0]), pytest.approx([30.0, 40.0])]
    assert curves["val_top5_seeds"] == [[pytest.approx(20.0), None, pytest.approx(40.0)], [pytest.approx(20.0), None]]


def resnet_table(gmp_mn_top1=None):
    """The paper's Table 3 with three seeds per variant (the paper's mean plus 0.05 k x (1, -2, 1) for
    the variant of index k); ``gmp_mn_top1`` replaces GmP+MN's top-1 seeds."""
    table = chen_resnet.paper_payload()
    for k, cell in enumerate(row["512"] for row in table["summary"].values()):
        for metric in ("top1", "top5"):
            cell[f"{metric}_seeds"] = [cell[metric] + 0.05 * k * d for d in (1, -2, 1)]
    if gmp_mn_top1 is not None:
        table["summary"]["GmP+MN"]["512"]["top1_seeds"] = gmp_mn_top1
    return table


def test_resnet_rule_needs_all_four_intervals_beyond_noise_and_a_straddling_one_is_partly():
    (best,) = chen_resnet.CLAIMS
    assert best.evaluate(resnet_table())[1] == REPRODUCED
    bn = resnet_table()["summary"]["BN"]["512"]["top1_seeds"]
    measured, verdict = best.evaluate(resnet_table([b + d for b, d in zip(bn, (2.0, 2.0, -3.5))]))
    assert verdict == PARTLY and "GmP+MN minus WN+MBN" in measured and "BN +0.17 [" in measured
    assert best.evaluate(resnet_table([b - 0.2 for b in bn]))[1] == NOT_REPRODUCED
    assert best.evaluate({**resnet_table(), "dataset": "digits"})[1] == PARTLY


def write_imagenet32(root, per_file=1):
    folder = root / "imagenet32"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"train_data_batch_{i}.npz" for i in range(1, 11)] + ["val_data.npz"]:
        np.savez(folder / name, data=rng.integers(0, 256, (per_file, 3072), dtype=np.uint8),
                 labels=rng.integers(1, 1001, per_file).tolist())


def run_chapter_in_process(name: str, scale: str) -> dict:
    """Execute the code cells of book/part1/<name>.ipynb in this process (so that monkeypatched
    configs apply), with ``SCALE`` set in the parameters cell; returns the namespace."""
    import nbformat
    from IPython.core.inputtransformer2 import TransformerManager

    root = Path(__file__).resolve().parents[1]
    notebook = nbformat.read(root / "book" / "part1" / f"{name}.ipynb", as_version=4)
    namespace: dict = {"__name__": "__chapter__"}
    transform = TransformerManager().transform_cell
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        exec(compile(transform(cell.source), f"<{name}>", "exec"), namespace)
        if "parameters" in cell.metadata.get("tags", []):
            namespace.update(SCALE=scale, DEVICE="cpu")
    return namespace


def test_vgg_chapter_runs_at_paper_scale_on_files_in_the_imagenet32_format(tmp_path, monkeypatch):
    """The chapter itself at the paper's config (full VGG-6, 1000 classes, checkpoints), with
    one epoch, one seed and two batch sizes patched into the config, on test-written files."""
    import matplotlib

    matplotlib.use("Agg")
    write_imagenet32(tmp_path)
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    monkeypatch.setenv("GMP_CHECKPOINTS", str(tmp_path / "checkpoints"))
    for key, value in dict(epochs=1, seeds=[0], batch_sizes=[256, 1024]).items():
        monkeypatch.setitem(chen_vgg.CONFIG["paper"], key, value)
    chen_vgg._imagenet32_arrays.cache_clear()
    try:
        chapter = run_chapter_in_process("chen_vgg", "paper")
    finally:
        chen_vgg._imagenet32_arrays.cache_clear()
    runs = chapter["runs"]
    assert chapter["cfg"].scale == "paper" and chapter["cfg"].widths == [128, 256, 512]
    assert len(runs) == 12 and all(r["epochs"] == 1 and not r["diverged"] for r in runs)
    assert len(list((tmp_path / "checkpoints" / "chen_vgg").glob("paper-*/*.pt"))) == 12
    table, curves = chapter["table2"], chapter["fig4"]
    assert set(table["summary"]) == set(chen_vgg.VARIANTS) and curves["batch_size"] == 1024
    frame = chen_vgg.table_frame(table, table)
    assert frame.shape == (18, 6) and (frame.iloc[1] == "not run").sum() == 2  # no run at 512
    assert chapter["estimate"]["forward_gflops"] == pytest.approx(2 * 607.7e6 / 1e9, rel=0.01)


def test_resnet_chapter_runs_at_paper_scale_on_an_image_folder(tmp_path, monkeypatch):
    import matplotlib
    from PIL import Image

    matplotlib.use("Agg")
    for split in ("train", "val"):
        for k, name in enumerate(("n01440764", "n01443537")):
            (tmp_path / "imagenet" / split / name).mkdir(parents=True)
            Image.new("RGB", (260, 250), (40 * k, 90, 200)).save(tmp_path / "imagenet" / split / name / "a.JPEG")
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    monkeypatch.setenv("GMP_CHECKPOINTS", str(tmp_path / "checkpoints"))
    for key, value in dict(epochs=1, seeds=[0]).items():
        monkeypatch.setitem(chen_resnet.CONFIG["paper"], key, value)
    chen_resnet._imagenet.cache_clear()
    try:
        chapter = run_chapter_in_process("chen_resnet", "paper")
    finally:
        chen_resnet._imagenet.cache_clear()
    runs = chapter["runs"]
    assert [r["variant"] for r in runs] == ["WN+MBN", "BN", "GmP+MN"] and all(r["epochs"] == 1 for r in runs)
    assert chen_resnet.table_frame(chapter["table3"], None).shape == (3, 6)
    assert len(list((tmp_path / "checkpoints" / "chen_resnet").glob("paper-*/*.pt"))) == 3
