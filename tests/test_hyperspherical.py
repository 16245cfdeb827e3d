"""Hyperspherical coordinates (Eq. (6) of Chen & Ge): round trips, uniformity, gradients."""

import math
import os
import subprocess
import sys
import time
import warnings

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


PATHS = ["compiled", "torch-rows-by-index", "torch-masked"]
"""The three implementations of the map: the compiled CPU kernel (:mod:`gmp._native`), and the torch
one (GPUs, or no C compiler) picking degenerate rows by index (its CPU form) or masking every row
(its GPU form)."""


def _use_path(path: str, monkeypatch) -> None:
    from gmp import _native, hyperspherical

    if path == "compiled":
        assert _native.unavailable() is None, _native.unavailable()
        return
    monkeypatch.setattr(hyperspherical._native, "kernel", lambda theta: None)
    monkeypatch.setattr(hyperspherical, "_index_rows", lambda device: path == "torch-rows-by-index")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [2, 3, 5, 9, 32, 33, 40, 257, 1024])
def test_fused_map_equals_autograd_through_cumprod_in_every_orthant_and_degenerate_points(n, path, monkeypatch):
    _use_path(path, monkeypatch)
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


@pytest.mark.parametrize("path", PATHS)
def test_fused_map_gradcheck_at_degenerate_angles_on_every_path(path, monkeypatch):
    from gmp import hyperspherical

    _use_path(path, monkeypatch)
    theta = torch.randn(7, 40, dtype=torch.float64)
    scale = torch.randn(7, dtype=torch.float64)
    _degenerate_rows(theta, scale)
    assert torch.autograd.gradcheck(hyperspherical.scaled_directions,
                                    (theta.requires_grad_(True), scale.requires_grad_(True)))


@pytest.mark.parametrize("path", PATHS)
def test_fused_map_underflowing_products_take_the_exact_scale_gradient(path, monkeypatch):
    # scale 1e-300 times sines of 1e-5: P_l underflows to exactly 0 at a factor that is not 0.
    from gmp.hyperspherical import scaled_directions

    _use_path(path, monkeypatch)
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


# ---------------------------------------------------------------- the compiled CPU kernel (gmp._native)

def test_compiled_map_serves_float32_and_float64_cpu_tensors_only():
    from gmp import _native

    assert _native.unavailable() is None, _native.unavailable()
    assert _native.kernel(torch.zeros(2, 3)) is not None and _native.kernel(torch.zeros(2, 3).double()) is not None
    assert _native.kernel(torch.zeros(2, 3, dtype=torch.bfloat16)) is None
    assert _native.kernel(torch.zeros(2, 3, device="meta")) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_sines_and_cosines_at_large_and_special_angles(dtype):
    # The kernel's own sine and cosine: a reduction by multiples of pi/2, then polynomials, up to
    # 8192 (float32) or 2^20 (float64), the C library beyond; inf and nan give nan as torch does.
    from gmp.hyperspherical import scaled_directions

    special = [0.0, -0.0, math.pi / 2, -math.pi / 2, math.pi, -math.pi, 3 * math.pi / 4, 1e3, -8191.5, 8193.0,
               -1e5, 1048575.0, 1048577.0, 3e7, 1e30, float("inf"), float("-inf"), float("nan")]
    theta = torch.tensor(special, dtype=torch.float64)
    theta = torch.cat([theta, (torch.rand(4000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
                               * 2 - 1) * 20])[:, None].to(dtype)
    got = scaled_directions(theta, torch.ones(len(theta), dtype=dtype))
    exact = torch.stack([torch.cos(theta.double()[:, 0]), torch.sin(theta.double()[:, 0])], dim=1)
    nan = ~torch.isfinite(theta[:, 0])
    assert torch.isnan(got[nan]).all() and torch.isfinite(got[~nan]).all()
    ulp = torch.finfo(dtype).eps  # of numbers in [1, 2): the errors of values of magnitude up to 1
    assert (got[~nan].double() - exact[~nan]).abs().max() <= ulp


def test_compiled_map_of_float32_is_as_accurate_as_torchs():
    from gmp.hyperspherical import scaled_directions

    theta = gmp.unit_to_angles(gmp.uniform_directions(64, 1024, generator=torch.Generator().manual_seed(3)))
    exact = _angles_to_unit_reference(theta.double())
    ones = torch.ones(64)
    compiled = (scaled_directions(theta, ones).double() - exact).abs().max()
    plain = (_angles_to_unit_reference(theta).double() - exact).abs().max()
    assert compiled <= 2 * plain


def test_compiled_map_is_the_same_on_any_number_of_threads_and_for_strided_angles(monkeypatch):
    from gmp import _native
    from gmp.hyperspherical import scaled_directions

    monkeypatch.setattr(_native, "ANGLES_PER_THREAD", 1)  # split even these few rows
    assert _native.threaded()

    theta = torch.randn(37, 300, generator=torch.Generator().manual_seed(4))
    scale = torch.randn(37, generator=torch.Generator().manual_seed(5))
    grad = torch.randn(37, 301, generator=torch.Generator().manual_seed(6))
    before = torch.get_num_threads()
    results = []
    try:
        for threads, angles in ((1, theta), (3, theta), (2, theta.t().contiguous().t())):
            torch.set_num_threads(threads)
            t, s = angles.detach().requires_grad_(True), scale.clone().requires_grad_(True)
            out = scaled_directions(t, s)
            out.backward(grad)
            results.append((out.detach(), t.grad, s.grad))
    finally:
        torch.set_num_threads(before)
    assert not theta.t().contiguous().t().is_contiguous()
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))  # rows are split, not sums


