"""What a lease brought back, merged into the repository's journals (``python -m gmp.gpu merge OUT``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .files import checkpoint_unjournalled
from .units import unit_config


def _whole(entries: Sequence[Mapping[str, Any]], epochs: int) -> bool:
    """Whether a network's journal entries (epochs 1, 2, ... in order) are a whole run: all
    ``epochs`` epochs, or every epoch up to one that diverged and only after-divergence ones after it."""
    values = [e["value"] for e in entries]
    if [v.get("epoch") for v in values] != list(range(1, len(values) + 1)):
        return False
    diverged = next((i for i, v in enumerate(values) if v.get("diverged")), None)
    return len(values) == epochs and (diverged is None or all(v.get("after_divergence") for v in values[diverged + 1:]))


def _journal_config(path: Path, chapter: str) -> Any:
    """The config of ``chapter`` that the returned journal ``path`` (``<scale>-<digest>.jsonl``), or
    checkpoint (``<scale>-<digest>.<unit>.pt``), was written for, today's or :func:`~gmp.gpu.units.unit_config`; a
    ValueError when it is neither."""
    from gmp import config

    stem, dot, rest = path.name.partition(".")
    scale, _, digest = stem.partition("-")
    ordinary = rest == "jsonl" or (rest.endswith(".pt") and path.suffix == ".pt")  # no other suffix such as .old
    if scale not in config.SCALES or not digest or not ordinary:
        raise ValueError(f"{path}: not a name that gmp.gpu writes (<scale>-<config digest>.jsonl or "
                         f"<scale>-<config digest>.<unit>.pt, scale one of {', '.join(config.SCALES)}); nothing "
                         "was merged: remove it from the returned folder and merge again")
    today, queued = config.load(chapter, scale), unit_config(chapter, scale)
    if digest not in (today.digest, queued.digest):
        raise ValueError(f"{path} was written for config {digest}, but {chapter}'s {scale} config is now "
                         f"{today.digest}{f' ({queued.digest} with its queued settings)' if queued.digest != today.digest else ''}"
                         f": its units were computed under other settings and cannot join this run")
    return queued if digest == queued.digest else today


def _checkpoint_progress(path: Path) -> int:
    """How far a unit's checkpoint has trained: the epochs of :func:`gmp.minibatch.fit_stack`'s, the steps of
    :func:`gmp.implicit.fit_spec`'s (a unit fits with one of them only, so two of its checkpoints compare)."""
    from gmp.train import load_checkpoint

    state = load_checkpoint(path)
    if not {"epoch", "step"} & set(state):
        raise ValueError(f"checkpoint {path} holds neither an 'epoch' (fit_stack's) nor a 'step' (fit_spec's); it "
                         "was not written by a unit's fit")
    return int(state["epoch"] if "epoch" in state else state["step"])


def _report(path: Path) -> Any:
    """The JSON of ``path`` (``gpu.json`` or ``summary.json`` of a returned folder); a ValueError naming it where it
    is not JSON."""
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is damaged ({type(err).__name__}: {err}), so which device computed the units "
                         "that came back is unknown; nothing was merged. Restore it from the lease's output "
                         "(it is JSON, as python -m gmp.gpu writes it) and merge again") from None


def _check_returned(out: Path) -> None:
    """A ValueError unless ``out`` is a folder that ``python -m gmp.gpu`` wrote and everything in it that would
    hold units lies where :func:`merge` reads it; a warning for each thing that its ``summary.json`` says did
    not come back (``return_problems``, ``left_out``)."""
    if not out.is_dir():
        raise ValueError(f"{out} is {'a file' if out.exists() else 'not there'}: merge takes the folder that came "
                         "back from a lease (the OUT of python -m gmp.gpu, with its gpu.json or summary.json); "
                         "nothing was merged")
    read = set(out.glob("*/_partial/*.jsonl")) | set(out.glob("*/_partial/*.pt"))
    if not (read or (out / "gpu.json").is_file() or (out / "summary.json").is_file()):
        raise ValueError(f"{out} holds no journal, no checkpoint and neither gpu.json nor summary.json, so python -m "
                         "gmp.gpu did not write it (a mistyped path, or a folder inside it?); nothing was merged")
    unread = sorted(path.relative_to(out).as_posix() for path in out.rglob("*")
                    if path.suffix in (".jsonl", ".pt") and path.is_file() and path not in read
                    and "_partial" in path.relative_to(out).parts
                    and not any(part.startswith(".") for part in path.relative_to(out).parts))
    if unread:
        raise ValueError(f"{out} holds journals or checkpoints where merge does not read them: {', '.join(unread)}. "
                         "A journal is <chapter>/_partial/<scale>-<digest>.jsonl, a unit's checkpoint "
                         "<chapter>/_partial/<scale>-<digest>.<unit>.pt; move each there (or remove it) and merge "
                         "again; nothing was merged")
    summary = _report(out / "summary.json") if (out / "summary.json").is_file() else {}
    for key, what in (("return_problems", "did not come back"), ("left_out", "was left out by the command")):
        for problem in (summary.get(key) or []) if isinstance(summary, dict) else []:
            print(f"  warning: {problem} ({what}, summary.json's {key}): its units are not merged", flush=True)


