"""Facts about the SBSNN activations and the strong condition (Sections 2-4 of the SBSNN paper)."""

import math

import numpy as np
import pytest
import sympy
import torch

import gmp
from gmp.activations import (ACTIVATION_LABELS, PAPER_COLOURS, SBSNNAbsSin, SBSNNSin, SBSNNTriangle,
                             SqrtSigmoid, activation, sbsnn_abs_sin, sbsnn_sin, sbsnn_triangle,
                             sqrt_sigmoid, strong_condition, symbolic_strong_condition, triangle_wave)
from gmp.experiments.sbsnn_condition import haar_forward_norms, symmetric_second_moments

THEOREM1 = [(1, 1), (-1, 1), (1, -1), (-1, -1)]


@pytest.mark.parametrize("S,w", THEOREM1)
def test_theorem1_family_satisfies_strong_condition(S, w):
    result = strong_condition(lambda x: sbsnn_sin(x, S, w))
    assert result.holds
    assert result.value_violation < 1e-12 and result.derivative_violation < 1e-5


def test_theorem1_family_is_plus_minus_sin_and_cos():
    x = torch.linspace(-7, 7, 101, dtype=torch.float64)
    root2 = math.sqrt(2)
    assert torch.allclose(sbsnn_sin(x, 1, -1), root2 * torch.cos(x + math.pi / 4))
    assert torch.allclose(sbsnn_sin(x, -1, -1), -root2 * torch.cos(x + math.pi / 4))
    assert torch.allclose(sbsnn_sin(x), torch.sin(x) + torch.cos(x))


@pytest.mark.parametrize("f", [sbsnn_triangle, sbsnn_abs_sin], ids=["triangle", "abs_sin"])
def test_theorem2_examples_satisfy_strong_condition_with_one_sided_derivatives(f):
    assert strong_condition(f).holds


def test_triangle_wave_shape():
    x = torch.tensor([0.0, 0.7, 1.5, 3.0, 4.5, 6.0, -0.7, -1.5, 7.5])
    expected = torch.tensor([0.0, 0.7, 1.5, 0.0, -1.5, 0.0, -0.7, -1.5, 1.5])
    assert torch.allclose(triangle_wave(x), expected, atol=1e-6)
    grid = torch.linspace(-20, 20, 4001, dtype=torch.float64)
    assert torch.allclose(triangle_wave(-grid), -triangle_wave(grid))  # odd
    assert torch.allclose(triangle_wave(grid + 6.0), triangle_wave(grid))  # period 6


def test_triangle_with_slope_not_one_fails():
    # slope 4 * 1.5 / 4 = 1.5: w is not in {1, -1}, so f'^2 - 1 is not odd (Theorem 2 needs |w| = 1)
    result = strong_condition(lambda x: sbsnn_triangle(x, 1.5, 4.0))
    assert not result.holds and result.value_violation < 1e-12 and result.derivative_violation > 1


def test_sqrt_sigmoid_satisfies_only_the_value_half():
    result = strong_condition(sqrt_sigmoid)
    assert not result.holds
    assert result.value_violation < 1e-12 and result.derivative_violation > 1


@pytest.mark.parametrize("name", ["tanh", "gelu", "elu", "leaky_relu", "relu"])
def test_gpn_activations_fail_strong_condition(name):
    result = strong_condition(gmp.GPN(name))
    assert not result.holds and result.value_violation > 0.5


@pytest.mark.parametrize("f", [torch.tanh, torch.relu, torch.sin], ids=["tanh", "relu", "sin"])
def test_plain_activations_fail(f):
    assert not strong_condition(f).holds


def test_kink_sampled_exactly_is_still_checked_one_sided():
    # the grid contains 1.5 (a kink of T); a derivative of 0 there would violate the condition
    result = strong_condition(sbsnn_triangle, radius=3.0, points=601)
    assert torch.isclose(torch.linspace(-3, 3, 601, dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64)).any()
    assert result.holds


