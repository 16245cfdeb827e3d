import io
import sys

from gmp.progress import PROGRESS_ENV, bar


def test_bar_is_quiet_off_a_terminal(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    stream = io.StringIO()
    for _ in bar(range(3), file=stream):
        pass
    assert stream.getvalue() == ""


def test_bar_writes_to_the_real_stderr_under_the_runner(monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, "1")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", stream)
    for _ in bar(range(3), desc="runs"):
        pass
    assert "runs" in stream.getvalue() and "3/3" in stream.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", quiet)
    for _ in bar(range(3), disable=True):
        pass
    assert quiet.getvalue() == ""
