"""A real single-node Slurm cluster for the tests, started by hand with every file in one folder.

Debian's ``slurm-wlm`` (22.05) and ``munge``: ``munged`` on its own socket and key, then ``slurmctld`` and
``slurmd`` on a ``slurm.conf`` that names this host as controller and node, with state, spool, pid and log
files in the folder (no systemd, nothing under ``/etc``). The daemons run as root (``SlurmUser=root``), so the
cluster needs root; :func:`missing` says what is lacking, :func:`start` starts it and :func:`stop` stops its
daemons by their pid files. ``.ci/slurm`` (run by ``make test``) installs the packages where it can.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
INSTALL = "apt-get install slurm-wlm munge"


def missing() -> str | None:
    """Why this machine cannot start the cluster (with the command that fixes it), None when it can."""
    absent = [program for program in PROGRAMS if shutil.which(program) is None]
    if absent:
        return f"needs Debian's slurm-wlm and munge ({', '.join(absent)} not on PATH): run `{INSTALL}` as root"
    if os.geteuid() != 0:
        return "starts slurmctld and slurmd as SlurmUser=root, so it runs only as root"
    return None


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def configuration(folder: Path, host: str, cpus: int, memory_mb: int) -> str:
    """The ``slurm.conf`` of a cluster whose only node and controller is ``host``, with its files in ``folder``.

    The scheduler parameters start an array's tasks in about a second instead of three."""
    return "\n".join([
        f"ClusterName=gmp{os.getpid()}", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder}/munge.socket",
        "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "MpiDefault=none",
        "ReturnToService=2", "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1",
        "MessageTimeout=30", "InactiveLimit=0", "KillWait=5", "MinJobAge=300", "SlurmdTimeout=60",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(folder: Path) -> dict[str, str]:
    """Start munged, slurmctld and slurmd with every file in ``folder`` (fresh: a state folder reused under
    another cluster name stops slurmctld) and wait until the node is idle; the environment the clients
    (``sbatch``, ``squeue``, submitit) need: ``SLURM_CONF``. On failure the daemons started are stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "cgroup"):
        (folder / sub).mkdir()
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    cpus = len(os.sched_getaffinity(0))
    (folder / "slurm.conf").write_text(configuration(folder, host, cpus, int(0.8 * _memory_mb())))
    # Slurm 22.05 always loads a cgroup plugin; an empty mount point lets slurmd start in a container.
    (folder / "cgroup.conf").write_text(f"CgroupAutomount=no\nCgroupMountpoint={folder}/cgroup\n")
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    try:
        subprocess.run(["mungekey", "--create", f"--keyfile={folder}/munge.key"], check=True, capture_output=True)
        subprocess.run(["munged", "--force", f"--socket={folder}/munge.socket", f"--key-file={folder}/munge.key",
                        f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
                        f"--seed-file={folder}/munged.seed"], check=True, capture_output=True)
        subprocess.run(["slurmctld", "-f", str(folder / "slurm.conf")], check=True, capture_output=True, env=env)
        subprocess.run(["slurmd", "-f", str(folder / "slurm.conf")], check=True, capture_output=True, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env)
            if state.returncode == 0 and state.stdout.strip() == "idle":
                return {"SLURM_CONF": env["SLURM_CONF"]}
            time.sleep(0.1)
        raise RuntimeError(f"the node did not become idle within 30 s (sinfo: {state.stdout.strip() or state.stderr.strip()}); "
                           f"see {folder}/slurmctld.log and {folder}/slurmd.log")
    except BaseException:
        stop(folder)
        raise


def stop(folder: Path) -> None:
    """Stop the cluster's daemons in ``folder`` by their pid files (slurmd, slurmctld, then munged) and wait
    until each has gone (at most 10 s each, then SIGKILL)."""
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = folder / f"{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie child of ours (not reaped) has gone for our purpose
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


@contextlib.contextmanager
def cluster(folder: Path) -> Iterator[dict[str, str]]:
    """:func:`start` in ``folder``, then :func:`stop` whatever happens."""
    env = start(folder)
    try:
        yield env
    finally:
        stop(folder)
