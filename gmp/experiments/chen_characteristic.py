"""Experiment of the chapter book/part1/chen_characteristic.md (Sec. 2 and Fig. 1 of Chen & Ge):
characteristic activation boundaries of ReLU units, their hyperspherical coordinates, and
their stability under small perturbations of the parameters (Eqs. (3)-(9)).

The computation is the same at every scale; the scales differ only in the number of random
units over which the perturbation statistics are taken. Units follow the official
notebook of the perturbation figure: ``w, b ~ 0.001 N(0, 1)`` in 2-D, every parameter
perturbed by ``eps`` in {1e-4, 1e-3, 1e-2, 1e-1}.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from gmp.characteristic import PERTURBED_PARAMS, characteristic_points, perturb_boundary
from gmp.config import Config, scaled
from gmp.hyperspherical import angles_to_unit, unit_to_angles
from gmp.layers import GmPLinear
from gmp.results import FAILS, IDENTITY, NOT_REPRODUCED, PARTLY, REPRODUCED, VERIFIED, Claim

NAMES: dict[str, str] = {"sp": "SP", "wn": "WN", "gmp": "GmP"}
"""Display names of the parameterizations compared in Fig. 1e-h."""

CONFIG = scaled(
    common=dict(
        eps=[1e-4, 1e-3, 1e-2, 1e-1], init_std=1e-3, dim=2, seed=0,
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


def sample_units(cfg: Config, units: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ReLU units ``w, b ~ init_std N(0, 1)`` in ``dim`` dimensions (float64)."""
    g = torch.Generator().manual_seed(cfg.seed)
    n = cfg.units if units is None else units
    w = cfg.init_std * torch.randn(n, cfg.dim, generator=g, dtype=torch.float64)
    b = cfg.init_std * torch.randn(n, generator=g, dtype=torch.float64)
    return w, b


def _quantiles(x: torch.Tensor) -> dict[str, float]:
    q = torch.quantile(x, torch.tensor([0.1, 0.5, 0.9], dtype=x.dtype))
    return {"min": float(x.min()), "p10": float(q[0]), "median": float(q[1]), "p90": float(q[2]),
            "max": float(x.max())}


