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


def test_glorot_half_converts_the_same_draw_into_the_half_sphere():
    torch.manual_seed(0)
    exact = gmp.GmPLinear(4, 2000, init="glorot", dtype=torch.float64)
    torch.manual_seed(0)
    half = gmp.GmPLinear(4, 2000, init="glorot_half", dtype=torch.float64)
    u, v = exact.direction.detach(), half.direction.detach()
    assert 0.45 < (u[:, -1] < 0).double().mean() < 0.55  # the exact conversion keeps the Glorot signs
    assert (v[:, -1] >= 0).all()
    assert torch.allclose(v, torch.cat([u[:, :-1], u[:, -1:].abs()], dim=-1), atol=1e-14)
    assert torch.equal(half.r, exact.r) and torch.equal(half.lam, exact.lam)


def test_mlp_glorot_half_changes_only_the_gmp_directions():
    torch.manual_seed(3)
    exact = gmp.mlp([3, 50, 1], param="gmp", dtype=torch.float64)
    torch.manual_seed(3)
    half = gmp.mlp([3, 50, 1], param="gmp", dtype=torch.float64, init="glorot_half")
    assert torch.equal(exact[-1].weight, half[-1].weight)
    flipped = exact[0].direction[:, -1] < 0
    assert flipped.any()
    assert torch.allclose(half[0].direction[:, -1], exact[0].direction[:, -1].abs(), atol=1e-14)
    with pytest.raises(ValueError, match="GmP layers only"):
        gmp.mlp([3, 5, 1], param="sp", init="glorot_half")


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


# ---------------------------------------------------------------- issue 19: refuse what cannot be done right

def test_mean_norm_of_a_sequence_input_centres_the_feature_axis():
    torch.manual_seed(0)
    layer = gmp.GmPLinear(4, 3, mean_norm=True, dtype=torch.float64)
    x = torch.randn(5, 7, 4, dtype=torch.float64) + torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    centred = x - x.reshape(-1, 4).mean(dim=0)  # over batch and time, per feature, as nn.BatchNorm1d would
    expected = layer.r * torch.relu(centred @ layer.direction.T + layer.lam)
    assert torch.allclose(layer(x), expected, atol=1e-12)
    assert torch.allclose(layer.mean_norm.running_mean, 0.01 * x.reshape(-1, 4).mean(dim=0), atol=1e-12)


@pytest.mark.parametrize("shape", [(0, 3), (1, 3), (1, 3, 1, 1)])
def test_mean_norm_in_training_refuses_an_empty_batch_or_a_single_value(shape):
    norm = gmp.MeanNorm(3)
    with pytest.raises(ValueError, match="more than 1 value per feature"):
        norm(torch.randn(shape))
    assert torch.equal(norm.running_mean, torch.zeros(3))  # untouched, not NaN
    norm.eval()
    assert norm(torch.randn(shape)).shape == shape  # evaluation uses the running mean: fine
    assert gmp.MeanNorm(3).train()(torch.randn(1, 3, 2, 2)).abs().sum() > 0  # one image, 4 values each: fine


def test_mean_norm_inside_gmp_linear_reports_the_users_input_shape():
    layer = gmp.GmPLinear(3, 2, mean_norm=True)
    with pytest.raises(ValueError, match=r"more than 1 value per feature, got input of shape \(1, 1, 3\) "):
        layer(torch.randn(1, 1, 3))


class _Scaled(nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


def test_convert_refuses_a_linear_subclass_with_its_own_forward():
    with pytest.raises(ValueError, match="_Scaled.forward overriding Linear.forward"):
        gmp.convert(nn.Sequential(_Scaled(3, 4), nn.ReLU(), nn.Linear(4, 1)))


def test_convert_refuses_a_linear_or_relu_with_hooks_and_accepts_a_plain_subclass():
    hooked = nn.Linear(3, 4)
    hooked.register_forward_hook(lambda module, args, out: out * 0)
    with pytest.raises(ValueError, match="hooks"):
        gmp.convert(nn.Sequential(hooked, nn.ReLU(), nn.Linear(4, 1)))
    relu = nn.ReLU()
    relu.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    with pytest.raises(ValueError, match="hooks"):
        gmp.convert(nn.Sequential(nn.Linear(3, 4), relu))
    out = nn.Linear(4, 1)
    out.register_forward_hook(lambda module, args, y: y)  # not converted, so allowed
    subclass = type("Renamed", (nn.Linear,), {})(3, 4)  # forward inherited: exact
    net = gmp.convert(nn.Sequential(subclass, nn.ReLU(), out))
    assert isinstance(net[0], gmp.GmPLinear) and net[2] is not out and net[2]._forward_hooks


def test_convert_keeps_a_weight_tie_as_one_unit_used_twice():
    torch.manual_seed(0)
    tied = nn.Linear(4, 4, dtype=torch.float64)
    net = nn.Sequential(tied, nn.ReLU(), tied, nn.ReLU(), nn.Linear(4, 1, dtype=torch.float64))
    converted = gmp.convert(net)
    assert isinstance(converted[0], gmp.GmPLinear) and converted[2] is converted[0]
    assert len(list(converted.parameters())) == len(list(net.parameters())) + 1  # theta, lam, r once
    x = torch.randn(6, 4, dtype=torch.float64)
    assert torch.allclose(converted(x), net(x), atol=1e-12)


def test_convert_refuses_a_tie_it_cannot_keep():
    tied = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="weight tie"):
        gmp.convert(nn.Sequential(tied, nn.ReLU(), tied))


