"""Experiment of the chapter book/part2/lu_gpn.md (Section 2, Table 1 and Propositions 1-3
of Lu et al.): Gaussian moments, GPN constants, Hermite spectra and the gradient-norm
identity of Proposition 1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from gmp.config import scaled
from gmp.gpn import (ACTIVATION_LABELS, ACTIVATIONS, PAPER_ROOTS, gaussian_moments, gpn_constants,
                     hermite_coefficients, make_activation)
from gmp.models.deep import deep_mlp
from gmp.propagation import propagate
from gmp.results import FAILS, IDENTITY, NOT_RUN, VERIFIED, Claim
from gmp import style

CONFIG = scaled(
    common=dict(activations=list(ACTIVATIONS),
                poincare_extra=["sigmoid", "softplus", "silu", "mish", "softsign", "erf", "sin", "cos",
                                "square", "cube", "abs"],
                prop1_width=64, prop1_depth=10, collapse_dtype="float32", correlation_width=500),
    smoke=dict(hermite_K=12, poincare_extra=["sigmoid", "sin", "abs"],
               collapse_widths=[16, 32], collapse_depths=[8, 16], collapse_samples=16, collapse_repeats=1,
               correlation_width=32, correlation_depth=16, correlation_samples=8),
    small=dict(hermite_K=60, collapse_widths=[32, 64, 128], collapse_depths=[16, 32, 64], collapse_samples=32,
               collapse_repeats=2, correlation_width=128, correlation_depth=100, correlation_samples=16),
    # The grid's L / n ranges over 1/32 to 8 and many (n, L) share a value of L / n.
    paper=dict(hermite_K=150, collapse_widths=[32, 64, 128, 256, 512], collapse_depths=[16, 32, 64, 128, 256],
               collapse_samples=64, collapse_repeats=3, correlation_depth=200, correlation_samples=32),
)

PAPER = {
    # Table 1 of Lu et al.: constants for Gaussian-Poincaré normalization (a, b), with
    # LeakyReLU slope 0.01, ELU alpha 1 and GELU x / (1 + exp(-1.702 x)) (footnote 1).
    "table1": {
        "tanh": {"a": 1.4674, "b": 0.3885},
        "relu": {"a": 1.4142, "b": 0.0000},
        "leaky_relu": {"a": 1.4141, "b": 0.0000},
        "elu": {"a": 1.2234, "b": 0.0742},
        "selu": {"a": 0.9660, "b": 0.2585},
        "gelu": {"a": 1.4915, "b": -0.9097},
    },
}

EXTRA_FUNCTIONS = {
    "sigmoid": torch.sigmoid,
    "softplus": F.softplus,
    "silu": F.silu,
    "mish": F.mish,
    "softsign": F.softsign,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "square": torch.square,
    "cube": lambda x: x ** 3,
    "abs": torch.abs,
}
"""Further differentiable (almost everywhere) functions for the Gaussian-Poincaré inequality."""


def _function(name: str):
    return ACTIVATIONS[name] if name in ACTIVATIONS else EXTRA_FUNCTIONS[name]


def table1(activations: list[str]) -> dict[str, dict[str, float]]:
    """Moments and both roots of the GPN constants (Proposition 3) of each activation."""
    rows = {}
    for name in activations:
        m, s2, d2 = gaussian_moments(name)
        a, b_plus, b_minus = gpn_constants(name)
        rows[name] = {"mean": m, "second": s2, "deriv_second": d2, "a": a, "b_plus": b_plus,
                      "b_minus": b_minus, "paper_root": PAPER_ROOTS[name],
                      "b": b_plus if PAPER_ROOTS[name] == "+" else b_minus}
    return rows


SELU_ROUNDED = {"alpha": 1.6733, "lambda": 1.0507}
"""SELU's constants rounded to four decimals.

