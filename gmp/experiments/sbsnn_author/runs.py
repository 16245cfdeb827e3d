"""The chapter's run as journalled units: every fit by its journal key (:func:`units`, in the order a run makes
them, cheapest and most telling first), the fit that both ablations and the text encoder's held-out fits share
(:func:`fit_settings`), and the keys of a run at a scale (:func:`units_keys`), which a GPU worker and an
unfinished run's reading both go by. Each unit is computed whole, by :func:`gmp.minibatch.fit_stack` (under
either protocol) or, for SIREN's full-batch reference on its photograph, :func:`gmp.implicit.fit_spec`, and
checkpoints itself in the store's scratch file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from gmp.data.images import coordinate_grid, grey_image, image_fitting_data
from gmp.implicit import fit_spec
from gmp.minibatch import EpochCurves, fit_stack, heldout_pixels, layers

from .protocol import (ANY_VALUES, ANY_VALUES_SEED, PLATEAU_NETWORKS, SBSNN_HELDOUT, TEXT_ARM, ablation_network,
                       ablation_settings, any_values_targets, data, encoded, figure_spec, reverse_settings,
                       script_spec, seeded, siren_spec)


def _curves(fits: list[EpochCurves], names: list[str]) -> dict[str, Any]:
    return {name: fit.to_json() for name, fit in zip(names, fits)}


def units(cfg, store, seed: int, device) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every fit of the chapter, by journal key, cheapest and most telling first.

    ``readme-aggressive`` and ``readme-less_aggressive``: the script's network under its two
    schedules; ``fig7-<activation>``: Fig. 7's network with the axis-aligned and the rotated
    encoder, trained together; ``heldout``: the script's network, the rotated ``sin``
    network and SIREN with a quarter of the pixels held out (aggressive schedule; SIREN at
    its own rate), with a render at ``render_side``; ``heldout_siren``: SIREN with the same
    pixels held out under its own protocol (full batch of the kept pixels, [-1, 1] targets,
    PyTorch's Adam at its rate, until its MSE 1e-5 on them or ``siren_steps``), with a render;
    ``siren-minibatch``: SIREN under the author's protocol; ``siren-fullbatch``: SIREN under its
    own (full batch, [-1, 1], its photograph), until SIREN's MSE 1e-5 or ``siren_steps``;
    ``ablation-<step>``: the forward ablation's steps; ``heldout_more-<mask>-<network>``: the script's
    network and the rotated sin network as in ``heldout`` on each further held-out mask of
    ``heldout_more`` (no render, no SIREN), for the generalisation claim.
    """
    coords, pixels = data(cfg)
    common = dict(batch_size=cfg.batch_size, device=device, compile=cfg.compile)
    script_inputs = lambda: encoded(coords, cfg.script_sizes[1], True, cfg.script_scale_factor)  # noqa: E731

    def script(schedule: str) -> Callable[[], dict[str, Any]]:
        plan = cfg.schedules[schedule]
        key = f"readme-{schedule}-{seed}"
        return lambda: _curves(fit_stack(layers(script_spec(cfg)), [seed], script_inputs(), pixels,
                                         epochs=cfg.epochs[schedule], lr=plan["lr"], plateau=plan["plateau"],
                                         checkpoint=store.scratch(key), desc=key, **common), ["script"])

    def fig7(activation: str) -> Callable[[], dict[str, Any]]:
        plan = cfg.schedules["aggressive"]
        key = f"fig7-{activation}-{seed}"
        inputs = lambda: torch.stack([encoded(coords, cfg.width, False), encoded(coords, cfg.width, True)])  # noqa: E731
        return lambda: _curves(fit_stack(layers(figure_spec(cfg, activation)), [seed, seed], inputs(), pixels,
                                         epochs=cfg.epochs["aggressive"], lr=plan["lr"], plateau=plan["plateau"],
                                         checkpoint=store.scratch(key), desc=key, **common), ["nerf", "rotated"])

    def heldout() -> dict[str, Any]:
        key = f"heldout-{seed}"
        held = heldout_pixels(pixels.shape[0], cfg.heldout_fraction, cfg.heldout_seed)
        plan = cfg.schedules["aggressive"]
        fine = coordinate_grid(cfg.render_side, indexing="xy")
        out: dict[str, Any] = {"heldout_seed": cfg.heldout_seed, "fraction": cfg.heldout_fraction, "fits": {},
                               "renders": {}}
        runs = {"script": (script_spec(cfg), lambda c: encoded(c, cfg.script_sizes[1], True, cfg.script_scale_factor),
                           plan["lr"], plan["plateau"], cfg.epochs["aggressive"]),
                "sin_rotated": (figure_spec(cfg, "sin"), lambda c: encoded(c, cfg.width, True), plan["lr"],
                                plan["plateau"], cfg.epochs["aggressive"]),
                "siren": (siren_spec(), lambda c: c, cfg.siren_lr, None, cfg.epochs["siren"])}
        for name, (spec, inputs_of, lr, plateau, epochs) in runs.items():
            net = {}
            fit = fit_stack(layers(spec), [seed], inputs_of(coords), pixels, epochs=epochs, lr=lr, plateau=plateau,
                            heldout=held, checkpoint=store.scratch(f"{key}-{name}"), desc=f"{key}-{name}",
                            keep=net, **common)[0]
            out["fits"][name] = fit.to_json()
            out["renders"][name] = render_crop(net["model"], inputs_of(fine), cfg)
        return out

    def heldout_siren() -> dict[str, Any]:
        key = f"heldout_siren-{seed}"
        held = heldout_pixels(pixels.shape[0], cfg.heldout_fraction, cfg.heldout_seed)
        net: dict[str, Any] = {}
        fit = fit_stack(layers(siren_spec()), [seed], coords, pixels * 2 - 1, epochs=cfg.siren_steps, lr=cfg.siren_lr,
                        batch_size=pixels.shape[0] - held.numel(), adam="torch", heldout=held, mse_to_unit=0.25,
                        stop_below=1e-5, device=device, compile=cfg.compile, checkpoint=store.scratch(key), desc=key,
                        keep=net)[0]
        render = (np.asarray(render_crop(net["model"], coordinate_grid(cfg.render_side, indexing="xy"), cfg)) + 1) / 2
        return {"fit": fit.to_json(), "render": render.round(5).tolist()}

    def siren_minibatch() -> dict[str, Any]:
        key = f"siren-minibatch-{seed}"
        return _curves(fit_stack(layers(siren_spec()), [seed], coords, pixels, epochs=cfg.epochs["siren"],
                                 lr=cfg.siren_lr, checkpoint=store.scratch(key), desc=key, **common), ["siren"])

    def siren_fullbatch() -> dict[str, Any]:
        siren_coords, siren_pixels = image_fitting_data(cfg.side, cfg.siren_image)
        spec = {**siren_spec(), "steps": cfg.siren_steps, "lr": cfg.siren_lr, "plateau": None,
                "stop_below": 1e-5, "compile": cfg.compile}
        fit = fit_spec(spec, siren_coords, siren_pixels, seed=seed, device=device, desc="siren-fullbatch",
                       checkpoint=store.scratch(f"siren-fullbatch-{seed}"))
        return {"mse": [float(v) for v in fit.mse], "seconds": fit.seconds, "diverged_at": fit.diverged_at}

    out = {f"readme-aggressive-{seed}": script("aggressive")}
    out.update({f"fig7-{a}-{seed}": fig7(a) for a in cfg.activations})
    out[f"heldout-{seed}"] = heldout
    out[f"heldout_siren-{seed}"] = heldout_siren
    out[f"siren-minibatch-{seed}"] = siren_minibatch
    out[f"readme-less_aggressive-{seed}"] = script("less_aggressive")
    out[f"siren-fullbatch-{seed}"] = siren_fullbatch
    for i in range(len(cfg.ablation) - 1):  # the last step is the Fig. 7 run
        out[f"ablation-{i}-{seed}"] = ablation_unit(cfg, i, seed, store, device)

    def heldout_more(mask: int, name: str) -> Callable[[], dict[str, Any]]:
        key = f"heldout_more-{mask}-{name}-{seed}"
        plan = cfg.schedules["aggressive"]
        spec, inputs = {"script": (script_spec(cfg), script_inputs),
                        "sin_rotated": (figure_spec(cfg, "sin"), lambda: encoded(coords, cfg.width, True))}[name]

        def compute() -> dict[str, Any]:
            held = heldout_pixels(pixels.shape[0], cfg.heldout_fraction, mask)
            fit = fit_stack(layers(spec), [seed], inputs(), pixels, epochs=cfg.epochs["aggressive"], lr=plan["lr"],
                            plateau=plan["plateau"], heldout=held, checkpoint=store.scratch(key), desc=key, **common)[0]
            return {"heldout_seed": mask, "fraction": cfg.heldout_fraction, "fit": fit.to_json()}

        return compute

    for mask in cfg.heldout_more:
        for name in SBSNN_HELDOUT:
            out[f"heldout_more-{mask}-{name}-{seed}"] = heldout_more(mask, name)

    def more_seeds(name: str) -> Callable[[], dict[str, Any]]:
        key = f"seeds-{name}-{seed}"
        schedule = name.removeprefix("readme-") if name.startswith("readme-") else "aggressive"
        plan = cfg.schedules[schedule]
        spec, inputs = ((script_spec(cfg), script_inputs) if name.startswith("readme-") else
                        (figure_spec(cfg, name.removeprefix("fig7-")), lambda: encoded(coords, cfg.width, True)))
        return lambda: {"seeds": list(cfg.more_seeds), "fits": [fit.to_json() for fit in fit_stack(
            layers(spec), list(cfg.more_seeds), inputs(), pixels, epochs=cfg.epochs[schedule], lr=plan["lr"],
            plateau=plan["plateau"], checkpoint=store.scratch(key), desc=key, **common)]}

    names = seeded(cfg)
    out[f"seeds-{names[0]}-{seed}"] = more_seeds(names[0])
    for arm in range(1, len(cfg.reverse)):
        out[f"reverse-{arm}-{seed}"] = reverse_unit(cfg, arm, seed, store, device)
    out.update({f"seeds-{name}-{seed}": more_seeds(name) for name in names[1:]})
    for mask in [cfg.heldout_seed, *cfg.heldout_more]:
        out[f"heldout_text-{mask}-{seed}"] = heldout_text_unit(cfg, mask, seed, store, device)

    def any_values(arm: str) -> Callable[[], dict[str, Any]]:
        key = f"anyvalues-{arm}-{seed}"
        plan = cfg.schedules["aggressive"]

        def compute() -> dict[str, Any]:
            targets = any_values_targets(pixels, arm)
            fit = fit_stack(layers(script_spec(cfg)), [seed], script_inputs(), targets, epochs=cfg.epochs["aggressive"],
                            lr=plan["lr"], plateau=plan["plateau"], checkpoint=store.scratch(key), desc=key,
                            **common)[0]
            return {"arm": arm, "target_seed": ANY_VALUES_SEED,
                    "target_variance": float(targets.double().var(unbiased=False)), "fit": fit.to_json()}

        return compute

    out.update({f"anyvalues-{arm}-{seed}": any_values(arm) for arm in ANY_VALUES})

    def plateau(name: str) -> Callable[[], dict[str, Any]]:
        key = f"plateau-{name}-{seed}"
        if name == "siren":  # its own protocol on the author's file: full batch, [-1, 1], PyTorch's Adam, no stop
            return lambda: fit_stack(layers(siren_spec()), [seed], coords, pixels * 2 - 1, epochs=cfg.plateau_steps,
                                     lr=cfg.siren_lr, batch_size=pixels.shape[0], adam="torch", mse_to_unit=0.25,
                                     device=device, compile=cfg.compile, checkpoint=store.scratch(key),
                                     desc=key)[0].to_json()
        plan = cfg.schedules["less_aggressive"]
        return lambda: fit_stack(layers(figure_spec(cfg, name)), [seed], encoded(coords, cfg.width, True), pixels,
                                 epochs=cfg.plateau_epochs, lr=plan["lr"], plateau=plan["plateau"],
                                 checkpoint=store.scratch(key), desc=key, **common)[0].to_json()

    if cfg.get("plateau_epochs"):
        out.update({f"plateau-{name}-{seed}": plateau(name) for name in PLATEAU_NETWORKS})
    return out