def returned_device(out: Path) -> str:
    """The device that computed what came back in ``out``, as a journal entry records it
    (:func:`gmp.runs.device_name`: ``"cuda (NVIDIA H100 80GB HBM3)"``, ``"cpu"``), read from ``out/gpu.json``
    or, where the command folded that into its summary, ``out/summary.json``'s ``environment``; a ValueError
    when neither holds it."""
    for name, key in (("gpu.json", None), ("summary.json", "environment")):
        if (out / name).is_file():
            environment = _report(out / name)
            environment = environment.get(key) if key else environment
            if isinstance(environment, dict) and environment.get("device"):
                device = str(environment["device"]).split(":")[0]
                return f"{device} ({environment['gpu']})" if environment.get("gpu") else device
    raise ValueError(f"{out} holds neither gpu.json nor a summary.json with the environment that python -m gmp.gpu "
                     "writes first: which device computed its units is unknown, and nothing was merged")


def merge(out: Path, results_root: Path | None = None) -> list[str]:
    """Add the units journalled under ``out/<chapter>/_partial/`` to the journal of the same name in
    ``results_root`` (default: the repository's ``book/_results``) under ``<chapter>/_partial/``.

    For ``lu_real`` only whole networks are added (``_whole``), and a network that already has an
    entry there is left out whole, so that two runs are never spliced into one trajectory; for the
    other chapters each unit is whole by itself and is added unless its key is there already.
    A returned checkpoint of a unit cut short (``out/<chapter>/_partial/<scale>-<digest>.<unit>.pt``) goes to
    where the unit checkpoints in ``results_root`` (``<chapter>/_partial/<scale>-<digest>/<unit>.pt``), where
    the next GPU command (which carries it) or a CPU run resumes the unit, unless the unit is journalled there
    or the checkpoint there has trained as far or further.

    Each unit added from a chapter other than ``lu_real`` carries the device that computed it
    (:func:`returned_device`, its ``device``), which a unit journalled by a CPU run of ``gmp.runs`` lacks; a
    ``lu_real`` entry names it in its value already.

    Everything that came back is checked before anything in ``results_root`` changes: a journal or
    checkpoint of another config, a damaged checkpoint, a name gmp.gpu does not write or units with no record
    of their device raise a ValueError and nothing is merged, and so do a path that is no folder ``python -m
    gmp.gpu`` wrote, a journal or checkpoint where merge does not read it (``<scale>-<digest>.old.jsonl``, a
    checkpoint a folder deeper) and a journal that a run of the chapter is writing (its lock,
    :func:`gmp.runlock.run_lock`, held by the run's pid: merge after it ends). What ``summary.json`` says did not
    come back is warned of. Returns the journal keys added."""
    from gmp import results

    root = results_root if results_root is not None else results.results_root()
    if root is None:
        raise ValueError("no results folder: run from a clone of the book's repository or set GMP_RESULTS")
    from gmp.runlock import run_lock

    _check_returned(out)
    journals = sorted({root / path.parents[1].name / "_partial" / f"{path.name.partition('.')[0]}.jsonl"
                       for pattern in ("*/_partial/*.jsonl", "*/_partial/*.pt") for path in out.glob(pattern)})
    made = sorted({folder for journal in journals for folder in [journal.parent, *journal.parent.parents]
                   if not folder.exists() and root in [folder, *folder.parents]}, key=lambda f: -len(f.parts))
    try:
        with contextlib.ExitStack() as locks:  # one writer per journal: a run of it, or this merge
            for journal in journals:
                locks.enter_context(run_lock(journal))
            return _merge_locked(out, root)
    finally:
        for folder in made:  # what the locks made and nothing filled
            with contextlib.suppress(OSError):
                folder.rmdir()


