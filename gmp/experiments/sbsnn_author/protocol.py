"""What the chapter fits and how: the author's protocol as his public Keras code runs it (his script's network,
his two schedules, his encoder, mini-batch epochs on [0, 1] pixel values), the numbers his README and the
paper report (``PAPER``), the book's scales of the run (``CONFIG``, and :data:`QUEUED` for a GPU), the
networks, the forward and reverse ablations' settings in words, and the names of the held-out fits.

An "iteration" of the paper is the author's Keras epoch: one pass over the pixels in mini-batches of 32, so
``ceil(side^2 / 32)`` Adam updates (2,048 at 256 x 256). The PSNR targets are on the [0, 1] pixel scale,
``PSNR = 10 log10(1 / MSE)``: the author's MSE 1e-5 is 50 dB; SIREN's MSE 1e-5 on [-1, 1] values is an MSE of
2.5e-6 on [0, 1] values, ``10 log10(4 / 1e-5)`` = 56.0 dB (:data:`PSNR_TARGETS`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from gmp.config import scaled
from gmp.data.images import coordinate_grid, grey_image
from gmp.encoders import AuthorEncoding, PositionalEncoding


SBSNN_FAMILY = ["sin", "triangle", "abs_sin"]
"""The activations that satisfy the strong condition."""


FIG7_ACTIVATIONS = ["sin", "triangle", "abs_sin", "gpn_tanh", "gpn_gelu", "gpn_elu", "gpn_relu"]
"""The activations of Fig. 7, in the order of its caption."""


SCRIPT_SIZES = [2, 252, 256, 128, 128, 128, 128, 1]
"""The layer sizes of the author's script ``Main.py``.

A rotated encoder to 252 features, five layers and the output.
"""


SCHEDULES = {"aggressive": {"lr": 1e-3, "plateau": {"factor": 0.5, "patience": 5, "rule": "keras"}},
             "less_aggressive": {"lr": 2e-4, "plateau": {"factor": 0.5, "patience": 40, "rule": "keras"}}}
"""The two schedules of the author's script.

Adam at ``lr``, halved on Keras plateaus of the epoch loss.
"""


PSNR_TARGETS = {"author": 50.0, "siren": 10 * math.log10(4 / 1e-5)}
"""The PSNR in dB of an MSE of 1e-5 as the author measures it and as SIREN does.

Both on the [0, 1] pixel scale. The author's MSE is on [0, 1] values (50 dB); SIREN's is on
[-1, 1] values, an MSE of 2.5e-6 on [0, 1] (56.0 dB).
"""


ABLATION = [
    {"name": "the text's reading", "image": "skimage", "range": "symmetric", "bias": True, "encoder": "text",
     "adam": "torch", "rule": "torch", "lr": 2e-3, "patience": 10, "batch_size": None},
    {"name": "+ the classic photograph (author's file)", "image": "author"},
    {"name": "+ targets in [0, 1]", "range": "unit"},
    {"name": "+ no biases", "bias": False},
    {"name": "+ the author's encoder", "encoder": "author"},
    {"name": "+ Keras Adam and plateau rule, his aggressive schedule", "adam": "keras", "rule": "keras", "lr": 1e-3,
     "patience": 5},
    {"name": "+ mini-batches of 32: the author's protocol", "batch_size": 32},
]
"""The ablation from the text's reading of Fig. 7 to the author's protocol, one setting at a time.

