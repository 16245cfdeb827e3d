"""Where the results cache lives, and how its files are written: whole or not at all.

A chapter ``book/<part>/<chapter>.md`` run at some scale by ``python -m gmp.runs`` keeps its results in
``<results root>/<chapter>/<scale>/`` (:func:`results_root`); every file there is written atomically
(:func:`atomic_write_bytes`) and a finished run's folder replaces the old one in two renames
(:func:`replace_folder`), so that a reader sees the old cache or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

STAGING_ENV = "GMP_RESULTS_STAGING"
ROOT_ENV = "GMP_RESULTS"
RESULTS_PATH = "book/_results"
"""Where the results cache lives in the repository, relative to its root."""


def repository_root() -> Path | None:
    """The book's repository (the folder holding ``_toc.yml`` and ``book/``), if we are in one."""
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for folder in (start, *start.parents):
            if (folder / "_toc.yml").is_file() and (folder / "book").is_dir():
                return folder
    return None


def results_root() -> Path | None:
    """``$GMP_RESULTS`` if set, else ``book/_results`` of the repository, else None."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    root = repository_root()
    return root / RESULTS_PATH if root else None


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o644 & ~_read_umask()  # read once, at import: os.umask is process-wide and not thread-safe


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The file is readable by everyone (mode 0644 less the process's umask, as ``open`` would
    give), not private like the temporary file it starts as, so a shared checkout can read it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n").encode())


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return buffer.getvalue()


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"result names are made of letters, digits, '_' and '-', got {name!r}")


def replace_folder(staging: Path, final: Path) -> None:
    """Put the finished cache folder ``staging`` in place of ``final`` (as ``gmp.runs`` does when a run
    succeeds): ``final`` is renamed aside to ``.old-<name>-<pid>``, ``staging`` renamed to it and the
    old one removed. A reader never sees a mix of the two (``_read_snapshot``)."""
    import shutil

    old = final.parent / f".old-{final.name}-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)