def perturbation_statistics(cfg: Config) -> dict[str, Any]:
    """Sec. 2.4 over ``cfg.units`` random units: how far each parameterization moves the boundary.

    For every ``eps`` and parameterization: quantiles of the angle between old and new
    normals (Eqs. (8)-(9)) and of the distance moved by the spatial location ``phi``.
    For GmP also the largest deviation of the angle from ``eps`` (Eq. (9)), the fraction of
    units obeying ``||phi' - phi|| <= (1 + |lam|) eps`` (triangle inequality), and the largest
    change of the boundary's distance to the origin, ``| |lam + eps| - |lam| |``.
    """
    w, b = sample_units(cfg)
    lam = b / w.norm(dim=1)
    out: dict[str, Any] = {"units": int(len(w)), "eps": list(cfg.eps), "drastic_factor": cfg.drastic_factor,
                           "phi_norm": _quantiles(perturb_boundary(w, b, 0.0, "sp").phi.norm(dim=1))}
    for param in PERTURBED_PARAMS:
        rows = []
        for eps in cfg.eps:
            res = perturb_boundary(w, b, eps, param)
            row = {"eps": eps, "angle": _quantiles(res.angle), "shift": _quantiles(res.shift)}
            if param == "gmp":
                row["max_angle_error"] = float((res.angle - abs(eps)).abs().max())
                bound = abs(eps) * (1 + lam.abs())
                row["bound_fraction"] = float((res.shift <= bound * (1 + 1e-9) + 1e-15).double().mean())
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
    variance; angles drawn uniformly are not.

    For ``cfg.init_units`` directions in ``init_dim`` dimensions: the mean of ``u_i^2`` per
    coordinate (1/n for uniform directions; its standard error is
    ``sqrt(2 (n - 1) / (n^2 (n + 2)) / units)``) for Gaussian weights of several standard
    deviations, and for directions built from uniform angles (``theta_i ~ U(0, pi)``, the
    last one ``U(-pi, pi)``).
    """
    n, units = cfg.init_dim, cfg.init_units
    stderr = math.sqrt(2 * (n - 1) / (n * n * (n + 2)) / units)
    g = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for std in cfg.init_stds:
        w = std * torch.randn(units, n, generator=g, dtype=torch.float64)
        u = w / w.norm(dim=1, keepdim=True)
        second = (u ** 2).mean(dim=0)
        rows.append({"source": f"Gaussian, std {std:g}", "first": float(second[0]), "last": float(second[-1]),
                     "max_dev_stderr": float((second - 1 / n).abs().max() / stderr),
                     "last_positive": float((u[:, -1] > 0).double().mean())})
    theta = torch.rand(units, n - 1, generator=g, dtype=torch.float64) * math.pi
    theta[:, -1] = theta[:, -1] * 2 - math.pi
    second = (angles_to_unit(theta) ** 2).mean(dim=0)
    rows.append({"source": "uniform angles", "first": float(second[0]), "last": float(second[-1]),
                 "max_dev_stderr": float((second - 1 / n).abs().max() / stderr),
                 "last_positive": float((angles_to_unit(theta)[:, -1] > 0).double().mean())})
    return {"n": n, "units": units, "stderr": stderr, "rows": rows}


def run(cfg: Config) -> dict[str, dict[str, Any]]:
    """Every result of the chapter, by name (what ``store.save`` keeps)."""
    return {"perturbation": perturbation_statistics(cfg), "figure_unit": figure_unit(cfg),
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
    fraction = min(row["bound_fraction"] for row in rows)
    medians = [row["shift"]["median"] for row in rows]
    excess = max((row["max_radius_change"] - row["eps"]) / (radius_tolerance(payload, row["eps"]) - row["eps"])
                 for row in rows)
    increasing = all(a < b for a, b in zip(medians, medians[1:]))
    text = (f"units within ||dphi|| <= (1+|lam|) eps: {100 * fraction:.4f}% (worst eps); "
            f"median ||dphi|| / eps: {', '.join(f'{m / row_eps:.3f}' for m, row_eps in zip(medians, payload['eps']))}; "
            f"largest excess of | |phi'| - |phi| | over eps: {excess:.2g} of the rounding tolerance "
            f"{RADIUS_ROUNDING:.1e} max|phi| (max|phi| = {payload['phi_norm']['max']:.3g})")
    return text, VERIFIED if fraction == 1.0 and increasing and excess <= 1 else FAILS


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


def _uniform_directions(payload: Mapping[str, Any]) -> tuple[str, str]:
    gaussian = [row for row in payload["rows"] if row["source"].startswith("Gaussian")]
    worst = max(row["max_dev_stderr"] for row in gaussian)
    angles = next(row for row in payload["rows"] if row["source"] == "uniform angles")
    text = (f"n = {payload['n']}, {payload['units']:,} directions: Gaussian weights of std "
            f"{', '.join(row['source'].split()[-1] for row in gaussian)} give every mean u_i^2 within "
            f"{worst:.1f} standard errors of 1/n = {1 / payload['n']:.4f} (uniform angles: mean u_1^2 = "
            f"{angles['first']:.3f})")
    return text, VERIFIED if worst <= 5 else FAILS


CLAIMS = [
    Claim(key="chen-characteristic-gmp-angle", paper="chen", result="perturbation",
          text="Eq. (9): in 2-D, perturbing the GmP angle by eps turns the characteristic boundary by exactly eps.",
          rule="verified if the largest |angle change - eps| over all sampled units and eps values is below "
               "1e-9 rad (float64 rounding of an angle is a few 1e-16 rad; 1e-9 is 1e-5 of the smallest eps); "
               "else fails",
          check=_gmp_angle_exact, kind=IDENTITY),
    Claim(key="chen-characteristic-gmp-smooth", paper="chen", result="perturbation",
          text="Fig. 1e-h: under GmP the boundary moves smoothly, gradually away from its original spatial "
               "location as eps grows.",
          rule="verified if every sampled unit moves its spatial location by at most (1 + |lambda|) eps "
               "(triangle inequality; counted with a relative slack of 1e-9 for rounding), its distance to the "
               "origin by at most eps + 1e4 * 2^-52 * max|phi| (1e4 units of float64 rounding of the largest "
               "|phi| of the sample, about 100 times the rounding measured), and the median move grows with "
               "eps; else fails",
          check=_gmp_smooth, kind=IDENTITY),
    Claim(key="chen-characteristic-sp-wn-drastic", paper="chen", result="perturbation",
          text="Sec. 2.4 / Fig. 1e-h: under SP and WN even eps = 1e-3 can drastically change the spatial location "
               "of the boundary (units with w, b ~ 0.001 N(0, 1)).",
          rule="reproduced if at eps = 1e-3, for both SP and WN, the median unit's spatial location moves at least "
               "drastic_factor (100) times farther than under GmP and its normal turns by at least 100 eps; partly if only one of SP/WN "
               "does, or both only by 10x; else not reproduced",
          check=_sp_wn_drastic),
    Claim(key="chen-characteristic-sp-arbitrary-angle", paper="chen", result="perturbation",
          text="Eq. (8): under SP (and WN) the direction change can take arbitrary values in [0, pi] even for a "
               "small perturbation.",
          rule="reproduced if at the smallest eps (1e-4) some sampled unit turns by at least 0.9 pi under both SP "
               "and WN; partly if by at least pi/2; else not reproduced",
          check=_sp_arbitrary_angle),
    Claim(key="chen-characteristic-uniform-init", paper="chen", result="init",
          text="Sec. 3.3: i.i.d. zero-mean Gaussian weights induce directions uniform on the unit sphere, "
               "whatever the variance.",
          rule="verified if, for every tested standard deviation, the mean of u_i^2 of every coordinate lies "
               "within 5 standard errors of 1/n (n = 50); else fails. This checks a necessary condition only: "
               "the normalised i.i.d. weights of any initialisation meet it (their coordinates are "
               "exchangeable). gmp.fourth_moment_test (E[u_i^4] = 3/(n(n+2)) on the sphere) tells uniform "
               "directions from Glorot-uniform ones; this chapter's cached run predates it",
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
                     "fraction u_n > 0"]
    return frame.map(lambda v: f"{v:.4g}")