The text's reading is the book's earlier chapters' set-up (full-batch updates, SIREN's range,
trained zero biases, the paper's encoder with SIREN's L = 6 and true rotations, PyTorch's Adam
and plateau rule, the book's aggressive schedule). Each step keeps the ones before it. Every
step trains the rotated-encoder sqrt(2) sin(x + pi/4) network for the same number of
"iterations" (epochs); the last step is the author's protocol (the Fig. 7 run).
"""


REVERSE_ABLATION = [
    {"name": "the author's protocol"},
    {"name": "− mini-batch epochs (full-batch updates)", "batch_size": None},
    {"name": "− the aliasing encoder (the text's encoder, one more sine layer)", "encoder": "text"},
    {"name": "− the aliasing encoder (the text's encoder, depth kept)", "encoder": "text", "sine_layers": "kept"},
    {"name": "− [0, 1] targets ([-1, 1])", "range": "symmetric"},
    {"name": "− no biases (zero-initialised, trained)", "bias": True},
    {"name": "− Keras's plateau rule (PyTorch's)", "rule": "torch"},
    {"name": "− Keras's Adam (PyTorch's)", "adam": "torch"},
]
"""The arms of the reverse ablation. From the author's protocol (the last step of :data:`ABLATION`), each arm
takes one of his settings away, the others kept. The encoder arms are mini-batch epochs with the text's band-limited
encoder, with its sixth sine layer (as the forward ablation builds it) and without (depth kept at five)."""


CONFIG = scaled(
    common=dict(ablation=ABLATION, image="author", siren_image="classic", width=192, hidden_layers=5, script_sizes=SCRIPT_SIZES,
                script_scale_factor=0.5, batch_size=32, schedules=SCHEDULES, siren_lr=1e-4,
                heldout_fraction=0.25, heldout_seed=2021, heldout_more=[], render_side=512, render_crop=128,
                reverse=REVERSE_ABLATION, compile=False),
    smoke=dict(side=32, width=48, script_sizes=[2, 36, 32, 16, 16, 16, 16, 1], activations=["sin", "gpn_relu"],
               heldout_more=[2022], more_seeds=[1], reverse_seeds=[0, 1],
               epochs={"aggressive": 2, "less_aggressive": 3, "siren": 2}, siren_steps=6, render_side=64,
               render_crop=32),
    small=dict(side=32, activations=["sin", "triangle", "gpn_relu"], more_seeds=[1], reverse_seeds=[0, 1],
               epochs={"aggressive": 3, "less_aggressive": 4, "siren": 3}, siren_steps=30, render_side=64,
               render_crop=32),
    paper=dict(side=256, activations=FIG7_ACTIVATIONS, epochs={"aggressive": 100, "less_aggressive": 550, "siren": 100},
               siren_steps=10_000, heldout_more=[2022, 2023], more_seeds=[1, 2, 3, 4], reverse_seeds=[0, 1, 2],
               compile=True),
)


PAPER = {
    # The author's README: PSNR above 95 dB "in 550 iterations" (less aggressive schedule) and
    # above 60 dB in 100 iterations (aggressive); SBSNN paper, Section 6 and abstract: the
    # rotated-encoder networks exceed SIREN's accuracy (MSE 1e-5) in around 100 iterations.
    "readme_less_aggressive_db": 95.0, "readme_less_aggressive_epochs": 550,
    "readme_aggressive_db": 60.0, "readme_aggressive_epochs": 100,
    "fig7_epochs": 100, "siren_steps": 10_000,
}


def data(cfg, source: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The author's inputs: a ``linspace(-1, 1)`` grid in ``meshgrid``'s ``xy`` order and pixel values in [0, 1]."""
    return coordinate_grid(cfg.side, indexing="xy"), grey_image(cfg.side, source or cfg.image).reshape(-1, 1)


def script_spec(cfg) -> dict[str, Any]:
    """The network of the author's script: rotated encoder (his matrices, scale factor 0.5), no biases."""
    return {"model": "sbsnn", "sizes": list(cfg.script_sizes), "activation": "sin", "first_layer": "encoder"}


def figure_spec(cfg, activation: str) -> dict[str, Any]:
    """A network of the paper's Figs. 6-7: an encoder to ``width`` features, five hidden layers of ``width``."""
    return {"model": "sbsnn", "sizes": [2] + [cfg.width] * (cfg.hidden_layers + 1) + [1], "activation": activation,
            "first_layer": "encoder"}


