"""Static checks of the book: packaging, pairing, labels, table of contents, Colab wiring."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jupytext
import pytest
import yaml

from conftest import ROOT, chapters, running_notebooks

LABEL = re.compile(r"^\s*name:\s*((?:chen|lu|sbsnn)-(?:fig|table)-[0-9a-z-]+)\s*$", re.M)
ANY_PAPER_LABEL = re.compile(r"name:\s*([a-z]+-(?:fig|table)-\S+)")


def _requirements(specs):
    return sorted(s.replace(" ", "") for s in specs)


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = project["dependencies"] + [d for extra in ("notebook", "book", "test") for d in extras[extra]
                                        if not d.startswith("gmp[")]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert _requirements(p for p in pip if not p.startswith("-e")) == _requirements(wanted)


def test_repository_url_is_set_once_and_used_everywhere():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Homepage"] == url
    pages = chapters() + [ROOT / "book" / "claims.md"] + running_notebooks()
    for page in pages:
        text = page.read_text()
        clones = re.findall(r"!git clone -q --depth 1 (\S+) gmp-book\n", text)
        assert clones == [url], f"{page.name}: its Colab install cell must clone {url} into gmp-book"
        assert '%pip install -q "./gmp-book[notebook]"' in text, f"{page.name}: the cell must install gmp[notebook]"


BUILD_TOOLCHAIN = ("jupyter-book", "sphinx", "myst-nb", "myst-parser", "jupytext", "papermill", "jupyter-cache")


def test_notebook_extra_holds_what_a_chapter_runs_with_and_no_build_toolchain():
    """Colab installs gmp[notebook]: no book toolchain, no torch pin that would replace the runtime's torch."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in extras["notebook"]]
    assert {"sympy", "scikit-learn", "scikit-image"} <= set(names)
    assert not [n for n in names if n.startswith(BUILD_TOOLCHAIN)], f"gmp[notebook] pulls in the build toolchain: {names}"
    assert "gmp[notebook]" in extras["book"], "the book extra builds on the notebook extra"
    torches = [d.replace(" ", "") for d in project["dependencies"] if re.match(r"torch(vision)?\b", d)]
    assert len(torches) == 2
    for spec in torches:
        assert re.fullmatch(r"torch(vision)?>=[0-9.]+", spec), f"{spec}: an upper bound or pin makes pip replace Colab's"


def _toc_files(node) -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "root"):
                found.append(value)
            else:
                found += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += _toc_files(item)
    return found


def test_toc_lists_every_chapter_and_only_existing_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = _toc_files(toc)
    for entry in files:
        assert (ROOT / f"{entry}.md").is_file(), f"_toc.yml lists {entry} but {entry}.md does not exist"
    listed = {ROOT / f"{f}.md" for f in files}
    missing = [p.relative_to(ROOT) for p in chapters() if p not in listed]
    assert not missing, f"chapters missing from _toc.yml: {missing}"
    captions = [part["caption"] for part in toc["parts"]]
    assert captions[-2:] == ["Claims and references", "Running and trusting the book"]


def test_the_reliability_page_names_only_tests_that_exist():
    """Each promise of book/running/reliability.md names the tests that check it: each must exist."""
    page = (ROOT / "book" / "running" / "reliability.md").read_text()
    named = set(re.findall(r"`(test_\w+\.py)::(\w+)`", page))
    assert len(named) > 100
    for file, name in sorted(named):
        assert re.search(rf"^def {name}\(", (ROOT / "tests" / file).read_text(), re.M), f"{file}::{name} is no test"


def _notebook_pages():
    return chapters() + [ROOT / "book" / "claims.md"] + running_notebooks()