At full precision they are alpha = 1.6732632423543772 and lambda = 1.0507009873554805, those
of ``torch.nn.functional.selu``.
"""


def selu_rounding() -> dict[str, dict[str, float]]:
    """The GPN constants (paper's root) of SELU with its constants rounded to four decimals
    (``"rounded"``) and at full precision (``"full"``), to explain Table 1's SELU b."""
    alpha, lam = SELU_ROUNDED["alpha"], SELU_ROUNDED["lambda"]

    def rounded_selu(x: torch.Tensor) -> torch.Tensor:
        return lam * torch.where(x > 0, x, alpha * torch.expm1(torch.clamp(x, max=0.0)))

    out = {}
    for label, phi in (("rounded", rounded_selu), ("full", "selu")):
        a, b_plus, _ = gpn_constants(phi)
        out[label] = {"a": a, "b": b_plus}
    return out


def table1_agreement(payload: Mapping[str, Any]) -> tuple[int, int, list[str]]:
    """How many of Table 1's constants ours equal after rounding to the paper's 4 decimals, out
    of how many, and which differ (e.g. ``["selu.b"]``)."""
    ours = {f"{n}.{c}": payload["table1"][n][c] for n in PAPER["table1"] for c in ("a", "b")}
    paper = {f"{n}.{c}": v for n, ref in PAPER["table1"].items() for c, v in ref.items()}
    differ = [k for k in paper if round(ours[k], 4) != paper[k]]
    return len(paper) - len(differ), len(paper), differ


def gpn_moments(activations: list[str]) -> dict[str, dict[str, float]]:
    """``E[phi_hat^2]`` and ``E[phi_hat'^2]`` of the GPN versions with both roots (Eq. (7))."""
    out = {}
    for name in activations:
        a, b_plus, b_minus = gpn_constants(name)
        fn = ACTIVATIONS[name]
        for root, b in (("+", b_plus), ("-", b_minus)):
            _, s2, d2 = gaussian_moments(lambda x, fn=fn, a=a, b=b: a * fn(x) + b)
            out[f"{name}{root}"] = {"second": s2, "deriv_second": d2}
    return out


def poincare(names: list[str]) -> dict[str, dict[str, float]]:
    """``Var[phi]`` and ``E[phi'^2]`` under N(0, 1) (Theorem 1, Eq. (8))."""
    out = {}
    for name in names:
        m, s2, d2 = gaussian_moments(_function(name))
        out[name] = {"var": s2 - m * m, "deriv_second": d2}
    return out


def hermite(activations: list[str], K: int) -> dict[str, Any]:
    """Hermite coefficients and the two sums of Eq. (27) against the quadrature moments."""
    out = {}
    for name in activations:
        coef = hermite_coefficients(name, K)
        m, s2, d2 = gaussian_moments(name)
        k = np.arange(K + 1)
        out[name] = {"coef": coef.tolist(), "sum_sq": float(np.sum(coef ** 2)),
                     "sum_k_sq": float(np.sum(k * coef ** 2)),
                     "sum_km1_sq": float(np.sum((k[2:] - 1) * coef[2:] ** 2)),
                     "mean": m, "second": s2, "deriv_second": d2}
    return out


def proposition1(width: int, depth: int, seed: int) -> dict[str, Any]:
    """Eq. (19) on one sample of a random Tanh-GPN network, and Eq. (6) on a linear
    orthogonal network (``phi(x) = x``, exactly bidirectionally self-normalizing)."""
    out = {}
    for label, act in (("tanh_gpn", "Tanh-GPN"), ("linear", lambda x: x)):
        gen = torch.Generator().manual_seed(seed)
        net = deep_mlp(width, depth, act, parametrized=False, dtype=torch.float64, generator=gen)
        x = torch.randn(1, width, dtype=torch.float64, generator=gen)
        g = torch.randn(1, width, dtype=torch.float64, generator=gen)
        p = propagate(net, x, g)
        product = p.x_norm[:depth] * p.d_norm
        out[label] = {"x_norm": p.x_norm.tolist(), "d_norm": p.d_norm.tolist(),
                      "grad_norm": p.grad_norm.tolist(),
                      "identity_rel_err": float(np.max(np.abs(p.grad_norm - product) / product)),
                      "grad_spread": float(p.grad_norm.max() / p.grad_norm.min())}
    return out


GPN_LABELS = {"tanh": "Tanh-GPN", "relu": "ReLU-GPN", "leaky_relu": "LeakyReLU-GPN", "elu": "ELU-GPN",
              "selu": "SELU-GPN", "gelu": "GELU-GPN"}
"""The paper's name of the GPN version of each activation."""


def collapse(cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The gradient-norm spread ``max_l / min_l ||dE/dW^(l)||_F`` of every GPN activation on a
    grid of widths ``n`` and depths ``L`` (Haar-orthogonal weights, Gaussian inputs and error
    signals as in Section 3.1; ``collapse_repeats`` networks per grid point).

    Theorems 2-3 are limits in width at fixed depth: each layer multiplies a norm by a factor
    ``1 + O(1/sqrt(n))`` that is independent between layers, so ``log`` of the spread grows like
    a random walk's range, ``sqrt(L / n)``.
    """
    dtype = {"float32": torch.float32, "float64": torch.float64}[cfg["collapse_dtype"]]
    spreads: dict[str, list] = {GPN_LABELS[name]: [] for name in cfg["activations"]}
    grid = []
    for width in cfg["collapse_widths"]:
        for depth in cfg["collapse_depths"]:
            grid.append([width, depth])
            runs = {label: [] for label in spreads}
            for repeat in range(cfg["collapse_repeats"]):
                gen = torch.Generator().manual_seed(seed + 7919 * repeat + 31 * width + depth)
                net = deep_mlp(width, depth, "Tanh", parametrized=False, dtype=dtype, generator=gen)
                x = torch.randn(cfg["collapse_samples"], width, dtype=dtype, generator=gen)
                g = torch.randn(cfg["collapse_samples"], width, dtype=dtype, generator=gen)
                for label in spreads:
                    net.phi = make_activation(label)
                    grad = propagate(net, x, g, bins=0).grad_norm
                    runs[label].append(float(grad.max() / grad.min()))
            for label in spreads:
                spreads[label].append(runs[label])
    return {"grid": grid, "samples": cfg["collapse_samples"], "spreads": spreads}


def correlation_map(coef: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """The correlation map ``f(c) = sum_k a_k^2 c^k`` of a GPN activation with orthonormal
    Hermite coefficients ``a_k`` (Eq. (21)): the correlation ``E[phi(u) phi(v)]`` of its outputs
    for standard Gaussian ``u, v`` of correlation ``c`` (Mehler's formula), ``E[phi^2] = 1``.

    The coefficients beyond ``K`` are put at ``c^(K+1)`` with the mass ``1 - sum_k a_k^2`` they
    miss, so that ``f(1) = 1`` exactly; that overstates ``f(c)`` for ``c < 1`` by at most this
    mass times ``c^(K+1)``.
    """
    coef = np.asarray(coef, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    k = np.arange(coef.size)
    tail = max(0.0, 1.0 - float(np.sum(coef ** 2)))
    return np.sum(coef[:, None] ** 2 * c.reshape(-1)[None, :] ** k[:, None], axis=0).reshape(c.shape) \
        + tail * c ** coef.size


def gpn_coefficients(name: str, K: int) -> np.ndarray:
    """Orthonormal Hermite coefficients of the GPN version ``a phi + b`` of ``name`` (paper's root):
    ``a a_0 + b`` and ``a a_k`` for ``k >= 1``."""
    a, b_plus, b_minus = gpn_constants(name)
    b = b_plus if PAPER_ROOTS[name] == "+" else b_minus
    coef = a * hermite_coefficients(name, K)
    coef[0] += b
    return coef


def correlation(cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """How fast two inputs' correlation goes to 1 with depth in GPN networks: predicted by
    iterating :func:`correlation_map` from the inputs' measured mean cosine similarity, and
    measured as the mean cosine similarity of all pairs of ``correlation_samples`` Gaussian
    inputs through one Haar-orthogonal network (width ``correlation_width``, float64).

    Orthogonal weights keep cosine similarities, and a GPN activation keeps
    ``||x||^2 / n`` at 1, so the pre-activations of two inputs are (for wide layers) standard
    Gaussian with the correlation of the inputs, and the map gives the next layer's.
    """
    width, depth, m = cfg["correlation_width"], cfg["correlation_depth"], cfg["correlation_samples"]
    gen = torch.Generator().manual_seed(seed + 11)
    net = deep_mlp(width, depth, "Tanh", parametrized=False, dtype=torch.float64, generator=gen)
    x0 = torch.randn(m, width, dtype=torch.float64, generator=gen)
    pairs = torch.triu_indices(m, m, offset=1)
    weights = [w.detach() for w in net.square_weights()]

    def mean_cosine(x: torch.Tensor) -> float:
        u = x / x.norm(dim=1, keepdim=True)
        return float((u @ u.T)[pairs[0], pairs[1]].mean())

    out = {}
    for name in cfg["activations"]:
        label = GPN_LABELS[name]
        phi = make_activation(label)
        x, measured = x0, [mean_cosine(x0)]
        with torch.no_grad():
            for w in weights:
                x = phi(x @ w.T)
                measured.append(mean_cosine(x))
        coef = gpn_coefficients(name, cfg["hermite_K"])
        predicted = [measured[0]]
        for _ in range(depth):
            predicted.append(float(correlation_map(coef, predicted[-1])))
        k = np.arange(coef.size)
        out[label] = {"measured": measured, "predicted": predicted, "f0": float(coef[0] ** 2),
                      "slope_at_1": float(np.sum(k * coef ** 2)), "tail": max(0.0, 1.0 - float(np.sum(coef ** 2)))}
    return {"width": width, "depth": depth, "samples": m, "per": out}


def run(cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every result of the chapter as one JSON-serialisable payload."""
    return {"table1": table1(cfg["activations"]),
            "gpn_moments": gpn_moments(cfg["activations"]),
            "poincare": poincare(list(cfg["activations"]) + list(cfg["poincare_extra"])),
            "hermite": hermite(cfg["activations"], cfg["hermite_K"]),
            "prop1": proposition1(cfg["prop1_width"], cfg["prop1_depth"], seed),
            "collapse": collapse(cfg, seed),
            "correlation": correlation(cfg, seed)}


def table1_differences(payload: Mapping[str, Any]) -> dict[str, float]:
    """``ours - paper`` for the twelve constants of Table 1 (paper's root)."""
    diffs = {}
    for name, ref in PAPER["table1"].items():
        row = payload["table1"][name]
        diffs[f"{name}.a"] = row["a"] - ref["a"]
        diffs[f"{name}.b"] = row["b"] - ref["b"]
    return diffs


def _table1_matches(payload):
    diffs = table1_differences(payload)
    same, total, _ = table1_agreement(payload)
    worst = max(diffs, key=lambda k: abs(diffs[k]))
    text = (f"{same}/{total} constants equal the printed values after rounding to 4 decimals; largest "
            f"difference {diffs[worst]:+.1e} ({worst})")
    return text, VERIFIED if abs(diffs[worst]) <= 1e-4 else FAILS


def _poincare_holds(payload):
    rows = payload["poincare"]
    gaps = {k: v["deriv_second"] - v["var"] for k, v in rows.items()}
    worst = min(gaps, key=gaps.get)
    holds = sum(g >= -1e-9 for g in gaps.values())
    text = (f"Var <= E[phi'^2] for {holds}/{len(gaps)} functions; smallest gap "
            f"{gaps[worst]:.2e} ({worst})")
    return text, VERIFIED if holds == len(gaps) else FAILS


def _gpn_normalized(payload):
    rows = payload["gpn_moments"]
    err = max(max(abs(v["second"] - 1), abs(v["deriv_second"] - 1)) for v in rows.values())
    text = f"max |E[phi^2]-1|, |E[phi'^2]-1| over {len(rows)} GPN functions (both roots): {err:.1e}"
    return text, VERIFIED if err <= 1e-8 else FAILS


def _hermite_identities(payload):
    rows = payload["hermite"]
    smooth = ("tanh", "gelu")
    err = max(max(abs(rows[n]["sum_sq"] - rows[n]["second"]), abs(rows[n]["sum_k_sq"] - rows[n]["deriv_second"]))
              for n in smooth if n in rows)
    zero_mean = [n for n in rows if abs(rows[n]["mean"]) < 1e-12]
    gaps = {n: rows[n]["deriv_second"] - rows[n]["second"] for n in zero_mean}
    text = (f"Eq. (27) for Tanh, GELU: max error {err:.1e}; zero-mean activations "
            + ", ".join(f"{ACTIVATION_LABELS[n]}: E[phi'^2]-E[phi^2] = {g:.4f}" for n, g in gaps.items()))
    ok = err <= 1e-6 and all(g > 1e-3 for g in gaps.values())
    return text, VERIFIED if ok else FAILS


def _proposition1(payload):
    p = payload["prop1"]
    text = (f"Eq. (19) relative error {max(p['tanh_gpn']['identity_rel_err'], p['linear']['identity_rel_err']):.1e}; "
            f"linear orthogonal net: gradient-norm spread max/min - 1 = {p['linear']['grad_spread'] - 1:.1e}")
    ok = max(p["tanh_gpn"]["identity_rel_err"], p["linear"]["identity_rel_err"]) <= 1e-10 \
        and p["linear"]["grad_spread"] - 1 <= 1e-10
    return text, VERIFIED if ok else FAILS


CLAIMS = [
    Claim(key="lu-gpn-table1", paper="lu", source="paper", result="gpn",
          text="Table 1: the GPN constants (a, b) of Tanh, ReLU, LeakyReLU, ELU, SELU and GELU.",
          rule="verified if all 12 constants are within 1e-4 (one unit of the printed 4th decimal) "
               "of Table 1, using the paper's root; else fails",
          check=_table1_matches, kind=IDENTITY),
    Claim(key="lu-gpn-poincare", paper="lu", source="paper", result="gpn",
          text="Theorem 1 (Gaussian-Poincaré inequality): Var[phi] <= E[phi'^2] under N(0, 1).",
          rule="verified if the inequality holds (to 1e-9) for every tested function (the 6 activations "
               "of Table 1 and 11 more); else fails",
          check=_poincare_holds, kind=IDENTITY),
    Claim(key="lu-gpn-prop3", paper="lu", source="paper", result="gpn",
          text="Proposition 3: a*phi + b with a = E[phi'^2]^(-1/2), b = a c is Gaussian-Poincaré normalized.",
          rule="verified if E[phi_hat^2] and E[phi_hat'^2] are 1 to 1e-8 for all 6 activations and both "
               "roots; else fails",
          check=_gpn_normalized, kind=IDENTITY),
    Claim(key="lu-gpn-prop2", paper="lu", source="paper", result="gpn",
          text="Proposition 2 (via Eq. (27)): a zero-mean nonlinear function is not GPN, "
               "since E[phi'^2] - E[phi^2] = sum_k (k-1) a_k^2 > 0.",
          rule="verified if the Hermite sums match the quadrature moments to 1e-6 for the smooth Tanh and "
               "GELU and E[phi'^2] - E[phi^2] > 1e-3 for every zero-mean activation (Tanh, SELU); else fails",
          check=_hermite_identities, kind=IDENTITY),
    Claim(key="lu-gpn-prop1", paper="lu", source="paper", result="gpn",
          text="Proposition 1: ||dE/dW^(l)||_F = ||x^(l)|| ||d^(l)|| (Eq. (19)), hence equal gradient "
               "norms in a bidirectionally self-normalizing network.",
          rule="verified if Eq. (19) holds to 1e-10 relative error on random networks and a linear "
               "orthogonal network has equal gradient norms to 1e-10; else fails",
          check=_proposition1, kind=IDENTITY),
]


def _f4(value: float) -> str:
    """Four decimals without a negative zero."""
    return f"{round(value, 4) + 0.0:.4f}"


def table1_frame(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Table 1 of Lu et al. beside ours (both roots of Eq. (10)) at this build's scale and
    from the paper-scale cache (``None``: not available)."""
    import pandas as pd

    rows = []
    for name, ref in PAPER["table1"].items():
        row = live["table1"][name]
        star = {"+": ("*", ""), "-": ("", "*")}[row["paper_root"]]
        rows.append({
            "activation": ACTIVATION_LABELS[name],
            "paper a": f"{ref['a']:.4f}", "paper b": f"{ref['b']:.4f}",
            "ours a": _f4(row["a"]),
            "ours b (+ root)": f"{_f4(row['b_plus'])}{star[0]}",
            "ours b (- root)": f"{_f4(row['b_minus'])}{star[1]}",
            "ours - paper (a, b)": f"{row['a'] - ref['a']:+.1e}, {row['b'] - ref['b']:+.1e}",
            "paper scale (cache): a, b": (f"{_f4(cached['table1'][name]['a'])}, {_f4(cached['table1'][name]['b'])}"
                                          if cached else NOT_RUN),
        })
    return pd.DataFrame(rows).set_index("activation")


def poincare_frame(payload: Mapping[str, Any]):
    """Var[phi] against E[phi'^2] (Theorem 1) for every tested function."""
    import pandas as pd

    rows = [{"function": ACTIVATION_LABELS.get(k, k), "Var[phi]": v["var"], "E[phi'^2]": v["deriv_second"],
             "E[phi'^2] - Var[phi]": v["deriv_second"] - v["var"]} for k, v in payload["poincare"].items()]
    return pd.DataFrame(rows).set_index("function").style.format("{:.6f}")


def plot_hermite(payload: Mapping[str, Any]):
    """Left: a_k^2 against k; right: the partial sums of Eq. (27) relative to their limits."""
    fig, (left, right) = style.subplots(1, 2, figsize=(11, 4))
    for name, row in payload["hermite"].items():
        coef = np.asarray(row["coef"])
        k = np.arange(coef.size)
        keep = coef ** 2 > 1e-30
        left.semilogy(k[keep], coef[keep] ** 2, ".-", ms=3, lw=0.8, label=ACTIVATION_LABELS[name])
        missing = row["deriv_second"] - np.cumsum(k * coef ** 2)
        right.semilogy(k, np.maximum(missing, 1e-16), lw=1, label=ACTIVATION_LABELS[name])
    left.set_xlabel("$k$")
    left.set_ylabel("$a_k^2$")
    left.set_title(r"Hermite spectrum, $\phi = \sum_k a_k H_k$ (Eq. (21))", fontsize=10)
    right.set_xlabel("$K$")
    right.set_ylabel(r"$E[\phi'^2] - \sum_{k \leq K} k\, a_k^2$")
    right.set_title("missing derivative energy after K terms (Eq. (27))", fontsize=10)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def plot_proposition1(payload: Mapping[str, Any]):
    """||dE/dW^(l)||_F against ||x^(l)|| ||d^(l)|| (Eq. (19)) on one sample."""
    fig, ax = style.subplots(figsize=(10, 4))
    for label, name in (("tanh_gpn", "Tanh-GPN"), ("linear", r"linear $\phi(x) = x$")):
        row = payload["prop1"][label]
        grad = np.asarray(row["grad_norm"])
        product = np.asarray(row["x_norm"][:grad.size]) * np.asarray(row["d_norm"])
        layers = np.arange(1, grad.size + 1)
        ax.plot(layers, grad, "o", mfc="none", label=rf"{name}: $\|\partial E/\partial W^{{(l)}}\|_F$ (Eq. (3))")
        ax.plot(layers, product, "-", label=rf"{name}: $\|x^{{(l)}}\|_2 \|d^{{(l)}}\|_2$")
    ax.set_xlabel("layer $l$")
    ax.set_ylabel("norm")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


SPREAD_TARGET = 2.0
"""The gradient-norm spread max_l/min_l that "wide enough" is measured against (a factor of 2)."""


def collapse_fit(payload: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per GPN activation, the fit ``log spread = s sqrt(L / n)`` (least squares through the
    origin, on the mean over repeats of the log spread at each grid point) and how well the
    grid collapses onto it.

    ``r2``: the fraction of the variance of the log spread over the grid that the one variable
    ``sqrt(L / n)`` explains; ``r2_depth`` and ``r2_width``: the same for the best fits in
    ``sqrt(L)`` and in ``1 / sqrt(n)`` alone (the alternatives the collapse must beat);
    ``same_ratio``: the largest difference of log spread between grid points of equal
    ``L / n <= 1`` (the scatter at a fixed ``sqrt(L / n)`` in the wide regime of the theorems),
    and ``range``: the range of log spread over the grid; ``width_per_depth``: the ``n / L`` at which the fit gives a spread of
    :data:`SPREAD_TARGET`, ``(s / ln 2)^2``.
    """
    grid = np.asarray(payload["grid"], dtype=np.float64)
    n, depth = grid[:, 0], grid[:, 1]
    out = {}
    for label, rows in payload["spreads"].items():
        y = np.log(np.asarray(rows, dtype=np.float64)).mean(axis=1)
        total = float(np.sum((y - y.mean()) ** 2))

        def r2(x: np.ndarray) -> tuple[float, float]:
            slope = float(x @ y / (x @ x))
            return slope, 1.0 - float(np.sum((y - slope * x) ** 2)) / total

        s, fit = r2(np.sqrt(depth / n))
        groups: dict[float, list[float]] = {}
        for ratio, value in zip(depth / n, y):
            if ratio <= 1:
                    groups.setdefault(round(float(ratio), 9), []).append(float(value))
        out[label] = {"slope": s, "r2": fit, "r2_depth": r2(np.sqrt(depth))[1], "r2_width": r2(1 / np.sqrt(n))[1],
                      "same_ratio": max((max(v) - min(v) for v in groups.values() if len(v) > 1), default=0.0),
                      "range": float(y.max() - y.min()),
                      "width_per_depth": float((s / np.log(SPREAD_TARGET)) ** 2)}
    return out


def plot_collapse(payload: Mapping[str, Any]):
    """Log gradient-norm spread of every GPN activation against ``sqrt(L / n)`` (with the fit
    of :func:`collapse_fit`) and, in the panel below it, against the depth ``L``; one marker per
    width, three activations a row."""
    grid = np.asarray(payload["grid"], dtype=np.float64)
    fits = collapse_fit(payload)
    labels = list(payload["spreads"])
    columns = 3
    groups = -(-len(labels) // columns)
    fig, axes = style.subplots(2 * groups, columns, figsize=(9, 3.2 * groups * 2), squeeze=False)
    markers = "osD^vP*X"
    widths = sorted(set(grid[:, 0]))
    x = np.linspace(0, np.sqrt(grid[:, 1] / grid[:, 0]).max(), 50)
    for index, label in enumerate(labels):
        top, bottom = axes[2 * (index // columns), index % columns], axes[2 * (index // columns) + 1, index % columns]
        y = np.log(np.asarray(payload["spreads"][label], dtype=np.float64)).mean(axis=1)
        for marker, width in zip(markers, widths):
            keep = grid[:, 0] == width
            top.plot(np.sqrt(grid[keep, 1] / width), y[keep], marker, mfc="none", label=f"n = {width:g}")
            bottom.plot(grid[keep, 1], y[keep], marker + "-", mfc="none", label=f"n = {width:g}")
        top.plot(x, fits[label]["slope"] * x, "k-", lw=1)
        top.set_title(f"{label}\nslope {fits[label]['slope']:.2f}, $R^2$ {fits[label]['r2']:.2f}")
        top.set_xlabel(r"$\sqrt{L/n}$")
        bottom.set_xlabel("depth $L$")
        bottom.set_xscale("log", base=2)
        if index % columns == 0:
            top.set_ylabel("log spread")
            bottom.set_ylabel("log spread")
    for ax in axes.flat[len(labels) * 2:]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    style.legend_below(fig, ncol=len(widths))
    return fig


CORRELATION_LEVEL = 0.9
"""The correlation whose depth of arrival orders the activations (two independent inputs
become 90% correlated)."""


def _depth_to(values: list[float], level: float) -> float:
    """The first layer at which ``values`` reaches ``level`` (``inf`` if it never does)."""
    reached = np.nonzero(np.asarray(values) >= level)[0]
    return float(reached[0]) if reached.size else float("inf")


def correlation_summary(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Per GPN activation: the depth at which the mean correlation of two inputs reaches
    :data:`CORRELATION_LEVEL`, predicted by the correlation map and measured, ``1 - c`` at
    the last layer both ways, and Spearman correlations of the orderings: predicted against
    measured, and each (``rho_{predicted,measured}_<dataset>`` for ``1 - c`` at the last layer,
    ``rho_depth_...`` for the depth) against the paper's Table 2 training accuracy of the GPN
    networks without batch normalisation (MNIST and CIFAR-10; a reference: a slower approach to
    1 should train better)."""
    from gmp.experiments.lu_real import PAPER as REAL

    per = payload["correlation"]["per"]
    rows = {label: {"depth_predicted": _depth_to(v["predicted"], CORRELATION_LEVEL),
                    "depth_measured": _depth_to(v["measured"], CORRELATION_LEVEL),
                    "gap_predicted": 1 - v["predicted"][-1], "gap_measured": 1 - v["measured"][-1],
                    **{f"paper_{d}": REAL["table2"][label][d]["train"][0] for d in ("mnist", "cifar10")}}
            for label, v in per.items()}
    labels = list(rows)

    def rho(a: str, b: str) -> float:
        return float(stats.spearmanr([rows[k][a] for k in labels], [rows[k][b] for k in labels]).statistic)

    return {"rows": rows, "level": CORRELATION_LEVEL,
            "rho_predicted_measured": rho("gap_predicted", "gap_measured"),
            "rho_depth_predicted_measured": rho("depth_predicted", "depth_measured"),
            **{f"rho_{which}_{d}": rho(f"gap_{which}", f"paper_{d}")
               for which in ("predicted", "measured") for d in ("mnist", "cifar10")},
            **{f"rho_depth_{which}_{d}": rho(f"depth_{which}", f"paper_{d}")
               for which in ("predicted", "measured") for d in ("mnist", "cifar10")}}


def correlation_frame(payload: Mapping[str, Any]):
    """The table of :func:`correlation_summary`."""
    import pandas as pd

    summary = correlation_summary(payload)
    level = summary["level"]
    frame = pd.DataFrame.from_records([
        {"activation": label, f"depth to c = {level:g}, map": row["depth_predicted"],
         f"depth to c = {level:g}, measured": row["depth_measured"],
         "1 - c at the last layer, map": row["gap_predicted"], "1 - c at the last layer, measured": row["gap_measured"],
         "paper: MNIST train % (Table 2)": row["paper_mnist"], "paper: CIFAR-10 train % (Table 2)": row["paper_cifar10"]}
        for label, row in summary["rows"].items()]).set_index("activation")
    return frame.style.format({c: "{:.3g}" for c in frame.columns})


def plot_correlation(payload: Mapping[str, Any]):
    """``1 - c`` against depth: measured mean cosine similarity (markers) and the iterated
    correlation map (lines), per GPN activation."""
    corr = payload["correlation"]
    fig, ax = style.subplots(figsize=(10, 4))
    for index, (label, row) in enumerate(corr["per"].items()):
        color = f"C{index}"
        layers = np.arange(len(row["measured"]))
        ax.loglog(layers[1:], 1 - np.asarray(row["predicted"][1:]), "-", color=color, label=f"{label}: map")
        ax.loglog(layers[1:], 1 - np.asarray(row["measured"][1:]), "o", ms=3, mfc="none", color=color,
                  label=f"{label}: measured")
    ax.set_xlabel("layer $l$")
    ax.set_ylabel("$1 - c^{(l)}$")
    ax.set_title(f"mean cosine similarity of {corr['samples']} Gaussian inputs (all pairs), width {corr['width']}")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    style.legend_below(fig, ncol=4)
    return fig
