"""What the cache holds, assembled from the journalled units: the claims' payload (:func:`summary`: per fit,
:func:`fit_row`'s best PSNRs and when each target is first reached, in epochs, Adam updates and seconds; the
held-out fits against interpolation of the kept pixels; the ablations; the further seeds; the any-values and
plateau runs) and the curves as arrays (:func:`to_arrays`, :func:`from_arrays`).

A fit's PSNR is on the [0, 1] pixel scale, ``10 log10(1 / MSE)``, by one of two readings
(:class:`gmp.minibatch.EpochCurves`): ``epoch``, the epoch-mean training loss that the author's Keras plot
shows, and ``train``, the whole image evaluated after the epoch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from gmp.minibatch import EpochCurves, heldout_pixels
from gmp.results import paired_interval

from .protocol import (ANY_VALUES, PAPER, PLATEAU_NETWORKS, PSNR_TARGETS, SBSNN_HELDOUT, SEED_ROWS, TEXT_HELDOUT,
                       data, seeded)


def seed_fits(cfg, units_done: Mapping[str, Any], seed: int, name: str) -> dict[int, EpochCurves]:
    """The journalled fits of network ``name`` of :func:`~gmp.experiments.sbsnn_author.protocol.seeded` by seed:
    ``seed``'s from its main unit and ``more_seeds``' from its ``seeds-`` unit, each only when journalled."""
    main = units_done.get(f"{name}-{seed}")
    out = {}
    if main is not None:
        out[seed] = EpochCurves.from_json(main["script" if name.startswith("readme-") else "rotated"])
    more = units_done.get(f"seeds-{name}-{seed}")
    if more is not None:
        out.update({s: EpochCurves.from_json(f) for s, f in zip(more["seeds"], more["fits"])})
    return dict(sorted(out.items()))


def reverse_summary(cfg, units_done: Mapping[str, Any], seed: int) -> list[dict[str, Any]]:
    """Per arm of the reverse ablation whose seeds are all journalled: its whole-image PSNRs ([0, 1] scale)
    after its last epoch, by seed, and their difference from the author's protocol (arm 0, from Fig. 7's
    rotated sin network) paired by seed, with its 95% interval (``gmp.results.paired_interval``); and the
    passes over the pixels (epochs) each seed needs to reach SIREN's accuracy (56.0 dB whole-image, None if not
    within the run), with their paired difference from the author's where every seed of both reaches it."""
    seeds = list(cfg.reverse_seeds)
    authors = seed_fits(cfg, units_done, seed, "fig7-sin")
    fits = {0: [authors[s] for s in seeds]} if all(s in authors for s in seeds) else {}
    for arm in range(1, len(cfg.reverse)):
        unit = units_done.get(f"reverse-{arm}-{seed}")
        if unit is not None:
            fits[arm] = [EpochCurves.from_json(f) for f in unit["fits"]]
    finals = {arm: [float(f.psnr("train")[-1]) for f in curves] for arm, curves in fits.items()}
    passes = {arm: [f.first_epoch_at(PSNR_TARGETS["siren"]) for f in curves] for arm, curves in fits.items()}
    out = []
    for arm, values in sorted(finals.items()):
        row = {"arm": arm, "name": cfg.reverse[arm]["name"], "seeds": seeds, "final_psnr": values,
               "mean_psnr": float(np.mean(values)), "passes": passes[arm]}
        if arm and 0 in finals:
            row["difference"] = paired_interval([v - b for v, b in zip(values, finals[0])])
            reached = None not in passes[arm] + passes[0]
            row["passes_difference"] = paired_interval([a - b for a, b in zip(passes[arm], passes[0])]) \
                if reached else None
        out.append(row)
    return out


def axes(fit: EpochCurves, db: float, which: str) -> dict[str, float | None]:
    """When ``fit`` first reaches ``db`` by ``which`` PSNR: in epochs, Adam updates and seconds (None if never)."""
    epoch = fit.first_epoch_at(db, which)
    if epoch is None:
        return {"epochs": None, "updates": None, "seconds": None}
    return {"epochs": epoch, "updates": epoch * fit.updates_per_epoch, "seconds": float(fit.seconds[epoch - 1])}


