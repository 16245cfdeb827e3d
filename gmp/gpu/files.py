"""The files of the GPU command: the repository it runs from, what it writes under ``OUT``, and what of
``OUT`` comes back from a GPU machine (at most :data:`RETURN_FILES` files of :data:`RETURN_BYTES`, at most
:data:`RETURN_DEPTH` folders deep)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
"""The repository the command runs from (the chapters' notebooks, the tests, the package ``gmp``)."""


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` (atomically; what JSON cannot hold, as its ``str``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def append_line(path: Path, obj: Any) -> None:
    """Append ``obj`` as one JSON line to ``path``, on disk before this returns (a lease may end at any time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(obj, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


RETURN_FILES = 8
"""The most files that come back from a GPU machine's ``OUT`` (:func:`return_problems`)."""
RETURN_BYTES = 16 * 2 ** 20
"""The largest file that comes back from a GPU machine's ``OUT``, in bytes (16 MiB)."""
RETURN_DEPTH = 2
"""The most folders below ``OUT`` that a file coming back from a GPU machine may lie in; every name on its
path is made of letters, digits, ``.``, ``_`` and ``-`` only."""


def return_problems(out: Path) -> list[str]:
    """What under ``out`` would not come back from a GPU machine (:data:`RETURN_FILES`), one line each;
    empty when everything would."""
    paths = sorted(path for path in out.rglob("*") if path.is_file() or path.is_symlink())
    problems = [f"{len(paths)} files, more than {RETURN_FILES}"] if len(paths) > RETURN_FILES else []
    for path in paths:
        name = path.relative_to(out).as_posix()
        if path.is_symlink():
            problems.append(f"{name}: a link, not a plain file")
        elif path.stat().st_size > RETURN_BYTES:
            problems.append(f"{name}: {path.stat().st_size:,} bytes, more than {RETURN_BYTES // 2 ** 20} MiB")
        if name.count("/") > RETURN_DEPTH:
            problems.append(f"{name}: {name.count('/')} folders below OUT, more than {RETURN_DEPTH}")
        if not all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in name.split("/")):
            problems.append(f"{name}: a name with characters other than letters, digits, '.', '_' and '-'")
    return problems


FOLDED = {"smoke.jsonl": "smoke_log", "gpu.json": "environment"}
"""The reports under ``OUT`` that ``summary.json`` can hold, each with its key there. They are written as the
command goes (a lease may end at any time), and folded into the summary, in this order, where ``OUT`` would
otherwise hold more than :data:`RETURN_FILES` files (:func:`within_return_limits`); ``gpu.json`` is the summary's
``environment``."""


def within_return_limits(out: Path, summary: dict[str, Any]) -> list[str]:
    """Keep ``out`` within what comes back (the journals first), ``summary`` being what ``out/summary.json``
    will hold: remove the returned checkpoints (``*/_partial/*.pt``) over :data:`RETURN_BYTES`; then, while
    ``out`` would hold more than :data:`RETURN_FILES` files with the summary, fold the reports of :data:`FOLDED`
    into ``summary`` (the folded ones named in its ``folded``), then remove the other checkpoints, last by name
    first (their units start again from the start). Returns what was removed and not folded, and why."""
    removed = []
    checkpoints = sorted(out.glob("*/_partial/*.pt"))
    for path in list(checkpoints):
        if path.stat().st_size > RETURN_BYTES:
            checkpoints.remove(path)
            path.unlink()
            removed.append(f"{path.relative_to(out)}: over {RETURN_BYTES // 2 ** 20} MiB")

    def over() -> bool:
        return len({path for path in out.rglob("*") if path.is_file()} | {out / "summary.json"}) > RETURN_FILES

    for name, key in FOLDED.items():
        if over() and (out / name).is_file():
            text = (out / name).read_text()
            summary[key] = [json.loads(line) for line in text.splitlines() if line] if name.endswith(".jsonl") \
                else json.loads(text)
            summary.setdefault("folded", {})[name] = key
            (out / name).unlink()
            print(f"  folded {name} into summary.json's {key} (at most {RETURN_FILES} files come back)", flush=True)
    while checkpoints and over():
        path = checkpoints.pop()
        path.unlink()
        removed.append(f"{path.relative_to(out)}: more than {RETURN_FILES} files")
    for note in removed:
        print(f"  removed {note} (it would not come back)", flush=True)
    return removed


def _returned_checkpoint(journal_stem: str, scratch_name: str) -> str:
    """The name under ``OUT/<chapter>/_partial/`` of the checkpoint ``<journal_stem>/<scratch_name>`` (where
    the unit checkpoints, ``Store.scratch``): ``<journal_stem>.<scratch_name>``, one folder less deep, so that
    it comes back (:data:`RETURN_DEPTH`)."""
    return f"{journal_stem}.{scratch_name}"


def scratch_stem(key: str) -> str:
    """The name, without ``.pt``, of the file that :meth:`gmp.results.Store.scratch` gives the unit ``key``: its
    characters other than letters, digits, ``-``, ``_`` and ``.`` become ``_`` (``fig6-sin/nerf-0`` checkpoints
    in ``fig6-sin_nerf-0.pt``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def checkpoint_unjournalled(stem: str, journalled: Mapping[str, Any]) -> bool:
    """Whether a unit's checkpoint (named ``stem`` plus ``.pt`` by ``Store.scratch`` after its key, or after
    ``<key>-<part>`` for a unit of several fits: :func:`scratch_stem`) belongs to no unit of ``journalled``."""
    return not any(stem == name or stem.startswith(f"{name}-") for name in map(scratch_stem, journalled))


def keep_returned(folder: Path) -> None:
    """Remove from ``folder`` all but its journals (``_partial/*.jsonl``) and the checkpoints of a unit cut
    short (``_partial/<scale>-<digest>/<unit>.pt``, whose unit the journal beside it lacks), which move to
    ``_partial/<scale>-<digest>.<unit>.pt`` (:data:`RETURN_DEPTH`): a child stopped at the deadline leaves
    its bookkeeping, locks and the checkpoints of finished units behind, and at most 8 files come back from
    a GPU machine (one unit at a time runs per chapter)."""
    from gmp import results

    if not folder.is_dir():
        return
    partial = folder / "_partial"
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
            continue
        if path.parent == partial and path.suffix in (".jsonl", ".pt") and not path.name.startswith("."):
            continue  # a journal, or a checkpoint moved here already
        if path.parent.parent == partial and path.suffix == ".pt" and not path.name.startswith(".") and \
                checkpoint_unjournalled(path.stem, results.journal_units(partial / f"{path.parent.name}.jsonl")):
            os.replace(path, partial / _returned_checkpoint(path.parent.name, path.name))
        else:
            path.unlink()


def environment(device: str) -> dict[str, Any]:
    """The machine, torch and the precision flags, as ``OUT/gpu.json`` records them."""
    info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "device": device,
                            "cuda_available": torch.cuda.is_available(),
                            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                            "float32_matmul_precision": torch.get_float32_matmul_precision(),
                            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2 ** 30, 1), cuda=torch.version.cuda)
    return info