def test_convert_refuses_a_parameter_shared_between_layers():
    a, b, out = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight  # two units would train two independent copies of one weight
    with pytest.raises(ValueError, match=r"weight tie: the parameter 0\.weight is shared with 2\.weight"):
        gmp.convert(nn.Sequential(a, nn.ReLU(), b, nn.ReLU()))
    out.bias = a.bias  # a converted layer's bias, shared with a layer that stays standard
    with pytest.raises(ValueError, match=r"weight tie: the parameter 0\.bias is shared with 2\.1\.bias"):
        gmp.convert(nn.Sequential(a, nn.ReLU(), nn.Sequential(nn.Tanh(), out)))
    conv, other = nn.Conv2d(1, 2, 3), nn.Conv2d(1, 2, 3)
    bn, bn2 = nn.BatchNorm2d(2), nn.BatchNorm2d(2)
    bn2.weight = bn.weight  # folded into the GmP unit: the tie would be dropped too
    with pytest.raises(ValueError, match=r"the parameter 1\.weight is shared with 4\.weight"):
        gmp.convert(nn.Sequential(conv, bn, nn.ReLU(), other, bn2).eval())


def test_a_callable_named_identity_is_applied_as_given():
    def identity(s):
        return s ** 2

    torch.manual_seed(0)
    layer = gmp.GmPLinear(3, 2, activation=identity, dtype=torch.float64)
    with torch.no_grad():
        layer.r.copy_(torch.tensor([0.5, 3.0]))
    x = torch.randn(5, 3, dtype=torch.float64)
    expected = layer.r * (x @ layer.direction.T + layer.lam) ** 2
    assert torch.allclose(layer(x), expected, atol=1e-12)


@pytest.mark.parametrize("in_features", [1, 2, 5])
def test_set_weight_refuses_non_finite_weights_on_every_path(in_features):
    layer = gmp.GmPLinear(in_features, 2)
    weight = torch.ones(2, in_features)
    weight[1, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        layer.set_weight(weight)
    with pytest.raises(ValueError, match="finite"):
        layer.set_weight(torch.ones(2, in_features), torch.tensor([0.0, float("inf")]))


@pytest.mark.parametrize("scale", [1e20, 1e-30])
@pytest.mark.parametrize("in_features", [1, 3])
def test_set_weight_computes_the_norm_without_overflow_or_underflow(scale, in_features):
    torch.manual_seed(0)
    weight = torch.randn(4, in_features, dtype=torch.float64)
    layer = gmp.GmPLinear(in_features, 4)  # float32
    layer.set_weight((weight * scale).float())
    expected = weight.norm(dim=1) * scale
    assert torch.allclose(layer.r.double(), expected, rtol=1e-5)
    assert torch.allclose(layer.direction.double(), weight / weight.norm(dim=1, keepdim=True), atol=1e-5)


def test_set_weight_refuses_a_norm_the_dtype_cannot_hold():
    with pytest.raises(ValueError, match="overflow"):
        gmp.GmPLinear(4, 1).set_weight(torch.full((1, 4), 3e38))


@pytest.mark.parametrize("make", [lambda: gmp.GmPLinear(3, 2, activation="identity"),
                                  lambda: gmp.GmPConv2d(2, 3, 3, activation="identity"),
                                  lambda: gmp.models.resnet34("gmp_mn", width=4, num_classes=3)],
                         ids=["linear", "conv", "resnet34-gmp_mn"])
def test_layers_with_the_identity_activation_can_be_saved(make, tmp_path):
    import pickle

    module = make()
    torch.save(module, tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    assert pickle.loads(pickle.dumps(module)) is not None
    x = torch.randn(2, 3) if isinstance(module, gmp.GmPLinear) else torch.randn(2, module.conv1.in_channels
                                                                               if hasattr(module, "conv1") else 2, 8, 8)
    module.eval(), loaded.eval()
    assert torch.equal(module(x), loaded(x))


@pytest.mark.parametrize("r_sign", [1.0, -1.0])
def test_gmp_linear_compiles_without_graph_breaks(r_sign):
    torch.manual_seed(0)
    layer = gmp.GmPLinear(5, 3, mean_norm=True)
    with torch.no_grad():
        layer.r.mul_(r_sign)
    x = torch.randn(4, 5)
    expected = layer(x)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(x)
    assert torch.allclose(got, expected, atol=1e-6)
    got.sum().backward()
    assert layer.theta.grad is not None and torch.isfinite(layer.theta.grad).all()


def test_gmp_linear_off_the_cpu_reads_no_tensor_on_the_host():
    # On the meta device every data-dependent read (bool(), .item(), nonzero) raises: the layer's
    # forward and backward pass, the hyperspherical map included, never make a GPU wait for the host.
    layer = gmp.GmPLinear(40, 6, mean_norm=True).to("meta")
    layer(torch.empty(8, 40, device="meta")).sum().backward()
    assert layer.theta.grad.shape == (6, 39) and layer.r.grad.shape == (6,) and layer.lam.grad.shape == (6,)


def test_layers_and_conv_depend_one_way_and_convert_lives_above_both():
    """gmp.conv builds on gmp.layers; gmp.layers imports neither gmp.conv nor gmp.conversion anywhere (inside
    functions too), so the two never import each other in a circle."""
    import ast
    from pathlib import Path

    def imported(module: str) -> set[str]:
        tree = ast.parse(Path(gmp.__file__).with_name(f"{module}.py").read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert "gmp.layers" in imported("conv")
    assert not {"gmp.conv", "gmp.conversion"} & imported("layers")
    assert {"gmp.conv", "gmp.layers"} <= imported("conversion")
    assert gmp.convert.__module__ == "gmp.conversion"
