"""Deep BSNN networks (Definition 1 of Lu et al.) and the norm probes of gmp.propagation."""

import numpy as np
import pytest
import torch

import gmp
from gmp.propagation import gradient_norm_ratio, parameter_gradient_norms, propagate


def _net(act, width=24, depth=6, seed=0, **kw):
    kw.setdefault("dtype", torch.float64)
    return gmp.deep_mlp(width, depth, act, generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize("weights", ["orthogonal", "row_normalized"])
def test_constraint_holds_during_training(weights):
    torch.manual_seed(0)
    net = gmp.deep_mlp(16, 3, "ReLU-GPN", weights=weights, in_features=5, out_features=2)
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.5)
    x, y = torch.randn(64, 5), torch.randint(0, 2, (64,))
    before = [w.detach().clone() for w in net.square_weights()]
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    eye = torch.eye(16)
    for w, w0 in zip(net.square_weights(), before):
        w = w.detach()
        assert not torch.allclose(w, w0)  # the weights did move
        if weights == "orthogonal":
            assert (w @ w.T - eye).abs().max() < 1e-5
        else:
            assert (w.norm(dim=1) - 1).abs().max() < 1e-5


def test_haar_initialisation_is_orthogonal_and_unbiased():
    traces = []
    for seed in range(400):
        w = _net(torch.tanh, width=12, depth=1, seed=seed, parametrized=False).layers[0].weight.detach()
        assert (w @ w.T - torch.eye(12, dtype=w.dtype)).abs().max() < 1e-12
        traces.append(float(torch.trace(w)))
    # For Haar measure on O(n), E[tr W] = 0 and E[tr(W)^2] = 1 (Diaconis-Shahshahani).
    assert abs(np.mean(traces)) < 0.2 and 0.75 < np.mean(np.square(traces)) < 1.25


def test_parametrized_and_plain_start_from_the_same_matrix():
    a = _net("Tanh", parametrized=True).square_weights()
    b = _net("Tanh", parametrized=False).square_weights()
    assert all(torch.allclose(u, v, atol=1e-12) for u, v in zip(a, b))


def test_shapes_and_value_errors():
    net = gmp.deep_mlp(8, 2, "ELU", in_features=3, out_features=4, batchnorm=True)
    assert net(torch.randn(5, 3)).shape == (5, 4) and net.depth == 2 and net.width == 8
    with pytest.raises(ValueError, match="weights"):
        gmp.deep_mlp(8, 2, "ELU", weights="unitary")
    with pytest.raises(ValueError, match="positive"):
        gmp.deep_mlp(0, 2, "ELU")
    with pytest.raises(ValueError, match="batch normalisation"):
        propagate(net, torch.randn(5, 8), torch.randn(5, 8))
    with pytest.raises(ValueError, match="shape"):
        propagate(_net("Tanh"), torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64))


@pytest.mark.parametrize("act", ["Tanh", "SELU-GPN", "GELU"])
def test_propagate_matches_autograd(act):
    net = _net(act, parametrized=False)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(10, 24, dtype=torch.float64, generator=gen)
    g = torch.randn(10, 24, dtype=torch.float64, generator=gen)
    p = propagate(net, x, g)
    hs = []
    cur = x
    for layer in net.layers:
        h = layer(cur)
        h.retain_grad()
        hs.append(h)
        cur = net.phi(h)
    (cur * g).sum().backward()
    assert np.allclose(p.grad_norm, [float(w.grad.norm()) for w in net.square_weights()], rtol=1e-10)
    assert np.allclose(p.grad_norm, parameter_gradient_norms(net), rtol=1e-10)
    assert np.allclose(p.d_norm, [float(h.grad.norm(dim=1).mean()) for h in hs], rtol=1e-10)
    assert p.x_norm[-1] == pytest.approx(float(cur.detach().norm(dim=1).mean()), rel=1e-10)
    assert p.hist.sum() + p.below + p.above == 10 * 24 * 6


def test_proposition1_identity_on_one_sample():
    net = _net("ReLU", parametrized=False)
    x, g = torch.randn(1, 24, dtype=torch.float64), torch.randn(1, 24, dtype=torch.float64)
    p = propagate(net, x, g)
    assert np.allclose(p.grad_norm, p.x_norm[:-1] * p.d_norm, rtol=1e-12)


