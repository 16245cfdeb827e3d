"""The download path of gmp.data.fetch, against a local HTTP server on 127.0.0.1."""

import hashlib
import http.server
import socket
import threading
from pathlib import Path

import pytest

from gmp.data import DataUnavailableError, fetch

PAYLOAD = b"0.1 0.2 3.0\n0.4 0.5 6.0\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):
        type(self).requests.append(self.path)
        super().do_GET()

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


def test_existing_file_is_not_downloaded_again(server, data_dir):
    base, www, requests = server
    first = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    (www / "table.txt").write_bytes(b"changed on the server\n")
    second = fetch("uci/demo/data.txt", f"{base}/table.txt", SHA)
    assert second == first and second.read_bytes() == PAYLOAD
    assert requests == ["/table.txt"]
