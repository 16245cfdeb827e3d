"""Experiment of the chapter book/part1/chen_characteristic.md (Sec. 2 and Fig. 1 of Chen & Ge):
characteristic activation boundaries of ReLU units, their hyperspherical coordinates, and
their stability under small perturbations of the parameters (Eqs. (3)-(9)).

The computation is the same at every scale; the scales differ only in the number of random
units over which the perturbation statistics are taken. Units follow the official
notebook of the perturbation figure: ``w, b ~ 0.001 N(0, 1)`` in 2-D, every parameter
perturbed by ``eps`` in {1e-4, 1e-3, 1e-2, 1e-1}; the same units scaled to a realistic weight
size (Glorot-normal for a 2-to-2 layer, ``E||w||^2 = 1``) are perturbed beside them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from gmp.characteristic import PERTURBED_PARAMS, characteristic_points, perturb_boundary
from gmp.config import Config, scaled
from gmp.hyperspherical import angles_to_unit, fourth_moment_test, unit_to_angles
from gmp.layers import GmPLinear
from gmp.results import FAILS, IDENTITY, NOT_REPRODUCED, PARTLY, REPRODUCED, VERIFIED, Claim

NAMES: dict[str, str] = {"sp": "SP", "wn": "WN", "gmp": "GmP"}
"""Display names of the parameterizations compared in Fig. 1e-h."""

CONFIG = scaled(
    common=dict(
        eps=[1e-4, 1e-3, 1e-2, 1e-1], init_std=1e-3, dim=2, seed=0,
        # The realistic weight scale: Glorot-normal std sqrt(2 / (fan_in + fan_out)) of a 2-to-2
        # layer, so that E||w||^2 = 1 (the paper's units have ||w|| about 1e-3).
        glorot_std=2 ** -0.5,
        # Fig. 1a-d: (angle in degrees, lambda) of the unit drawn in each panel (our choice:
        # the paper's values are not given in its text).
        fig1_units=[[30.0, -1.0], [135.0, -0.5], [210.0, 1.0], [300.0, 0.5]],
        # Fig. 1e-h: which of the random units is drawn (the first one of the seed).
        fig1_unit_index=0, fig1_extent=3.0,
        roundtrip_dims=[2, 3, 10, 100, 1000, 4608], roundtrip_vectors=64,
        boundary_dims=[2, 3, 10, 100], boundary_units=32,
        drastic_factor=100.0, init_dim=50, init_stds=[1e-3, 1.0, 1e3],
    ),
    smoke=dict(units=2_000, init_units=2_000),
    small=dict(units=100_000, init_units=20_000),
    paper=dict(units=1_000_000, init_units=200_000),
)

PAPER = {
    # Fig. 1e-h of Chen & Ge: perturbation scales of the four panels.
    "eps": [1e-4, 1e-3, 1e-2, 1e-1],
    # Eq. (9): in 2-D a perturbation eps of the GmP angle turns the boundary by exactly eps.
    "gmp_angle_change": "exactly eps",
    # Sec. 2.4: "even a small perturbation eps of magnitude 10^-3 can drastically change the
    # spatial locations of the characteristic activation planes under other parameterizations".
    "drastic_eps": 1e-3,
    # Sec. 2.4 after Eq. (8): under SP the direction change "can take arbitrary values in
    # [0, pi] even for a small perturbation".
    "sp_angle_range": [0.0, math.pi],
}


def sample_units(cfg: Config, units: int | None = None, std: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ReLU units ``w, b ~ std N(0, 1)`` in ``dim`` dimensions (float64; ``std`` defaults
    to ``cfg.init_std``). Every ``std`` scales the same draws, so ``lam = b / ||w||`` and the
    boundaries do not depend on it."""
    g = torch.Generator().manual_seed(cfg.seed)
    n = cfg.units if units is None else units
    std = cfg.init_std if std is None else std
    w = std * torch.randn(n, cfg.dim, generator=g, dtype=torch.float64)
    b = std * torch.randn(n, generator=g, dtype=torch.float64)
    return w, b


def _quantiles(x: torch.Tensor) -> dict[str, float]:
    q = torch.quantile(x, torch.tensor([0.1, 0.5, 0.9], dtype=x.dtype))
    return {"min": float(x.min()), "p10": float(q[0]), "median": float(q[1]), "p90": float(q[2]),
            "max": float(x.max())}


