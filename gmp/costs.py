"""What a chapter's paper-scale run costs, read from the results cache (the book's pages ``book/running/costs.md``,
:func:`costs_table`, and ``book/running/cluster.md``, :func:`cost_table`).

A chapter that splits into units keeps each unit's measured ``seconds`` and the device that computed it in its
cache (``units.jsonl.gz``) or, while unfinished, in its journal. From them :func:`unit_costs` sums the compute a
run takes and finds its longest unit: on one machine of ``C`` cores a run takes about the sum over ``C``
(``--jobs C``); on a cluster with a task per unit, about the longest unit. Nothing here computes a result.
"""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path
from typing import Any

from gmp import config as _config
from gmp import results as _results
from gmp.results.cache import _duration


def _entries(chapter: str, scale: str) -> tuple[list[dict[str, Any]], str]:
    """The unit entries of ``chapter`` at ``scale``: its cache's, else those of its journals (every config), and
    which it was."""
    root = _results.results_root()
    if root is None:
        return [], "none"
    cache = root / chapter / scale / "units.jsonl.gz"
    if cache.is_file():
        return _cached_entries(cache), "cache"
    journals = sorted((root / chapter / "_partial").glob(f"{scale}-*.jsonl"))
    return [entry for path in journals for entry in _results.journal_entries(path)], "journal" if journals else "none"


def _cached_entries(path: Path) -> list[dict[str, Any]]:
    """The unit entries of a cache's ``units.jsonl.gz``."""
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line]


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


def _units(folder: Path) -> tuple[int, float, dict[str, int]]:
    """How many units a cache keeps, the seconds they record (0 for units that record none) and how many
    each device computed (``"cpu"`` for units that name none: a CPU run of ``gmp.runs`` records no device)."""
    path = folder / "units.jsonl.gz"
    entries = _cached_entries(path) if path.is_file() else []
    devices = collections.Counter(entry.get("device", "cpu").split(" (")[0] for entry in entries)
    return len(entries), sum(entry.get("seconds") or 0.0 for entry in entries), dict(devices)


def costs(chapters: list[str] | None = None) -> list[dict[str, Any]]:
    """For each chapter of ``chapters`` (default: every chapter with an experiment module), what its committed
    paper-scale cache records of its cost: the date of the run, the machine its notebook ran on, the notebook's
    wall time, how many units (independent pieces of work journalled one by one) it keeps, on which devices, and
    the seconds those units record. A chapter without a cache gives instead the units an unfinished run with
    today's config has journalled and the seconds they record, and the GPU-hours its experiment module estimates
    from FLOPs where it has such an estimate (``gpu_hours_estimate``)."""
    import importlib

    from gmp.results.journal import _journalled

    root = _results.results_root()
    rows = []
    for chapter in chapters or _results.experiment_chapters():
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