def fit_row(fit: EpochCurves, schedule: str, readme_db: float | None = None, at_epoch: int = 100) -> dict[str, Any]:
    """The numbers of one fit that the claims use: best PSNRs, PSNR at ``at_epoch``, and when it reaches each target.

    ``reach`` gives, per target of :data:`~gmp.experiments.sbsnn_author.protocol.PSNR_TARGETS` and per PSNR (``epoch``:
    the author's, ``train``: whole image), the epochs, updates and seconds to it (:func:`axes`); ``reach_readme`` the
    same for ``readme_db`` when given.
    """
    return {"schedule": schedule, "epochs": len(fit.epoch_loss), "updates_per_epoch": fit.updates_per_epoch,
            "best_epoch_psnr": float(np.nanmax(fit.psnr("epoch"))), "best_train_psnr": float(np.nanmax(fit.psnr("train"))),
            "at_epoch": at_epoch, "psnr_epoch_at": _at(fit.psnr("epoch"), at_epoch),
            "psnr_train_at": _at(fit.psnr("train"), at_epoch),
            "seconds": float(np.nanmax(fit.seconds)), "diverged_at": fit.diverged_at,
            "reach": {f"{target}-{which}": axes(fit, db, which) for target, db in PSNR_TARGETS.items()
                      for which in ("epoch", "train")},
            "reach_readme": {which: axes(fit, readme_db, which) for which in ("epoch", "train")}
            if readme_db is not None else None}