def perturbation_statistics(cfg: Config, std: float | None = None) -> dict[str, Any]:
    """Sec. 2.4 over ``cfg.units`` random units ``w, b ~ std N(0, 1)`` (``std`` defaults to the
    paper's ``cfg.init_std``): how far each parameterization moves the boundary.

    For every ``eps`` and parameterization: quantiles of the angle between old and new
    normals (Eqs. (8)-(9)) and of the distance moved by the spatial location ``phi``.
    For GmP also the largest deviation of the angle from ``eps`` (Eq. (9)), the largest
    relative excess of the move over the triangle-inequality bound,
    ``max (||phi' - phi|| - (1 + |lam|) eps) / ((1 + |lam|) eps)`` (negative when every unit
    stays inside it), and the largest change of the boundary's distance to the origin,
    ``| |lam + eps| - |lam| |``.
    """
    w, b = sample_units(cfg, std=std)
    lam = b / w.norm(dim=1)
    out: dict[str, Any] = {"units": int(len(w)), "eps": list(cfg.eps), "drastic_factor": cfg.drastic_factor,
                           "std": cfg.init_std if std is None else std,
                           "w_norm": _quantiles(w.norm(dim=1)),
                           "phi_norm": _quantiles(perturb_boundary(w, b, 0.0, "sp").phi.norm(dim=1))}
    for param in PERTURBED_PARAMS:
        rows = []
        for eps in cfg.eps:
            res = perturb_boundary(w, b, eps, param)
            row = {"eps": eps, "angle": _quantiles(res.angle), "shift": _quantiles(res.shift)}
            if param == "gmp":
                row["max_angle_error"] = float((res.angle - abs(eps)).abs().max())
                bound = abs(eps) * (1 + lam.abs())
                row["max_bound_excess"] = float(((res.shift - bound) / bound).max())
                radius_change = (res.phi_perturbed.norm(dim=1) - res.phi.norm(dim=1)).abs()
                row["max_radius_change"] = float(radius_change.max())
            rows.append(row)
        out[param] = rows
    return out


def figure_unit(cfg: Config) -> dict[str, Any]:
    """The unit drawn in Fig. 1e-h and its perturbed boundaries, JSON-serialisable."""
    w, b = sample_units(cfg, units=cfg.fig1_unit_index + 1)
    w, b = w[cfg.fig1_unit_index:], b[cfg.fig1_unit_index:]
    out: dict[str, Any] = {"w": w[0].tolist(), "b": float(b[0])}
    for param in PERTURBED_PARAMS:
        out[param] = []
        for eps in cfg.eps:
            res = perturb_boundary(w, b, eps, param)
            out[param].append({"eps": eps, "phi": res.phi[0].tolist(), "normal": res.normal[0].tolist(),
                               "phi_perturbed": res.phi_perturbed[0].tolist(),
                               "normal_perturbed": res.normal_perturbed[0].tolist(),
                               "angle": float(res.angle[0]), "shift": float(res.shift[0])})
    return out


