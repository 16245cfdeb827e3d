"""GmPLinear (Eqs. (10)-(11) of Chen & Ge), MeanNorm, convert and the MLP builder."""

import math

import pytest
import torch
from torch import nn

import gmp
from gmp.models import PARAMS


def test_gmp_linear_equals_scaled_relu_of_affine_map():
    torch.manual_seed(0)
    layer = gmp.GmPLinear(7, 5, init="glorot", dtype=torch.float64)
    with torch.no_grad():
        layer.lam.normal_()
        layer.r.uniform_(-2, 2)
    x = torch.randn(11, 7, dtype=torch.float64)
    u = layer.direction
    expected = layer.r * torch.relu(x @ u.T + layer.lam)
    assert torch.allclose(layer(x), expected, atol=1e-14)
    assert torch.allclose(u.norm(dim=1), torch.ones(5, dtype=torch.float64), atol=1e-14)
    identity = gmp.GmPLinear(7, 5, activation="identity", dtype=torch.float64)
    assert torch.allclose(identity(x), identity.r * (x @ identity.direction.T + identity.lam), atol=1e-14)


def test_parameter_shapes_and_gradients():
    layer = gmp.GmPLinear(6, 4)
    assert layer.theta.shape == (4, 5) and layer.lam.shape == (4,) and layer.r.shape == (4,)
    assert layer.direction.shape == (4, 6)
    layer(torch.randn(3, 6)).sum().backward()
    assert all(p.grad is not None for p in (layer.theta, layer.lam, layer.r))


def test_uniform_init_is_uniform_on_sphere_with_paper_values():
    torch.manual_seed(0)
    layer = gmp.GmPLinear(50, 20000, init="uniform", dtype=torch.float64)
    u = layer.direction.detach()
    assert torch.equal(layer.lam.detach(), torch.zeros(20000, dtype=torch.float64))
    assert torch.equal(layer.r.detach(), torch.ones(20000, dtype=torch.float64))
    assert ((u ** 2).mean(dim=0) - 1 / 50).abs().max() < 6e-4
    assert 0.45 < (u[:, -1] > 0).double().mean() < 0.55


def test_glorot_init_equals_a_glorot_layer():
    torch.manual_seed(0)
    layer = gmp.GmPLinear(300, 200, init="glorot", dtype=torch.float64)
    w = layer.r.detach()[:, None] * layer.direction.detach()
    bound = math.sqrt(6 / 500)
    assert w.abs().max() <= bound + 1e-12
    assert abs(w.var().item() - bound ** 2 / 3) < 0.05 * bound ** 2 / 3
    assert torch.equal(layer.lam.detach(), torch.zeros(200, dtype=torch.float64))


def test_one_input_has_fixed_sign_direction():
    torch.manual_seed(0)
    layer = gmp.GmPLinear(1, 50, init="glorot", dtype=torch.float64)
    assert layer.theta is None
    assert not layer.sign.requires_grad and set(layer.sign.flatten().tolist()) == {-1.0, 1.0}
    assert {n for n, _ in layer.named_parameters()} == {"lam", "r"}
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)[:, None]
    assert torch.allclose(layer(x), layer.r * torch.relu(x * layer.sign.T + layer.lam), atol=1e-15)


def test_mean_norm_train_and_eval():
    mn = gmp.MeanNorm(3, momentum=0.1).double()
    assert torch.equal(mn.running_mean, torch.zeros(3, dtype=torch.float64))
    x = torch.randn(64, 3, dtype=torch.float64) + torch.tensor([1.0, -2.0, 5.0], dtype=torch.float64)
    y = mn(x)
    assert torch.allclose(y.mean(dim=0), torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(mn.running_mean, 0.1 * x.mean(dim=0), atol=1e-14)
    mn(x)
    assert torch.allclose(mn.running_mean, (0.1 * 0.9 + 0.1) * x.mean(dim=0), atol=1e-14)
    mn.eval()
    assert torch.allclose(mn(x), x - mn.running_mean, atol=1e-15)
    assert len(list(mn.parameters())) == 0


def test_mean_norm_4d_averages_over_spatial_axes():
    mn = gmp.MeanNorm(2, momentum=1.0)
    x = torch.randn(4, 2, 5, 5) + torch.tensor([3.0, -1.0])[None, :, None, None]
    y = mn(x)
    assert torch.allclose(y.mean(dim=(0, 2, 3)), torch.zeros(2), atol=1e-5)
    assert torch.allclose(mn.running_mean, x.mean(dim=(0, 2, 3)), atol=1e-6)
    with pytest.raises(ValueError, match=r"\(N, 2, \*\)"):
        mn(torch.randn(4, 3))


def test_gmp_linear_with_mean_norm_is_equation_11():
    layer = gmp.GmPLinear(4, 3, mean_norm=True, dtype=torch.float64)
    x = torch.randn(10, 4, dtype=torch.float64) + 5
    expected = layer.r * torch.relu((x - x.mean(0)) @ layer.direction.T + layer.lam)
    assert torch.allclose(layer(x), expected, atol=1e-13)


def _sp_net():
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU())
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), inner, nn.Linear(5, 2)).double()


