"""Shared fixtures. The tests read real data from GMP_DATA (this project: ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def chapters() -> list[Path]:
    """The chapter sources: every MyST notebook under book/part*/."""
    return sorted(ROOT.glob("book/part*/*.md"))


def pytest_report_header(config):
    return f"GMP_DATA={os.environ.get('GMP_DATA', '(unset: ~/.cache/gmp)')}"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip on a machine without a CUDA GPU."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