def roundtrip_checks(cfg: Config) -> dict[str, Any]:
    """Largest errors of the hyperspherical round trips (Eq. (6) and its inverse) per dimension.

    ``vector``: ``|u(theta(v)) - v / ||v|| |``; ``angle``: ``|theta(u(theta)) - theta|`` for the
    angles of random directions; ``norm``: ``| ||u(theta)|| - 1 |``. Half the vectors have a
    negative last coordinate.
    """
    rows = []
    g = torch.Generator().manual_seed(cfg.seed)
    for n in cfg.roundtrip_dims:
        v = torch.randn(cfg.roundtrip_vectors, n, generator=g, dtype=torch.float64)
        v[: cfg.roundtrip_vectors // 2, -1] = -v[: cfg.roundtrip_vectors // 2, -1].abs()
        row: dict[str, Any] = {"n": n, "negative_last": int((v[:, -1] < 0).sum())}
        for dtype, name in ((torch.float64, "float64"), (torch.float32, "float32")):
            x = v.to(dtype)
            theta = unit_to_angles(x)
            u = angles_to_unit(theta)
            row[name] = {"vector": float((u - x / x.norm(dim=1, keepdim=True)).abs().max()),
                         "angle": float((unit_to_angles(u) - theta).abs().max()),
                         "norm": float((u.norm(dim=1) - 1).abs().max())}
        rows.append(row)
    return {"rows": rows}


def boundary_checks(cfg: Config) -> dict[str, Any]:
    """``phi`` lies on the boundary and is orthogonal to it (Secs. 2.1-2.3), per layer kind.

    For random layers of each kind and dimension: the largest ``|pre-activation(phi)|``, the
    largest ``|phi . t|`` for random directions ``t`` inside the boundary, and the largest
    ``|pre-activation(phi + t)|`` (the boundary is the plane through ``phi`` normal to ``u``).
    """
    rows = []
    torch.manual_seed(cfg.seed)
    for n in cfg.boundary_dims:
        sp = torch.nn.Linear(n, cfg.boundary_units, dtype=torch.float64)
        wn = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(n, cfg.boundary_units, dtype=torch.float64))
        gm = GmPLinear(n, cfg.boundary_units, init="uniform", dtype=torch.float64)
        with torch.no_grad():
            gm.lam.normal_()
            wn.parametrizations.weight.original0.mul_(2.5)
        for kind, layer in (("SP", sp), ("WN", wn), ("GmP", gm)):
            with torch.no_grad():
                if kind == "GmP":
                    weight, bias = layer.direction, layer.lam
                else:
                    weight, bias = layer.weight, layer.bias
                phi = characteristic_points(layer)
                normal = weight / weight.norm(dim=1, keepdim=True)
                t = torch.randn_like(phi)
                t -= (t * normal).sum(1, keepdim=True) * normal
                rows.append({"n": n, "kind": kind,
                             "preact_at_phi": float(((weight * phi).sum(1) + bias).abs().max()),
                             "phi_dot_tangent": float((phi * t).sum(1).abs().max()),
                             "preact_along_boundary": float(((weight * (phi + t)).sum(1) + bias).abs().max()),
                             "phi_parallel_normal": float((phi - (phi * normal).sum(1, keepdim=True) * normal)
                                                          .norm(dim=1).max())})
    return {"rows": rows}


def init_checks(cfg: Config) -> dict[str, Any]:
    """Sec. 3.3: directions of i.i.d. Gaussian weights are uniform on the sphere, whatever the
    variance; those of Glorot-uniform weights and directions built from uniform angles are not.

    For ``cfg.init_units`` directions in ``init_dim`` dimensions, per way of drawing them: the
    mean of ``u_i^2`` per coordinate (1/n for any exchangeable coordinates, so it cannot tell;
    its standard error is ``sqrt(2 (n - 1) / (n^2 (n + 2)) / units)``), and the fourth-moment
    test of :func:`gmp.fourth_moment_test` (the mean of ``sum_i u_i^4`` against its value
    ``3 / (n + 2)`` on the sphere, in standard errors). The ways: Gaussian weights of several
    standard deviations, Glorot-uniform weights (``torch.nn.init.xavier_uniform_``, i.i.d.
    uniform; their scale does not change the direction), and uniform angles
    (``theta_i ~ U(0, pi)``, the last one ``U(-pi, pi)``).
    """
    n, units = cfg.init_dim, cfg.init_units
    stderr = math.sqrt(2 * (n - 1) / (n * n * (n + 2)) / units)
    g = torch.Generator().manual_seed(cfg.seed)

    def row(source: str, u: torch.Tensor) -> dict[str, Any]:
        second = (u ** 2).mean(dim=0)
        fourth = fourth_moment_test(u)
        return {"source": source, "first": float(second[0]), "last": float(second[-1]),
                "max_dev_stderr": float((second - 1 / n).abs().max() / stderr),
                "last_positive": float((u[:, -1] > 0).double().mean()),
                "fourth_ratio": fourth.ratio, "fourth_z": fourth.z}

    rows = []
    for std in cfg.init_stds:
        w = std * torch.randn(units, n, generator=g, dtype=torch.float64)
        rows.append(row(f"Gaussian, std {std:g}", w / w.norm(dim=1, keepdim=True)))
    w = torch.nn.init.xavier_uniform_(torch.empty(units, n, dtype=torch.float64), generator=g)
    rows.append(row("Glorot-uniform", w / w.norm(dim=1, keepdim=True)))
    theta = torch.rand(units, n - 1, generator=g, dtype=torch.float64) * math.pi
    theta[:, -1] = theta[:, -1] * 2 - math.pi
    rows.append(row("uniform angles", angles_to_unit(theta)))
    return {"n": n, "units": units, "stderr": stderr, "rows": rows}


