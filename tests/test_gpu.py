"""``python -m gmp.gpu`` against what the GPU machine holds and gives back: chapter code run as under a
plain ``python`` without IPython (the packages the GPU image lacks blocked: ``tests/gpu_image``), and
what comes back from ``OUT`` within the machine's limits."""

import json
import os
from pathlib import Path

import pytest

from gmp import gpu

GPU_IMAGE = Path(__file__).resolve().parent / "gpu_image"
"""A folder whose ``sitecustomize`` blocks the packages the GPU image lacks, in every process started with it
on ``PYTHONPATH``."""


def _notebook(path: Path, cells: list[str]) -> Path:
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": source} for source in cells],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_chapter_code_runs_where_ipython_is_absent(tmp_path, monkeypatch):
    """pyplot, gmp's HTML notes and the ``display`` a notebook has run in a process that cannot import IPython;
    IPython stays absent there (matplotlib asked a stand-in ``IPython`` for ``get_ipython``)."""
    monkeypatch.setenv("PYTHONPATH", str(GPU_IMAGE))
    notebook = _notebook(tmp_path / "chapter.ipynb", [
        "import sys\n\nimport matplotlib.pyplot as plt\n\nimport gmp",
        "plt.plot([0, 1], [1, 0])\nplt.show()",
        "display(gmp.results.verdict_box('lu_gpn'))\ndisplay(gmp.results.cached('lu_gpn', 'gpn').note())",
        "assert 'IPython' not in sys.modules\ntry:\n    import IPython\nexcept ImportError:\n    pass\nelse:\n"
        "    raise AssertionError('IPython imported')"])
    result = gpu.run_chapter(notebook, "smoke", "cpu", 120)
    assert result["ok"], result["output_tail"]
