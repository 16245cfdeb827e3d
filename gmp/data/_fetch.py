"""Find a data file under ``GMP_DATA``, or download it from its public source and verify it."""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

DATA_ENV = "GMP_DATA"


class DataUnavailableError(FileNotFoundError):
    """A data file is neither under ``GMP_DATA`` nor downloadable."""


def data_root() -> Path:
    """``$GMP_DATA``, else ``~/.cache/gmp``."""
    return Path(os.environ.get(DATA_ENV) or Path.home() / ".cache" / "gmp").expanduser()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(relpath: str, url: str, sha256: str, *, timeout: float = 60.0) -> Path:
    """Return ``GMP_DATA/relpath``, downloading it from ``url`` first when it is missing.

    A download is written to a temporary file, checked against ``sha256`` and only then
    moved into place, so an interrupted or corrupted download never leaves a bad file.
    A file already present is trusted (the shared offline copies are read-only).
    """
    target = data_root() / relpath
    if target.is_file():
        return target
    hint = (f"Put the file at {target} (set {DATA_ENV} to the folder that holds your data, "
            f"now {data_root()}), or connect to the internet so that it can be downloaded.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataUnavailableError(f"data file {relpath!r} is missing and {target.parent} cannot be "
                                   f"created ({err}). Source: {url}. {hint}") from None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
        got = sha256_of(Path(tmp))
        if got != sha256:
            raise DataUnavailableError(f"download of {relpath!r} from {url} has sha256 {got}, expected "
                                       f"{sha256}; the file was discarded. {hint}")
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError) as err:
        if isinstance(err, DataUnavailableError):
            raise
        raise DataUnavailableError(f"data file {relpath!r} is missing and could not be downloaded from "
                                   f"{url} ({err}). {hint}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target
