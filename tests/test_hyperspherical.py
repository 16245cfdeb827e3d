"""Hyperspherical coordinates (Eq. (6) of Chen & Ge): round trips, uniformity, gradients."""

import math

import pytest
import torch

import gmp
from gmp.hyperspherical import _angles_to_unit_reference

DIMS = [2, 3, 4, 5, 17, 50, 512, 4608]


def _random_vectors(n: int, dtype: torch.dtype, units: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    u = torch.randn(units, n, generator=g, dtype=dtype) * torch.rand(units, 1, generator=g, dtype=dtype) * 10
    u[0, -1] = -u[0, -1].abs()  # a negative last coordinate
    u[1, -1] = u[1, -1].abs()
    return u


@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_round_trip_vectors(n, dtype, tol):
    u = _random_vectors(n, dtype)
    unit = gmp.angles_to_unit(gmp.unit_to_angles(u))
    assert unit.dtype == dtype and unit.shape == u.shape
    assert torch.allclose(unit.norm(dim=-1), torch.ones(len(u), dtype=dtype), atol=tol, rtol=0)
    assert (unit - u / u.norm(dim=-1, keepdim=True)).abs().max() < tol


@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_round_trip_angles(n, dtype, tol):
    g = torch.Generator().manual_seed(n + 1)
    if n <= 50:  # uniform angles; their sine products would underflow in high dimension
        theta = torch.rand(8, n - 1, generator=g, dtype=dtype) * math.pi
        theta[:, -1] = (torch.rand(8, generator=g, dtype=dtype) * 2 - 1) * math.pi
    else:  # angles of uniform directions, computed in float64
        theta = gmp.unit_to_angles(torch.randn(8, n, generator=g, dtype=torch.float64)).to(dtype)
    back = gmp.unit_to_angles(gmp.angles_to_unit(theta))
    assert (back - theta).abs().max() < tol * 10  # angles amplify rounding of u near the poles by ~1/sin


def test_negative_last_coordinate_is_kept():
    u = torch.tensor([[0.3, -0.4, -0.5], [0.0, 0.0, -1.0], [1.0, -1e-3, -2.0]], dtype=torch.float64)
    theta = gmp.unit_to_angles(u)
    assert (theta[:, -1] < 0).all()
    assert torch.allclose(gmp.angles_to_unit(theta), u / u.norm(dim=-1, keepdim=True), atol=1e-14)


def test_half_sphere_inverse_folds_the_last_coordinate_as_the_official_code():
    u = torch.tensor([[0.3, -0.4, -0.5], [0.0, 0.0, -1.0], [1.0, -1e-3, -2.0], [0.2, 0.5, 0.7]], dtype=torch.float64)
    theta = gmp.unit_to_angles(u, half_sphere=True)
    folded = torch.cat([u[:, :-1], u[:, -1:].abs()], dim=-1)
    assert (theta[:, -1] >= 0).all() and (theta[:, -1] <= math.pi).all()
    assert torch.allclose(gmp.angles_to_unit(theta), folded / folded.norm(dim=-1, keepdim=True), atol=1e-14)
    assert torch.equal(theta[-1], gmp.unit_to_angles(u[-1:])[0])  # u_n >= 0: both inverses agree


def test_axis_vectors_and_angle_ranges():
    n = 6
    eye = torch.cat([torch.eye(n), -torch.eye(n)]).double()
    theta = gmp.unit_to_angles(eye)
    assert torch.allclose(gmp.angles_to_unit(theta), eye, atol=1e-15)
    assert (theta[:, :-1] >= 0).all() and (theta[:, :-1] <= math.pi).all()
    assert (theta[:, -1] > -math.pi).all() and (theta[:, -1] <= math.pi).all()


def test_matches_equation_6_by_hand():
    theta = torch.tensor([0.3, 1.1, -2.0], dtype=torch.float64)
    t1, t2, t3 = theta.tolist()
    expected = torch.tensor([math.cos(t1), math.sin(t1) * math.cos(t2),
                             math.sin(t1) * math.sin(t2) * math.cos(t3),
                             math.sin(t1) * math.sin(t2) * math.sin(t3)], dtype=torch.float64)
    assert torch.allclose(gmp.angles_to_unit(theta), expected, atol=1e-15)


def test_batched_shapes_and_scale_invariance():
    u = torch.randn(3, 4, 7, dtype=torch.float64)
    theta = gmp.unit_to_angles(u)
    assert theta.shape == (3, 4, 6)
    assert torch.allclose(gmp.unit_to_angles(1e-30 * u), theta, atol=1e-12)
    assert torch.allclose(gmp.unit_to_angles(1e30 * u), theta, atol=1e-12)


def test_uniform_directions_are_uniform():
    n, units = 50, 20000
    u = gmp.uniform_directions(units, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.allclose(u.norm(dim=-1), torch.ones(units, dtype=torch.float64), atol=1e-12)
    # E[u_i^2] = 1/n for each coordinate; the standard error of the mean of u_i^2 is
    # sqrt(2 / (n^2 (n + 2)) / units) ~ 1.4e-4 here.
    second = (u ** 2).mean(dim=0)
    assert (second - 1 / n).abs().max() < 6e-4
    assert (u[:, -1] > 0).float().mean().sub(0.5).abs() < 0.02
    # Uniform angles are not uniform directions: u_1 = cos(theta_1) then has E[u_1^2] = 1/2.
    theta = torch.rand(units, n - 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * math.pi
    assert (gmp.angles_to_unit(theta)[:, 0] ** 2).mean() > 0.4


def test_gradcheck_generic_angles():
    theta = torch.randn(6, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gmp.angles_to_unit, (theta,))


def test_gradcheck_degenerate_angles():
    theta = torch.randn(6, 5, dtype=torch.float64)
    theta[1, 2] = 0.0
    theta[2, 4] = 0.0
    theta[3, 0] = 0.0
    theta[3, 3] = 0.0
    theta[4, :] = 0.0
    assert torch.autograd.gradcheck(gmp.angles_to_unit, (theta.requires_grad_(True),))


def test_custom_backward_matches_autograd_of_cumprod_float32_large():
    theta = gmp.unit_to_angles(gmp.uniform_directions(32, 4608, generator=torch.Generator().manual_seed(2)))
    grad_out = torch.randn(32, 4608)
    a = theta.clone().requires_grad_(True)
    gmp.angles_to_unit(a).backward(grad_out)
    b = theta.double().requires_grad_(True)
    _angles_to_unit_reference(b).backward(grad_out.double())
    assert (a.grad.double() - b.grad).abs().max() < 1e-4 * b.grad.abs().max()


def test_bad_input():
    with pytest.raises(ValueError, match="nonzero"):
        gmp.unit_to_angles(torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="n >= 2"):
        gmp.unit_to_angles(torch.ones(3, 1))
    with pytest.raises(ValueError, match="finite"):
        gmp.unit_to_angles(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="floating"):
        gmp.angles_to_unit(torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="scalar"):
        gmp.angles_to_unit(torch.tensor(1.0))
    with pytest.raises(ValueError, match=">= 1"):
        gmp.uniform_directions(3, 0)


def test_scaled_directions_value_and_gradcheck():
    from gmp.hyperspherical import scaled_directions

    theta = torch.randn(7, 4, dtype=torch.float64)
    scale = torch.tensor([1.5, -0.7, 0.0, 2.0, 1e-3, -3.0, 0.4], dtype=torch.float64)
    theta[3, 1] = 0.0
    assert torch.allclose(scaled_directions(theta, scale), scale[:, None] * gmp.angles_to_unit(theta), atol=1e-15)
    assert torch.autograd.gradcheck(scaled_directions, (theta.requires_grad_(True), scale.requires_grad_(True)))
    with pytest.raises(ValueError, match=r"scale \(m,\)"):
        scaled_directions(theta, scale[:3])


def test_fourth_moment_test_rejects_glorot_uniform_directions_and_accepts_gaussian_ones():
    n, m = 100, 20_000
    g = torch.Generator().manual_seed(0)
    glorot = torch.nn.init.xavier_uniform_(torch.empty(m, n, dtype=torch.float64), generator=g)
    glorot = glorot / glorot.norm(dim=1, keepdim=True)
    # The second moments cannot tell them apart: every mean u_i^2 lies within noise of 1/n.
    stderr = math.sqrt(2 * (n - 1) / (n * n * (n + 2)) / m)
    assert float(((glorot ** 2).mean(dim=0) - 1 / n).abs().max()) < 5 * stderr
    rejected = gmp.hyperspherical.fourth_moment_test(glorot)
    assert rejected.z < -100 and rejected.p_value < 1e-12 and abs(rejected.ratio - 0.6) < 0.02
    for seed in range(5):
        gaussian = gmp.hyperspherical.uniform_directions(m, n, generator=torch.Generator().manual_seed(seed),
                                                     dtype=torch.float64)
        accepted = gmp.hyperspherical.fourth_moment_test(gaussian)
        assert abs(accepted.z) < 4 and accepted.p_value > 1e-4 and abs(accepted.ratio - 1) < 0.01
    with pytest.raises(ValueError, match="shape"):
        gmp.hyperspherical.fourth_moment_test(torch.ones(5))
