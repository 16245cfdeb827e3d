"""What CI and a fresh machine rely on: the browser test's Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

INSTALL = "sudo apt-get install chromium chromium-driver"


def _chromium_check(env: dict[str, str], unprivileged: bool = False) -> subprocess.CompletedProcess:
    """``make chromium`` (the first step of ``make test``) with ``env`` added, as nobody when asked and root."""
    command = ["make", "--no-print-directory", "chromium"]
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is needed to run the check as a user who is not root")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def test_make_test_checks_chromium_before_installing_or_testing():
    done = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[0] == ".ci/chromium"


def test_missing_chromium_stops_with_the_command_that_installs_it():
    done = _chromium_check({"CHROMIUM": "gmp-no-such-chromium"}, unprivileged=True)
    assert done.returncode != 0
    assert "gmp-no-such-chromium and chromedriver" in done.stderr
    assert INSTALL in done.stderr


def test_missing_chromedriver_stops_with_the_command_that_installs_it():
    done = _chromium_check({"CHROMEDRIVER": "gmp-no-such-chromedriver"}, unprivileged=True)
    assert done.returncode != 0
    assert "gmp-no-such-chromedriver" in done.stderr and INSTALL in done.stderr


def test_present_chromium_passes_silently():
    done = _chromium_check({"CHROMIUM": "sh", "CHROMEDRIVER": "sh"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")