def run(cfg: Config) -> dict[str, dict[str, Any]]:
    """Every result of the chapter, by name (what ``store.save`` keeps)."""
    return {"perturbation": perturbation_statistics(cfg),
            "perturbation_glorot": perturbation_statistics(cfg, cfg.glorot_std), "figure_unit": figure_unit(cfg),
            "roundtrip": roundtrip_checks(cfg), "boundary": boundary_checks(cfg), "init": init_checks(cfg)}


def row_at(payload: Mapping[str, Any], param: str, eps: float) -> Mapping[str, Any]:
    """The perturbation result of ``param`` at ``eps`` in a ``perturbation`` payload."""
    for row in payload[param]:
        if math.isclose(row["eps"], eps):
            return row
    raise ValueError(f"no perturbation result for {param} at eps = {eps}; have {[r['eps'] for r in payload[param]]}")


ANGLE_TOLERANCE = 1e-9
"""The tolerance in rad within which Eq. (9) holds for every ``|angle change - eps|``.

Float64 rounding of the angles is a few 1e-16 rad, so this leaves a factor of about 1e6 of
slack above rounding, while it is 1e-5 of the smallest eps (1e-4); any real failure of the
identity exceeds it.
"""

RADIUS_ROUNDING = 1e4 * 2.0 ** -52
"""The change of the boundary's distance to the origin, ``| |phi'| - |phi| |``, may exceed
``eps`` by this times the largest ``|phi|`` of the sample: the two norms are each rounded to a
few units of ``2^-52 |phi|``, so 1e4 such units leave a factor of about 100 of slack above the
rounding we measure (1.4e-11 at max|phi| = 553), while the tolerance (1.2e-9 there) stays about
1e-5 of the smallest eps: a real failure of the bound exceeds it."""


BOUND_ROUNDING = 1e-9
"""The relative excess of a GmP move over its bound ``(1 + |lam|) eps`` that the smooth-move rule
accepts as rounding.

The move ``||phi' - phi||`` is the difference of two spatial locations, each rounded to a few
units of ``2^-52 |phi|``, while the bound is at least ``|phi| eps``: rounding is below about
``1e-11`` of the bound at the smallest eps (1e-4), a factor of 100 under this tolerance. The
paper-scale units stay inside the bound by ``2.5e-6`` of it (the unit closest to the bound has
the smallest ``|lam|``), far more than this tolerance on the other side.
"""


def radius_tolerance(payload: Mapping[str, Any], eps: float) -> float:
    """The largest change of the distance to the origin that the smooth-move rule accepts at ``eps``."""
    return eps + RADIUS_ROUNDING * (payload["phi_norm"]["max"] + eps)


def _gmp_angle_exact(payload: Mapping[str, Any]) -> tuple[str, str]:
    err = max(row["max_angle_error"] for row in payload["gmp"])
    text = (f"largest |angle - eps| over {payload['units']:,} units and eps in {payload['eps']}: {err:.1e} rad "
            f"(tolerance {ANGLE_TOLERANCE:g})")
    return text, VERIFIED if err < ANGLE_TOLERANCE else FAILS


def _gmp_smooth(payload: Mapping[str, Any]) -> tuple[str, str]:
    rows = payload["gmp"]
    bound_excess = max(row["max_bound_excess"] for row in rows)
    medians = [row["shift"]["median"] for row in rows]
    excess = max((row["max_radius_change"] - row["eps"]) / (radius_tolerance(payload, row["eps"]) - row["eps"])
                 for row in rows)
    increasing = all(a < b for a, b in zip(medians, medians[1:]))
    text = (f"largest ||dphi|| / ((1+|lam|) eps) - 1 over {payload['units']:,} units and every eps: "
            f"{bound_excess:.2g} (tolerance +{BOUND_ROUNDING:g}); "
            f"median ||dphi|| / eps: {', '.join(f'{m / row_eps:.3f}' for m, row_eps in zip(medians, payload['eps']))}; "
            f"largest excess of | |phi'| - |phi| | over eps: {excess:.2g} of the rounding tolerance "
            f"{RADIUS_ROUNDING:.1e} max|phi| (max|phi| = {payload['phi_norm']['max']:.3g})")
    return text, VERIFIED if bound_excess <= BOUND_ROUNDING and increasing and excess <= 1 else FAILS