@pytest.fixture
def fresh_native(tmp_path, monkeypatch):
    """:mod:`gmp._native` as on first use, building into an empty folder; restored afterwards."""
    from gmp import _native

    def reset():
        _native._load.cache_clear()
        _native._FAILURE.clear()
        _native._BUILT.clear()

    monkeypatch.setenv("GMP_KERNELS", str(tmp_path / "kernels"))
    reset()
    yield _native
    monkeypatch.undo()
    reset()


def test_compiled_map_builds_once_into_gmp_kernels(fresh_native, monkeypatch):
    monkeypatch.setenv("CC", "cc -DAN_ARGUMENT=1")  # a compiler command with arguments
    assert fresh_native.unavailable() is None
    built = list(fresh_native._kernel_dir().glob("hyperspherical-*.so"))
    assert len(built) == 1 and not list(fresh_native._kernel_dir().glob("tmp*"))
    stamp = built[0].stat().st_mtime_ns
    fresh_native._load.cache_clear()
    assert fresh_native.unavailable() is None and built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
    # This machine's torch runs on GNU OpenMP as libgomp.so.1, so the map shares its threads.
    assert fresh_native.flag_sets()[0] == fresh_native.FLAGS[0] and fresh_native.threaded()


def test_the_compiled_map_refuses_what_it_would_misread():
    from gmp import _native

    kernel = _native.kernel(torch.zeros(1, 1))
    theta, scale = torch.zeros(4, 6), torch.ones(4)
    for bad_theta, bad_scale, match in ((theta.t(), scale, "theta must be a contiguous"),
                                        (theta.double(), scale, "theta must be"),
                                        (theta, scale.double(), "scale must be"),
                                        (theta, torch.ones(4, device="meta"), "scale must be"),
                                        (theta, torch.ones(3), "one scale per row")):
        with pytest.raises(ValueError, match=match):
            kernel.forward(bad_theta, bad_scale)
    with pytest.raises(ValueError, match="gradient of shape"):
        kernel.backward(theta, scale, torch.zeros(4, 6))