def fit_settings(cfg, settings: Mapping[str, Any], seeds: list[int], epochs: int, key: str, store,
                 device, heldout: torch.Tensor | None = None) -> list[EpochCurves]:
    """Fit the rotated-encoder sin network of the ablations with ``settings``
    (:func:`~gmp.experiments.sbsnn_author.protocol.ablation_settings`), one network per seed in one stack, for
    ``epochs`` iterations; whole-image PSNR on the [0, 1] scale, or with ``heldout`` (pixel indices) fitted to the other
    pixels and evaluated on those too."""
    s = settings
    coords = coordinate_grid(cfg.side, indexing="xy")
    pixels = grey_image(cfg.side, s["image"]).reshape(-1, 1)
    if s["range"] == "symmetric":
        pixels = pixels * 2 - 1
    encoder, sizes = ablation_network(cfg, s)
    spec = {"model": "sbsnn", "sizes": sizes, "activation": "sin", "first_layer": "encoder", "bias": s["bias"]}
    return fit_stack(layers(spec), seeds, encoder(coords), pixels, epochs=epochs, lr=s["lr"],
                     plateau={"factor": 0.5, "patience": s["patience"], "rule": s["rule"]}, adam=s["adam"],
                     batch_size=s["batch_size"] or pixels.shape[0] - (0 if heldout is None else heldout.numel()),
                     mse_to_unit=0.25 if s["range"] == "symmetric" else 1.0, heldout=heldout, device=device,
                     compile=cfg.compile, checkpoint=store.scratch(key), desc=key)