def test_convert_preserves_the_function_with_nested_modules():
    net = _sp_net()
    converted = gmp.convert(net)
    x = torch.randn(20, 3, dtype=torch.float64)
    assert torch.allclose(converted(x), net(x), atol=1e-12)
    assert isinstance(converted[0], gmp.GmPLinear) and isinstance(converted[1], nn.Identity)
    assert isinstance(converted[2][0], gmp.GmPLinear) and isinstance(converted[2][2], gmp.GmPLinear)
    assert type(converted[3]) is nn.Linear  # the output layer stays standard
    assert isinstance(net[0], nn.Linear)  # the original is untouched
    first = converted[0]
    w, b = net[0].weight, net[0].bias
    assert torch.allclose(first.r, w.norm(dim=1)) and torch.allclose(first.lam, b / w.norm(dim=1))


def test_convert_with_mean_norm_and_weight_norm_and_single_input():
    net = nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)),
                        nn.ReLU(), nn.Linear(4, 1)).double()
    converted = gmp.convert(net, mean_norm=True).eval()
    assert converted[0].mean_norm is None and converted[2].mean_norm is not None
    x = torch.randn(9, 1, dtype=torch.float64)
    assert torch.allclose(converted(x), net(x), atol=1e-12)


def test_gmp_mlp_output_layer_is_linear():
    for param in PARAMS:
        net = gmp.mlp([3, 7, 7, 2], param=param, dtype=torch.float64)
        assert net(torch.randn(5, 3, dtype=torch.float64)).shape == (5, 2)
        assert isinstance(net[-1], nn.Linear)
    wn = gmp.mlp([3, 7, 2], param="wn")
    assert nn.utils.parametrize.is_parametrized(wn[-1])
    assert torch.allclose(wn[0].parametrizations.weight.original0.flatten(), wn[0].weight.norm(dim=1))
    sp = gmp.mlp([3, 7, 2], param="sp")
    assert torch.equal(sp[0].bias, torch.zeros(7)) and sp[0].weight.abs().max() <= math.sqrt(6 / 10)
    kinds = [type(m).__name__ for m in gmp.mlp([3, 7, 7, 2], param="gmp_mn")]
    assert kinds == ["GmPLinear", "MeanNorm", "GmPLinear", "MeanNorm", "Linear"]
    kinds = [type(m).__name__ for m in gmp.mlp([3, 7, 2], param="bn")]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Linear"]
    uniform = gmp.mlp([3, 7, 2], param="gmp", init="uniform")
    assert torch.equal(uniform[0].r.detach(), torch.ones(7))


def test_bad_input():
    with pytest.raises(ValueError, match="in_features"):
        gmp.GmPLinear(0, 3)
    with pytest.raises(ValueError, match="init"):
        gmp.GmPLinear(3, 3, init="he")
    with pytest.raises(ValueError, match="activation"):
        gmp.GmPLinear(3, 3, activation="swish")
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        gmp.GmPLinear(3, 2)(torch.randn(4, 5))
    with pytest.raises(ValueError, match="sp, wn, bn, wn_mbn, gmp, gmp_mn"):
        gmp.mlp([2, 3, 1], param="xx")
    with pytest.raises(ValueError, match="GmP layers only"):
        gmp.mlp([2, 3, 1], param="sp", init="uniform")
    with pytest.raises(ValueError, match="sizes"):
        gmp.mlp([2], param="sp")
    with pytest.raises(ValueError, match="nonzero"):
        gmp.convert(nn.Sequential(nn.Linear(2, 2), nn.ReLU()).requires_grad_(False).apply(
            lambda m: m.weight.zero_() if isinstance(m, nn.Linear) else None))


def test_fast_path_for_positive_scales_matches_the_general_formula():
    torch.manual_seed(1)
    layer = gmp.GmPLinear(9, 6, init="glorot", dtype=torch.float64)
    with torch.no_grad():
        layer.lam.normal_()
        layer.r.uniform_(0.5, 2.0)
    x = torch.randn(13, 9, dtype=torch.float64)
    out = layer(x)
    out.square().sum().backward()
    fast = [p.grad.clone() for p in (layer.theta, layer.lam, layer.r)]
    layer.zero_grad()
    reference = layer.r * torch.relu(x @ gmp.angles_to_unit(layer.theta).T + layer.lam)
    assert torch.allclose(out, reference, atol=1e-13)
    reference.square().sum().backward()
    for got, expected in zip(fast, (layer.theta.grad, layer.lam.grad, layer.r.grad)):
        assert torch.allclose(got, expected, atol=1e-12)
