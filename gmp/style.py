"""The one look of every figure in the book.

The book shows each figure at the full width of its text column (``book/_static/gmp.css``
stretches a figure's image to it: about 690 px on a 1300 px screen). So every figure is drawn
:data:`WIDTH` inches wide, whatever its number of panels, with type sized to stay legible
once scaled to that column, and a legend inside its axes or below them, never beside them.
The plot functions of ``gmp.experiments`` and ``gmp.implicit`` make their figures with
:func:`subplots` (matplotlib's, brought to this width and type) and put shared legends under
the axes with :func:`legend_below`.
"""

from __future__ import annotations

from typing import Any

#: Width of every figure in inches. At matplotlib's 100 dpi a figure is about 900 px wide,
#: wider than the text column, which scales it down to the column's width (by about 0.77 on
#: a 1300 px screen), so 12 pt type shows at about 13 px.
WIDTH = 9.0

#: The matplotlib settings of every figure, with type sizes legible at the column's width.
RC: dict[str, Any] = {
    "font.size": 12,
    "axes.titlesize": 12,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "figure.titlesize": 13,
    "figure.dpi": 100,
}


def apply() -> None:
    """Set :data:`RC` in matplotlib's settings (for every figure made afterwards)."""
    import matplotlib

    matplotlib.rcParams.update(RC)


def scaled(width: float, height: float) -> tuple[float, float]:
    """The size of a figure drawn as ``width`` x ``height`` inches, brought to :data:`WIDTH`
    with its aspect ratio kept."""
    if width <= 0 or height <= 0:
        raise ValueError(f"a figure needs a positive width and height, not {width} x {height}")
    return WIDTH, height * WIDTH / width


def subplots(*args, figsize: tuple[float, float] = (WIDTH, WIDTH / 2.5), **kwargs):
    """``matplotlib.pyplot.subplots`` with :data:`RC` applied and ``figsize`` brought to
    :data:`WIDTH` by :func:`scaled` (its aspect ratio kept)."""
    import matplotlib.pyplot as plt

    apply()
    return plt.subplots(*args, figsize=scaled(*figsize), **kwargs)


def legend_below(fig, handles=None, labels=None, *, ncol: int = 4):
    """One legend for the whole figure, centred under its axes, ``ncol`` entries a row.

    ``handles`` and ``labels`` default to every labelled artist of the figure's axes, each
    label once. The saved figure's tight bounding box takes the legend in.
    """
    if handles is None or labels is None:
        found: dict[str, Any] = {}
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                found.setdefault(label, handle)
        labels, handles = list(found), list(found.values())
    if not labels:
        raise ValueError("legend_below: the figure has no labelled curve")
    return fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                      ncol=max(1, min(ncol, len(labels))), frameon=False)