def ablation_unit(cfg, step: int, seed: int, store, device) -> Callable[[], dict[str, Any]]:
    """The fit of ablation step ``step`` (see :data:`~gmp.experiments.sbsnn_author.protocol.ABLATION`) as a journal
    unit."""
    key = f"ablation-{step}-{seed}"
    return lambda: fit_settings(cfg, ablation_settings(cfg, step), [seed], cfg.epochs["aggressive"], key, store,
                                device)[0].to_json()


def heldout_text_unit(cfg, mask: int, seed: int, store, device) -> Callable[[], dict[str, Any]]:
    """Reverse-ablation arm :data:`~gmp.experiments.sbsnn_author.protocol.TEXT_ARM` fitted for seed ``seed`` with
    held-out mask ``mask`` (a quarter of the pixels, as the other held-out fits), as a journal unit."""
    key = f"heldout_text-{mask}-{seed}"

    def compute() -> dict[str, Any]:
        held = heldout_pixels(cfg.side * cfg.side, cfg.heldout_fraction, mask)
        fit = fit_settings(cfg, reverse_settings(cfg, TEXT_ARM), [seed], cfg.epochs["aggressive"], key, store, device,
                           heldout=held)[0]
        return {"heldout_seed": mask, "fraction": cfg.heldout_fraction, "fit": fit.to_json()}

    return compute