def test_symbolic_theorem1_both_directions():
    x = sympy.symbols("x", real=True)
    r2, q = sympy.sqrt(2), sympy.pi / 4
    for expr in (r2 * sympy.sin(x + q), -r2 * sympy.sin(x + q), r2 * sympy.cos(x + q), -r2 * sympy.cos(x + q)):
        assert symbolic_strong_condition(expr, x) == (0, 0)
    for expr in (r2 * sympy.sin(2 * x + q), sympy.sin(x + q), r2 * sympy.sin(x), sympy.sqrt(2 / (1 + sympy.exp(-x)))):
        value, derivative = symbolic_strong_condition(expr, x)
        assert value != 0 or derivative != 0


def test_modules_match_functions_and_registry():
    x = torch.randn(50, dtype=torch.float64)
    assert torch.equal(SBSNNSin(-1, -1)(x), sbsnn_sin(x, -1, -1))
    assert torch.equal(SBSNNTriangle()(x), sbsnn_triangle(x))
    assert torch.equal(SBSNNAbsSin()(x), sbsnn_abs_sin(x))
    assert torch.equal(SqrtSigmoid()(x), sqrt_sigmoid(x))
    for name in ACTIVATION_LABELS:
        assert isinstance(activation(name), torch.nn.Module)
        assert name in PAPER_COLOURS
    with pytest.raises(ValueError, match="unknown activation"):
        activation("swish")
    with pytest.raises(ValueError):
        SBSNNSin(2, 1)


def test_second_moments_equal_one_for_symmetric_distributions_theorem3():
    moments = symmetric_second_moments(["normal", "uniform", "laplace", "student_t5", "rademacher2"], orders=4)
    for name, values in moments.items():
        assert np.allclose(values, 1.0, atol=1e-8), name
    skewed = symmetric_second_moments(["exponential"], orders=1)["exponential"]
    assert abs(skewed[0] - 1) > 0.1


def test_haar_shortcut_matches_explicit_haar_matrices():
    # W Haar and independent of v => W v is uniform on the sphere of radius ||v||, so the law of
    # the norms is the same whether we sample the matrices or the directions.
    n, layers, runs = 6, 3, 4000
    f = gmp.GPN("relu")
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(runs, n, generator=gen, dtype=torch.float64)
    x0 = x0 / x0.norm(dim=1, keepdim=True) * math.sqrt(n) / 2
    shortcut = haar_forward_norms(f, x0, layers, generator=gen)
    x = x0
    explicit = []
    for _ in range(layers):
        q, r = torch.linalg.qr(torch.randn(runs, n, n, generator=gen, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
        x = torch.einsum("rij,rj->ri", q, f(x))
        explicit.append(x.norm(dim=1))
    explicit = torch.stack(explicit, dim=1)
    se = torch.sqrt(shortcut.var(0) / runs + explicit.var(0) / runs)
    assert torch.all((shortcut.mean(0) - explicit.mean(0)).abs() < 4 * se)
    assert shortcut.shape == (runs, layers)


# ---------------------------------------------------------------- issue 19: validated arguments

@pytest.mark.parametrize("tol", [math.inf, math.nan, -1.0])
def test_strong_condition_refuses_a_tolerance_that_accepts_anything(tol):
    with pytest.raises(ValueError, match="tol"):
        strong_condition(torch.tanh, tol=tol)


@pytest.mark.parametrize("radius", [math.inf, math.nan])
def test_strong_condition_refuses_a_non_finite_radius(radius):
    with pytest.raises(ValueError, match="radius"):
        strong_condition(torch.tanh, radius=radius)


@pytest.mark.parametrize("kwargs", [dict(amplitude=math.nan), dict(period=math.nan), dict(amplitude=math.inf)])
def test_triangle_wave_refuses_non_finite_shapes(kwargs):
    with pytest.raises(ValueError, match="finite and positive"):
        triangle_wave(torch.zeros(3), **kwargs)
    with pytest.raises(ValueError, match="finite and positive"):
        gmp.activations.SBSNNTriangle(**kwargs)