def test_linear_orthogonal_network_is_bidirectionally_self_normalizing():
    net = _net(lambda v: v, depth=12, parametrized=False)
    x, g = torch.randn(1, 24, dtype=torch.float64), torch.randn(1, 24, dtype=torch.float64)
    p = propagate(net, x, g)
    assert np.ptp(p.x_norm) < 1e-12 * p.x_norm[0] and np.ptp(p.d_norm) < 1e-12 * p.d_norm[0]
    assert gradient_norm_ratio(p.grad_norm) == pytest.approx(1.0, abs=1e-12)


def test_gpn_preserves_norms_where_plain_relu_vanishes():
    x = torch.randn(64, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    g = torch.randn(64, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    gpn = propagate(_net("ReLU-GPN", width=256, depth=40, parametrized=False), x, g)
    plain = propagate(_net("ReLU", width=256, depth=40, parametrized=False), x, g)
    assert gpn.x_norm.max() / gpn.x_norm.min() < 1.5 and gpn.d_norm.max() / gpn.d_norm.min() < 1.5
    assert plain.x_norm[0] / plain.x_norm[-1] > 2 ** 15 and plain.d_norm[-1] / plain.d_norm[0] > 2 ** 15


def test_gradient_norm_ratio():
    assert gradient_norm_ratio([2.0, 1.0, 4.0]) == 4.0
    assert gradient_norm_ratio([0.0, 1.0]) == float("inf")
    assert np.isnan(gradient_norm_ratio([np.nan, 1.0]))
    with pytest.raises(ValueError):
        gradient_norm_ratio([])


@pytest.mark.parametrize("batchnorm", [False, True])
def test_fused_row_normalized_layers_match_the_parametrization(batchnorm):
    """RowNormalizedLinear (Eq. (55) with a hand-written backward) gives the outputs and the
    gradients of every parameter that nn.Linear + the RowNormalized parametrization give."""
    ref = _net("GELU-GPN", width=12, depth=4, weights="row_normalized", batchnorm=batchnorm, in_features=5,
               out_features=3)
    fused = _net("GELU-GPN", width=12, depth=4, weights="row_normalized", batchnorm=batchnorm, in_features=5,
                 out_features=3, fused=True)
    with torch.no_grad():
        for a, b in zip(ref.free_parameters(), fused.free_parameters()):
            b.copy_(a * torch.linspace(0.5, 2.0, a.shape[0], dtype=a.dtype).unsqueeze(1))  # rows of unequal norm
            a.copy_(b)
        fused.first.weight.copy_(ref.first.weight)
        fused.last.weight.copy_(ref.last.weight)
    x, y = torch.randn(7, 5, dtype=torch.float64), torch.randint(0, 3, (7,))
    outs = []
    for net in (ref, fused):
        out = net(x)
        torch.nn.functional.cross_entropy(out, y).backward()
        outs.append(out)
    assert torch.allclose(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    assert all(torch.allclose(w, v, rtol=1e-12, atol=1e-14) for w, v in zip(ref.square_weights(), fused.square_weights()))
    grads = [[p.grad for p in net.free_parameters()] + [net.first.weight.grad, net.last.weight.grad] for net in (ref, fused)]
    assert all(g.abs().max() > 0 for g in grads[1])
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-14) for a, b in zip(*grads))


def test_fused_layers_refuse_what_they_do_not_build():
    with pytest.raises(ValueError, match="fused=True"):
        gmp.deep_mlp(8, 2, "ReLU", weights="orthogonal", fused=True)
    with pytest.raises(ValueError, match="fused=True"):
        gmp.deep_mlp(8, 2, "ReLU", weights="row_normalized", bias=True, fused=True)


def test_orthogonality_drift_is_zero_for_orthogonal_and_positive_otherwise():
    """max |W W^T - I|: 0 (to float32 rounding) for a Haar matrix, positive once one entry moves."""
    q = _net(torch.tanh, width=64, depth=1, parametrized=False, dtype=torch.float32).layers[0].weight.detach()
    assert gmp.orthogonality_drift(q) < 1e-5
    e = torch.zeros(64, 64)
    e[0, 1] = 1e-2
    p = q + e
    drift = gmp.orthogonality_drift(p)
    assert drift > 1e-4 and drift == pytest.approx(float((p @ p.T - torch.eye(64)).abs().max()), rel=1e-6)
    net = _net("Tanh", width=16, depth=3, weights="row_normalized", fused=True)
    drifts = net.orthogonality_drift()
    assert len(drifts) == 3 and all(d > 0.05 for d in drifts)  # Gaussian rows are far from orthogonal
    with pytest.raises(ValueError, match="square"):
        gmp.orthogonality_drift(torch.zeros(3, 4))