def summary(cfg, units_done: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The payload of the chapter's claims from the journalled units (missing ones are left out)."""
    rows: dict[str, Any] = {}

    def add(name: str, data: Mapping[str, Any], schedule: str) -> None:
        readme = PAPER[f"readme_{schedule}_db"] if name.startswith("script") else None
        rows[name] = fit_row(EpochCurves.from_json(data), schedule, readme)

    for schedule in ("aggressive", "less_aggressive"):
        key = f"readme-{schedule}-{seed}"
        if key in units_done:
            add(f"script/{schedule}", units_done[key]["script"], schedule)
    for activation in cfg.activations:
        key = f"fig7-{activation}-{seed}"
        if key in units_done:
            for encoder in ("nerf", "rotated"):
                add(f"{activation}/{encoder}", units_done[key][encoder], "aggressive")
    if f"siren-minibatch-{seed}" in units_done:
        add("siren/minibatch", units_done[f"siren-minibatch-{seed}"]["siren"], "constant")
    siren_full = units_done.get(f"siren-fullbatch-{seed}")
    if siren_full is not None:
        mse = np.array([np.nan if v is None else v for v in siren_full["mse"]])
        # SIREN's full batch trains on [-1, 1] values: a PSNR of db dB on the [0, 1] scale is an MSE of 4 * 10^(-db/10)
        hits, author_hits = (np.flatnonzero(mse <= 4 * 10 ** (-PSNR_TARGETS[target] / 10)) for target in ("siren", "author"))
        rows["siren/fullbatch"] = {"schedule": "constant", "steps": len(mse),
                                   "first_below_siren_target": int(hits[0]) if hits.size else None,
                                   "first_below_author_target": int(author_hits[0]) if author_hits.size else None,
                                   "best_psnr": float(10 * np.log10(4 / np.nanmin(mse))),
                                   "seconds": siren_full["seconds"]}
    heldout = units_done.get(f"heldout-{seed}")
    siren_own = units_done.get(f"heldout_siren-{seed}")

    def with_text(mask: int, fits: Mapping[str, Any]) -> dict[str, Any]:
        text = units_done.get(f"heldout_text-{mask}-{seed}")
        return {**fits, **({TEXT_HELDOUT: text["fit"]} if text else {})}

    if heldout:
        heldout = {**heldout, "fits": with_text(cfg.heldout_seed, heldout["fits"])}
    more = []
    for mask in cfg.heldout_more:
        keys = {name: f"heldout_more-{mask}-{name}-{seed}" for name in SBSNN_HELDOUT}
        if all(key in units_done for key in keys.values()):  # a mask counts once both networks are fitted
            fits = with_text(mask, {name: units_done[key]["fit"] for name, key in keys.items()})
            more.append(heldout_summary(cfg, {"heldout_seed": mask, "fraction": cfg.heldout_fraction, "fits": fits}))
    return {"side": cfg.side, "seed": seed, "rows": rows,
            "heldout": heldout_summary(cfg, heldout, siren_own) if heldout else None,
            "heldout_more": more, "ablation": ablation_summary(cfg, units_done, seed),
            "seeds": seed_rows(cfg, units_done, seed), "reverse": reverse_summary(cfg, units_done, seed),
            "any_values": any_values_summary(units_done, seed), "plateau": plateau_summary(units_done, seed)}


PLATEAU_TAIL = 0.1
"""The last share of a plateau run whose gain in best PSNR says whether the fit had stopped moving."""


def plateau_summary(units_done: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Per network of :data:`~gmp.experiments.sbsnn_author.protocol.PLATEAU_NETWORKS` whose ``plateau-`` unit is
    journalled: its best whole-image PSNR ([0, 1] scale) in the run, the passes the run made, and ``tail_gain``, how
    much the best rose in the run's last :data:`PLATEAU_TAIL` of its passes."""
    out = {}
    for name in PLATEAU_NETWORKS:
        unit = units_done.get(f"plateau-{name}-{seed}")
        if unit is None:
            continue
        psnr = EpochCurves.from_json(unit).psnr("train")
        best = np.fmax.accumulate(np.where(np.isfinite(psnr), psnr, -np.inf))
        cut = max(1, int(round(len(best) * (1 - PLATEAU_TAIL))))
        out[name] = {"best_train_psnr": float(best[-1]), "passes": len(psnr),
                     "tail_gain": float(best[-1] - best[cut - 1])}
    return out


def any_values_summary(units_done: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Per arm of :data:`~gmp.experiments.sbsnn_author.protocol.ANY_VALUES` whose unit is journalled: :func:`fit_row` of
    its fit, ``mean_db``, the whole-image PSNR ([0, 1] scale) of predicting its targets' mean (10 log10 of one over
    their variance), and ``psnr_by_epoch``, its whole-image PSNR after each pass (None where not finite)."""
    out = {}
    for arm in ANY_VALUES:
        unit = units_done.get(f"anyvalues-{arm}-{seed}")
        if unit is not None:
            fit = EpochCurves.from_json(unit["fit"])
            out[arm] = {**fit_row(fit, "aggressive"), "mean_db": 10 * math.log10(1 / unit["target_variance"]),
                        "target_seed": unit["target_seed"],
                        "psnr_by_epoch": [float(v) if math.isfinite(v) else None for v in fit.psnr("train")]}
    return out


def seed_rows(cfg, units_done: Mapping[str, Any], seed: int) -> dict[str, list[dict[str, Any]]]:
    """Per network of :func:`~gmp.experiments.sbsnn_author.protocol.seeded` whose ``seeds-`` unit is journalled, by its
    summary row (:data:`~gmp.experiments.sbsnn_author.protocol.SEED_ROWS`): the :func:`fit_row` of each of its seeds,
    with ``"seed"``."""
    out = {}
    for name in seeded(cfg):
        if f"seeds-{name}-{seed}" not in units_done:
            continue
        schedule = name.removeprefix("readme-") if name.startswith("readme-") else "aggressive"
        readme = PAPER[f"readme_{schedule}_db"] if name.startswith("readme-") else None
        out[SEED_ROWS[name]] = [{"seed": s, **fit_row(fit, schedule, readme)}
                                for s, fit in seed_fits(cfg, units_done, seed, name).items()]
    return out


def ablation_fits(cfg, units_done: Mapping[str, Any], seed: int) -> dict[int, EpochCurves]:
    """The journalled fits of the ablation by step (the last step is the rotated sin network of Fig. 7)."""
    out = {i: EpochCurves.from_json(units_done[f"ablation-{i}-{seed}"]) for i in range(len(cfg.ablation) - 1)
           if f"ablation-{i}-{seed}" in units_done}
    if (fig7 := units_done.get(f"fig7-sin-{seed}")) is not None:
        out[len(cfg.ablation) - 1] = EpochCurves.from_json(fig7["rotated"])
    return out


def ablation_summary(cfg, units_done: Mapping[str, Any], seed: int) -> list[dict[str, Any]]:
    """Per ablation step: its name, the final and best whole-image PSNR ([0, 1] scale) and the updates it made."""
    fits = ablation_fits(cfg, units_done, seed)
    return [{"step": i, "name": cfg.ablation[i]["name"], "final_psnr": float(fit.psnr("train")[-1]),
             "best_psnr": float(np.nanmax(fit.psnr("train"))), "updates": fit.updates_per_epoch * len(fit.train_mse),
             "epochs": len(fit.train_mse)} for i, fit in sorted(fits.items())]


def _at(curve: np.ndarray, epoch: int) -> float | None:
    value = curve[min(epoch, len(curve)) - 1]
    return float(value) if math.isfinite(value) else None


def heldout_summary(cfg, unit: Mapping[str, Any], siren_own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Held-out PSNR of each network beside interpolating the held-out pixels from the kept ones.

    ``siren_own``, the ``heldout_siren`` unit when journalled, adds SIREN under its own protocol as ``"siren_own"``:
    the book's only SIREN fitted to the author's file, so the reference of the abstract's "1/100th" on the
    same image. Per network: the final PSNRs on the training and held-out pixels, its epochs (passes over the
    kept pixels), Adam updates per epoch, and ``reach``, the first epoch whose PSNR on the kept pixels reaches
    each target of :data:`~gmp.experiments.sbsnn_author.protocol.PSNR_TARGETS` (None if never).
    """
    _, pixels = data(cfg)
    held = heldout_pixels(pixels.shape[0], unit["fraction"], unit["heldout_seed"])
    image = pixels.reshape(cfg.side, cfg.side).double().numpy()
    out = {"heldout_seed": unit["heldout_seed"], "networks": {}, "interpolation": interpolation_psnr(image, held.numpy()),
           "kept_pixels": int(pixels.shape[0] - held.numel())}
    fits = {**unit["fits"], **({"siren_own": siren_own["fit"]} if siren_own else {})}
    for name, data_ in fits.items():
        fit = EpochCurves.from_json(data_)
        out["networks"][name] = {"train_psnr": float(fit.psnr("train")[-1]), "heldout_psnr": float(fit.psnr("heldout")[-1]),
                                 "best_heldout_psnr": float(np.nanmax(fit.psnr("heldout"))),
                                 "epochs": len(fit.train_mse), "updates_per_epoch": fit.updates_per_epoch,
                                 "reach": {target: fit.first_epoch_at(db, "train") for target, db in PSNR_TARGETS.items()}}
    return out


def interpolation_psnr(image: np.ndarray, held: np.ndarray) -> dict[str, float]:
    """PSNR ([0, 1] scale) on the ``held`` pixels of ``image`` interpolated from the others (nearest, linear, cubic)."""
    from scipy.interpolate import griddata

    side = image.shape[0]
    rows, cols = np.divmod(np.arange(side * side), side)
    kept = np.setdiff1d(np.arange(side * side), held)
    points = np.stack([rows, cols], axis=1)
    out = {}
    for method in ("nearest", "linear", "cubic"):
        guess = griddata(points[kept], image.ravel()[kept], points[held], method=method)
        guess = np.where(np.isfinite(guess), guess, griddata(points[kept], image.ravel()[kept], points[held],
                                                                method="nearest"))
        out[method] = float(-10 * np.log10(np.mean((guess - image.ravel()[held]) ** 2)))
    return out


def fits_of(units_done: Mapping[str, Any], seed: int) -> dict[str, EpochCurves]:
    """Every fit in ``units_done`` (journalled units) by curve name, SIREN's full-batch fit as one-update epochs."""
    out: dict[str, EpochCurves] = {}
    for schedule in ("aggressive", "less_aggressive"):
        if (unit := units_done.get(f"readme-{schedule}-{seed}")) is not None:
            out[f"script/{schedule}"] = EpochCurves.from_json(unit["script"])
    for key, unit in units_done.items():
        if key.startswith("fig7-"):
            activation = key.removeprefix("fig7-").rsplit("-", 1)[0]
            for encoder in ("nerf", "rotated"):
                out[f"{activation}/{encoder}"] = EpochCurves.from_json(unit[encoder])
    if (unit := units_done.get(f"siren-minibatch-{seed}")) is not None:
        out["siren/minibatch"] = EpochCurves.from_json(unit["siren"])
    if (unit := units_done.get(f"siren-fullbatch-{seed}")) is not None:
        # entry i of the fit is measured after i updates (gmp.implicit.FitResult): the first, before any, is no epoch
        mse = np.array([np.nan if v is None else v for v in unit["mse"][1:]])
        steps = np.arange(1, len(mse) + 1)
        out["siren/fullbatch"] = EpochCurves(mse, mse, None, np.full(len(mse), np.nan),
                                             steps * unit["seconds"] / len(mse), 1, 0.25, unit["diverged_at"])
    return out


def to_arrays(fits: Mapping[str, EpochCurves], units_done: Mapping[str, Any], seed: int) -> dict[str, np.ndarray]:
    """The curves (and held-out renders) as arrays for ``Store.save``; :func:`from_arrays` inverts the curves."""
    arrays = {}
    for name, fit in fits.items():
        stem = name.replace("/", "__")
        arrays[f"{stem}__epoch_loss"] = fit.epoch_loss
        arrays[f"{stem}__train_mse"] = fit.train_mse
        arrays[f"{stem}__seconds"] = fit.seconds
        arrays[f"{stem}__lr"] = fit.lr
        arrays[f"{stem}__meta"] = np.array([fit.updates_per_epoch, fit.mse_to_unit])
    held = units_done.get(f"heldout-{seed}")
    for name, crop in (held or {}).get("renders", {}).items():
        arrays[f"render__{name}"] = np.asarray(crop, dtype=np.float32)
    if f"heldout_siren-{seed}" in units_done:
        arrays["render__siren_own"] = np.asarray(units_done[f"heldout_siren-{seed}"]["render"], dtype=np.float32)
    return arrays


def from_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, EpochCurves]:
    """The curves of :func:`to_arrays` (held-out curves and renders are not among them)."""
    out = {}
    for key in arrays:
        if key.endswith("__meta"):
            stem = key.removesuffix("__meta")
            updates, to_unit = arrays[key]
            out[stem.replace("__", "/")] = EpochCurves(arrays[f"{stem}__epoch_loss"], arrays[f"{stem}__train_mse"],
                                                       None, arrays[f"{stem}__lr"], arrays[f"{stem}__seconds"],
                                                       int(updates), float(to_unit), None)
    return out


def same_image_siren(payload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """SIREN under its own protocol on the author's file (the held-out unit's, fitted to its kept pixels): ``passes`` to
    each target of :data:`~gmp.experiments.sbsnn_author.protocol.PSNR_TARGETS` (one full-batch update each) and the kept
    pixels; None when the payload predates these numbers or holds no such fit."""
    held = (payload or {}).get("heldout") or {}
    own = held.get("networks", {}).get("siren_own")
    if own is None or "reach" not in own:
        return None
    return {"passes": own["reach"], "kept_pixels": held["kept_pixels"], "epochs": own["epochs"]}