def _sp_wn_drastic(payload: Mapping[str, Any]) -> tuple[str, str]:
    eps = PAPER["drastic_eps"]
    factor = payload["drastic_factor"]
    gm = row_at(payload, "gmp", eps)["shift"]["median"]
    parts, passed, weak = [], 0, 0
    for param in ("sp", "wn"):
        row = row_at(payload, param, eps)
        shift_ratio = row["shift"]["median"] / gm
        angle_ratio = row["angle"]["median"] / eps
        parts.append(f"{NAMES[param]}: median shift {row['shift']['median']:.3f} ({shift_ratio:.0f}x GmP), "
                     f"median turn {row['angle']['median']:.3f} rad ({angle_ratio:.0f}x eps)")
        passed += shift_ratio >= factor and angle_ratio >= factor
        weak += shift_ratio >= 10 and angle_ratio >= 10
    text = f"at eps = {eps:g}: " + "; ".join(parts) + f" (median |phi| {payload['phi_norm']['median']:.3f})"
    if passed == 2:
        return text, REPRODUCED
    return text, PARTLY if passed == 1 or weak == 2 else NOT_REPRODUCED


def _sp_arbitrary_angle(payload: Mapping[str, Any]) -> tuple[str, str]:
    eps = min(payload["eps"])
    angles = {param: row_at(payload, param, eps)["angle"]["max"] for param in ("sp", "wn")}
    text = (f"largest turn at eps = {eps:g} over {payload['units']:,} units: "
            + ", ".join(f"{NAMES[p]} {a:.3f} rad ({a / math.pi:.3f} pi)" for p, a in angles.items()))
    worst = min(angles.values())
    return text, REPRODUCED if worst >= 0.9 * math.pi else PARTLY if worst >= 0.5 * math.pi else NOT_REPRODUCED


FOURTH_Z = 4.0
"""The fourth-moment test accepts a way of drawing directions as uniform if its ``|z| <`` this.

A two-sided normal tail of 6e-5 per test: three Gaussian variances are tested, so a uniform
source is rejected by chance with probability about 2e-4.
"""


def _uniform_directions(payload: Mapping[str, Any]) -> tuple[str, str]:
    gaussian = [row for row in payload["rows"] if row["source"].startswith("Gaussian")]
    worst = max(abs(row["fourth_z"]) for row in gaussian)
    glorot = next(row for row in payload["rows"] if row["source"] == "Glorot-uniform")
    angles = next(row for row in payload["rows"] if row["source"] == "uniform angles")
    text = (f"n = {payload['n']}, {payload['units']:,} directions per source: fourth-moment test "
            f"(mean sum u_i^4 against 3/(n+2)) |z| <= {worst:.2f} for Gaussian weights of std "
            f"{', '.join(row['source'].split()[-1] for row in gaussian)}; the same test rejects Glorot-uniform "
            f"directions (z = {glorot['fourth_z']:.0f}, ratio {glorot['fourth_ratio']:.3f}) and uniform angles "
            f"(z = {angles['fourth_z']:.0f}); mean u_i^2, which cannot tell, is within "
            f"{glorot['max_dev_stderr']:.1f} standard errors of 1/n for Glorot-uniform too")
    powerful = abs(glorot["fourth_z"]) >= FOURTH_Z
    return text, VERIFIED if worst < FOURTH_Z and powerful else FAILS


