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


# ---------------------------------------------------------------- issue 30: the fused map and its backward

def _fused_and_reference(theta: torch.Tensor, scale: torch.Tensor, grad: torch.Tensor):
    """Output and gradients of :func:`gmp.hyperspherical.scaled_directions` and of the plain
    formula differentiated by autograd through ``cumprod``, for the same upstream gradient."""
    from gmp.hyperspherical import scaled_directions

    results = []
    for fn in (scaled_directions, lambda t, s: s[:, None] * _angles_to_unit_reference(t)):
        t, s = theta.clone().requires_grad_(True), scale.clone().requires_grad_(True)
        out = fn(t, s)
        out.backward(grad)
        results.append((out.detach(), t.grad, s.grad))
    return results


def _every_orthant(n: int, units: int, generator: torch.Generator) -> torch.Tensor:
    """Angles of ``units`` Gaussian vectors in R^n whose signs run through every pattern of the
    first ``log2(units)`` coordinates (every orthant when ``units >= 2^n``) and are random after
    them, then some raw angles anywhere in (-2 pi, 2 pi)."""
    u = torch.randn(units, n, generator=generator, dtype=torch.float64).abs()
    negative = torch.rand(units, n, generator=generator) < 0.5
    bits = min(n, units.bit_length() - 1)
    negative[:, :bits] = (torch.arange(units)[:, None] >> torch.arange(bits) & 1).bool()
    u = torch.where(negative, -u, u)
    theta = gmp.unit_to_angles(u)
    raw = (torch.rand(4, n - 1, generator=generator, dtype=torch.float64) * 4 - 2) * math.pi
    return torch.cat([theta, raw])


def _degenerate_rows(theta: torch.Tensor, scale: torch.Tensor) -> None:
    """Put zero angles, a zero scale and an angle pi into the first rows, in place."""
    k = theta.shape[1]
    theta[0, 0] = 0.0  # the first factor after the scale vanishes
    theta[1, k // 2] = 0.0
    theta[2, :] = 0.0  # every sine zero: the direction is e_1
    theta[3, 0] = theta[3, k - 1] = 0.0  # two zeros: the second one cuts the first one's tail sum
    theta[4, k - 1] = math.pi  # sin(pi) rounds to 1.2e-16, not 0: the quotients stand
    scale[5] = 0.0


@pytest.mark.parametrize("index_rows", [True, False], ids=["rows-by-index", "masked"])
@pytest.mark.parametrize("n", [2, 3, 5, 32, 33, 40, 257, 1024])
def test_fused_map_equals_autograd_through_cumprod_in_every_orthant_and_degenerate_points(n, index_rows, monkeypatch):
    from gmp import hyperspherical

    monkeypatch.setattr(hyperspherical, "_index_rows", lambda device: index_rows)
    g = torch.Generator().manual_seed(n)
    theta = _every_orthant(n, max(2 ** min(n, 5), 8), g)
    scale = torch.rand(len(theta), generator=g, dtype=torch.float64) * 4 - 2
    _degenerate_rows(theta, scale)
    grad = torch.randn(len(theta), n, generator=g, dtype=torch.float64)
    fused, reference = _fused_and_reference(theta, scale, grad)
    for got, expected in zip(fused, reference):
        assert torch.isfinite(got).all()
        assert (got - expected).abs().max() <= 1e-13 * expected.abs().max()
    assert torch.equal(fused[1][5], torch.zeros(n - 1, dtype=torch.float64))  # zero scale: no angle moves w


@pytest.mark.parametrize("index_rows", [True, False], ids=["rows-by-index", "masked"])
def test_fused_map_gradcheck_at_degenerate_angles_on_both_paths(index_rows, monkeypatch):
    from gmp import hyperspherical

    monkeypatch.setattr(hyperspherical, "_index_rows", lambda device: index_rows)
    theta = torch.randn(7, 40, dtype=torch.float64)
    scale = torch.randn(7, dtype=torch.float64)
    _degenerate_rows(theta, scale)
    assert torch.autograd.gradcheck(hyperspherical.scaled_directions,
                                    (theta.requires_grad_(True), scale.requires_grad_(True)))


def test_fused_map_underflowing_products_take_the_exact_scale_gradient():
    # scale 1e-300 times sines of 1e-5: P_l underflows to exactly 0 at a factor that is not 0.
    from gmp.hyperspherical import scaled_directions

    theta = torch.full((2, 40), 1e-5, dtype=torch.float64)
    theta[1] = torch.linspace(0.1, 3.0, 40, dtype=torch.float64)
    scale = torch.tensor([1e-300, 1e-300], dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, 41, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = theta.clone().requires_grad_(True)
    scaled_directions(t, scale).backward(grad)
    assert torch.isfinite(t.grad).all()
    expected = (grad * gmp.angles_to_unit(theta)).sum(dim=1)  # dL/dscale = g . u(theta)
    assert torch.allclose(scale.grad, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 48, 1000])
def test_blocked_scans_equal_torch_scans(n):
    from gmp.hyperspherical import _cumprod_, _padded_width, _reverse_cumsum

    width = _padded_width(n)
    assert width >= n and (width == n or width % 16 == 0)
    x = torch.rand(6, width, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) + 0.5
    assert torch.allclose(_cumprod_(x.clone()), torch.cumprod(x, 1), rtol=1e-13, atol=0)
    expected = x.flip(1).cumsum(1).flip(1)
    assert torch.allclose(_reverse_cumsum(x), expected, rtol=1e-13, atol=0)


def test_masked_path_reads_no_tensor_on_the_host():
    # On the meta device every data-dependent read (bool(), .item(), nonzero) raises, so a
    # forward and backward pass there reads nothing back: no GPU step would wait for the host.
    from gmp.hyperspherical import scaled_directions

    theta = torch.empty(5, 40, device="meta", requires_grad=True)
    scale = torch.empty(5, device="meta", requires_grad=True)
    scaled_directions(theta, scale).backward(torch.empty(5, 41, device="meta"))
    assert theta.grad.shape == (5, 40) and scale.grad.shape == (5,)


def test_reverse_scan_avoids_matrix_products_that_may_round_float32_to_bfloat16():
    from gmp.hyperspherical import _exact_matmul, _reverse_cumsum

    x = torch.rand(4, 48, generator=torch.Generator().manual_seed(0))
    assert _exact_matmul(x) and _exact_matmul(x.double())
    assert not _exact_matmul(torch.empty(4, 48, device="meta"))  # any device but the CPU: TF32 may be on
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        assert not _exact_matmul(x) and _exact_matmul(x.double())
        assert torch.equal(_reverse_cumsum(x), x.flip(1).cumsum(1).flip(1))
    finally:
        torch.set_float32_matmul_precision(before)
