"""The units of Part III's paper-scale runs that the repository lacks, computed with the time the
``lu_real`` group leaves: first as one stacked fit, then unit by unit (step 4 of the command, its second job)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .files import ROOT, keep_returned, write_json


UNIT_CHAPTERS: tuple[str, ...] = ("sbsnn_gap", "sbsnn_fitting", "sbsnn_encoders", "sbsnn_author", "sbsnn_author_figs")
"""The chapters whose missing paper-scale units the second job computes, in this order. First the full-batch
fits (``gmp.implicit.fit_spec``) of the three chapters whose caches record no code fingerprint, unit by unit,
then :data:`STACKED_CHAPTERS`. The full-batch fits go first: they restore pages that exist, each of their steps
is one large product per layer (the 65,536 pixels of a 256 x 256 image), and each unit is short, so that a lease
cut short loses little; the units that :data:`STACKED_CHAPTERS` still lack are new claims, trained in
mini-batches of 32 whose small steps keep a GPU busier with launches than with arithmetic (not yet measured on
one), and a stacked queue runs only when its probe predicts that it ends in time."""

STACKED_CHAPTERS: tuple[str, ...] = ("sbsnn_author", "sbsnn_author_figs")
"""The chapters of :data:`UNIT_CHAPTERS` whose units may go to the stacked fit (:func:`compute_units_stacked`):
those whose fits are ``fit_stack`` fits. The others fit with ``fit_spec``, which the stacked fit's planning
cannot record (calling one of their units would train it, with no deadline): they run only unit by unit, in
the child process that the deadline stops (:func:`units_job`)."""


def unit_config(chapter: str, scale: str):
    """The config whose units the second job computes for ``chapter`` at ``scale``: today's, with the settings
    that the chapter's ``QUEUED`` (a dict by scale, when it has one) queues for a GPU and has not yet put into
    its ``CONFIG``. Those may only add settings, so that the units of today's config are units of this one."""
    from gmp import config

    cfg = config.load(chapter, scale)
    queued = getattr(config.experiment(chapter), "QUEUED", {}).get(scale)
    if not queued:
        return cfg
    if clash := sorted(set(queued) & set(cfg)):
        raise ValueError(f"{chapter}.QUEUED[{scale!r}] sets {clash}, which its CONFIG has already: queued settings "
                         f"may only add to the config; remove them from QUEUED")
    return config.Config(chapter, scale, {**cfg.as_dict(), **queued})


def unit_keys(chapter: str, cfg: Any, seed: int = 0) -> list[str]:
    """The keys of ``chapter``'s units under ``cfg``, in order: its ``units_keys``, or for a chapter without one
    the keys of its ``units`` (which builds a function per unit and computes none; the full-batch chapters' read
    their image, a fraction of a second), given a :class:`gmp.results.Store` outside any run (it writes nothing)."""
    import importlib

    from gmp import results

    experiment = importlib.import_module(f"gmp.experiments.{chapter}")
    if hasattr(experiment, "units_keys"):
        return list(experiment.units_keys(cfg, seed))
    return list(_with_staging(None, lambda: experiment.units(cfg, results.Store(chapter, cfg), seed, "cpu")))


def _current(chapter: str, scale: str, folder: Path) -> bool:
    """Whether the ``scale`` cache of ``chapter`` in ``folder`` is current, read through the result its first claim
    judges, or for a chapter without claims (``sbsnn_gap``) through the first of the cache's JSON payloads."""
    from gmp import results

    claims = results._claims_of(chapter)
    name = claims[0].result if claims else next(
        (path.stem for path in sorted(folder.glob("*.json")) if path.name != "provenance.json"), None)
    return name is not None and results.cached(chapter, name, scale).current


def missing_units(chapter: str, scale: str, seed: int = 0) -> list[str]:
    """The keys of ``chapter``'s units at ``scale`` (:func:`unit_keys` under :func:`unit_config`, in order)
    that none of the repository's journals of that config and of today's config, nor the chapter's current
    cache (``units.jsonl.gz``), holds: a unit journalled on the CPU under today's config and not yet assembled
    into the cache is not computed again."""
    import gzip

    from gmp import config, results

    cfg = unit_config(chapter, scale)
    have = {key for digest in {cfg.digest, config.load(chapter, scale).digest}
            for key in results.journal_units(results.journal_path(chapter, scale, digest))}
    root = results.results_root()
    cache = root / chapter / scale / "units.jsonl.gz" if root else None
    if cache is not None and cache.is_file() and _current(chapter, scale, cache.parent):
        have |= {json.loads(line)["key"] for line in gzip.decompress(cache.read_bytes()).decode().splitlines() if line}
    return [key for key in unit_keys(chapter, cfg, seed) if key not in have]