@pytest.mark.parametrize("page", _notebook_pages(), ids=lambda p: p.stem)
def test_markdown_and_notebook_are_paired_in_sync_and_without_outputs(page: Path):
    twin = page.with_suffix(".ipynb")
    assert twin.is_file(), f"{twin.relative_to(ROOT)} is missing: run jupytext --sync {page.relative_to(ROOT)}"
    raw = json.loads(twin.read_text())
    for cell in raw["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, \
                f"{twin.name} holds outputs: clear them (jupytext --sync rewrites it without)"
    md, nb = jupytext.read(page), jupytext.read(twin)
    strip = lambda n: [(c.cell_type, c.source.strip(), c.metadata.get("tags", [])) for c in n.cells]  # noqa: E731
    assert strip(md) == strip(nb), f"{page.name} and {twin.name} differ: run jupytext --sync {page.relative_to(ROOT)}"


@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_chapter_has_install_cell_then_one_parameters_cell(page: Path):
    code = [c for c in jupytext.read(page).cells if c.cell_type == "code"]
    assert "%pip install" in code[0].source, "the first code cell installs gmp on Colab"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0] is code[1], "the second code cell, and only it, is tagged parameters"
    assert "hide-cell" in params[0].metadata["tags"], "the parameters cell is folded in the rendered page"
    names = set(re.findall(r"^(\w+) =", params[0].source, re.M))
    assert names == {"SCALE", "DEVICE", "SEED"}
    assert 'os.environ.get("GMP_SCALE", "small")' in params[0].source
    text = page.read_text()
    assert f'gmp.load_config("{page.stem}", SCALE)' in text, "the chapter reads its config from gmp.experiments"


def test_figure_and_table_labels_follow_the_paper_numbering_and_are_unique():
    seen: dict[str, str] = {}
    for page in chapters():
        text = page.read_text()
        for label in ANY_PAPER_LABEL.findall(text):
            assert LABEL.search(f"name: {label}"), f"{page.name}: label {label!r} is not <paper>-fig|table-<n>"
            assert label not in seen, f"label {label} used in {seen.get(label)} and {page.name}"
            seen[label] = page.name


@pytest.mark.parametrize("page", chapters(), ids=lambda p: p.stem)
def test_a_chapter_with_claims_opens_with_its_verdict_box(page: Path):
    """Each chapter with claims shows their paper-scale verdicts near its top: a remove-input cell
    calling gmp.results.verdict_box with the chapter's own name, before its first section and
    among its first code cells (after the install, parameters and set-up cells)."""
    from gmp.results import _claims_of

    cells = jupytext.read(page).cells
    calls = [(i, c) for i, c in enumerate(cells) if c.cell_type == "code" and "verdict_box(" in c.source]
    if not _claims_of(page.stem):
        assert not calls, f"{page.name} has no claims, so no verdict box"
        return
    assert len(calls) == 1, f"{page.name}: one cell calls gmp.results.verdict_box (found {len(calls)})"
    index, cell = calls[0]
    assert re.search(rf'^gmp\.results\.verdict_box\("{page.stem}"\)$', cell.source, re.M), cell.source
    assert "remove-input" in cell.metadata.get("tags", [])
    code = [c for c in cells[:index] if c.cell_type == "code"]
    assert len(code) <= 3, f"{page.name}: the verdict box comes after {len(code)} code cells, not near the top"
    headings = [c for c in cells[:index] if c.cell_type == "markdown" and re.search(r"^## ", c.source, re.M)]
    if page.stem != "chen_resnet":  # its intro has a section ("How a residual network is converted") before any code
        assert not headings, f"{page.name}: the verdict box comes after a section heading"


def test_no_documented_constant_renders_its_first_words_as_a_type():
    """Napoleon reads an attribute docstring that starts ``words: more`` as ``type: description``,
    so the API page would print "Type: words" (it did for five constants)."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import GoogleDocstring
    from sphinx.pycode import ModuleAnalyzer

    settings = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    config = Config(napoleon_use_ivar=settings["napoleon_use_ivar"])
    modules = re.findall(r"automodule:: (\S+)", (ROOT / "book" / "api.md").read_text())
    assert len(modules) > 20
    typed = [f"{module}.{name}" for module in modules
             for (cls, name), lines in ModuleAnalyzer.for_module(module).find_attr_docs().items()
             if ":type:" in str(GoogleDocstring(list(lines), config, what="attribute" if cls else "data", name=name))]
    assert typed == []
