"""Every chapter's code at smoke scale on the device, then the tests marked ``cuda`` (step 2 of the command)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .files import ROOT, append_line


def chapter_code(notebook: Path, scale: str, device: str) -> str:
    """The code cells of a chapter's ``.ipynb`` as one Python program: IPython magics and shell
    lines (the Colab install cell's) become ``pass``, and the parameters cell is followed by
    ``SCALE``/``DEVICE`` set to ``scale``/``device``."""
    cells = json.loads(notebook.read_text())["cells"]
    parts = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines = [line if not line.lstrip().startswith(("!", "%")) else line[:len(line) - len(line.lstrip())] + "pass"
                 for line in source.splitlines()]
        parts.append("\n".join(lines))
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            parts.append(f"SCALE = {scale!r}\nDEVICE = {device!r}")
    return "\n\n".join(parts) + "\n"


class _HTML:
    """``IPython.display.HTML`` where IPython is absent: the markup, shown as such by a notebook."""

    def __init__(self, data: str = "", *args: Any, **kwargs: Any) -> None:
        self.data = data

    def _repr_html_(self) -> str:
        return self.data


def without_ipython() -> None:
    """Give a chapter's code, run by a plain ``python`` (``run_chapter``), what a notebook gives it:
    ``display`` as a builtin (IPython's, or one that shows nothing where IPython is absent, as on the GPU
    machine), and where IPython is absent the one module of it that gmp's notes and tables import,
    ``IPython.display`` (its ``HTML`` and ``display``). The package ``IPython`` itself stays absent, so that
    libraries that look for it (matplotlib's pyplot, tqdm) find it missing, as under a plain ``python``."""
    import builtins
    import types

    try:
        from IPython.display import display
    except ImportError:
        module = types.ModuleType("IPython.display", "IPython's display module where IPython is absent (gmp.gpu)")
        module.HTML, module.display = _HTML, lambda *objects, **kwargs: None
        sys.modules[module.__name__] = module  # its parent package is not needed to import it by this name
        display = module.display
    builtins.display = display


_PRELUDE = """
import matplotlib
matplotlib.use("Agg")
from gmp.gpu.chapters import without_ipython
without_ipython()
"""


def run_chapter(notebook: Path, scale: str, device: str, timeout: float) -> dict[str, Any]:
    """Execute one chapter's code (:func:`chapter_code`) in a fresh Python process, at most ``timeout`` s."""
    start = time.perf_counter()
    program = _PRELUDE + chapter_code(notebook, scale, device)
    env = {**os.environ, "GMP_SCALE": scale, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", program], cwd=notebook.parent, env=env, capture_output=True,
                              text=True, timeout=max(timeout, 1))
        ok, tail = done.returncode == 0, (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        ok, tail = False, f"stopped after {timeout:.0f} s (the smoke budget)"
    return {"chapter": notebook.stem, "ok": ok, "seconds": round(time.perf_counter() - start, 1),
            "output_tail": "" if ok else tail}


def smoke(out: Path, device: str, budget: float, workers: int, chapters: Sequence[str] | None = None) -> dict[str, Any]:
    """Every chapter (or those named) at smoke scale on ``device``, then the ``cuda`` tests, all
    within ``budget`` seconds: a chapter is stopped at the budget's end, and one that could not
    start before it is recorded as not run."""
    notebooks = sorted(nb for nb in ROOT.glob("book/part*/*.ipynb") if not chapters or nb.stem in chapters)
    if chapters and len(notebooks) != len(set(chapters)):
        raise ValueError(f"unknown chapter among {', '.join(chapters)}: expected names of book/part*/*.ipynb")
    deadline = time.monotonic() + budget
    tests_share = 20.0  # seconds kept for the cuda tests

    def one(notebook: Path) -> dict[str, Any]:
        left = deadline - tests_share - time.monotonic()
        if left < 5:
            return {"chapter": notebook.stem, "ok": False, "seconds": 0.0, "output_tail": "not run: no time left"}
        return run_chapter(notebook, "smoke", device, left)

    results = []
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        for future in concurrent.futures.as_completed([pool.submit(one, nb) for nb in notebooks]):
            result = future.result()
            results.append(result)
            append_line(out / "smoke.jsonl", result)
            print(f"  smoke {result['chapter']}: {'ok' if result['ok'] else 'FAILED'} ({result['seconds']} s)", flush=True)
    left = max(deadline - time.monotonic(), 10)
    start = time.perf_counter()
    try:  # only the file of cuda tests: collecting the others needs packages the GPU machine lacks (papermill, ...)
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                                str(ROOT / "tests" / "test_cuda.py")], cwd=ROOT, capture_output=True, text=True,
                               timeout=left)
        test_result = {"tests": "cuda", "rc": tests.returncode, "output_tail": (tests.stdout + tests.stderr)[-3000:]}
    except subprocess.TimeoutExpired:
        test_result = {"tests": "cuda", "rc": None, "output_tail": f"stopped after {left:.0f} s"}
    test_result["seconds"] = round(time.perf_counter() - start, 1)
    append_line(out / "smoke.jsonl", test_result)
    print(f"  cuda tests: rc {test_result['rc']} ({test_result['seconds']} s)", flush=True)
    return {"chapters_ok": sum(r["ok"] for r in results), "chapters": len(results),
            "failed": [r["chapter"] for r in results if not r["ok"]], "cuda_tests_rc": test_result["rc"]}
