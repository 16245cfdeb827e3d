"""Experiment configuration: every knob of a chapter derives from its ``SCALE``.

Each chapter ``book/<part>/<chapter>.md`` has one module ``gmp.experiments.<chapter>`` (a
file, or a package where the chapter's experiment outgrew one) that defines ``CONFIG = scaled(common=..., smoke=..., small=..., paper=...)``. The chapter
reads it with :func:`load`; the results cache compares the digest of the config a
result was computed with against the current one, so that editing the config marks old
results as stale.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

#: The scales of every chapter, from fastest to the paper's own settings. ``smoke`` runs
#: every code path in seconds, ``small`` is the default build, ``paper`` the paper's settings.
SCALES: tuple[str, ...] = ("smoke", "small", "paper")


def resolve_scale(scale: str | None = None) -> str:
    """Return ``scale``, or ``$GMP_SCALE``, or ``"small"``, after checking it is a known scale."""
    value = scale if scale is not None else os.environ.get("GMP_SCALE", "small")
    if value not in SCALES:
        raise ValueError(f"unknown scale {value!r}: expected one of {', '.join(SCALES)} "
                         "(set SCALE in the chapter's parameters cell or GMP_SCALE)")
    return value


def scaled(*, common: Mapping[str, Any] | None = None, **per_scale: Mapping[str, Any]
           ) -> dict[str, dict[str, Any]]:
    """Build a chapter's ``CONFIG``: ``common`` settings updated by one dict per scale.

    Every scale in :data:`SCALES` must be given, and no other key. Values must be JSON
    serialisable (numbers, strings, lists, dicts), because the digest of a config is part
    of every cached result.
    """
    if set(per_scale) != set(SCALES):
        raise ValueError(f"scaled() needs exactly the scales {SCALES}, got {tuple(per_scale)}")
    table = {scale: {**(common or {}), **dict(per_scale[scale])} for scale in SCALES}
    for scale, values in table.items():
        try:
            json.dumps(values, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"config for scale {scale!r} is not JSON serialisable: {err}") from None
    return table


def digest_of(values: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of a config's ``values`` (:attr:`Config.digest`); a
    cache's recorded config is checked against its recorded digest with it."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Config(Mapping[str, Any]):
    """A read-only experiment configuration with attribute access.

    ``cfg.lr`` and ``cfg["lr"]`` are the same; ``cfg.digest`` identifies the values.
    """

    def __init__(self, chapter: str, scale: str, values: Mapping[str, Any]):
        self._chapter = chapter
        self._scale = scale
        self._values = json.loads(json.dumps(dict(values)))

    @property
    def chapter(self) -> str:
        return self._chapter

    @property
    def scale(self) -> str:
        return self._scale

    @property
    def digest(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical JSON of the values."""
        return digest_of(self._values)

    def as_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._values))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"config of {self._chapter!r} at scale {self._scale!r} "
                                 f"has no setting {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._chapter!r}, {self._scale!r}, {self._values!r})"


def experiment(chapter: str):
    """Import ``gmp.experiments.<chapter>``, with a clear error for an unknown chapter."""
    if not chapter.isidentifier():
        raise ValueError(f"chapter names are Python identifiers like 'chen_uci', got {chapter!r}")
    try:
        return importlib.import_module(f"gmp.experiments.{chapter}")
    except ModuleNotFoundError as err:
        if err.name != f"gmp.experiments.{chapter}":
            raise
        raise ValueError(f"no experiment config for chapter {chapter!r}: expected a module "
                         f"gmp/experiments/{chapter}.py, or a package gmp/experiments/{chapter}/, "
                         f"defining CONFIG") from None


def load(chapter: str, scale: str | None = None) -> Config:
    """The configuration of ``chapter`` at ``scale`` (default: ``$GMP_SCALE`` or "small")."""
    scale = resolve_scale(scale)
    return Config(chapter, scale, experiment(chapter).CONFIG[scale])


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else the CPU; otherwise a CPU, CUDA or MPS device
    that this machine has (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``), else ValueError.

    On CUDA it also turns TF32 off for matrix products and convolutions, so that a chapter
    computes in float32 as the papers' GPUs did (set ``GMP_TF32=1`` to keep TF32 on)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda[:N]' ({err})") from None
    if resolved.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r} cannot train or evaluate a network; use 'auto', 'cpu' or 'cuda[:N]'")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use 'auto' or 'cpu'")
    if resolved.type == "cuda" and (resolved.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} requested but this machine has {torch.cuda.device_count()} CUDA devices")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} requested but MPS is not available; use 'auto' or 'cpu'")
    if resolved.type == "cuda" and os.environ.get("GMP_TF32") != "1":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return resolved


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
