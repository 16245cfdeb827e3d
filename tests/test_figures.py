"""One figure style for the book (gmp.style) and figures numbered by the paper's own numbers."""

from __future__ import annotations

import re
import sys

import jupytext
import matplotlib
import pytest

from conftest import ROOT, chapters
from gmp import style

matplotlib.use("Agg")
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from gmp_figures import caption_number  # noqa: E402

PAPERS = {"chen": "Chen & Ge", "lu": "Lu et al.", "sbsnn": "SBSNN"}


def test_scaled_brings_a_figure_to_the_book_width_keeping_its_shape():
    assert style.scaled(12, 4) == pytest.approx((style.WIDTH, 4 * style.WIDTH / 12))
    assert style.scaled(5, 3.2)[0] == style.WIDTH
    with pytest.raises(ValueError, match="positive"):
        style.scaled(0, 3)


def test_subplots_applies_the_book_type_and_width():
    import matplotlib.pyplot as plt

    matplotlib.rcParams["font.size"] = 7
    fig, axes = style.subplots(1, 3, figsize=(15, 3.4))
    try:
        assert fig.get_size_inches() == pytest.approx((style.WIDTH, 3.4 * style.WIDTH / 15))
        assert matplotlib.rcParams["font.size"] == style.RC["font.size"]
        assert len(axes) == 3
    finally:
        plt.close(fig)


def test_legend_below_sits_under_every_axes_with_each_label_once():
    import matplotlib.pyplot as plt

    fig, axes = style.subplots(1, 2, figsize=(12, 4))
    try:
        for ax in axes:
            ax.plot([0, 1], [0, 1], label="shared")
            ax.set_xlabel("x")
        axes[1].plot([0, 1], [1, 0], label="right only")
        fig.tight_layout()
        legend = style.legend_below(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        assert [t.get_text() for t in legend.get_texts()] == ["shared", "right only"]
        top = legend.get_window_extent(renderer).y1
        assert all(top <= ax.get_tightbbox(renderer).y0 + 1 for ax in axes), "the legend overlaps an axes"
    finally:
        plt.close(fig)


def test_legend_below_refuses_a_figure_without_labels():
    import matplotlib.pyplot as plt

    fig, ax = style.subplots()
    try:
        ax.plot([0, 1])
        with pytest.raises(ValueError, match="no labelled curve"):
            style.legend_below(fig)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("caption, number", [
    ("Chen & Ge Fig. 2c: the largest move", "Chen & Ge Fig. 2c"),
    ("Not in the paper, the ablation: from the text", "Not in the paper, the ablation"),
    ("PSNR of $x: y$ over time", None),
    ("a caption with no number", None),
    ("x" * 80 + ": too long to be a number", None),
])
def test_caption_number_is_the_opening_before_the_first_colon(caption, number):
    assert caption_number(caption) == number


def _figures():
    for page in chapters():
        for cell in jupytext.read(page).cells:
            figure = cell.metadata.get("mystnb", {}).get("figure")
            if figure and "caption" in figure:
                yield page, figure["name"], figure["caption"]


def test_every_chapter_figure_is_numbered_by_the_paper_or_says_it_is_not_in_it():
    seen = 0
    for page, name, caption in _figures():
        seen += 1
        number = caption_number(caption)
        assert number, f"{page.name}: the caption of {name} does not open with its number and a colon"
        assert re.match(r"(Chen & Ge|Lu et al\.|SBSNN) |Not in the paper", number), (
            f"{page.name}: {name} is numbered {number!r}: neither a paper's number nor 'Not in the paper'")
        paper_label = re.fullmatch(r"(chen|lu|sbsnn)-(fig|table)-(\d+[a-z]?)", name)
        if paper_label:
            paper, kind, index = paper_label.groups()
            expected = f"{PAPERS[paper]} {'Fig.' if kind == 'fig' else 'Table'} {index.rstrip('abcdefgh')}"
            assert re.match(re.escape(expected) + r"(?!\d)", number), (
                f"{page.name}: {name} is numbered {number!r}, not as {expected!r}")
    assert seen > 50


def test_every_figure_of_the_package_and_the_chapters_is_made_through_gmp_style():
    sources = [p for p in (ROOT / "gmp").rglob("*.py") if p.name != "style.py"] + chapters()
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"\bplt\.(subplots|figure|subplot_mosaic)\(", line)]
    assert not offenders, f"figures made without gmp.style.subplots (the book's width and type): {offenders}"
