"""Facts about Gaussian-Poincaré normalization (Section 2.2 of Lu et al.)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gmp
from gmp.experiments.lu_gpn import EXTRA_FUNCTIONS, PAPER
from gmp.gpn import ACTIVATIONS, PAPER_ROOTS

NAMES = list(ACTIVATIONS)


@pytest.mark.parametrize("name", NAMES)
def test_constants_reproduce_table1(name):
    a, b_plus, b_minus = gmp.gpn_constants(name)
    b = b_plus if PAPER_ROOTS[name] == "+" else b_minus
    ref = PAPER["table1"][name]
    assert abs(a - ref["a"]) <= 1e-4 and abs(b - ref["b"]) <= 1e-4
    if name != "selu":
        assert round(a, 4) == ref["a"] and round(b, 4) + 0.0 == ref["b"]


def test_selu_b_against_closed_form():
    # E[selu] = 0 and E[selu^2] = 1 exactly; E[selu'^2] = lam^2 (1/2 + alpha^2 e^2 Phi(-2)).
    lam, alpha = 1.0507009873554805, 1.6732632423543772
    d2 = lam ** 2 * (0.5 + alpha ** 2 * math.exp(2) * 0.5 * math.erfc(2 / math.sqrt(2)))
    a, b, b_alt = gmp.gpn_constants("selu")
    assert a == pytest.approx(d2 ** -0.5, abs=1e-10)
    assert b == pytest.approx(d2 ** -0.5 * math.sqrt(d2 - 1), abs=1e-10)
    assert b_alt == pytest.approx(-b, abs=1e-10)
    assert round(b, 4) == 0.2584  # Table 1 prints 0.2585: its last digit is off by one


def test_relu_moments_closed_form():
    m, s2, d2 = gmp.gaussian_moments("relu")
    assert m == pytest.approx(1 / math.sqrt(2 * math.pi), abs=1e-12)
    assert s2 == pytest.approx(0.5, abs=1e-12) and d2 == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_moments_match_monte_carlo(name):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1_000_000, dtype=torch.float64, generator=gen).requires_grad_(True)
    y = ACTIVATIONS[name](x)
    (dy,) = torch.autograd.grad(y.sum(), x)
    y = y.detach()
    for ours, sample in zip(gmp.gaussian_moments(name), (y, y ** 2, dy ** 2)):
        se = float(sample.std()) / math.sqrt(sample.numel())
        assert abs(ours - float(sample.mean())) <= 5 * se + 1e-12


@pytest.mark.parametrize("name", NAMES)
def test_explicit_derivative_equals_autograd(name):
    fn = ACTIVATIONS[name]

    def derivative(x):
        x = x.clone().requires_grad_(True)
        with torch.enable_grad():
            return torch.autograd.grad(fn(x).sum(), x)[0]

    assert np.allclose(gmp.gaussian_moments(fn, derivative), gmp.gaussian_moments(name), atol=1e-12)


@pytest.mark.parametrize("name", NAMES + list(EXTRA_FUNCTIONS))
def test_gaussian_poincare_inequality(name):
    fn = ACTIVATIONS.get(name) or EXTRA_FUNCTIONS[name]
    m, s2, d2 = gmp.gaussian_moments(fn)
    assert s2 - m * m <= d2 + 1e-10


def test_poincare_equality_only_for_affine():
    m, s2, d2 = gmp.gaussian_moments(lambda x: 3 * x + 2)
    assert (m, s2 - m * m, d2) == pytest.approx((2.0, 9.0, 9.0), abs=1e-10)
    m, s2, d2 = gmp.gaussian_moments(torch.tanh)
    assert d2 - (s2 - m * m) > 0.05


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("root", ["+", "-"])
def test_gpn_module_is_normalized(name, root):
    phi = gmp.GPN(name, root=root)
    _, s2, d2 = gmp.gaussian_moments(phi)
    assert s2 == pytest.approx(1.0, abs=1e-9) and d2 == pytest.approx(1.0, abs=1e-9)
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    assert torch.allclose(phi(x), phi.a * ACTIVATIONS[name](x) + phi.b)


def test_gpn_default_root_is_the_papers():
    assert gmp.GPN("gelu").b == pytest.approx(PAPER["table1"]["gelu"]["b"], abs=1e-4)
    assert gmp.GPN("tanh").b == pytest.approx(PAPER["table1"]["tanh"]["b"], abs=1e-4)
    assert gmp.GPN(torch.tanh).root == "+"


def test_identity_is_gpn_and_proposition2():
    a, b, b_alt = gmp.gpn_constants(lambda x: x)
    assert (a, b, b_alt) == pytest.approx((1.0, 0.0, 0.0), abs=1e-6)
    # A zero-mean nonlinear function is not GPN: E[phi'^2] - E[phi^2] = sum (k-1) a_k^2 > 0.
    coef = gmp.hermite_coefficients("tanh", 60)
    m, s2, d2 = gmp.gaussian_moments("tanh")
    k = np.arange(61)
    assert abs(m) < 1e-14
    assert np.sum((k[2:] - 1) * coef[2:] ** 2) == pytest.approx(d2 - s2, abs=1e-8)
    assert d2 - s2 > 0.05


@pytest.mark.parametrize("name", ["tanh", "gelu"])
def test_hermite_identities_smooth(name):
    coef = gmp.hermite_coefficients(name, 60)
    m, s2, d2 = gmp.gaussian_moments(name)
    k = np.arange(61)
    assert coef[0] == pytest.approx(m, abs=1e-12)
    assert np.sum(coef ** 2) == pytest.approx(s2, abs=1e-9)
    assert np.sum(k * coef ** 2) == pytest.approx(d2, abs=1e-8)


def test_hermite_relu_closed_form_and_slow_convergence():
    coef = gmp.hermite_coefficients("relu", 80)
    assert coef[:3] == pytest.approx([1 / math.sqrt(2 * math.pi), 0.5, 1 / (2 * math.sqrt(math.pi))], abs=1e-10)
    assert np.abs(coef[3::2]).max() < 1e-10
    k = np.arange(81)
    partial = np.cumsum(k * coef ** 2)
    assert np.all(np.diff(partial) >= -1e-14) and 0.5 - 0.03 < partial[-1] < 0.5
    assert np.sum(coef ** 2) == pytest.approx(0.5, abs=1e-3)


def test_hermite_polynomials_expand_exactly():
    coef = gmp.hermite_coefficients(lambda x: x ** 3 - 3 * x, 6)  # He_3 = sqrt(3!) H_3
    assert coef == pytest.approx([0, 0, 0, math.sqrt(6), 0, 0, 0], abs=1e-10)


def test_value_errors():
    with pytest.raises(ValueError, match="derivative vanishes"):
        gmp.gpn_constants(lambda x: torch.ones_like(x))
    with pytest.raises(ValueError, match="derivative vanishes"):
        gmp.gpn_constants(torch.sign)  # autograd gives 0 almost everywhere
    with pytest.raises(ValueError, match="no real root"):
        gmp.gpn_constants(lambda x: x + 2 * torch.sign(x))  # a jump breaks Theorem 1
    with pytest.raises(ValueError, match="infinite"):
        gmp.gaussian_moments(lambda x: torch.exp(x ** 2))
    with pytest.raises(ValueError, match="unknown activation"):
        gmp.gpn_constants("swish2")
    with pytest.raises(ValueError, match="root"):
        gmp.GPN("relu", root="*")
    with pytest.raises(ValueError, match="K must be"):
        gmp.hermite_coefficients("relu", -1)


def test_make_activation_names():
    assert isinstance(gmp.make_activation("SELU-GPN"), gmp.GPN)
    x = torch.linspace(-2, 2, 5)
    assert torch.allclose(gmp.make_activation("LeakyReLU")(x), F.leaky_relu(x, 0.01))
    assert torch.allclose(gmp.make_activation("GELU")(x), x * torch.sigmoid(1.702 * x))


# ---------------------------------------------------------------- issue 19: say what happened

@pytest.mark.parametrize("phi", [math.sin, np.tanh, math.tanh, lambda x: x.detach().numpy()],
                         ids=["math.sin", "np.tanh", "math.tanh", "returns numpy"])
def test_a_function_that_is_not_torch_is_named_as_such(phi):
    for call in (gmp.gpn_constants, gmp.gaussian_moments, lambda f: gmp.hermite_coefficients(f, 3), gmp.GPN):
        with pytest.raises(ValueError, match="torch function"):
            call(phi)


def test_nan_in_the_integrand_is_reported_as_nan_not_overflow():
    with pytest.raises(ValueError, match="NaN at") as info:
        gmp.gaussian_moments(lambda x: torch.where(x > 3, torch.full_like(x, math.nan), x))
    assert "overflow" not in str(info.value) and "not finite" not in str(info.value)


def test_finite_moments_that_float64_cannot_evaluate_are_not_called_infinite():
    # exp(x^2/2) exp(-x^2/2) = 1 has finite moments, but exp(800) overflows at the outer nodes
    with pytest.raises(ValueError, match="cannot be computed") as info:
        gmp.gaussian_moments(lambda x: torch.exp(x ** 2 / 2) * torch.exp(-x ** 2 / 2))
    assert "x = -40" in str(info.value) and "is not finite" not in str(info.value)


def test_a_heavy_tail_is_reported_with_its_weight():
    with pytest.raises(ValueError, match="heavy-tailed to integrate: .* still weighs"):
        gmp.gaussian_moments(lambda x: torch.where(x.abs() > 38, torch.full_like(x, 1e154), x))


@pytest.mark.parametrize("name", ["tanh", "relu", "selu"])
def test_correlation_map_is_mehlers_formula_with_a_marginal_fixed_point_at_one(name):
    from gmp.experiments.lu_gpn import correlation_map, gpn_coefficients

    coef = gpn_coefficients(name, 150)
    assert float(correlation_map(coef, 1.0)) == pytest.approx(1.0, abs=1e-12)
    assert float(correlation_map(coef, 0.0)) == pytest.approx(coef[0] ** 2, abs=1e-15)
    # f'(1) = E[phi_hat'^2] = 1 for a GPN activation: the fixed point c = 1 is marginal.
    slope = float(correlation_map(coef, 1.0) - correlation_map(coef, 1 - 1e-4)) / 1e-4
    assert slope == pytest.approx(1.0, abs=0.03)
    # E[phi_hat(u) phi_hat(v)] for Gaussians of correlation c, by Monte Carlo.
    gen = torch.Generator().manual_seed(0)
    u, z = torch.randn(2, 2_000_000, dtype=torch.float64, generator=gen)
    phi = gmp.make_activation({"tanh": "Tanh-GPN", "relu": "ReLU-GPN", "selu": "SELU-GPN"}[name])
    for c in (-0.5, 0.3, 0.9):
        v = c * u + math.sqrt(1 - c * c) * z
        assert float((phi(u) * phi(v)).mean()) == pytest.approx(float(correlation_map(coef, c)), abs=5e-3)
    assert np.all(np.diff(correlation_map(coef, np.linspace(-1, 1, 201))) >= -1e-12)


def test_collapse_fit_recovers_a_law_in_sqrt_depth_over_width_and_tells_it_from_depth_alone():
    from gmp.experiments.lu_gpn import collapse_fit

    grid = [[n, depth] for n in (32, 64, 128) for depth in (16, 32, 64)]
    law = {"A": [[math.exp(0.7 * math.sqrt(d / n))] * 2 for n, d in grid],
           "B": [[math.exp(0.1 * math.sqrt(d))] * 2 for n, d in grid]}
    fits = collapse_fit({"grid": grid, "samples": 8, "spreads": law})
    assert fits["A"]["slope"] == pytest.approx(0.7) and fits["A"]["r2"] == pytest.approx(1.0)
    assert fits["A"]["same_ratio"] == pytest.approx(0.0, abs=1e-12) and fits["A"]["r2_depth"] < 0.9
    assert fits["A"]["width_per_depth"] == pytest.approx((0.7 / math.log(2)) ** 2)
    assert fits["B"]["r2_depth"] == pytest.approx(1.0) and fits["B"]["r2"] < 0.9 and fits["B"]["same_ratio"] > 0.1
