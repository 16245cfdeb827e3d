"""Find a data file under ``GMP_DATA``, or download it from its public source, and verify it.

Every file a loader reads is hashed and checked against its known sha256 on every read,
whether it was just downloaded or was already there: nothing about a file (its size or
mtime) stands in for its digest, so bytes that rot in place are caught on the next read. The
largest file checked, MNIST's training images (9.9 MB), hashes in a few tens of milliseconds,
less than decompressing it; nothing is written outside ``GMP_DATA``, which may be read-only.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

DATA_ENV = "GMP_DATA"

DOWNLOAD_DEADLINE = 600.0
"""Seconds a whole download may take by default, however steadily the server sends."""

DOWNLOAD_MAX_BYTES = 256 * 2**20
"""Bytes a download may have by default (the largest file a loader fetches is about 10 MB)."""


class DataUnavailableError(FileNotFoundError):
    """A data file is neither under ``GMP_DATA`` (intact) nor downloadable."""


def data_root() -> Path:
    """``$GMP_DATA``, else ``~/.cache/gmp``; a relative ``$GMP_DATA`` is taken from the working directory
    (``python -m gmp.runs`` passes its kernel the folder resolved from where it was started)."""
    return Path(os.path.abspath(os.path.expanduser(os.environ.get(DATA_ENV) or Path.home() / ".cache" / "gmp")))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, sha256: str, *, restore: str) -> Path:
    """Return ``path`` if its sha256 is ``sha256``; else raise :class:`DataUnavailableError`
    naming the file, both digests and ``restore`` (how to get the original back).

    The file is hashed on every call (see the module docstring).
    """
    path = Path(path)
    got = sha256_of(path)
    if got != sha256:
        raise DataUnavailableError(
            f"data file {path} is corrupt or not the expected file: its sha256 is {got}, expected "
            f"{sha256}. {restore}")
    return path


def fetch(relpath: str, url: str, sha256: str, *, timeout: float = 60.0,
          deadline: float = DOWNLOAD_DEADLINE, max_bytes: int = DOWNLOAD_MAX_BYTES,
          root: str | Path | None = None, download: bool = True) -> Path:
    """Return ``root/relpath`` (``root`` defaults to ``GMP_DATA``) after checking its sha256,
    downloading it from ``url`` first when it is missing.

    A file already present is hashed and checked with ``verify`` on every call; a mismatch raises :class:`DataUnavailableError` that says to
    delete the file so that it is downloaded again. A download is written to a temporary
    file, checked against ``sha256`` and only then moved into place, so an interrupted or
    corrupted download never leaves a bad file. ``timeout`` bounds each network read,
    ``deadline`` the whole download from the first byte on (connection, headers and body: the
    connection is cut when it passes, however slowly the server trickles; name resolution is
    not bounded) and ``max_bytes`` its size. With ``download=False`` a
    missing file raises at once.
    """
    if not deadline > 0 or not max_bytes > 0:
        raise ValueError(f"deadline and max_bytes must be positive, got {deadline!r} and {max_bytes!r}")
    folder = Path(root) if root is not None else data_root()
    target = folder / relpath
    hint = (f"Put the file at {target} (set {DATA_ENV} to the folder that holds your data, "
            f"now {data_root()}), or connect to the internet so that it can be downloaded.")
    if target.is_file():
        return verify(target, sha256, restore=f"Delete it so that it is downloaded again from {url}, "
                                              "or copy the original file over it.")
    if not download:
        raise DataUnavailableError(f"data file {relpath!r} is missing and download=False. Source: {url}. {hint}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataUnavailableError(f"data file {relpath!r} is missing and {target.parent} cannot be "
                                   f"created ({err}). Source: {url}. {hint}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    except OSError as err:  # a read-only GMP_DATA, say
        raise DataUnavailableError(f"data file {relpath!r} is missing and cannot be downloaded into "
                                   f"{target.parent} ({err.strerror or err}). Source: {url}. {hint}") from None
    try:
        _download(url, fd, timeout=timeout, deadline=deadline, max_bytes=max_bytes)
        got = sha256_of(Path(tmp))
        if got != sha256:
            raise DataUnavailableError(f"download of {relpath!r} from {url} has sha256 {got}, expected "
                                       f"{sha256}; the file was discarded. {hint}")
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:  # incl. a garbled status line
        if isinstance(err, DataUnavailableError):
            raise
        raise DataUnavailableError(f"data file {relpath!r} is missing and could not be downloaded from "
                                   f"{url} ({err}). {hint}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


class _DownloadLimit(OSError):
    """The download ran past its deadline or size cap (reported as a DataUnavailableError)."""


class _Watchdog:
    """Shuts down every socket a download opens once its deadline has passed.

    ``urlopen`` reads the status line and headers with the per-read ``timeout`` only, so a
    server that trickles them one byte at a time could hold it forever; the body loop's own
    check comes too late. The watchdog registers each socket as it is connected (redirects
    included) and, at the deadline, shuts it down from a timer thread, which makes the blocked
    read return at once; ``expired`` then tells the reader why.
    """

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.end = time.monotonic() + deadline
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(deadline, self._expire)
        self._timer.daemon = True

    def left(self) -> float:
        return self.end - time.monotonic()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:  # the plain socket's shutdown, also for an SSL socket (its own would drop its state)
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def opener(self) -> urllib.request.OpenerDirector:
        """An opener whose HTTP and HTTPS connections register their sockets here."""
        watchdog = self

        def watched(connection_class):
            class Watched(connection_class):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    create = self._create_connection  # set per instance by HTTPConnection

                    def create_watched(*args, **kwargs):  # the plain socket, watched before any TLS handshake
                        sock = create(*args, **kwargs)
                        watchdog.watch(sock)
                        return sock

                    self._create_connection = create_watched

                def connect(self):
                    left = watchdog.left()
                    if left <= 0:
                        raise _DownloadLimit(watchdog.message())
                    self.timeout = min(self.timeout, left) if self.timeout is not None else left
                    super().connect()
                    watchdog.watch(self.sock)  # an SSL socket has taken over the plain one's descriptor
            return Watched

        class HTTP(urllib.request.HTTPHandler):
            def do_open(self, http_class, req, **kwargs):
                return super().do_open(watched(http_class), req, **kwargs)

        class HTTPS(urllib.request.HTTPSHandler):
            def do_open(self, http_class, req, **kwargs):
                return super().do_open(watched(http_class), req, **kwargs)

        return urllib.request.build_opener(HTTP(), HTTPS())

    def message(self, received: int | None = None) -> str:
        got = "before the response headers arrived" if received is None else f"{received} bytes received"
        return f"the download took longer than deadline={self.deadline} s ({got})"

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


def _download(url: str, fd: int, *, timeout: float, deadline: float, max_bytes: int) -> None:
    """Copy ``url`` into the open file ``fd``, within ``deadline`` seconds and ``max_bytes`` bytes.

    The deadline holds from the first byte: connecting, the status line and headers, and the
    body (see :class:`_Watchdog`).
    """
    received = None
    with os.fdopen(fd, "wb") as out, _Watchdog(deadline) as watchdog:
        try:
            with watchdog.opener().open(url, timeout=min(timeout, deadline)) as response:
                received = 0
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > max_bytes:
                    raise _DownloadLimit(f"the server announces {int(length)} bytes, more than "
                                         f"max_bytes={max_bytes}")
                while block := response.read1(1 << 16):
                    received += len(block)
                    if received > max_bytes:
                        raise _DownloadLimit(f"more than max_bytes={max_bytes} bytes received")
                    if watchdog.left() < 0:
                        raise _DownloadLimit(watchdog.message(received))
                    out.write(block)
        except _DownloadLimit:
            raise
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            if watchdog.expired or watchdog.left() <= 0:  # cut by the watchdog, or a read timed out at the
                # deadline just before it: say so, not "connection reset" or "timed out"
                raise _DownloadLimit(watchdog.message(received)) from None
            raise
        if watchdog.expired:  # a read cut short by the watchdog looks like the end of the body
            raise _DownloadLimit(watchdog.message(received))