def siren_spec() -> dict[str, Any]:
    """SIREN as in its code: 2 -> 256, three more sine layers of 256, linear output."""
    return {"model": "siren", "hidden_features": 256, "hidden_layers": 3}


def encoded(coords: torch.Tensor, width: int, rotated: bool, scale_factor: float = 1.0) -> torch.Tensor:
    """The author's encoding (his matrices) of ``coords``."""
    return AuthorEncoding(width, rotated=rotated, scale_factor=scale_factor)(coords)


PLATEAU_NETWORKS = ["siren", *SBSNN_FAMILY]
"""The networks run to their plateau for the abstract's "to higher accuracy" (units ``plateau-<name>``, queued for a
GPU: :data:`QUEUED`): SIREN under its own protocol on the author's file, and Fig. 7's rotated-encoder SBSNN-family
networks under the author's protocol with his less aggressive schedule (the README's 95 dB run's)."""


QUEUED = {"paper": dict(plateau_epochs=1100, plateau_steps=50_000)}
"""Settings of the paper scale queued for the prepared GPU command's second job (:mod:`gmp.gpu`) and not yet in
``CONFIG``: ``plateau_epochs``, the epochs of the SBSNN networks of :data:`PLATEAU_NETWORKS` (twice the README's 550:
below an MSE of 1e-4 Keras's plateau rule halves the rate every 40 epochs, so after some 25 halvings the fit has
stopped moving), and ``plateau_steps``, SIREN's full-batch steps (five times the 10,000 of SIREN's paper). On this
project's CPU that is about 2 hours for the three SBSNNs (2.4 s per network-epoch in the ``seeds-fig7-sin`` unit) and
12 for SIREN (0.84 s per full-batch step in ``siren-fullbatch``), so they wait for a GPU, kept out of ``CONFIG``
meanwhile so that the chapter's cache stays current (:func:`gmp.gpu.unit_config` journals them under the digest of
the config with them). Once all four are journalled, the settings move into ``CONFIG`` and the chapter's run
carries the cached units over. The smoke and small scales do not run them."""


ANY_VALUES = {"permuted": "the image's pixels under a fixed random permutation of their positions",
              "uniform": "i.i.d. uniform values on the image's range"}
"""The assignments of values to the pixels, other than the image, that the script's network is fitted to (units
``anyvalues-<arm>``, the README's aggressive run with other targets), each in words."""


ANY_VALUES_SEED = 7
"""The seed of the permutation and of the uniform values of :data:`ANY_VALUES`."""


def any_values_targets(pixels: torch.Tensor, arm: str) -> torch.Tensor:
    """The targets of arm ``arm`` of :data:`ANY_VALUES` for the image's ``pixels`` (``(count, 1)``): the pixels
    permuted by ``torch.randperm`` of :data:`ANY_VALUES_SEED`, or uniform values on ``[pixels.min(), pixels.max()]``
    drawn by ``torch.rand`` from that seed."""
    generator = torch.Generator().manual_seed(ANY_VALUES_SEED)
    if arm == "permuted":
        return pixels[torch.randperm(pixels.shape[0], generator=generator)]
    if arm == "uniform":
        low, high = pixels.min(), pixels.max()
        return low + (high - low) * torch.rand(pixels.shape, generator=generator, dtype=pixels.dtype)
    raise ValueError(f"unknown arm {arm!r}: expected one of {list(ANY_VALUES)}")


def ablation_settings(cfg, step: int) -> dict[str, Any]:
    """The settings of ablation step ``step``: the first step updated by every later one up to it."""
    settings: dict[str, Any] = {}
    for change in cfg.ablation[:step + 1]:
        settings.update(change)
    return settings


TEXT_LEVELS = 6
"""The number of frequencies ``L`` of the text's encoder in the ablation (SIREN's rule for its NeRF baseline
at 256 pixels)."""