def compute_units(out: Path, chapter: str, scale: str, device: str, deadline: float, seed: int = 0) -> dict[str, Any]:
    """Compute ``chapter``'s :func:`missing_units` (under :func:`unit_config`) that ``out``'s journal lacks (the
    stacked fit's, :func:`compute_units_stacked`, are there already) one at a time on ``device`` until ``deadline``
    (monotonic s), each journalled whole under ``out/<chapter>/_partial/`` as it finishes, with what was done
    in ``out/<chapter>/units.json`` after each unit. Meant for a child process that the caller stops at the
    deadline: a unit cut short is never journalled in part, but its last checkpoint (the chapter's
    ``store.scratch``, written every few epochs) stays under ``out/<chapter>/_partial/<scale>-<digest>/``
    (the caller moves it to ``<scale>-<digest>.<unit>.pt`` beside the journal, to come back), and a unit whose
    checkpoint the repository holds there (:func:`~gmp.gpu.returned.merge` puts a returned one) resumes from it."""
    import importlib

    from gmp import results

    experiment = importlib.import_module(f"gmp.experiments.{chapter}")
    cfg = unit_config(chapter, scale)
    keys = missing_units(chapter, scale, seed)
    summary: dict[str, Any] = {"scale": scale, "config_digest": cfg.digest, "pending": keys, "done": {}}
    staging = out / chapter / f".staging-{scale}"
    report = out / chapter / "units.json"
    previous = os.environ.get(results.STAGING_ENV)
    os.environ[results.STAGING_ENV] = str(staging)
    root = results.results_root()
    try:
        store = results.Store(chapter, cfg)
        keys = summary["pending"] = [key for key in keys if store.journalled(key) is None]  # not the stacked fit's
        units = experiment.units(cfg, store, seed, device)
        write_json(report, summary)
        for key in keys:
            if time.monotonic() > deadline:
                summary["stopped"] = f"{key}: not started, the deadline has passed"
                break
            scratch = store.scratch(key)
            saved = root / chapter / scratch.relative_to(out / chapter) if root is not None else None
            if saved is not None and saved.is_file() and not scratch.exists():
                scratch.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(saved, scratch)
                summary.setdefault("resumed", []).append(key)
                print(f"  {chapter} {key}: resumed from {saved}", flush=True)
            summary["started"] = key
            write_json(report, summary)
            started = time.monotonic()
            store.memo(key, units[key])
            summary["done"][key] = round(time.monotonic() - started, 1)
            write_json(report, summary)
            print(f"  {chapter} {key}: {summary['done'][key]:.0f} s", flush=True)
    finally:
        if previous is None:
            os.environ.pop(results.STAGING_ENV, None)
        else:
            os.environ[results.STAGING_ENV] = previous
        shutil.rmtree(staging, ignore_errors=True)  # at most 8 files come back from a GPU machine
    write_json(report, summary)
    return summary


STACKED_REPORT = "units-stacked.json"
"""The file under ``OUT`` where the stacked fit's child process reports (:func:`stacked_units_job` reads it into the
summary and removes it: at most 8 files come back)."""


def _with_staging(staging: Path | None, make: Any) -> Any:
    """``make()`` with :data:`gmp.results.STAGING_ENV` set to ``staging``, or unset where it is None (a
    :class:`gmp.results.Store` reads it)."""
    from gmp import results

    previous = os.environ.get(results.STAGING_ENV)
    if staging is None:
        os.environ.pop(results.STAGING_ENV, None)
    else:
        os.environ[results.STAGING_ENV] = str(staging)
    try:
        return make()
    finally:
        if previous is None:
            os.environ.pop(results.STAGING_ENV, None)
        else:
            os.environ[results.STAGING_ENV] = previous


