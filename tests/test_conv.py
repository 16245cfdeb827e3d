"""GmPConv2d (Eq. (10) of Chen & Ge per output filter) and the convolution rule of gmp.convert."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gmp
from gmp.conv import GmPConv2d, convert_conv_block, fold_batch_norm


@pytest.mark.parametrize("kwargs", [dict(kernel_size=3, padding=1),
                                    dict(kernel_size=(3, 2), stride=2, padding=(1, 0), dilation=(1, 2)),
                                    dict(kernel_size=3, groups=2, padding="same")])
def test_output_equals_scaled_relu_of_convolution_with_the_direction_kernel(kwargs):
    torch.manual_seed(0)
    layer = GmPConv2d(4, 6, init="glorot", dtype=torch.float64, **kwargs)
    with torch.no_grad():
        layer.lam.normal_()
        layer.r.uniform_(-2, 2)  # some negative scales: the general path
    x = torch.randn(5, 4, 9, 8, dtype=torch.float64)
    u = layer.direction
    assert u.shape == (6, 4 // layer.groups, *layer.kernel_size)
    norms = u.reshape(6, -1).norm(dim=1)
    assert torch.allclose(norms, torch.ones(6, dtype=torch.float64), atol=1e-14)
    conv = F.conv2d(x, u, None, layer.stride, layer.padding, layer.dilation, layer.groups)
    expected = layer.r.view(1, -1, 1, 1) * torch.relu(conv + layer.lam.view(1, -1, 1, 1))
    assert torch.allclose(layer(x), expected, atol=1e-13)
    with torch.no_grad():
        layer.r.abs_().add_(0.1)  # all positive: the one-convolution path
    expected = layer.r.view(1, -1, 1, 1) * torch.relu(conv + layer.lam.view(1, -1, 1, 1))
    assert torch.allclose(layer(x), expected, atol=1e-13)


def test_fast_path_gradients_equal_those_of_the_reference_formula():
    torch.manual_seed(1)
    layer = GmPConv2d(3, 5, 3, padding=1, init="glorot", dtype=torch.float64)
    with torch.no_grad():
        layer.lam.normal_()
    x = torch.randn(4, 3, 6, 6, dtype=torch.float64)
    weights = torch.randn(4, 5, 6, 6, dtype=torch.float64)
    (layer(x) * weights).sum().backward()
    fast = [p.grad.clone() for p in (layer.theta, layer.lam, layer.r)]
    layer.zero_grad()
    u = gmp.angles_to_unit(layer.theta).view(layer.kernel_shape)
    reference = layer.r.view(1, -1, 1, 1) * torch.relu(F.conv2d(x, u, padding=1) + layer.lam.view(1, -1, 1, 1))
    (reference * weights).sum().backward()
    for got, want in zip(fast, (layer.theta.grad, layer.lam.grad, layer.r.grad)):
        assert torch.allclose(got, want, atol=1e-11)


def test_identity_activation_is_an_affine_convolution():
    torch.manual_seed(2)
    layer = GmPConv2d(2, 3, 1, activation="identity", dtype=torch.float64)
    with torch.no_grad():
        layer.r.uniform_(-1, 1)
        layer.lam.normal_()
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    w = layer.r.view(-1, 1, 1, 1) * layer.direction
    assert torch.allclose(layer(x), F.conv2d(x, w, layer.r * layer.lam), atol=1e-13)


def test_set_weight_reproduces_a_relu_convolution_and_parameter_shapes():
    torch.manual_seed(3)
    conv = nn.Conv2d(3, 7, 3, stride=2, padding=1, dtype=torch.float64)
    layer = GmPConv2d(3, 7, 3, stride=2, padding=1, dtype=torch.float64)
    layer.set_weight(conv.weight.detach(), conv.bias.detach())
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    assert torch.allclose(layer(x), torch.relu(conv(x)), atol=1e-13)
    assert layer.theta.shape == (7, 26) and layer.lam.shape == (7,) and layer.r.shape == (7,)
    assert torch.allclose(layer.r, conv.weight.detach().reshape(7, -1).norm(dim=1), atol=1e-14)
    assert sum(p.numel() for p in layer.parameters()) == 7 * (27 + 1)


def test_initialisations_follow_the_paper_and_the_official_code():
    torch.manual_seed(4)
    uniform = GmPConv2d(64, 512, 3, init="uniform", dtype=torch.float64)
    u = uniform.direction.detach().reshape(512, -1)
    assert torch.equal(uniform.r.detach(), torch.ones(512, dtype=torch.float64))
    assert torch.equal(uniform.lam.detach(), torch.zeros(512, dtype=torch.float64))
    assert abs((u ** 2).mean().item() - 1 / 576) < 1e-12  # unit rows
    assert 0.4 < (u[:, -1] > 0).double().mean() < 0.6  # both half-spheres (exact inverse)
    glorot = GmPConv2d(64, 128, 3, init="glorot", dtype=torch.float64)
    w = glorot.r.detach().view(-1, 1, 1, 1) * glorot.direction.detach()
    bound = math.sqrt(6 / (64 * 9 + 128 * 9))  # Keras' Glorot fans for a 3x3 kernel
    assert w.abs().max() <= bound + 1e-12
    assert abs(w.var().item() - bound ** 2 / 3) < 0.03 * bound ** 2 / 3


def test_single_weight_filters_have_a_fixed_sign():
    torch.manual_seed(5)
    layer = GmPConv2d(1, 8, 1, init="glorot", dtype=torch.float64)
    assert layer.theta is None and not layer.sign.requires_grad
    assert set(layer.sign.flatten().tolist()) <= {-1.0, 1.0}
    x = torch.randn(3, 1, 4, 4, dtype=torch.float64)
    w = layer.r.view(-1, 1, 1, 1) * layer.direction
    assert torch.allclose(layer(x), torch.relu(F.conv2d(x, w)), atol=1e-13)


def test_mean_norm_subtracts_the_batch_and_spatial_mean_of_the_input():
    torch.manual_seed(6)
    layer = GmPConv2d(3, 4, 3, padding=1, mean_norm=True, dtype=torch.float64)
    x = torch.randn(6, 3, 5, 5, dtype=torch.float64) + 3.0
    centred = x - x.mean(dim=(0, 2, 3), keepdim=True)
    plain = GmPConv2d(3, 4, 3, padding=1, dtype=torch.float64)
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("mean_norm")})
    assert torch.allclose(layer(x), plain(centred), atol=1e-12)


def test_fold_batch_norm_equals_conv_then_bn_in_evaluation():
    torch.manual_seed(7)
    conv, bn = nn.Conv2d(3, 5, 3, bias=False, dtype=torch.float64), nn.BatchNorm2d(5, dtype=torch.float64)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_()
        bn.bias.normal_()
    bn.eval()
    weight, bias = fold_batch_norm(conv, bn)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    assert torch.allclose(F.conv2d(x, weight, bias), bn(conv(x)), atol=1e-12)


def test_convert_turns_conv_bn_relu_blocks_into_units_with_the_same_function():
    torch.manual_seed(8)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()),
                        nn.Conv2d(8, 4, 1), nn.Flatten(), nn.Linear(64, 10), nn.ReLU(), nn.Linear(10, 2)).double()
    with torch.no_grad():
        net[1].running_mean.normal_()
        net[1].running_var.uniform_(0.5, 2.0)
    net.eval()
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    converted = gmp.convert(net).eval()
    assert isinstance(converted[0], GmPConv2d) and isinstance(converted[1], nn.Identity)
    assert isinstance(converted[2], nn.Identity) and isinstance(converted[4][0], GmPConv2d)
    assert type(converted[5]) is nn.Conv2d  # no ReLU after it: stays standard
    assert isinstance(converted[7], gmp.GmPLinear) and type(converted[9]) is nn.Linear
    assert torch.allclose(converted(x), net(x), atol=1e-12)
    with_mn = gmp.convert(net, mean_norm=True).eval()
    assert with_mn[0].mean_norm is None  # the first unit sees the centred images
    assert with_mn[4][0].mean_norm is not None and with_mn[7].mean_norm is not None
    assert torch.allclose(with_mn(x), net(x), atol=1e-12)  # running means start at zero
    assert type(net[0]) is nn.Conv2d  # the original is untouched


def test_conv_rule_reports_what_it_replaces():
    conv, relu = nn.Conv2d(2, 3, 3), nn.ReLU()
    unit, length = convert_conv_block([conv, relu], mean_norm=False)
    assert isinstance(unit, GmPConv2d) and length == 2
    assert convert_conv_block([conv, nn.BatchNorm2d(3), relu], mean_norm=True)[1] == 3
    assert convert_conv_block([conv, nn.Identity()], mean_norm=False) is None
    assert convert_conv_block([nn.ReLU(), conv], mean_norm=False) is None


@pytest.mark.parametrize("kwargs, match", [
    (dict(in_channels=0, out_channels=2, kernel_size=3), "in_channels"),
    (dict(in_channels=3, out_channels=2, kernel_size=3, groups=2), "divisible"),
    (dict(in_channels=2, out_channels=2, kernel_size=3, activation="tanh"), "activation"),
    (dict(in_channels=2, out_channels=2, kernel_size=3, init="he"), "init"),
    (dict(in_channels=2, out_channels=2, kernel_size=3, padding="full"), "padding"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GmPConv2d(**kwargs)


def test_bad_inputs_and_weights_raise():
    layer = GmPConv2d(3, 2, 3)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        layer(torch.randn(2, 4, 5, 5))
    with pytest.raises(ValueError, match="shape"):
        layer.set_weight(torch.randn(2, 3, 2, 2))
    with pytest.raises(ValueError, match="nonzero"):
        layer.set_weight(torch.zeros(2, 3, 3, 3))


def test_channels_last_inputs_give_the_same_output():
    torch.manual_seed(9)
    layer = GmPConv2d(3, 4, 3, padding=1, init="glorot")
    x = torch.randn(2, 3, 7, 7)
    nhwc = x.contiguous(memory_format=torch.channels_last)
    assert torch.allclose(layer(nhwc), layer(x), atol=1e-6)


def test_the_accelerator_path_without_sign_checks_equals_the_formula_for_any_sign_of_r():
    torch.manual_seed(10)
    layer = GmPConv2d(3, 6, 3, padding=1, init="glorot", dtype=torch.float64)
    with torch.no_grad():
        layer.lam.normal_()
        layer.r.copy_(torch.tensor([1.5, -0.7, 0.0, 2.0, -3.0, 0.2]))
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    conv = F.conv2d(x, layer.direction, padding=1) + layer.lam.view(1, -1, 1, 1)
    expected = layer.r.view(1, -1, 1, 1) * torch.relu(conv)
    assert torch.allclose(layer._relu_without_sync(x), expected, atol=1e-13)
    assert torch.allclose(layer(x), expected, atol=1e-13)


def test_gmp_conv_off_the_cpu_reads_no_tensor_on_the_host():
    # As for GmPLinear: on the meta device any data-dependent read raises.
    layer = GmPConv2d(3, 4, 3, padding=1).to("meta")
    layer(torch.empty(2, 3, 8, 8, device="meta")).sum().backward()
    assert layer.theta.grad.shape == (4, 26) and layer.r.grad.shape == (4,)