@pytest.mark.parametrize("setting, why", [
    ({"GMP_NATIVE": "0"}, "turned off by GMP_NATIVE=0"),
    ({"CC": "no-such-compiler-here"}, "no C compiler 'no-such-compiler-here' on PATH"),
    ({"CC": "false"}, "compiling or loading it failed"),
])
def test_without_the_compiled_map_the_torch_map_runs_and_says_why(setting, why, fresh_native, monkeypatch):
    from gmp.hyperspherical import scaled_directions

    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    theta = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fresh_native.kernel(theta) is None and why in fresh_native.unavailable()
        assert fresh_native.kernel(theta) is None  # said once
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if "GMP_NATIVE" in setting:
        assert said == []  # asked for: no warning
    else:
        assert len(said) == 1 and said[0].startswith(f"gmp: the compiled hyperspherical map is unavailable ({why}")
        assert "GMP_NATIVE=0 silences this" in said[0]
    scale = torch.ones(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(scaled_directions, (theta, scale))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_compiled_map_equals_the_torch_map_it_replaced_on_the_cpu(dtype, tol, monkeypatch):
    # What gmp.results.SAME_FUNCTION vouches for: the cached runs used the torch map.
    from gmp import hyperspherical

    g = torch.Generator().manual_seed(7)
    theta = _every_orthant(300, 64, g).to(dtype)
    scale = (torch.rand(len(theta), generator=g, dtype=torch.float64) + 0.5).to(dtype)
    _degenerate_rows(theta, scale)
    grad = torch.randn(len(theta), 300, generator=g, dtype=torch.float64).to(dtype)
    results = []
    for path in ("compiled", "torch-rows-by-index"):
        with monkeypatch.context() as patch:
            _use_path(path, patch)
            t, s = theta.clone().requires_grad_(True), scale.clone().requires_grad_(True)
            out = hyperspherical.scaled_directions(t, s)
            out.backward(grad)
            results.append((out.detach(), t.grad, s.grad))
    for compiled, previous in zip(*results):
        assert (compiled - previous).abs().max() <= tol * previous.abs().max()


@pytest.mark.parametrize("refused", [["-fopenmp"], ["-fopenmp", "-march=native"]],
                         ids=["no-openmp", "no-openmp-no-native"])
def test_compiled_map_builds_with_the_fallback_flags_and_gives_the_same_numbers(refused, fresh_native, tmp_path,
                                                                                monkeypatch):
    # A compiler that refuses the first flag sets (as one without OpenMP, or not GCC-like, would)
    # gets the next set; the map it builds (one thread, generic instructions) agrees with the torch map.
    from gmp.hyperspherical import scaled_directions

    wrapper, calls = tmp_path / "cc", tmp_path / "calls"
    cases = "|".join(refused)
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                       f'for a in "$@"; do case "$a" in {cases}) exit 1;; esac; done\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    theta = torch.randn(9, 41, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    assert fresh_native.kernel(theta) is not None, fresh_native.unavailable()
    assert not fresh_native.threaded()  # built without OpenMP: one thread
    tried = len(calls.read_text().splitlines())
    assert tried == len(fresh_native.FLAGS) - (1 if len(refused) == 1 else 0)
    assert len(list(fresh_native._kernel_dir().glob("*.failed"))) == tried - 1
    fresh_native._load.cache_clear()
    assert fresh_native.kernel(theta) is not None
    assert len(calls.read_text().splitlines()) == tried  # the failed sets are remembered, the build reused
    scale = torch.randn(9, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    compiled = scaled_directions(theta, scale)
    assert torch.allclose(compiled, scale[:, None] * _angles_to_unit_reference(theta), rtol=0, atol=1e-14)
    assert torch.autograd.gradcheck(scaled_directions, (theta[:3, :20].requires_grad_(True),
                                                        scale[:3].clone().requires_grad_(True)))


def test_a_build_whose_arithmetic_is_relaxed_fails_its_self_check_and_the_torch_map_runs(fresh_native, monkeypatch):
    # -ffast-math breaks the kernel's rounding to multiples of pi/2: without the self-check its map
    # was off by up to 0.66 per coordinate of a unit vector, with no sign.
    from gmp.hyperspherical import scaled_directions

    monkeypatch.setenv("CC", "cc -ffast-math")
    theta = torch.rand(6, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 12 - 6
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fresh_native.kernel(theta) is None and fresh_native.kernel(theta.float()) is None
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "remove them from CC" in said[0]
    # gcc links -ffast-math libraries with code that sets the loading thread to flush subnormal numbers to
    # zero (gcc 12 for shared libraries too): the load is refused and the mode set back, which had stayed on
    # for the rest of the process (a Gaussian tail weighing 1e-314 read as 0 in a later test); where the
    # library loads without it, the self-check finds its numbers wrong
    assert "differ from the torch map's by up to" in said[0] or "flushing subnormal numbers to zero" in said[0]
    assert not fresh_native._subnormals_flushed()
    assert torch.tensor(2.2250738585072014e-308, dtype=torch.float64) / 2 > 0
    assert len(list(fresh_native._kernel_dir().glob("*.so"))) == len(fresh_native.flag_sets())  # each set tried
    assert fresh_native.describe() == {"map": "torch", "why": fresh_native.unavailable()}
    scale = torch.ones(6, dtype=torch.float64)
    assert torch.allclose(scaled_directions(theta, scale), _angles_to_unit_reference(theta), rtol=0, atol=1e-14)


def test_the_self_check_takes_every_branch_passes_a_sound_build_and_names_what_differs(fresh_native):
    kernels = fresh_native._load()[0]
    assert fresh_native.self_check(kernels) is None
    described = fresh_native.describe()
    assert described["map"] == "compiled" and described["flags"] == " ".join(fresh_native.flag_sets()[0])
    assert described["compiler"] == "cc" and described["version"]
    cases = fresh_native._self_check_cases()
    angles = torch.cat([theta.flatten() for theta, _, _ in cases])
    assert (angles.abs() > 1048576).any() and (angles.abs() > 8192).any()  # the C library's sines, both types
    assert {0.0, math.pi / 2, math.pi}.issubset(set(angles.tolist()))
    assert any(theta.shape[1] % 16 and theta.shape[1] > 32 for theta, _, _ in cases)  # whole vectors and a rest
    assert any(theta.shape[1] == 0 for theta, _, _ in cases) and any((s == 0).any() for _, s, _ in cases)
    if torch.get_num_threads() > 1:
        assert any(fresh_native._threads(*theta.shape) > 1 for theta, _, _ in cases)

    class Off:  # a kernel whose last coordinate is one ulp-ish too large, in float32 only
        def __init__(self, kernel):
            self.kernel = kernel

        def forward(self, theta, scale):
            out = self.kernel.forward(theta, scale)
            out[:, -1] += 1e-3
            return out

        def backward(self, theta, scale, grad):
            return self.kernel.backward(theta, scale, grad)

    wrong = fresh_native.self_check({torch.float64: kernels[torch.float64], torch.float32: Off(kernels[torch.float32])})
    assert wrong.startswith("its float32 outputs differ from the torch map's by up to 0.001")


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_the_self_check_runs_where_the_map_is_first_used_without_gradients(context, fresh_native):
    with warnings.catch_warnings(), context():
        warnings.simplefilter("error")
        assert fresh_native.kernel(torch.zeros(2, 3)) is not None and fresh_native.unavailable() is None


def _kernel_in_a_new_process(kernels, **env) -> subprocess.CompletedProcess:
    code = ("import warnings, torch; from gmp import _native; warnings.simplefilter('error'); "
            "assert _native.kernel(torch.zeros(2, 3)) is not None, _native.unavailable(); print('loaded')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GMP_KERNELS": str(kernels), **env})


def test_a_library_cut_short_is_never_loaded_but_built_again(fresh_native, tmp_path):
    # An older gmp renamed the compiler's output into place without flushing it: a crash or a full
    # disk could leave part of it, and mapping that killed every later process (SIGBUS), silently.
    kernels = tmp_path / "kernels"
    assert _kernel_in_a_new_process(kernels).stdout.strip() == "loaded"
    library, = kernels.glob("hyperspherical-*.so")
    assert fresh_native._whole(library) is None
    whole = library.stat().st_size
    for size in (1000, 8000, 20000, whole - 1):
        os.truncate(library, size)
        assert "bytes, but" in fresh_native._whole(library)
        done = _kernel_in_a_new_process(kernels)
        assert done.returncode == 0 and done.stdout.strip() == "loaded", (size, done.returncode, done.stderr[-500:])
        assert library.stat().st_size == whole and fresh_native._whole(library) is None


def test_a_compiler_failure_of_the_moment_is_retried_and_a_remembered_one_says_how_to_retry(fresh_native, tmp_path,
                                                                                            monkeypatch):
    # A full disk once made the torch map stick for good, repeating the old reason, with no word on retrying.
    wrapper, full = tmp_path / "cc", tmp_path / "disk-full"
    wrapper.write_text(f'#!/bin/sh\nif [ -e {full} ]; then echo "fatal error: No space left on device" >&2; exit 1; fi\n'
                       f'for a in "$@"; do case "$a" in -fopenmp) exit 1;; esac; done\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    full.touch()
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        assert fresh_native.kernel(torch.zeros(2, 3)) is None
    assert not list(fresh_native._kernel_dir().glob("*.failed"))  # not remembered
    full.unlink()
    fresh_native._load.cache_clear()
    fresh_native._FAILURE.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # built after two refused sets: no warning
        assert fresh_native.kernel(torch.zeros(2, 3)) is not None  # the disk has room again: built
    refused = fresh_native._kernel_dir() / "elsewhere"
    monkeypatch.setenv("GMP_KERNELS", str(refused))
    monkeypatch.setattr(fresh_native, "flag_sets", lambda: [fresh_native.FLAGS[0]])
    fresh_native._load.cache_clear()
    fresh_native._FAILURE.clear()
    with pytest.warns(RuntimeWarning, match=r"remembered in .*elsewhere.*\.failed for 86400 s; delete it to try again at once"):
        assert fresh_native.kernel(torch.zeros(2, 3)) is None
    monkeypatch.setenv("GMP_KERNELS", str(refused.parent))
    remembered = list(fresh_native._kernel_dir().glob("*.failed"))  # the sets with -fopenmp, refused for good
    assert remembered and all("-fopenmp" in path.read_text() for path in remembered)
    try:
        fresh_native._build([str(wrapper)], fresh_native.FLAGS[1])
    except RuntimeError as err:
        assert "tried again" in str(err) and "at once when that file is deleted" in str(err)
        assert str(fresh_native._kernel_dir()) in str(err)
    else:
        pytest.fail("a remembered failure was not raised")
    stale = time.time() - fresh_native.RETRY_AFTER_S - 1
    for path in remembered:
        os.utime(path, (stale, stale))
    calls = tmp_path / "calls"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nfor a in "$@"; do case "$a" in -fopenmp) exit 1;; esac; done\n'
                       'exec cc "$@"\n')
    with pytest.raises(RuntimeError):
        fresh_native._build([str(wrapper)], fresh_native.FLAGS[1])
    assert len(calls.read_text().splitlines()) == 1  # a failure remembered for longer than RETRY_AFTER_S is tried again


def test_a_cc_that_cannot_be_split_is_named(fresh_native, monkeypatch):
    monkeypatch.setenv("CC", "gcc -DX='unclosed")
    with pytest.warns(RuntimeWarning, match="CC=\"gcc -DX='unclosed\" cannot be split .*No closing quotation.*"
                                            "correct its quotes or unset CC"):
        assert fresh_native.kernel(torch.zeros(2, 3)) is None
    assert gmp.angles_to_unit(torch.zeros(2, 3)).shape == (2, 4)


def test_small_maps_run_in_one_thread_and_large_ones_in_torchs_threads():
    from gmp import _native

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        per = _native.ANGLES_PER_THREAD
        assert _native._threads(100, 3) == 1  # a UCI layer: not worth a second thread
        assert _native._threads(1024, 1023) == 4 and _native._threads(3, 10 * per) == 3
        assert _native._threads(64, 2 * per // 64) == 2
        assert _native._threads(0, 5) == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("death", ['echo "gcc: fatal error: Killed signal terminated program cc1" >&2; exit 1',
                                   'echo "gcc: fatal error: CPU time limit exceeded signal terminated program cc1" >&2; '
                                   'exit 1',
                                   'echo "cc1: out of memory allocating 65536 bytes" >&2; exit 1',
                                   "kill -9 $$", "exit 137"])
def test_a_compiler_killed_by_a_signal_or_a_resource_limit_is_not_remembered(fresh_native, tmp_path, monkeypatch,
                                                                             death):
    """Issue #48: a compiler whose cc1 was killed (the out-of-memory killer, ``ulimit -t``) was remembered for a
    day as if it had refused the flags."""
    monkeypatch.setenv("GMP_KERNELS", str(tmp_path / "kernels"))
    wrapper = tmp_path / "cc"
    wrapper.write_text(f"#!/bin/sh\n{death}\n")
    wrapper.chmod(0o755)
    with pytest.raises(RuntimeError) as err:
        fresh_native._build([str(wrapper)], fresh_native.FLAGS[-1])
    assert "remembered" not in str(err.value)
    assert not list((tmp_path / "kernels").glob("*.failed"))
    wrapper.write_text("#!/bin/sh\necho 'cc: error: unrecognized command-line option' >&2; exit 1\n")
    with pytest.raises(RuntimeError, match="remembered in"):  # a refusal of the flags still is
        fresh_native._build([str(wrapper)], fresh_native.FLAGS[-1])


@pytest.mark.parametrize("size", [0, 1, 3])
def test_a_library_cut_to_less_than_its_magic_number_is_built_again(fresh_native, tmp_path, monkeypatch, size):
    """Issue #48: a ``.so`` cut to 0-3 bytes was taken as whole (not ELF, so 'another format'), failed to load,
    and every process quietly used the next flag set."""
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF"[:size])
    assert fresh_native._whole(library) == f"{size} bytes, less than an ELF header"
    library.write_bytes(b"MZ")  # another format's start is still taken as whole
    assert fresh_native._whole(library) is None


def test_a_relative_gmp_kernels_is_resolved_from_the_working_directory(fresh_native, tmp_path, monkeypatch):
    """Issue #48: a relative ``GMP_KERNELS`` made every build fail (the compiler runs in a scratch folder) and be
    remembered for a day."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GMP_KERNELS", "rel/kernels")
    assert fresh_native._kernel_dir() == tmp_path / "rel" / "kernels"


@pytest.mark.parametrize("setting", ["false", "off", "2"])
def test_a_gmp_native_that_is_neither_0_nor_1_is_refused_not_read_as_on(fresh_native, monkeypatch, setting):
    """Issue #48's probe: ``GMP_NATIVE=false`` (or ``off``) left the compiled map on, silently."""
    monkeypatch.setenv("GMP_NATIVE", setting)
    with pytest.raises(ValueError, match=rf"GMP_NATIVE='{setting}': set it to 0 \(the torch map\) or 1"):
        fresh_native.kernel(torch.zeros(2, 3))