def compute_units_stacked(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int = 0,
                          probe_only: bool = False) -> dict[str, Any]:
    """Train the missing units of chapters as one stacked fit where their fits allow it; what was done.

    The units are ``chapters``' :func:`missing_units` (chapters of :data:`STACKED_CHAPTERS` only: a ValueError
    names any other), the stacked fit :mod:`gmp.minibatch_queue`'s, on
    ``device`` until ``deadline`` (monotonic s); the report also goes to ``out/`` :data:`STACKED_REPORT` as it
    goes.

    Each unit is called once with its ``fit_stack`` recorded, not run (:func:`gmp.minibatch_queue.planned`, on the
    module that defines the chapter's ``units``: a submodule where the chapter's experiment is a package); a
    unit that fits otherwise is left to :func:`compute_units` (``not_stacked``, with why). The planned fits
    split into queues of one image and protocol (:func:`gmp.minibatch_queue.queues`); each queue's step is
    probed on a throw-away stack (a few updates, captured as a CUDA graph on CUDA), and the queue trains only
    when the probe predicts that all its epochs end before the deadline. A unit is journalled whole under
    ``out/<chapter>/_partial/`` as soon as its fits have ended, by its own code given their curves
    (:func:`gmp.minibatch_queue.replayed`), exactly as :func:`compute_units` would journal it; its seconds are
    its networks' share of the stack's time. ``probe_only`` stops after the probes (their prediction reported)."""
    import importlib

    from gmp import minibatch_queue as mq
    from gmp import results

    if others := [chapter for chapter in chapters if chapter not in STACKED_CHAPTERS]:
        raise ValueError(f"{', '.join(others)}: not among gmp.gpu.STACKED_CHAPTERS ({', '.join(STACKED_CHAPTERS)}); "
                         "its units fit with fit_spec, which the stacked fit cannot plan: run them unit by unit "
                         "(compute_units)")
    report = out / STACKED_REPORT
    summary: dict[str, Any] = {"scale": scale, "device": device, "not_stacked": {}, "queues": [], "done": {}}
    planned: list[tuple[str, str, list[Any]]] = []  # (chapter, key, its fits)
    stores, unit_fns, modules = {}, {}, {}
    for chapter in chapters:
        experiment = importlib.import_module(f"gmp.experiments.{chapter}")
        cfg = unit_config(chapter, scale)
        store = _with_staging(out / chapter / f".staging-{scale}", lambda: results.Store(chapter, cfg))
        stores[chapter], modules[chapter] = store, sys.modules[experiment.units.__module__]
        unit_fns[chapter] = experiment.units(cfg, store, seed, device)
        for key in missing_units(chapter, scale, seed):
            if store.journalled(key) is not None:
                continue
            try:
                with mq.planned(modules[chapter]) as jobs:
                    unit_fns[chapter][key]()
            except mq.NotStackable as err:
                summary["not_stacked"][f"{chapter}/{key}"] = str(err)
                continue
            planned.append((chapter, key, list(jobs)))
    jobs = [job for _, _, fits in planned for job in fits]
    owner = [n for n, (_, _, fits) in enumerate(planned) for _ in fits]  # the unit of each job
    summary["units"] = [f"{chapter}/{key}" for chapter, key, _ in planned]
    summary["networks"] = sum(len(job.seeds) for job in jobs)
    write_json(report, summary)
    curves: dict[int, list[Any]] = {}

    def journal(n: int) -> None:
        chapter, key, fits = planned[n]
        first = next(i for i, o in enumerate(owner) if o == n)
        own = [curves[first + i] for i in range(len(fits))]
        with mq.replayed(modules[chapter], fits, own):
            value = unit_fns[chapter][key]()
        seconds = sum(float(fit.seconds[-1]) for fits_curves in own for fit in fits_curves if len(fit.seconds))
        _with_staging(out / chapter / f".staging-{scale}", lambda: stores[chapter].record({key: (value, seconds)}))
        summary["done"][f"{chapter}/{key}"] = round(seconds, 1)
        write_json(report, summary)
        print(f"  stacked {chapter} {key}: journalled", flush=True)

    for queue in mq.queues(jobs):
        units = sorted({owner[i] for i in queue})
        if any(owner[i] in units for i in set(range(len(jobs))) - set(queue)):
            for n in units:  # a unit whose fits fall in two queues: left to the unit-by-unit path
                summary["not_stacked"][summary["units"][n]] = "its fits need more than one queue"
            continue
        entry: dict[str, Any] = {"units": [summary["units"][n] for n in units],
                                 "networks": sum(len(jobs[i].seeds) for i in queue)}
        summary["queues"].append(entry)
        notes: list[str] = []
        try:
            probed = mq.probe([jobs[i] for i in queue], device, notes=notes)
            entry.update(probe_mode=probed["mode"], probe_ms_per_step=round(probed["ms_per_step"], 4),
                         probe_s_per_epoch_besides_updates=round(probed["s_per_epoch_besides_updates"], 3),
                         groups=probed["groups"],
                         predicted_minutes=float(f"{probed['predicted_minutes']:.4g}"))
            left = (deadline - time.monotonic()) / 60
            entry["minutes_left"] = round(left, 2)
            print(f"  stacked queue of {entry['networks']} networks ({len(units)} units, {probed['mode']}): "
                  f"{probed['ms_per_step']:.3f} ms per "
                  f"step, predicted {entry['predicted_minutes']:.1f} min, {left:.1f} min left", flush=True)
            if probe_only:
                entry["status"] = "probed only"
                continue
            if entry["predicted_minutes"] * 1.1 > left:
                entry["status"] = "not run: the probe predicts it ends past the deadline (its units: unit by unit)"
                continue
            started = time.monotonic()
            done = {n: 0 for n in units}
            needed = {n: sum(owner[i] == n for i in queue) for n in units}

            def ended(j: int, fits: list[Any]) -> None:
                curves[queue[j]] = fits
                done[owner[queue[j]]] += 1
                if done[owner[queue[j]]] == needed[owner[queue[j]]]:
                    journal(owner[queue[j]])

            mq.fit_jobs([jobs[i] for i in queue], device, probed["mode"], deadline=deadline, on_end=ended,
                        notes=notes)
            entry.update(status="trained", minutes=round((time.monotonic() - started) / 60, 2))
        except Exception as err:
            entry["status"] = (f"failed (the units it had not journalled go unit by unit): {type(err).__name__}: "
                               f"{err}")[:1500]
            print(f"  stacked queue: {entry['status']}", flush=True)
        finally:
            entry["notes"] = notes
            write_json(report, summary)
    return summary


