"""What the committed caches say at a glance: the claims ledger's tallies as one picture (the README's). What
each chapter's paper-scale run cost is :mod:`gmp.costs`.

    python -m gmp.overview                       # writes book/_static/ledger-tallies.png from the caches
    python -m gmp.overview --check               # exit 1 when that picture no longer matches the caches

The picture carries the tallies it draws in its PNG metadata (``TALLIES_KEY``), so a test can tell, without
comparing pixels, whether it still matches the caches.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from gmp.results import claims as _claims
from gmp.results import files as _files

PICTURE = Path("book/_static/ledger-tallies.png")
"""Where the picture of the tallies lives in the repository (the README shows it)."""
TALLIES_KEY = "gmp-ledger-tallies"
"""The PNG text chunk that holds the tallies the picture draws, as JSON."""

ORDER = (_claims.REPRODUCED, _claims.PARTLY, _claims.NOT_REPRODUCED, _claims.INCONCLUSIVE, _claims.VERIFIED,
         _claims.FAILS, _claims.NOT_RUN, _claims.STALE, _claims.CORRUPT)
"""The tally categories in the order the picture draws them; a provisional verdict counts with its verdict."""
COLOURS = {_claims.REPRODUCED: "#1b7f3b", _claims.PARTLY: "#e0a100", _claims.NOT_REPRODUCED: "#b3261e",
           _claims.INCONCLUSIVE: "#7e57c2", _claims.VERIFIED: "#5fb37a", _claims.FAILS: "#7a1a14",
           _claims.NOT_RUN: "#bdc1c6", _claims.STALE: "#e8eaed", _claims.CORRUPT: "#000000"}
"""A colour per category (those of ``book/_static/gmp.css`` where it has one)."""


def tallies() -> dict[str, dict[str, int]]:
    """Per paper (``"Chen & Ge"``...), how many of the papers' own claims (``source="paper"``, findings and
    identities together) the ledger judges in each category of :data:`ORDER`, from the paper-scale caches.
    A provisional verdict (judged on an unfinished run) counts with its verdict; the ledger page tells them apart."""
    from gmp.results.verdicts import PROVISIONAL, ledger_rows

    counts: dict[str, dict[str, int]] = {}
    for row in ledger_rows():
        if row["source"] != _claims.PAPER:
            continue
        category = row["category"].removesuffix(f" ({PROVISIONAL})")
        paper = counts.setdefault(_claims.PAPERS[row["paper"]], dict.fromkeys(ORDER, 0))
        paper[category] += 1
    return counts


def _label(category: str) -> str:
    return category.split(":")[0]


def draw(counts: Mapping[str, Mapping[str, int]], path: Path) -> None:
    """Draw ``counts`` (:func:`tallies`) as one horizontal bar per paper, a segment per category, into the PNG
    ``path``, with the counts in its metadata under :data:`TALLIES_KEY`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from gmp import style

    papers = list(counts)
    used = [c for c in ORDER if any(counts[p][c] for p in papers)]
    fig, ax = style.subplots(figsize=(8, 0.45 * len(papers) + 0.8), dpi=100)
    for row, paper in enumerate(papers):
        left = 0
        for category in used:
            n = counts[paper][category]
            if n:
                ax.barh(row, n, left=left, color=COLOURS[category], edgecolor="white", height=0.62)
                dark = category not in (_claims.NOT_RUN, _claims.STALE, _claims.PARTLY)
                ax.text(left + n / 2, row, str(n), ha="center", va="center", fontsize=9,
                        color="white" if dark else "black")
                left += n
        ax.text(left + 0.4, row, f"{left} claims", va="center", fontsize=9, color="#3c4043")
    ax.set_yticks(range(len(papers)), papers)
    ax.invert_yaxis()
    ax.set_xlim(0, max(sum(counts[p].values()) for p in papers) * 1.18)
    ax.xaxis.set_visible(False)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=COLOURS[c], edgecolor="#9aa0a6") for c in used]
    style.legend_below(fig, handles, [_label(c) for c in used], ncol=(len(used) + 1) // 2)
    ax.set_title("The papers' claims, judged on our paper-scale runs (claims ledger)", loc="left")
    fig.savefig(path, bbox_inches="tight", metadata={TALLIES_KEY: json.dumps(counts, sort_keys=True), "Software": None})
    plt.close(fig)


def drawn(path: Path) -> dict[str, dict[str, int]] | None:
    """The tallies a picture written by :func:`draw` holds in its metadata, or None when it holds none."""
    from PIL import Image

    with Image.open(path) as image:
        text = image.info.get(TALLIES_KEY)
    return None if text is None else json.loads(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.overview", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, help=f"where to write the picture (default: {PICTURE} of the "
                        "repository)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the picture's tallies "
                        "differ from the caches'")
    args = parser.parse_args(argv)
    root = _files.repository_root()
    if args.path is None and root is None:
        parser.error("run it from inside the book's repository, or name the picture's path")
    path = args.path or root / PICTURE
    counts = tallies()
    if args.check:
        if not path.is_file():
            print(f"{path} is missing: run python -m gmp.overview", file=sys.stderr)
            return 1
        if drawn(path) != counts:
            print(f"{path} no longer matches the caches (it draws {drawn(path)}, the ledger counts {counts}): "
                  "run python -m gmp.overview and commit the picture", file=sys.stderr)
            return 1
        print(f"{path} matches the caches")
        return 0
    draw(counts, path)
    print(f"wrote {path}: {json.dumps(counts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
