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
from gmp.results import PARTLY, REPRODUCED
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



def test_claim_rules_reproduce_the_papers_own_tables_and_cap_stand_ins():
    table = chen_vgg.paper_payload()
    for claim in chen_vgg.CLAIMS:
        if claim.result == "table2":
            assert claim.evaluate(table)[1] == REPRODUCED, claim.key
            assert claim.evaluate({**table, "dataset": "digits"})[1] == PARTLY, claim.key
    assert chen_vgg.margins(table, "top1") == pytest.approx([43.14 - 42.79, 43.62 - 41.90, 42.70 - 41.39])
    (resnet_claim,) = chen_resnet.CLAIMS
    assert resnet_claim.evaluate(chen_resnet.paper_payload())[1] == REPRODUCED
    assert resnet_claim.evaluate({**chen_resnet.paper_payload(), "dataset": "digits"})[1] == PARTLY
    curves = {"dataset": "imagenet32", "fast_fraction": 0.5, "curves": {
        "BN": {"train_top5": [10, 20, 30, 40], "val_top5": [10, 20, 30, 40]},
        "GmP": {"train_top5": [20, 30, 30, 30], "val_top5": [5, 10, 30, 50]}}}
    fastest = next(c for c in chen_vgg.CLAIMS if c.key == "chen-vgg-fastest")
    assert fastest.evaluate(curves)[1] == PARTLY  # GmP leads the training curve only


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