def reverse_unit(cfg, arm: int, seed: int, store, device) -> Callable[[], dict[str, Any]]:
    """Reverse-ablation arm ``arm`` fitted for ``reverse_seeds`` (one stack) as many epochs as Fig. 7's runs,
    as a journal unit. Arm 0, the author's protocol, is Fig. 7's rotated sin network and has no unit of its own."""
    key = f"reverse-{arm}-{seed}"
    return lambda: {"seeds": list(cfg.reverse_seeds), "fits": [fit.to_json() for fit in fit_settings(
        cfg, reverse_settings(cfg, arm), list(cfg.reverse_seeds), cfg.epochs["aggressive"], key, store, device)]}


@torch.no_grad()
def render_crop(model: torch.nn.Module, fine_inputs: torch.Tensor, cfg) -> list[list[float]]:
    """The central ``render_crop`` square of ``model``'s image on the finer ``render_side`` grid (the inputs are
    moved to the model's device)."""
    side, crop = cfg.render_side, cfg.render_crop
    fine_inputs = fine_inputs.to(next(model.parameters()).device)
    values = torch.cat([model(chunk[None])[0] for chunk in fine_inputs.split(8192)]).reshape(side, side)
    lo = (side - crop) // 2
    return values[lo:lo + crop, lo:lo + crop].cpu().double().numpy().round(5).tolist()


def run(cfg, store, seed: int, device) -> dict[str, Any]:
    """Every unit of :func:`units`, journalled by ``store.memo``, by journal key."""
    return {key: store.memo(key, compute) for key, compute in units(cfg, store, seed, device).items()}


def journalled(cfg, journal: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The units of :func:`units` that an unfinished run has journalled (keys as in :func:`units`)."""
    return {key: journal[key] for key in units_keys(cfg, seed) if key in journal}


def units_keys(cfg, seed: int) -> list[str]:
    """The journal keys of :func:`units`, in its order."""
    return ([f"readme-aggressive-{seed}"] + [f"fig7-{a}-{seed}" for a in cfg.activations]
            + [f"heldout-{seed}", f"heldout_siren-{seed}", f"siren-minibatch-{seed}", f"readme-less_aggressive-{seed}",
               f"siren-fullbatch-{seed}"] + [f"ablation-{i}-{seed}" for i in range(len(cfg.ablation) - 1)]
            + [f"heldout_more-{mask}-{name}-{seed}" for mask in cfg.heldout_more for name in SBSNN_HELDOUT]
            + [f"seeds-{seeded(cfg)[0]}-{seed}"] + [f"reverse-{arm}-{seed}" for arm in range(1, len(cfg.reverse))]
            + [f"seeds-{name}-{seed}" for name in seeded(cfg)[1:]]
            + [f"heldout_text-{mask}-{seed}" for mask in [cfg.heldout_seed, *cfg.heldout_more]]
            + [f"anyvalues-{arm}-{seed}" for arm in ANY_VALUES]
            + ([f"plateau-{name}-{seed}" for name in PLATEAU_NETWORKS] if cfg.get("plateau_epochs") else []))
