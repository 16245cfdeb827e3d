"""Characteristic points (Eqs. (3)-(7) of Chen & Ge) and the perturbation analysis (Eqs. (8)-(9))."""

import math

import numpy as np
import pytest
import torch
from torch import nn

import gmp


def _check_on_boundary_and_orthogonal(phi, preact, normal):
    """phi has zero pre-activation, and moving along the boundary from phi keeps it zero."""
    assert preact(phi).abs().max() < 1e-10
    tangent = torch.randn_like(phi)
    tangent = tangent - (tangent * normal).sum(1, keepdim=True) * normal  # in the boundary plane
    assert preact(phi + tangent).abs().max() < 1e-10
    assert (phi * tangent).sum(1).abs().max() < 1e-10  # phi is orthogonal to the boundary
    # phi is the point of the boundary closest to the origin (brute force over tangent moves)
    assert ((phi + tangent).norm(dim=1) >= phi.norm(dim=1) - 1e-12).all()


def _root_along(preact_row, direction):
    """Brute-force root of t -> preact(t * direction) by bisection (the boundary point on a ray)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if (preact_row(lo * direction) > 0) == (preact_row(mid * direction) > 0):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2 * direction


def test_sp_points_match_equation_4_and_brute_force_root():
    torch.manual_seed(0)
    layer = nn.Linear(3, 6).double()
    phi = gmp.characteristic_points(layer)
    w, b = layer.weight.detach(), layer.bias.detach()
    assert torch.allclose(phi, -b[:, None] * w / (w * w).sum(1, keepdim=True), atol=1e-15)
    _check_on_boundary_and_orthogonal(phi, lambda x: (w * x).sum(1) + b, w / w.norm(dim=1, keepdim=True))
    for i in range(6):  # the root of the pre-activation along the normal is phi
        u = w[i] / w[i].norm()
        root = _root_along(lambda x: (w[i] @ x + b[i]).item(), u)
        assert torch.allclose(root, phi[i], atol=1e-9)


def test_wn_points_use_effective_weight():
    torch.manual_seed(1)
    layer = nn.utils.parametrizations.weight_norm(nn.Linear(4, 5).double())
    with torch.no_grad():
        layer.parametrizations.weight.original0.mul_(3.0)
    w, b = layer.weight.detach(), layer.bias.detach()
    phi = gmp.characteristic_points(layer)
    _check_on_boundary_and_orthogonal(phi, lambda x: (w * x).sum(1) + b, w / w.norm(dim=1, keepdim=True))


def test_bn_points_use_running_statistics():
    torch.manual_seed(2)
    layer, bn = nn.Linear(2, 4).double(), nn.BatchNorm1d(4).double()
    bn.train()
    for _ in range(5):
        bn(layer(torch.randn(32, 2, dtype=torch.float64) * 3 + 1))
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.normal_()
    bn.eval()
    phi = gmp.characteristic_points(layer, bn)
    w = layer.weight.detach()
    with torch.no_grad():
        preact = torch.stack([bn(layer(phi[i:i + 1]))[0, i] for i in range(4)])
    assert preact.abs().max() < 1e-10
    assert torch.allclose(phi / phi.norm(dim=1, keepdim=True), torch.sign((phi * w).sum(1, keepdim=True))
                          * w / w.norm(dim=1, keepdim=True), atol=1e-10)  # phi is normal to B
    assert not torch.allclose(phi, gmp.characteristic_points(layer))  # BN moves the boundary


def test_gmp_points_are_minus_lambda_u():
    torch.manual_seed(3)
    layer = gmp.GmPLinear(3, 5, dtype=torch.float64)
    with torch.no_grad():
        layer.lam.normal_()
    phi = gmp.characteristic_points(layer)
    u, lam = layer.direction.detach(), layer.lam.detach()
    assert torch.allclose(phi, -lam[:, None] * u, atol=1e-15)
    assert torch.allclose(phi.norm(dim=1), lam.abs(), atol=1e-14)
    _check_on_boundary_and_orthogonal(phi, lambda x: (u * x).sum(1) + lam, u)


def test_gmp_points_with_mean_norm_use_running_mean():
    layer = gmp.GmPLinear(3, 4, mean_norm=True, dtype=torch.float64)
    layer(torch.randn(50, 3, dtype=torch.float64) + 4)
    layer.eval()
    phi = gmp.characteristic_points(layer)
    with torch.no_grad():
        preact = layer.mean_norm(phi) @ layer.direction.T + layer.lam
    assert torch.diagonal(preact).abs().max() < 1e-12


def test_converted_layer_has_the_same_points():
    torch.manual_seed(4)
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    converted = gmp.convert(net)
    assert torch.allclose(gmp.characteristic_points(net[0]), gmp.characteristic_points(converted[0]), atol=1e-13)


def test_boundary_angle_is_arccos_and_accurate_for_tiny_angles():
    a, b = torch.randn(100, 5, dtype=torch.float64), torch.randn(100, 5, dtype=torch.float64)
    cos = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    assert torch.allclose(gmp.boundary_angle(a, b), torch.arccos(cos), atol=1e-12)
    t = torch.tensor([1e-9], dtype=torch.float64)
    u0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    u1 = torch.stack([torch.cos(t), torch.sin(t)], dim=1)
    assert abs(gmp.boundary_angle(u0, u1).item() - 1e-9) < 1e-20


@pytest.mark.parametrize("eps", [1e-4, 1e-3, 1e-2, 1e-1, -0.05])
def test_gmp_turns_the_boundary_by_exactly_eps_in_2d(eps):
    g = torch.Generator().manual_seed(5)
    w = 1e-3 * torch.randn(1000, 2, generator=g, dtype=torch.float64)
    b = 1e-3 * torch.randn(1000, generator=g, dtype=torch.float64)
    result = gmp.perturb_boundary(w, b, eps, "gmp")
    assert (result.angle - abs(eps)).abs().max() < 1e-12  # Eq. (9)
    lam = b / w.norm(dim=1)
    exact = torch.sqrt(eps ** 2 + 2 * lam * (lam + eps) * (1 - math.cos(eps)))  # law of cosines
    assert torch.allclose(result.shift, exact, atol=1e-12)
    assert (result.shift <= abs(eps) * (1 + lam.abs()) + 1e-15).all()  # triangle inequality


def test_sp_and_wn_follow_equation_8():
    g = torch.Generator().manual_seed(6)
    w = 1e-3 * torch.randn(500, 3, generator=g, dtype=torch.float64)
    b = 1e-3 * torch.randn(500, generator=g, dtype=torch.float64)
    eps = 1e-3
    sp, wn = gmp.perturb_boundary(w, b, eps, "sp"), gmp.perturb_boundary(w, b, eps, "wn")
    cos = (w * (w + eps)).sum(1) / (w.norm(dim=1) * (w + eps).norm(dim=1))
    assert torch.allclose(sp.angle, torch.arccos(cos.clamp(-1, 1)), atol=1e-7)
    assert torch.allclose(wn.angle, sp.angle, atol=1e-14)  # WN turns like SP (Sec. 4.1)
    assert sp.angle.median() > 0.3 and sp.shift.median() > 0.3  # small weights: drastic moves
    gm = gmp.perturb_boundary(w, b, eps, "gmp")
    assert gm.shift.median() < 1e-2


def test_perturbation_of_zero_reaches_pi_under_sp():
    w = torch.tensor([[1e-3, 2e-3]], dtype=torch.float64)
    b = torch.tensor([1e-3], dtype=torch.float64)
    eps = -2e-3  # w + eps * 1 = (-1e-3, 0): far from w's direction although |eps| is tiny
    angle = gmp.perturb_boundary(w, b, eps, "sp").angle.item()
    assert angle > math.pi / 2


def test_tracker_records_history():
    torch.manual_seed(7)
    net = gmp.mlp([2, 4, 1], param="gmp", dtype=torch.float64)
    tracker = gmp.CharacteristicTracker(lambda m: m[0], every=2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(16, 2, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)
    for epoch in range(5):
        tracker(epoch, net)
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()
    assert tracker.epochs == [0, 2, 4]
    assert tracker.history.shape == (3, 4, 2)
    change = tracker.max_change()
    expected = np.linalg.norm(tracker.history[1] - tracker.history[0], axis=1).max()
    assert change.shape == (2,) and change[0] == pytest.approx(expected)
    by_reference = gmp.CharacteristicTracker(net[0])
    by_reference(0, None)
    assert np.allclose(by_reference.history[0], gmp.characteristic_points(net[0]).numpy())


def test_bad_input():
    with pytest.raises(ValueError, match="nn.Linear"):
        gmp.characteristic_points(nn.Conv2d(1, 1, 3))
    with pytest.raises(ValueError, match="sp, wn, gmp"):
        gmp.perturb_boundary(torch.ones(2, 2), torch.ones(2), 0.1, "bn")
    with pytest.raises(ValueError, match="nonzero"):
        gmp.perturb_boundary(torch.zeros(2, 2), torch.ones(2), 0.1, "sp")
    with pytest.raises(ValueError, match="4 units"):
        gmp.characteristic_points(nn.Linear(2, 4), nn.BatchNorm1d(3))
    with pytest.raises(ValueError, match="every"):
        gmp.CharacteristicTracker(nn.Linear(2, 2), every=0)
