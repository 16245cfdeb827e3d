"""Every chapter as Colab runs it: a clean Python with only torch and a Jupyter kernel runs the
notebook's own install cell (it clones a snapshot of this repository in place of GitHub's and
installs ``gmp[notebook]`` from the clone) and then the whole chapter at smoke scale, in a folder
with no repository around it, reading the clone's committed results.

Slow: the runtime (torch, torchvision, ipykernel, papermill) is installed once per session into a
fresh virtual environment without system site packages; ``GMP_COLAB_VENV=<folder>`` keeps it there
between sessions instead (created when absent; the gmp a former session installed is removed
first). Skipped when pip cannot install the runtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import ROOT, chapters

# Colab's runtime brings its own torch and Jupyter kernel; papermill only executes the notebooks here.
RUNTIME = ["torch==2.14.1", "torchvision==0.29.1", "ipykernel", "papermill"]
KERNEL = "gmp-colab"
REUSE = "GMP_COLAB_VENV"
# Variables of this test run that a Colab runtime does not have: they would let the kernel import the
# checkout's gmp or read its results instead of the installed package's behaviour.
LEAKS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "JUPYTER_PATH", "GMP_RESULTS", "GMP_RESULTS_STAGING")


@dataclass(frozen=True)
class Runtime:
    venv: Path
    repo: Path
    torch: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in LEAKS}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["GMP_SCALE"] = "smoke"
        if env.get("GMP_DATA"):
            env["GMP_DATA"] = str(Path(env["GMP_DATA"]).resolve())  # the kernel runs in another folder
        return env

    def run(self, *args: str | Path, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
        """``args`` in the runtime's environment, in ``cwd`` (default: the venv, away from this checkout's gmp)."""
        return subprocess.run([str(a) for a in args], cwd=cwd or self.venv, env=self.env(), capture_output=True,
                              text=True, timeout=timeout)

    def check(self, code: str) -> str:
        done = self.run(self.python, "-c", code)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()


def _snapshot(repo: Path) -> None:
    """The working tree (tracked and untracked, not ignored files) as a git repository on branch main."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=gmp tests", "-c", "user.email=tests@localhost"]
    for step in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "snapshot for the Colab test"]):
        subprocess.run(git + step, cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="session")
def colab(tmp_path_factory) -> Runtime:
    where = tmp_path_factory.mktemp("colab")
    runtime = Runtime(Path(os.environ.get(REUSE) or where / "venv").resolve(), where / "repo", torch="")
    if not runtime.python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(runtime.venv)], check=True)
    done = runtime.run(runtime.python, "-m", "pip", "install", "-q", *RUNTIME)
    if done.returncode != 0:
        pytest.skip(f"cannot install a Colab-like runtime ({' '.join(RUNTIME)}) with pip here: "
                    f"{done.stderr.strip()[-600:]}")
    for step in (["pip", "uninstall", "-y", "-q", "gmp"], ["ipykernel", "install", "--sys-prefix", "--name", KERNEL]):
        done = runtime.run(runtime.python, "-m", *step)
        assert done.returncode == 0, done.stderr[-3000:]
    assert runtime.check("import importlib.util; print(importlib.util.find_spec('gmp'))") == "None"
    _snapshot(runtime.repo)
    return Runtime(runtime.venv, runtime.repo, torch=runtime.check("import torch; print(torch.__version__)"))


@pytest.mark.colab
@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_chapter_installs_gmp_notebook_and_runs_in_a_colab_like_runtime(page: Path, colab: Runtime, tmp_path):
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    notebook = nbformat.read(page.with_suffix(".ipynb"), as_version=4)
    install = next(c for c in notebook.cells if c.cell_type == "code")
    source = f"!git clone -q --depth 1 {url} gmp-book"
    assert source in install.source, f"{page.name}: the first code cell does not clone {url}"
    install.source = install.source.replace(source, f"!git clone -q --depth 1 file://{colab.repo} gmp-book")
    # Where the chapter read its results from: the clone's committed ones, as on Colab.
    notebook.cells.append(nbformat.v4.new_code_cell("import gmp.results\nprint('RESULTS', gmp.results.results_root())"))
    nbformat.write(notebook, tmp_path / f"{page.stem}.ipynb")

    # Colab gives each notebook a fresh runtime: gmp is not installed yet, whichever chapter ran before.
    uninstalled = colab.run(colab.python, "-m", "pip", "uninstall", "-y", "-q", "gmp")
    assert uninstalled.returncode == 0, uninstalled.stderr[-3000:]
    done = colab.run(colab.python, "-m", "papermill", f"{page.stem}.ipynb", "executed.ipynb", "-k", KERNEL,
                     "-p", "SCALE", "smoke", "--cwd", tmp_path, "--no-progress-bar", cwd=tmp_path)
    assert done.returncode == 0, f"{page.stem} failed in the Colab-like runtime:\n{done.stderr[-5000:]}"
    outputs = nbformat.read(tmp_path / "executed.ipynb", as_version=4).cells[-1].outputs
    printed = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    clone = tmp_path / "gmp-book" / "book" / "_results"
    assert printed.strip() == f"RESULTS {clone}", f"{page.stem} did not read the clone's results {clone}: {printed}"
    assert (clone / "chen_levy" / "paper").is_dir(), "the clone lacks the committed paper-scale results"

    where = colab.check("import gmp, torch; print(gmp.__file__); print(torch.__version__)").splitlines()
    assert Path(where[0]).is_relative_to(colab.venv), f"gmp was imported from {where[0]}, not installed by the cell"
    assert where[1] == colab.torch, f"installing gmp[notebook] replaced the runtime's torch {colab.torch} by {where[1]}"
    toolchain = colab.check("import importlib.util as u; print([m for m in ('sphinx', 'jupyter_book', 'myst_nb',"
                            " 'jupytext') if u.find_spec(m)])")
    assert toolchain == "[]", f"gmp[notebook] installed the book's build toolchain: {toolchain}"