CLAIMS = [
    Claim(key="chen-characteristic-gmp-angle", paper="chen", source="paper", result="perturbation",
          text="Eq. (9): in 2-D, perturbing the GmP angle by eps turns the characteristic boundary by exactly eps.",
          rule="verified if the largest |angle change - eps| over all sampled units and eps values is below "
               "1e-9 rad (float64 rounding of an angle is a few 1e-16 rad; 1e-9 is 1e-5 of the smallest eps); "
               "else fails",
          check=_gmp_angle_exact, kind=IDENTITY),
    Claim(key="chen-characteristic-gmp-smooth", paper="chen", source="paper", result="perturbation",
          text="Fig. 1e-h: under GmP the boundary moves smoothly, gradually away from its original spatial "
               "location as eps grows.",
          rule="verified if every sampled unit moves its spatial location by at most (1 + |lambda|) eps "
               "(triangle inequality; with a relative tolerance of 1e-9 for rounding, which is below 1e-11 of "
               "the bound; the measured units stay inside it by 2.5e-6), its distance to the "
               "origin by at most eps + 1e4 * 2^-52 * max|phi| (1e4 units of float64 rounding of the largest "
               "|phi| of the sample, about 100 times the rounding measured), and the median move grows with "
               "eps; else fails",
          check=_gmp_smooth, kind=IDENTITY),
    Claim(key="chen-characteristic-sp-wn-drastic", paper="chen", source="paper", result="perturbation",
          baseline="SP and WN",
          text="Sec. 2.4 / Fig. 1e-h: under SP and WN even eps = 1e-3 can drastically change the spatial location "
               "of the boundary (units with w, b ~ 0.001 N(0, 1)).",
          rule="reproduced if at eps = 1e-3, for both SP and WN, the median unit's spatial location moves at least "
               "drastic_factor (100) times farther than under GmP and its normal turns by at least 100 eps; partly if only one of SP/WN "
               "does, or both only by 10x; else not reproduced",
          check=_sp_wn_drastic,
          short="SP/WN: eps = 1e-3 moves the boundary drastically (at weight scale 1e-3, by construction)",
          note="Holds at the paper's weight scale only, and there by construction: with w, b ~ 0.001 N(0, 1) a "
               "perturbation of 1e-3 is as large as the weights themselves. At the Glorot scale the same "
               "perturbation barely moves the boundary (the chapter's table of both scales)."),
    Claim(key="chen-characteristic-sp-arbitrary-angle", paper="chen", source="paper", result="perturbation",
          baseline="SP and WN",
          text="Eq. (8): under SP (and WN) the direction change can take arbitrary values in [0, pi] even for a "
               "small perturbation.",
          rule="reproduced if at the smallest eps (1e-4) some sampled unit turns by at least 0.9 pi under both SP "
               "and WN; partly if by at least pi/2; else not reproduced",
          check=_sp_arbitrary_angle,
          short="SP/WN: a small eps can turn the boundary by any angle (at weight scale 1e-3)",
          note="At the paper's weight scale (w, b ~ 0.001 N(0, 1)), where eps = 1e-4 is a tenth of a typical "
               "weight; at the Glorot scale the largest turn falls far below pi (the chapter's table of both "
               "scales)."),
    Claim(key="chen-characteristic-uniform-init", paper="chen", source="paper", result="init",
          text="Sec. 3.3: i.i.d. zero-mean Gaussian weights induce directions uniform on the unit sphere, "
               "whatever the variance.",
          rule="verified if the fourth-moment test (gmp.fourth_moment_test: the mean over the directions of "
               "sum_i u_i^4 against its value 3/(n+2) on the sphere, in standard errors z; n = 50) accepts the "
               "directions of Gaussian weights of every tested standard deviation (|z| < 4) and rejects those "
               "of Glorot-uniform weights (|z| >= 4, so that the check can fail); else fails. The mean of "
               "u_i^2 is shown too but cannot tell: it is 1/n for any i.i.d. weights",
          check=_uniform_directions, kind=IDENTITY),
]


