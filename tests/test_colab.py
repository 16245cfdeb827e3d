"""Every chapter as Colab runs it: a clean Python with only torch and a Jupyter kernel runs the
chapters' install cell (it clones a snapshot of this repository in place of GitHub's and installs
``gmp[notebook]`` from the clone) and then each whole chapter at smoke scale, in a folder with no
repository around it, reading the clone's committed results.

Every chapter has the same install cell, byte for byte (checked here), so it is run once from the
clean runtime (``installed``); each chapter then runs whole, its install cell included, in the
runtime that cell left (gmp installed), beside its own clone of the snapshot, as a Colab runtime
runs a notebook again after its first run. (Installing the same cell into the same runtime again for
every chapter checked nothing more.)

Slow: the runtime (torch, torchvision, ipykernel, papermill) is installed once per session into a
fresh virtual environment without system site packages; ``GMP_COLAB_VENV=<folder>`` keeps it there
between sessions instead (created when absent; the gmp a former session installed is removed
first). Skipped when pip cannot install the runtime. Its tests share that runtime, so they stay on
one pytest-xdist worker (``WORKER_GROUPS`` in conftest.py).
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
URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
# A last cell: where the chapter read its results from (the clone's committed ones, as on Colab), which gmp and
# torch it ran with, and which of the book's build tools the runtime holds (none: gmp[notebook] brings none).
REPORT = ("import importlib.util, gmp.results, torch\n"
          "print('RESULTS', gmp.results.results_root(), gmp.__file__, torch.__version__, sep='\\n')\n"
          "print([m for m in ('sphinx', 'jupyter_book', 'myst_nb', 'jupytext') if importlib.util.find_spec(m)])")


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


def _install_cell(page: Path) -> str:
    """The source of a chapter's first code cell, the one that installs gmp on Colab."""
    notebook = nbformat.read(page.with_suffix(".ipynb"), as_version=4)
    return next(c for c in notebook.cells if c.cell_type == "code").source


def _clone(url: str) -> str:
    return f"!git clone -q --depth 1 {url} gmp-book"


def _on_colab(cell: str, colab: Runtime) -> str:
    """The install cell cloning the snapshot in place of GitHub's repository."""
    return cell.replace(_clone(URL), _clone(f"file://{colab.repo}"))


def _check_report(executed: Path, clone: Path, colab: Runtime) -> None:
    """What the last cell (REPORT) of a notebook executed in ``colab`` printed: it read the results in ``clone``,
    ran with the gmp installed in the runtime and the runtime's own torch, and no build toolchain was installed."""
    outputs = nbformat.read(executed, as_version=4).cells[-1].outputs
    printed = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout").strip().splitlines()
    assert printed[:2] == ["RESULTS", str(clone)], f"gmp did not read the clone's results {clone}: {printed}"
    assert (clone / "chen_levy" / "paper").is_dir(), "the clone lacks the committed paper-scale results"
    where, version, toolchain = printed[2:]
    assert Path(where).is_relative_to(colab.venv), f"gmp was imported from {where}, not installed by the cell"
    assert version == colab.torch, f"installing gmp[notebook] replaced the runtime's torch {colab.torch} by {version}"
    assert toolchain == "[]", f"gmp[notebook] installed the book's build toolchain: {toolchain}"


def test_every_chapter_has_the_same_install_cell_which_clones_the_repository():
    """What lets ``installed`` run the install cell once for every chapter."""
    cells = {page.stem: _install_cell(page) for page in chapters()}
    first = next(iter(cells.values()))
    assert _clone(URL) in first, f"the first code cell does not clone {URL}"
    assert [name for name, cell in cells.items() if cell != first] == [], "install cells differ from the first's"


@dataclass(frozen=True)
class Installed:
    """The install cell run once in the clean runtime, in ``home``: papermill's outcome and what the cell left."""
    home: Path
    done: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def installed(colab: Runtime, tmp_path_factory) -> Installed:
    """The chapters' install cell, then the REPORT cell, in the clean runtime
    (``colab``: gmp not installed), as a chapter's first run on Colab does."""
    home = tmp_path_factory.mktemp("colab-home")
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": KERNEL, "display_name": KERNEL,
                                                                 "language": "python"}})
    notebook.cells = [nbformat.v4.new_code_cell(_on_colab(_install_cell(chapters()[0]), colab)),
                      nbformat.v4.new_code_cell(REPORT)]
    nbformat.write(notebook, home / "install.ipynb")
    done = colab.run(colab.python, "-m", "papermill", "install.ipynb", "executed.ipynb", "-k", KERNEL, "--cwd", home,
                     "--no-progress-bar", cwd=home)
    return Installed(home, done)


@pytest.mark.colab
def test_the_install_cell_installs_gmp_notebook_into_a_clean_colab_runtime(colab: Runtime, installed: Installed):
    done = installed.done
    assert done.returncode == 0, f"the install cell failed in a clean runtime:\n{done.stderr[-5000:]}"
    _check_report(installed.home / "executed.ipynb", installed.home / "gmp-book" / "book" / "_results", colab)


@pytest.mark.colab
@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_chapter_installs_gmp_notebook_and_runs_in_a_colab_like_runtime(page: Path, colab: Runtime,
                                                                       installed: Installed, tmp_path):
    """The chapter whole (its install cell first) at smoke scale, in the runtime the install cell left, in a folder
    holding only a clone of the snapshot, as when a Colab runtime runs the notebook again."""
    assert installed.done.returncode == 0, "the install cell failed in a clean runtime (see the test above)"
    notebook = nbformat.read(page.with_suffix(".ipynb"), as_version=4)
    install = next(c for c in notebook.cells if c.cell_type == "code")
    assert _clone(URL) in install.source, f"{page.name}: the first code cell does not clone {URL}"
    install.source = _on_colab(install.source, colab)
    notebook.cells.append(nbformat.v4.new_code_cell(REPORT))
    nbformat.write(notebook, tmp_path / f"{page.stem}.ipynb")
    cloned = colab.run("git", "clone", "-q", "--depth", "1", f"file://{colab.repo}", "gmp-book", cwd=tmp_path)
    assert cloned.returncode == 0, cloned.stderr[-3000:]

    done = colab.run(colab.python, "-m", "papermill", f"{page.stem}.ipynb", "executed.ipynb", "-k", KERNEL,
                     "-p", "SCALE", "smoke", "--cwd", tmp_path, "--no-progress-bar", cwd=tmp_path)
    assert done.returncode == 0, f"{page.stem} failed in the Colab-like runtime:\n{done.stderr[-5000:]}"
    _check_report(tmp_path / "executed.ipynb", tmp_path / "gmp-book" / "book" / "_results", colab)
