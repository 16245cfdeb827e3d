"""What a chapter's paper-scale run costs, read from the results cache (the page ``book/running/cluster.md``).

A chapter that splits into units keeps each unit's measured ``seconds`` and the device that computed it in its
cache (``units.jsonl.gz``) or, while unfinished, in its journal. From them :func:`unit_costs` sums the compute a
run takes and finds its longest unit: on one machine of ``C`` cores a run takes about the sum over ``C``
(``--jobs C``); on a cluster with a task per unit, about the longest unit. Nothing here computes a result.
"""

from __future__ import annotations

import collections
import gzip
import json
from typing import Any

from gmp import config as _config
from gmp import results as _results


def _entries(chapter: str, scale: str) -> tuple[list[dict[str, Any]], str]:
    """The unit entries of ``chapter`` at ``scale``: its cache's, else those of its journals (every config), and
    which it was."""
    root = _results.results_root()
    if root is None:
        return [], "none"
    cache = root / chapter / scale / "units.jsonl.gz"
    if cache.is_file():
        lines = gzip.decompress(cache.read_bytes()).decode().splitlines()
        return [json.loads(line) for line in lines if line], "cache"
    journals = sorted((root / chapter / "_partial").glob(f"{scale}-*.jsonl"))
    return [entry for path in journals for entry in _results.journal_entries(path)], "journal" if journals else "none"


def unit_costs(chapter: str, scale: str = "paper") -> dict[str, Any]:
    """What the units of ``chapter`` at ``scale`` cost where they were computed: ``units`` (in today's config),
    ``measured`` (units with a recorded time), ``seconds`` (their sum), ``longest_s``, ``devices`` (how many each
    device computed; ``cpu`` where an entry names none, as a CPU run of ``gmp.runs`` journals it), ``threads`` (the
    thread counts they ran with) and ``source`` (``cache``, ``journal`` or ``none``). Today's units of a chapter
    with no measured time get ``seconds`` from the mean measured unit times their number, as ``estimated_s``."""
    entries, source = _entries(chapter, scale)
    measured = [e for e in {e["key"]: e for e in entries}.values() if e.get("seconds")]
    units_fn = getattr(_config.experiment(chapter), "units", None)
    total = None
    if units_fn is not None:
        from gmp import cluster

        total = len(cluster.unit_keys(chapter, _config.load(chapter, scale), 0))
    seconds = sum(e["seconds"] for e in measured)
    out = {"units": total, "measured": len(measured), "seconds": seconds,
           "longest_s": max((e["seconds"] for e in measured), default=None),
           "devices": dict(collections.Counter(e.get("device", "cpu") for e in measured)),
           "threads": sorted({e.get("threads") for e in measured if e.get("threads")}), "source": source}
    if measured and total and len(measured) < total:
        out["estimated_s"] = seconds / len(measured) * total
    return out


def cost_table(chapters: list[str] | None = None, scale: str = "paper") -> list[dict[str, Any]]:
    """One row of :func:`unit_costs` per chapter that splits into units (all of them by default), in the book's
    order, with ``hours`` (measured or estimated compute), ``longest_min`` and ``device``."""
    if chapters is None:
        chapters = [c for c in _results.experiment_chapters() if hasattr(_config.experiment(c), "units")]
    rows = []
    for chapter in chapters:
        cost = unit_costs(chapter, scale)
        hours = cost.get("estimated_s", cost["seconds"]) / 3600
        rows.append({"chapter": chapter, **cost, "hours": hours,
                     "longest_min": None if cost["longest_s"] is None else cost["longest_s"] / 60,
                     "device": ", ".join(sorted(cost["devices"])) or "not measured"})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`cost_table` as a Markdown table: units, the device that measured them, their compute in
    hours (estimated from the measured ones where some lack a time) and the longest unit in minutes."""
    lines = ["| chapter | units | measured on | compute (h) | longest unit (min) |", "|---|---:|---|---:|---:|"]
    for row in rows:
        if not row["measured"]:
            lines.append(f"| {row['chapter']} | {row['units']} | not yet measured | | |")
            continue
        estimated = f" (est. from {row['measured']})" if "estimated_s" in row else ""
        lines.append(f"| {row['chapter']} | {row['units']} | {row['device']} | {row['hours']:.2f}{estimated} | "
                     f"{row['longest_min']:.1f} |")
    return "\n".join(lines)
