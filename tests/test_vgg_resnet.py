"""VGG-6 (Table 2 of Chen & Ge) and ResNet-34 (Table 3) in their parameterizations."""

import pytest
import torch
from torch import nn

import gmp
from gmp.conv import GmPConv2d
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
