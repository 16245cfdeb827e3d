"""The download path of gmp.data.fetch, against a local HTTP server on 127.0.0.1."""

import hashlib
import os
import http.server
import socket
import threading
import time
from pathlib import Path

import pytest

from gmp.data import DataUnavailableError, fetch

PAYLOAD = b"0.1 0.2 3.0\n0.4 0.5 6.0\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):
        type(self).requests.append(self.path)
        if self.path.startswith("/trickle"):  # 1 byte every 50 ms: each read is quick, the whole is slow
            self._send(b"x" * 200, length=True, pause=0.05)
        elif self.path.startswith("/big"):  # 4,000 bytes, announced or not
            self._send(b"y" * 4000, length=self.path == "/big")
        elif self.path.startswith("/slow-headers"):  # status line and headers, 1 byte every 0.5 s
            self._trickle_headers(pause=0.5)
        else:
            super().do_GET()

    def _send(self, body: bytes, length: bool, pause: float = 0.0):
        self.send_response(200)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(0, len(body), 1 if pause else 1000):
                self.wfile.write(body[i:i + (1 if pause else 1000)])
                self.wfile.flush()
                time.sleep(pause)
        except OSError:  # the client gave up
            pass
        self.close_connection = True

    def _trickle_headers(self, pause: float):
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(PAYLOAD)}\r\n\r\n".encode()
        try:
            for i in range(len(head)):  # each byte resets a per-read timeout; the whole takes 20 s
                self.wfile.write(head[i:i + 1])
                self.wfile.flush()
                time.sleep(pause)
            self.wfile.write(PAYLOAD)
        except OSError:  # the client gave up
            pass
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """Serve ``tmp_path/www`` on a free port of 127.0.0.1; yields (base URL, folder, request log)."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "table.txt").write_bytes(PAYLOAD)
    handler = type("Handler", (_Handler,), {"requests": []})
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(www), **k))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", www, handler.requests
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    root = tmp_path / "gmp_data"
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)  # 127.0.0.1 must be reached directly
    monkeypatch.setenv("GMP_DATA", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # where a cache outside GMP_DATA would go
    return root


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_downloads_verifies_and_places_the_file(server, data_dir):
    base, _, requests = server
    path = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    assert path == data_dir / "uci" / "demo" / "data.txt"
    assert path.read_bytes() == PAYLOAD
    assert requests == ["/table.txt"]
    assert _leftovers(data_dir) == ["data.txt"]  # no temporary .part file left behind


def test_sha256_mismatch_raises_and_leaves_no_file(server, data_dir):
    base, _, _ = server
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(DataUnavailableError) as info:
        fetch("uci/demo/data.txt", f"{base}/table.txt", wrong)
    message = str(info.value)
    assert SHA in message and wrong in message and "discarded" in message
    assert _leftovers(data_dir) == []


def test_missing_on_server_raises_data_unavailable(server, data_dir):
    base, _, _ = server
    with pytest.raises(DataUnavailableError, match="uci/demo/data.txt"):
        fetch("uci/demo/data.txt", f"{base}/absent.txt", SHA)
    assert _leftovers(data_dir) == []


def test_unreachable_source_names_file_url_and_gmp_data(data_dir):
    with socket.socket() as probe:  # a port on 127.0.0.1 that nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/table.txt"
    with pytest.raises(DataUnavailableError) as info:
        fetch("uci/demo/data.txt", url, SHA, timeout=5)
    message = str(info.value)
    assert "uci/demo/data.txt" in message and url in message
    assert "GMP_DATA" in message and str(data_dir) in message
    assert isinstance(info.value, FileNotFoundError)
    assert _leftovers(data_dir) == []


def test_a_read_only_gmp_data_with_a_file_missing_names_the_file(server, data_dir, monkeypatch):
    # Before: OSError [Errno 30] about a ".part" file, naming neither the data file nor GMP_DATA.
    import errno

    from gmp.data import _fetch

    (data_dir / "uci" / "demo").mkdir(parents=True)
    if os.geteuid() != 0:
        os.chmod(data_dir / "uci" / "demo", 0o555)
    else:  # root writes into read-only folders: the file system refuses as a read-only mount would
        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs.get("dir"))

        monkeypatch.setattr(_fetch.tempfile, "mkstemp", refuse)
    base, _, _ = server
    try:
        with pytest.raises(DataUnavailableError) as info:
            fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    finally:
        os.chmod(data_dir / "uci" / "demo", 0o755)
    message = str(info.value)
    assert message.startswith("data file 'uci/demo/data.txt' is missing and cannot be downloaded into ")
    assert f"{base}/table.txt" in message and "GMP_DATA" in message and ".part" not in message
    assert isinstance(info.value, FileNotFoundError)


def test_existing_file_is_not_downloaded_again(server, data_dir):
    base, www, requests = server
    first = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    (www / "table.txt").write_bytes(b"changed on the server\n")
    second = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    assert second == first and second.read_bytes() == PAYLOAD
    assert requests == ["/table.txt"]


def test_a_changed_local_file_is_refused_with_both_digests_and_how_to_restore(server, data_dir):
    base, _, requests = server
    path = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    path.write_bytes(PAYLOAD.replace(b"0.4", b"0.5"))  # one changed digit
    with pytest.raises(DataUnavailableError) as info:
        fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    message = str(info.value)
    assert str(path) in message and SHA in message and hashlib.sha256(path.read_bytes()).hexdigest() in message
    assert "Delete it" in message and f"{base}/table.txt" in message
    assert requests == ["/table.txt"]  # never silently replaced


@pytest.mark.parametrize("corrupt", [lambda b: b[: len(b) // 2], lambda b: b"# " + b, lambda b: b + b"\n"])
def test_a_file_put_in_place_by_hand_is_verified_too(data_dir, corrupt):
    target = data_dir / "uci" / "demo" / "data.txt"
    target.parent.mkdir(parents=True)
    target.write_bytes(corrupt(PAYLOAD))
    with pytest.raises(DataUnavailableError, match="corrupt"):
        fetch("uci/demo/data.txt", "http://127.0.0.1:9/table.txt", SHA)
    target.write_bytes(PAYLOAD)
    assert fetch("uci/demo/data.txt", "http://127.0.0.1:9/table.txt", SHA) == target


def test_bit_rot_that_keeps_size_and_mtime_is_caught_on_the_next_read(data_dir, tmp_path):
    """Every read hashes the file: a flipped byte with the file's size and mtime restored (bit rot) is
    refused after any number of verified reads, and nothing is written outside GMP_DATA."""
    target = data_dir / "uci" / "demo" / "data.txt"
    target.parent.mkdir(parents=True)
    target.write_bytes(PAYLOAD)
    for _ in range(2):
        fetch("uci/demo/data.txt", "http://127.0.0.1:9/table.txt", SHA)
    stat = target.stat()
    target.write_bytes(PAYLOAD[:-2] + b"7\n")
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert target.stat().st_size == stat.st_size and target.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(DataUnavailableError, match="corrupt"):
        fetch("uci/demo/data.txt", "http://127.0.0.1:9/table.txt", SHA)
    assert not (tmp_path / "xdg").exists() and _leftovers(data_dir) == ["data.txt"]


def test_missing_file_with_download_disabled_raises_at_once(server, data_dir):
    base, _, requests = server
    with pytest.raises(DataUnavailableError, match="download=False"):
        fetch("uci/demo/data.txt", f"{base}/table.txt", SHA, download=False)
    assert requests == []


def test_a_trickling_server_is_cut_off_at_the_deadline(server, data_dir):
    base, _, _ = server
    start = time.monotonic()
    with pytest.raises(DataUnavailableError, match="deadline=0.5"):
        fetch("uci/demo/data.txt", f"{base}/trickle", SHA, timeout=5, deadline=0.5)
    assert time.monotonic() - start < 3.0  # the whole body would take 10 s
    assert _leftovers(data_dir) == []


def test_the_deadline_holds_while_the_server_trickles_its_headers(server, data_dir):
    base, _, _ = server
    start = time.monotonic()
    with pytest.raises(DataUnavailableError, match="deadline=2"):
        fetch("uci/demo/data.txt", f"{base}/slow-headers", SHA, timeout=5, deadline=2)
    assert time.monotonic() - start < 3.0  # the headers alone would take 20 s
    assert _leftovers(data_dir) == []  # no .part file left in GMP_DATA


def test_the_deadline_holds_while_a_tls_server_trickles_its_handshake(data_dir):
    server = socket.create_server(("127.0.0.1", 0))

    def trickle():  # a TLS record header announcing 16 KiB, then one byte every 0.5 s
        connection, _ = server.accept()
        with connection:
            connection.recv(4096)
            try:
                connection.sendall(b"\x16\x03\x03\x40\x00")
                for _ in range(40):
                    connection.sendall(b"\x02")
                    time.sleep(0.5)
            except OSError:
                pass

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    start = time.monotonic()
    with pytest.raises(DataUnavailableError, match="deadline=2"):
        fetch("uci/demo/data.txt", f"https://127.0.0.1:{server.getsockname()[1]}/table.txt", SHA, timeout=5, deadline=2)
    assert time.monotonic() - start < 3.0
    assert _leftovers(data_dir) == []
    server.close()


@pytest.mark.parametrize("path", ["/big", "/big-without-length"])
def test_a_download_larger_than_max_bytes_is_refused(server, data_dir, path):
    base, _, _ = server
    with pytest.raises(DataUnavailableError, match="max_bytes=1000"):
        fetch("uci/demo/data.txt", f"{base}{path}", SHA, max_bytes=1000)
    assert _leftovers(data_dir) == []


@pytest.mark.parametrize("kwargs", [dict(deadline=0), dict(max_bytes=-1)])
def test_limits_must_be_positive(data_dir, kwargs):
    with pytest.raises(ValueError, match="positive"):
        fetch("uci/demo/data.txt", "http://127.0.0.1:9/table.txt", SHA, **kwargs)