def stacked_units_job(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int,
                      probe_only: bool = False) -> dict[str, Any]:
    """:func:`compute_units_stacked` in a child process stopped at ``deadline``; its report (what it did, or how it
    failed), for the summary. What it has not journalled is left to ``units_job`` (the unit-by-unit path)."""
    seconds = deadline - time.monotonic()
    if seconds < 60:
        return {"status": f"{max(seconds, 0):.0f} s left: not started"}
    report = out / STACKED_REPORT
    command = [sys.executable, "-m", "gmp.gpu", "stacked", str(out), *chapters, "--scale", scale, "--device", device,
               "--seconds", str(seconds), "--seed", str(seed), *(["--probe-only"] if probe_only else [])]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 10, cwd=ROOT)
        done: dict[str, Any] = {"returncode": child.returncode, "log": (child.stdout + child.stderr)[-2000:]}
    except subprocess.TimeoutExpired as stopped:
        log = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                      for part in (stopped.stdout or "", stopped.stderr or ""))
        done = {"status": "stopped at the deadline", "log": log[-2000:]}
    if report.is_file():
        done.update(json.loads(report.read_text()))
        report.unlink()
    for chapter in chapters:
        keep_returned(out / chapter)
    return done


def units_job(out: Path, chapters: Sequence[str], scale: str, device: str, deadline: float, seed: int) -> dict[str, Any]:
    """:func:`compute_units` of each chapter in a child process stopped at ``deadline``; what each did."""
    done: dict[str, Any] = {}
    for chapter in chapters:
        seconds = deadline - time.monotonic()
        if seconds < 60:
            done[chapter] = {"status": f"{max(seconds, 0):.0f} s left: not started"}
            continue
        report = out / chapter / "units.json"
        command = [sys.executable, "-m", "gmp.gpu", "units", str(out), chapter, "--scale", scale, "--device", device,
                   "--seconds", str(seconds), "--seed", str(seed)]
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 10, cwd=ROOT)
            done[chapter] = {"returncode": child.returncode, "log": (child.stdout + child.stderr)[-2000:]}
        except subprocess.TimeoutExpired as stopped:
            log = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                          for part in (stopped.stdout or "", stopped.stderr or ""))
            done[chapter] = {"status": "stopped at the deadline", "log": log[-2000:]}
        if report.is_file():
            done[chapter].update(json.loads(report.read_text()))
        keep_returned(out / chapter)
    return done