def _merge_locked(out: Path, root: Path) -> list[str]:
    """:func:`merge` once it holds the lock of every journal it may write (:func:`gmp.runlock.run_lock`)."""
    from gmp import results

    appends: list[tuple[Path, list[dict[str, Any]]]] = []  # (journal in root, entries to add)
    copies: list[tuple[Path, Path, int]] = []  # (returned checkpoint, where it goes, how far it trained)
    for path in sorted(out.glob("*/_partial/*.jsonl")):
        chapter = path.parent.parent.name
        if chapter == "lu_real":
            continue
        _journal_config(path, chapter)
        target = root / chapter / "_partial" / path.name
        present = set(results.journal_units(target))
        entries = results.journal_entries(path)
        for entry in entries:
            if entry["key"] in present:
                print(f"  {chapter} {entry['key']}: already in {target.name}, left out", flush=True)
        lines = [e for e in entries if e["key"] not in present]
        if lines:
            device = returned_device(out)
            appends.append((target, results.with_code([{**e, "device": device} for e in lines], entries)))
    for path in sorted(out.glob("*/_partial/*.pt")):
        chapter = path.parents[1].name
        if chapter == "lu_real" or path.name.startswith("."):
            continue
        _journal_config(path, chapter)
        stem, unit = path.name.split(".", 1)
        try:
            progress = _checkpoint_progress(path)
        except ValueError as err:
            raise ValueError(f"{err}. Nothing was merged: remove {path} from the returned folder (its unit then "
                             "starts afresh, or from the repository's checkpoint) and merge again") from None
        target = root / chapter / "_partial" / stem / unit
        journalled = {**results.journal_units(target.parent.with_suffix(".jsonl")),
                      **results.journal_units(path.with_name(f"{stem}.jsonl"))}
        if not checkpoint_unjournalled(target.stem, journalled):
            print(f"  {chapter} {target.stem}: journalled already, its checkpoint left out", flush=True)
        elif target.is_file() and (kept := _checkpoint_progress(target)) >= progress:
            print(f"  {chapter} {target.stem}: the repository's checkpoint is at epoch or step {kept}, "
                  f"the returned one at {progress}: kept the repository's", flush=True)
        else:
            copies.append((path, target, progress))
    for path in sorted((out / "lu_real" / "_partial").glob("*.jsonl")):
        cfg = _journal_config(path, "lu_real")
        target = root / "lu_real" / "_partial" / path.name
        present = {key.rsplit("/", 1)[0] for key in results.journal_units(target)}
        networks: dict[str, list[dict[str, Any]]] = {}
        for entry in results.journal_entries(path):
            networks.setdefault(entry["key"].rsplit("/", 1)[0], []).append(entry)
        lines = []
        for network, entries in networks.items():
            epochs = int(cfg["epochs"][network.split("/")[0]])
            if network in present:
                print(f"  {network}: already in {target.name}, left out", flush=True)
            elif not _whole(entries, epochs):
                print(f"  {network}: not a whole run ({len(entries)} entries), left out", flush=True)
            else:
                lines += entries
        if lines:
            appends.append((target, lines))
    for source, target, progress in copies:
        results.atomic_write_bytes(target, source.read_bytes())
        print(f"  {target.parents[2].name} {target.stem}: checkpoint at epoch or step {progress} put in {target}",
              flush=True)
    added = []
    for target, lines in appends:
        results.append_journal(target, [json.dumps(e) for e in lines])
        added += [e["key"] for e in lines]
    keep_lease_record(out, root / "lu_real" / "leases")
    return added


def keep_lease_record(out: Path, leases: Path) -> list[Path]:
    """Keep what a lease measured beside the journals: ``out/summary.json`` and ``out/measure.json`` as
    ``leases/<stamp>-summary.json`` and ``<stamp>-measure.json``, the stamp the command's start
    (``gpu.json``'s or the summary's ``environment`` date); a record kept already is left as it is. Returns
    the files written."""
    if not (out / "summary.json").is_file():
        return []
    summary = json.loads((out / "summary.json").read_text())
    environment = summary.get("environment")
    if (out / "gpu.json").is_file():
        environment = json.loads((out / "gpu.json").read_text())
    if not isinstance(environment, dict) or not environment.get("date"):
        print(f"  {out}: neither gpu.json nor summary.json says when the command ran, so its summary was not kept "
              "(the journals were merged)", flush=True)
        return []
    stamp = "".join(ch for ch in str(environment["date"]) if ch.isdigit())
    written = []
    for name in ("summary.json", "measure.json"):
        target = leases / f"{stamp[:8]}-{stamp[8:14]}-{name}"
        if (out / name).is_file() and not target.exists():
            record = json.loads((out / name).read_text())
            if name == "summary.json":
                record.setdefault("environment", environment)
            leases.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(record, indent=1) + "\n")
            written.append(target)
            print(f"  kept {name} as {target}", flush=True)
    return written