def ablation_network(cfg, settings: Mapping[str, Any]) -> tuple[torch.nn.Module, list[int]]:
    """The encoder and the layer sizes of an ablation step with ``settings`` (:func:`ablation_settings`).

    The text's encoder (``PositionalEncoding(TEXT_LEVELS, rotated=True)``, 72 features) is followed by
    ``hidden_layers + 1`` sine layers of ``width``, as the earlier chapters build it (``hidden_layers``
    with ``settings["sine_layers"] == "kept"``, the reverse ablation's arm that keeps the depth); the
    author's encoder gives ``width`` features itself, so the same ``sizes`` list as Fig. 7 has one sine
    layer fewer.
    """
    if settings["encoder"] == "text":
        encoder = PositionalEncoding(TEXT_LEVELS, rotated=True)
        width = encoder(torch.zeros(1, 2)).shape[1]
        layers_after = cfg.hidden_layers if settings.get("sine_layers") == "kept" else cfg.hidden_layers + 1
        return encoder, [2, width] + [cfg.width] * layers_after + [1]
    return AuthorEncoding(cfg.width, rotated=True), figure_spec(cfg, "sin")["sizes"]


def encoder_text(encoder: torch.nn.Module) -> str:
    """An encoder in words: its kind, frequencies, features and amplitude."""
    if isinstance(encoder, PositionalEncoding):
        width = encoder(torch.zeros(1, 2)).shape[1]
        kind = "the text's rotated NeRF-type encoder (true rotations)" if encoder.rotated else "the text's NeRF-type encoder"
        return (f"{kind}: {encoder.levels} frequencies 2^k π up to 2^{encoder.levels - 1} π, {width} features, "
                f"amplitude √2")
    amplitude = math.sqrt(2 * encoder.scale_factor)
    amplitude_text = "√2" if math.isclose(amplitude, math.sqrt(2)) else f"{amplitude:g}"
    kind = "the author's rotated encoder (his matrices)" if encoder.rotated else "the author's axis-aligned encoder"
    return (f"{kind}: {encoder.levels} frequencies 2^k up to 2^{encoder.levels - 1}, {encoder.width} features, "
            f"amplitude {amplitude_text}")


_IMAGES = {"skimage": "today's skimage.data.camera()", "author": "the author's file of the classic photograph",
           "classic": "the classic photograph"}


def ablation_setup(cfg, step: int) -> dict[str, str]:
    """Every setting of ablation step ``step`` in words, derived from what its fit runs
    (:func:`~gmp.experiments.sbsnn_author.runs.ablation_unit`)."""
    return settings_setup(cfg, ablation_settings(cfg, step))


def settings_setup(cfg, s: Mapping[str, Any]) -> dict[str, str]:
    """Every setting of the ablations' fit with settings ``s`` (:func:`~gmp.experiments.sbsnn_author.runs.fit_settings`)
    in words."""
    encoder, sizes = ablation_network(cfg, s)
    batch = s["batch_size"]
    pixels = cfg.side * cfg.side
    return {"image": _IMAGES[s["image"]], "targets": "[-1, 1]" if s["range"] == "symmetric" else "[0, 1]",
            "biases after the encoder": "zero-initialised, trained" if s["bias"] else "none",
            "encoder": encoder_text(encoder),
            "sine layers": f"{len(sizes) - 3} ({' → '.join(str(n) for n in sizes[1:-1])})",
            "Adam": "PyTorch's (ε = 1e-8)" if s["adam"] == "torch" else "Keras's (ε = 1e-7 outside the bias correction)",
            "plateau rule": "PyTorch's (relative 1e-4)" if s["rule"] == "torch" else "Keras's (absolute 1e-4)",
            "learning rate": f"{s['lr']:g}", "patience": f"{s['patience']} flat epochs",
            "an iteration": "one full-batch update" if batch is None else
            f"an epoch of mini-batches of {batch} ({math.ceil(pixels / batch):,} updates)"}


