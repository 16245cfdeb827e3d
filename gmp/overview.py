"""What the committed caches say at a glance: the claims ledger's tallies as one picture (the README's), and
what each chapter's paper-scale run cost (the book's page "Cost of each chapter at paper scale").

    python -m gmp.overview                       # writes book/_static/ledger-tallies.png from the caches
    python -m gmp.overview --check               # exit 1 when that picture no longer matches the caches

The picture carries the tallies it draws in its PNG metadata (``TALLIES_KEY``), so a test can tell, without
comparing pixels, whether it still matches the caches.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gmp.results import claims as _claims
from gmp.results import files as _files
from gmp.results.cache import _duration

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


def _units(folder: Path) -> tuple[int, float, dict[str, int]]:
    """How many units a cache keeps, the seconds they record (0 for units that record none) and how many
    each device computed (``"cpu"`` for units that name none: a CPU run of ``gmp.runs`` records no device)."""
    path = folder / "units.jsonl.gz"
    count, seconds, devices = 0, 0.0, {}
    if path.is_file():
        with gzip.open(path, "rt") as lines:
            for line in lines:
                entry = json.loads(line)
                count += 1
                seconds += entry.get("seconds") or 0.0
                device = entry.get("device", "cpu").split(" (")[0]
                devices[device] = devices.get(device, 0) + 1
    return count, seconds, devices


def costs(chapters: list[str] | None = None) -> list[dict[str, Any]]:
    """For each chapter of ``chapters`` (default: every chapter with an experiment module), what its committed
    paper-scale cache records of its cost: the date of the run, the machine its notebook ran on, the notebook's
    wall time, how many units (independent pieces of work journalled one by one) it keeps, on which devices, and
    the seconds those units record. A chapter without a cache gives instead the units an unfinished run with
    today's config has journalled and the seconds they record, and the GPU-hours its experiment module estimates
    from FLOPs where it has such an estimate (``gpu_hours_estimate``)."""
    import importlib

    from gmp import config as _config
    from gmp.results.journal import _journalled

    root = _files.results_root()
    rows = []
    for chapter in chapters or _claims.experiment_chapters():
        folder = root / chapter / "paper" if root else None
        provenance = folder / "provenance.json" if folder else None
        if provenance is None or not provenance.is_file():
            journal = _journalled(chapter, "paper")
            estimate = getattr(importlib.import_module(f"gmp.experiments.{chapter}"), "gpu_hours_estimate", None)
            rows.append({"chapter": chapter, "date": None, "machine": None, "notebook_s": None, "units": len(journal),
                         "unit_s": sum(e.get("seconds") or 0.0 for e in journal), "devices": {},
                         "gpu_hours_estimate": estimate(_config.load(chapter, "paper"))["hours"] if estimate else None})
            continue
        record = json.loads(provenance.read_text())
        count, seconds, devices = _units(folder)
        rows.append({"chapter": chapter, "date": record.get("date"), "machine": record.get("device"),
                     "notebook_s": record.get("wall_time_s"), "units": count, "unit_s": seconds,
                     "devices": devices, "gpu_hours_estimate": None})
    return rows


def costs_table(chapters: list[str] | None = None):
    """:func:`costs` as the table of the book's page: one row per chapter, in words."""
    import pandas as pd

    rows = []
    for row in costs(chapters):
        if row["date"] is None:
            journalled = (f"{row['units']} journalled by an unfinished run" if row["units"] else "")
            estimate = (f"estimate from FLOPs: {row['gpu_hours_estimate']:.0f} GPU-hours"
                        if row["gpu_hours_estimate"] is not None else "")
            rows.append({"Chapter": row["chapter"], "Paper-scale run": "not yet run", "Machine": "", "Notebook": "",
                         "Units": journalled, "Time the units record": (
                             _duration(row["unit_s"]) if row["unit_s"] else estimate)})
            continue
        devices = ", ".join(f"{n} on {d}" for d, n in sorted(row["devices"].items()))
        rows.append({"Chapter": row["chapter"], "Paper-scale run": row["date"], "Machine": row["machine"],
                     "Notebook": _duration(row["notebook_s"]),
                     "Units": f"{row['units']} ({devices})" if row["units"] else "none: the notebook computes it all",
                     "Time the units record": _duration(row["unit_s"]) if row["unit_s"] else (
                         "not recorded (carried from an earlier run)" if row["units"] else "")})
    return pd.DataFrame(rows).set_index("Chapter")


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