def plot_unit(ax, angle_deg: float, lam: float, extent: float) -> None:
    """Fig. 1a-d: boundary ``B``, spatial location ``phi`` and active region of
    ``relu(cos(t) x1 + sin(t) x2 + lam)``."""
    theta = math.radians(angle_deg)
    u = np.array([math.cos(theta), math.sin(theta)])
    phi = -lam * u
    grid = np.linspace(-extent, extent, 301)
    x1, x2 = np.meshgrid(grid, grid)
    pre = u[0] * x1 + u[1] * x2 + lam
    ax.contourf(x1, x2, np.maximum(pre, 0), levels=20, cmap="Greens", alpha=0.6)
    ax.contourf(x1, x2, (pre < 0).astype(float), levels=[0.5, 1.5], colors=["#f4c7c3"], alpha=0.7)
    tangent = np.array([-u[1], u[0]])
    line = phi[None, :] + np.linspace(-3 * extent, 3 * extent, 2)[:, None] * tangent[None, :]
    ax.plot(line[:, 0], line[:, 1], color="saddlebrown", lw=2.5, label=r"$\mathcal{B}$")
    ax.annotate("", xy=phi, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="tab:blue", lw=2))
    ax.plot(*phi, "o", color="tab:blue", label=r"$\phi = -\lambda u(\theta)$")
    for sign, color in ((1, "tab:green"), (-1, "tab:red")):
        start = phi + 0.35 * extent * tangent
        ax.annotate("", xy=start + sign * 0.3 * extent * u, xytext=start,
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2))
    ax.plot(0, 0, "k+", ms=10)
    ax.set(xlim=(-extent, extent), ylim=(-extent, extent), aspect="equal", xlabel="$x_1$", ylabel="$x_2$",
           title=fr"$\theta = {angle_deg:g}^\circ$, $\lambda = {lam:g}$")


def plot_perturbation(ax, unit: Mapping[str, Any], index: int, extent: float) -> None:
    """Fig. 1e-h: the original boundary and the boundaries after perturbing every parameter
    of SP, WN and GmP by ``unit[param][index]['eps']``; dotted lines join the origin and ``phi``."""
    colors = {"sp": "tab:orange", "wn": "tab:purple", "gmp": "tab:green"}
    base = unit["sp"][index]
    eps = base["eps"]

    styles = {"sp": dict(ls="--", lw=3.5), "wn": dict(ls="-.", lw=2), "gmp": dict(ls="--", lw=2)}

    def draw(phi, normal, color, label, style):
        phi, normal = np.asarray(phi), np.asarray(normal)
        tangent = np.array([-normal[1], normal[0]])
        line = phi[None, :] + np.linspace(-4 * extent, 4 * extent, 2)[:, None] * tangent[None, :]
        ax.plot(line[:, 0], line[:, 1], color=color, label=label, **style)
        ax.plot([0, phi[0]], [0, phi[1]], ":", color=color, lw=1.5)
        ax.plot(*phi, "o", color=color, ms=5)

    draw(base["phi"], base["normal"], "black", "original", dict(ls="-", lw=2))
    for param, color in colors.items():
        row = unit[param][index]
        draw(row["phi_perturbed"], row["normal_perturbed"], color,
             f"{NAMES[param]} (turn {row['angle']:.2g} rad)", styles[param])
    ax.plot(0, 0, "k+", ms=10)
    ax.set(xlim=(-extent, extent), ylim=(-extent, extent), aspect="equal", xlabel="$x_1$", ylabel="$x_2$",
           title=fr"$\epsilon = 10^{{{round(math.log10(eps))}}}$")
    ax.legend(loc="lower left")


def plot_statistics(axes, payload: Mapping[str, Any]) -> None:
    """Median (line) and 10-90% band (shade) over the sampled units of the turn of the normal
    (left) and of the move of the spatial location (right) against ``eps``, per parameterization."""
    colors = {"sp": "tab:orange", "wn": "tab:purple", "gmp": "tab:green"}
    eps = np.asarray(payload["eps"])
    for ax, key, label in zip(axes, ("angle", "shift"), ("turn of the normal (rad)", r"move of $\phi$, $\|\Delta\phi\|$")):
        for param, color in colors.items():
            rows = payload[param]
            median = [row[key]["median"] for row in rows]
            ax.fill_between(eps, [row[key]["p10"] for row in rows], [row[key]["p90"] for row in rows],
                            color=color, alpha=0.2)
            ax.plot(eps, median, "o-", color=color, label=NAMES[param])
        ax.plot(eps, eps, "k:", label=r"$\epsilon$")
        ax.set(xscale="log", yscale="log", xlabel=r"perturbation $\epsilon$", ylabel=label)
        ax.legend()
    axes[0].axhline(math.pi, color="grey", lw=0.8)