def ablation_changes(cfg) -> list[list[str]]:
    """Per ablation step, every setting that differs from the step before, as ``"setting: old → new"``
    (the first step lists none): what the step's name says and what comes with it."""
    setups = [ablation_setup(cfg, i) for i in range(len(cfg.ablation))]
    return [[]] + [[f"{k}: {before[k]} → {after[k]}" for k in after if after[k] != before[k]]
                   for before, after in zip(setups, setups[1:])]


def reverse_settings(cfg, arm: int) -> dict[str, Any]:
    """The settings of reverse-ablation arm ``arm`` (``cfg.reverse``): the author's protocol with the arm's change."""
    change = {k: v for k, v in cfg.reverse[arm].items() if k != "name"}
    return {**ablation_settings(cfg, len(cfg.ablation) - 1), **change, "name": cfg.reverse[arm]["name"]}


def reverse_changes(cfg) -> list[list[str]]:
    """Per reverse-ablation arm, every setting that differs from the author's protocol (arm 0), as
    ``"setting: his → the arm's"`` (arm 0 lists none): what the arm's name says and what comes with it."""
    setups = [settings_setup(cfg, reverse_settings(cfg, arm)) for arm in range(len(cfg.reverse))]
    return [[f"{k}: {setups[0][k]} → {after[k]}" for k in after if after[k] != setups[0][k]] for after in setups]


TEXT_ARM = 2
"""The reverse-ablation arm with the text's band-limited encoder (and the sine layer that widens it) under the
author's mini-batch epochs: its held-out fits (``heldout_text-<mask>``) ask whether that network generalises."""


def seeded(cfg) -> list[str]:
    """The networks of thin-margin verdicts, fitted again for each of ``more_seeds``, by unit name in the order
    they run: Fig. 7's rotated sin network first (also the reverse ablation's first arm), the script's network
    under the aggressive schedule, Fig. 7's other rotated SBSNN-family networks, and last the script's network
    under the less aggressive schedule (four more seeds of its 550 epochs: about 1.8 hours on one CPU thread)."""
    family = [f"fig7-{a}" for a in SBSNN_FAMILY if a in cfg.activations]
    return family[:1] + ["readme-aggressive"] + family[1:] + ["readme-less_aggressive"]


SEED_ROWS = {"readme-aggressive": "script/aggressive", "readme-less_aggressive": "script/less_aggressive",
             **{f"fig7-{a}": f"{a}/rotated" for a in SBSNN_FAMILY}}
"""The summary row of each network of :func:`seeded`."""


SBSNN_HELDOUT = ["script", "sin_rotated"]
"""The fitted SBSNN networks of the held-out units."""


TEXT_HELDOUT = "text_minibatch"
"""The held-out fits' key of reverse-ablation arm :data:`TEXT_ARM` (the text's encoder, mini-batch epochs)."""


HELDOUT_NETS = {
    "script": ("author's script network (rotated encoder)", "author's script network", "the script's network"),
    "sin_rotated": ("√2 sin(x + π/4), rotated encoder", "√2 sin, rotated encoder", "the rotated-encoder sin network"),
    TEXT_HELDOUT: ("√2 sin(x + π/4), the text's band-limited encoder (+1 sine layer), mini-batch epochs",
                   "√2 sin, the text's encoder", "the text-encoder sin network"),
    "siren": ("SIREN (mini-batch, constant 1e-4)", "SIREN, mini-batch", "SIREN in mini-batches"),
    "siren_own": ("SIREN (its own protocol: full batch, [-1, 1], until MSE 1e-5)", "SIREN, its own protocol",
                  "SIREN under its own protocol"),
}
"""The held-out fits by key, each with its names in the table, in the renders and in prose."""


MINIBATCH_ARM = 1
"""The reverse-ablation arm that replaces the author's mini-batch epochs by full-batch updates."""