def _fmt(row: Mapping[str, Any] | None, key: str) -> str:
    if row is None:
        return "—"
    q = row[key]
    return f"{q['median']:.3g} [{q['p10']:.2g}, {q['p90']:.2g}]"


def summary_table(live: Mapping[str, Any], cached: Mapping[str, Any] | None):
    """Per eps and parameterization: what the paper says, and the median [10%, 90%] turn and move
    over the sampled units, at this build's scale and at paper scale (None: no current cache)."""
    import pandas as pd

    said = {"sp": "can change drastically from eps = 1e-3 on (Sec. 2.4)",
            "wn": "turns like SP (Sec. 4.1); drastic from eps = 1e-3 on",
            "gmp": "turns by exactly eps (Eq. (9)); moves gradually"}
    records = []
    for param in PERTURBED_PARAMS:
        for i, eps in enumerate(live["eps"]):
            row = live[param][i]
            paper_row = row_at(cached, param, eps) if cached is not None else None
            records.append({"eps": f"{eps:g}", "parameterization": NAMES[param], "paper": said[param],
                            "turn (rad), this build": _fmt(row, "angle"),
                            "move of phi, this build": _fmt(row, "shift"),
                            "turn (rad), paper scale": _fmt(paper_row, "angle"),
                            "move of phi, paper scale": _fmt(paper_row, "shift")})
    return pd.DataFrame.from_records(records).set_index(["eps", "parameterization"])


def roundtrip_table(payload: Mapping[str, Any]):
    """Largest round-trip errors per dimension and precision (see :func:`roundtrip_checks`)."""
    import pandas as pd

    records = [{"n": row["n"], **{f"{prec} {key}": f"{row[prec][key]:.1e}" for prec in ("float64", "float32")
                                  for key in ("vector", "angle", "norm")}} for row in payload["rows"]]
    return pd.DataFrame.from_records(records).set_index("n")


def boundary_table(payload: Mapping[str, Any]):
    """Largest residuals of the boundary checks per dimension and layer kind (see :func:`boundary_checks`)."""
    import pandas as pd

    frame = pd.DataFrame.from_records(payload["rows"]).set_index(["n", "kind"])
    frame.columns = ["|pre-activation at phi|", "|phi . t|, t in B", "|pre-activation at phi + t|",
                     "component of phi along B"]
    return frame.map(lambda v: f"{v:.1e}")


def init_table(payload: Mapping[str, Any]):
    """Mean of ``u_1^2`` and ``u_n^2`` (1/n for uniform directions) per way of drawing directions."""
    import pandas as pd

    frame = pd.DataFrame.from_records(payload["rows"]).set_index("source")
    frame.columns = ["mean u_1^2", "mean u_n^2", "largest |mean u_i^2 - 1/n| (standard errors)",
                     "fraction u_n > 0", "mean sum u_i^4 / (3/(n+2))", "fourth-moment z"]
    return frame.map(lambda v: f"{v:.4g}")


def scale_table(small: Mapping[str, Any], glorot: Mapping[str, Any]):
    """Per eps and parameterization, the median turn of the normal and move of the spatial
    location for the paper's units (``w, b ~ 0.001 N(0, 1)``) and for the same units at the
    Glorot scale (two :func:`perturbation_statistics` payloads)."""
    import pandas as pd

    records = []
    for param in PERTURBED_PARAMS:
        for eps in small["eps"]:
            rows = {name: row_at(payload, param, eps) for name, payload in (("paper", small), ("glorot", glorot))}
            records.append({"eps": f"{eps:g}", "parameterization": NAMES[param],
                            f"turn / eps, ||w|| ~ {small['w_norm']['median']:.1g}": rows["paper"]["angle"]["median"] / eps,
                            f"turn / eps, ||w|| ~ {glorot['w_norm']['median']:.1g}": rows["glorot"]["angle"]["median"] / eps,
                            f"move / eps, ||w|| ~ {small['w_norm']['median']:.1g}": rows["paper"]["shift"]["median"] / eps,
                            f"move / eps, ||w|| ~ {glorot['w_norm']['median']:.1g}": rows["glorot"]["shift"]["median"] / eps})
    frame = pd.DataFrame.from_records(records).set_index(["eps", "parameterization"])
    return frame.map(lambda v: f"{v:.3g}")
