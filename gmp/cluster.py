"""A chapter's units as a Slurm job array, or as local processes, through ``submitit``.

    python -m gmp.runs CHAPTER --scale paper --executor slurm [--partition P] [--time 4:00:00]
        [--cpus-per-task 4] [--gpus-per-task 1] [--mem 16G] [--account A] [--array-parallelism 32] [--detach]
    python -m gmp.runs CHAPTER --scale paper --executor local [--cpus-per-task 1] [--array-parallelism 2]
    python -m gmp.runs lu_real --scale paper --executor slurm --device cuda --gpus-per-task 1 --time 2:00:00
        [--networks-per-task N]

The runner (:func:`gmp.runs.run`, holding the chapter's run lock) calls :func:`execute` where ``--jobs`` would
start its workers. It plans the units that neither the journal, the current cache nor a finished unit file
holds (:func:`plan`) and submits them as one array, one task per unit (``submitit``'s ``map_array`` of
:class:`UnitTask`). Each task computes its unit with ``Store.memo`` in a private folder and writes only its
own unit file (a temporary file, then a rename) under ``<journal>/cluster/units/`` on the shared filesystem;
the driver, the only writer of the journal, merges the unit files into it (:func:`merge`) and the runner then
assembles the cache as without an executor. The driver waits on the unit files and ``squeue`` (or, locally,
the processes), never on ``sacct``: a cluster without accounting works. A task that ends without its unit
file is named with its log; the units that finished are merged all the same, and a rerun submits only the
rest. ``--detach`` submits the array and an assembling job that depends on it (``afterok``) and returns.

``lu_real`` (:data:`STACKED`) is the exception to one task per unit: its units are the epochs of each network,
each resuming from the epoch before, so a task trains networks whole instead. One task is one stack, the
networks of one group (a data set, without or with BN) that have no journalled epoch, as the GPU command groups
them, or at most ``--networks-per-task`` of them: it trains them stacked for all their epochs
(:class:`StackTask`, :func:`gmp.gpu.lu_real.train_stack`, the GPU command's trainer) and writes one unit file that
holds every epoch of its networks, which the driver merges as any other. With ``--device cuda --gpus-per-task 1``
that is one stack per GPU: a lab with four GPUs runs the paper's four groups at once. A network partly journalled
is an error (:func:`gmp.gpu.lu_real.pending_groups`), and a rerun submits only the networks with no journalled
epoch. A stack's task keeps no checkpoint, so it is not requeued at its time limit; it probes its stack first, as
a GPU lease does, and where the measured time exceeds ``--time`` it trains only the networks that fit (or none),
journals them, and fails naming the rest, which the rerun submits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


from gmp import config as _config
from gmp import results as _results
from gmp.provenance import device_name, precision, units_of

EXECUTORS = ("slurm", "local")
"""The executors of ``--executor``: Slurm's job arrays, or processes on this machine (submitit's local executor)."""
FOLDER = "cluster"
"""The folder, inside a run's scratch folder beside its journal, of the executor's unit files, work and logs."""


STACKED = {"lu_real": "gmp.gpu.lu_real"}
"""Chapters whose units are the epochs of networks, each resuming from the epoch before: ``--executor`` runs each
of their tasks as a stack of whole networks (:class:`StackTask`), not as one unit. Each names the module of its
``pending_groups`` and ``train_stack`` (:mod:`gmp.gpu.lu_real`), imported by name for that chapter alone: the code
fingerprint of every other chapter counts what ``gmp.runs`` imports, and their runs never execute it."""


def _stacked(chapter: str) -> Any:
    """The module of :data:`STACKED` that plans and trains ``chapter``'s stacks."""
    return importlib.import_module(STACKED[chapter])


class Detached(Exception):
    """``--detach`` submitted the work and returns: the message says what runs and where the cache will be."""


class TasksFailed(RuntimeError):
    """Some tasks ended without their unit file; the message names each with its log. The others are merged."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What ``--executor`` and the cluster options of ``python -m gmp.runs`` ask for (see :func:`add_arguments`)."""

    executor: str
    partition: str | None = None
    time_min: int = 60
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    mem_gb: float | None = None
    account: str | None = None
    array_parallelism: int | None = None
    detach: bool = False
    networks_per_task: int | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"--executor is one of {', '.join(EXECUTORS)}, not {self.executor!r}")
        if self.detach and self.executor != "slurm":
            raise ValueError("--detach submits a Slurm job that assembles the cache later: it goes with --executor slurm")
        for name in ("cpus_per_task", "array_parallelism", "networks_per_task"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        if self.gpus_per_task < 0:
            raise ValueError(f"--gpus-per-task must be 0 or more, not {self.gpus_per_task}")
        slurm_only = [flag for flag, value in (("--partition", self.partition), ("--mem", self.mem_gb),
                                               ("--account", self.account)) if value is not None]
        if slurm_only and self.executor != "slurm":
            raise ValueError(f"{', '.join(slurm_only)} ask Slurm for something, and --executor {self.executor} runs no "
                             "Slurm job: drop them, or use --executor slurm")

    def flags(self) -> str:
        """The options as command-line flags, for the provenance's command."""
        values = {"--executor": self.executor, "--partition": self.partition, "--time": self.time_min,
                  "--cpus-per-task": self.cpus_per_task, "--gpus-per-task": self.gpus_per_task or None,
                  "--mem": f"{self.mem_gb:g}G" if self.mem_gb else None, "--account": self.account,
                  "--array-parallelism": self.array_parallelism, "--networks-per-task": self.networks_per_task}
        return " ".join(f"{k} {v}" for k, v in values.items() if v is not None) + (" --detach" if self.detach else "")


def time_minutes(text: str) -> int:
    """Slurm's time limit (``--time``: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in whole minutes,
    rounded up; a ValueError naming the forms for anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise ValueError(f"--time {text!r} is not a Slurm time limit: give minutes (90), H:M:S (1:30:00) or D-H:M "
                         "(1-12:00)")
    days, first, second, third = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-H[:M[:S]]
        seconds = days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)
    elif third is not None:  # H:M:S
        seconds = first * 3600 + second * 60 + third
    elif second is not None:  # M:S
        seconds = first * 60 + second
    else:
        seconds = first * 60
    if seconds <= 0:
        raise ValueError(f"--time {text!r} is no time at all")
    return -(-seconds // 60)


def memory_gb(text: str) -> float:
    """Slurm's ``--mem`` (a number with an optional K, M, G or T suffix, megabytes without one) in GB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", text.strip().upper())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"--mem {text!r} is not an amount of memory: give e.g. 16G or 4000M")
    return float(match.group(1)) * {"K": 2**-20, "M": 2**-10, "": 2**-10, "G": 1, "T": 2**10}[match.group(2)]


def add_arguments(parser: Any) -> None:
    """The options of ``--executor`` on the runner's command line (``parser``, an ``argparse`` parser)."""
    group = parser.add_argument_group("running the units on a Slurm cluster or as local processes (submitit)")
    group.add_argument("--executor", choices=EXECUTORS, help="compute the chapter's units as a Slurm job array (slurm) "
                       "or as processes on this machine (local), each writing its own unit file, then assemble the "
                       "cache here (chapters with units)")
    group.add_argument("--partition", help="Slurm partition of the array (default: the cluster's)")
    group.add_argument("--time", help="time limit of each task, in Slurm's forms (90, 1:30:00, 1-12:00; default 60 "
                                      "minutes); a unit cut by it is requeued and resumes from its checkpoint (lu_real: a stack whose "
                                      "measured time exceeds it trains only the networks that fit; the rerun submits "
                                      "the rest)")
    group.add_argument("--cpus-per-task", type=int, help="CPU cores of each task, and its torch threads (default 1)")
    group.add_argument("--gpus-per-task", type=int, help="GPUs of each task (default 0); use with --device cuda")
    group.add_argument("--mem", help="memory of each task, in Slurm's form (16G, 4000M; default: the partition's)")
    group.add_argument("--account", help="Slurm account to charge (default: yours)")
    group.add_argument("--array-parallelism", type=int, help="most tasks running at once (default: Slurm's limit; "
                                                             "local: the cores over --cpus-per-task)")
    group.add_argument("--networks-per-task", type=int, help="lu_real only: each task trains at most this many "
                       "networks, stacked, for all their epochs (default: a whole group, a data set without or with "
                       "BN: the paper's 12 networks); with --device cuda --gpus-per-task 1, one stack per GPU")
    group.add_argument("--detach", action="store_true", help="with --executor slurm: submit the array and a job that "
                       "assembles the cache once every task succeeded (afterok), and return")


CLUSTER_ARGUMENTS = ("partition", "time", "cpus_per_task", "gpus_per_task", "mem", "account", "array_parallelism",
                     "networks_per_task")


def options_from(args: Any) -> Options | None:
    """The :class:`Options` of parsed arguments ``args``, None without ``--executor``; a ValueError for a cluster
    option without ``--executor`` or an invalid one."""
    given = [name for name in CLUSTER_ARGUMENTS if getattr(args, name) is not None] + ["detach"] * args.detach
    if args.executor is None:
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} goes with --executor slurm (or local)")
        return None
    if args.networks_per_task is not None and args.chapter not in STACKED:
        raise ValueError(f"--networks-per-task sizes the stacks of networks of {', '.join(STACKED)}; each task of "
                         f"{args.chapter} is one unit")
    if args.gpus_per_task and args.device == "cpu":
        raise ValueError(f"--gpus-per-task {args.gpus_per_task} gives each task GPUs that --device cpu leaves idle: use "
                         "--device cuda (or auto), or drop --gpus-per-task")
    return Options(args.executor, partition=args.partition,
                   time_min=60 if args.time is None else time_minutes(args.time),
                   cpus_per_task=1 if args.cpus_per_task is None else args.cpus_per_task,
                   gpus_per_task=0 if args.gpus_per_task is None else args.gpus_per_task,
                   mem_gb=None if args.mem is None else memory_gb(args.mem), account=args.account,
                   array_parallelism=args.array_parallelism, detach=args.detach,
                   networks_per_task=args.networks_per_task)


def unit_file_name(key: str) -> str:
    """The name of the unit file of ``key``: the key made safe for a file name, and a hash of it that keeps two
    keys apart which the first part would merge."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[:80]
    return f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.jsonl"


def cluster_folder(journal: Path) -> Path:
    """The executor's folder of the run whose journal is ``journal`` (in the run's scratch folder)."""
    return journal.with_suffix("") / FOLDER


class UnitTask:
    """One task of the array: compute one unit and write its unit file (submitit pickles this by reference).

    The unit is computed by ``Store.memo`` under a private staging folder ``<folder>/work/<unit>/``, so that its
    journal line (code, threads, seconds) is the one a run on one machine writes and its checkpoint
    (``store.scratch``) stays in one place across requeues: on the time-limit signal submitit calls
    :meth:`checkpoint`, which requeues the same call, and the unit resumes from its checkpoint.
    The line, with the node, device and precision added, is written to ``<folder>/units/`` atomically."""

    def __call__(self, chapter: str, scale: str, seed: int, device: str, key: str, folder: str, threads: int) -> str:
        _set_threads(threads)
        folder_path = Path(folder)
        name = unit_file_name(key)
        work = folder_path / "work" / name.removesuffix(".jsonl")
        cfg = _config.load(chapter, scale)
        resolved = _config.resolve_device(device)
        previous = os.environ.get(_results.STAGING_ENV)
        os.environ[_results.STAGING_ENV] = str(work / ".staging")
        try:
            store = _results.Store(chapter, cfg)
            shared = journal_scratch(folder_path, store, key)
            if shared.is_file() and not store.scratch(key).exists():  # a run on one machine got this far
                store.scratch(key).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shared, store.scratch(key))
            store.memo(key, units_of(chapter)(cfg, store, seed, resolved)[key])
            entries = [e for e in _results.journal_entries(store._journal_path) if e["key"] == key]
        finally:
            if previous is None:
                os.environ.pop(_results.STAGING_ENV, None)
            else:
                os.environ[_results.STAGING_ENV] = previous
        line = json.dumps({**_results.with_code(entries[-1:], entries)[0], **_where(resolved)}) + "\n"
        _results.atomic_write_bytes(folder_path / "units" / name, line.encode())
        shutil.rmtree(work, ignore_errors=True)
        return key

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit calls on the time-limit signal: the same call again (``submitit.helpers.Checkpointable``'s
        rule), to be requeued."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _set_threads(threads: int) -> None:
    """Torch's threads in a task: Slurm's ``--cpus-per-task`` where it sets one, else ``threads`` (not every core)."""
    import torch

    given = os.environ.get("SLURM_CPUS_PER_TASK", "")
    torch.set_num_threads(int(given) if given.isdigit() and int(given) > 0 else threads)


def _where(resolved: Any) -> dict[str, str]:
    """What a task adds to each entry of its unit file: the node, the device, the precision and the task (Slurm's
    ``<array>_<index>``, or the job id of a submission of one task, which submitit sends as a plain job)."""
    slurm = os.environ.get("SUBMITIT_EXECUTOR") != "local"  # a local task may inherit the variables of a Slurm job
    array, job = (os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_JOB_ID")) if slurm else (None, None)
    task = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if array else job or f"local {os.getpid()}"
    return {"node": platform.node(), "device": device_name(resolved), "precision": precision(), "task": task}


@dataclasses.dataclass(frozen=True)
class Stack:
    """Networks of a :data:`STACKED` chapter that one task trains whole: ``labels`` (run labels) on ``dataset``;
    ``keys``: the first epoch of each (the task is done once they are journalled); ``units``: all their epochs."""

    dataset: str
    labels: tuple[str, ...]
    keys: tuple[str, ...]
    units: int

    @property
    def name(self) -> str:
        """The stack's name, in messages and in its unit file's name."""
        return f"{self.dataset}: {', '.join(self.labels)}"


STACK_MARGIN_S = 60
"""Seconds of a stack's task kept from training: its start (imports, data) and its unit file."""


class StackTask:
    """One task of a :data:`STACKED` chapter's array: train a stack of networks whole and write one unit file with
    every epoch of each (:func:`gmp.gpu.lu_real.train_stack`, in a private folder ``<folder>/work/<stack>/``), each
    entry with the node, device, precision and task, as :class:`UnitTask` writes its one entry.

    It has ``seconds`` (the task's time limit less Slurm's warning, :func:`signal_delay_s`) less
    :data:`STACK_MARGIN_S` to train in. The stack is probed first: where its measured time does not fit, only the
    networks that fit are trained, their unit file written, and a RuntimeError names the others (the rerun
    submits them), or, where none fits, names the measured time at once. It is not requeued at the time limit: it
    has no checkpoint to resume from (submitit requeues only a function with ``checkpoint``)."""

    def __call__(self, chapter: str, scale: str, seed: int, device: str, dataset: str, labels: Sequence[str],
                 folder: str, threads: int, seconds: float | None = None) -> str:
        started = time.monotonic()
        _set_threads(threads)
        stack_name = Stack(dataset, tuple(labels), (), 0).name
        name = unit_file_name(stack_name)
        work = Path(folder) / "work" / name.removesuffix(".jsonl")
        resolved = _config.resolve_device(device)
        left = None if seconds is None else seconds - STACK_MARGIN_S - (time.monotonic() - started)
        entries, summary = _stacked(chapter).train_stack(work, _config.load(chapter, scale), str(resolved), seed, dataset, labels, left)
        if entries:
            where = _where(resolved)
            lines = "".join(json.dumps({**entry, **where}) + "\n" for entry in _results.with_code(entries, entries))
            _results.atomic_write_bytes(Path(folder) / "units" / name, lines.encode())
        shutil.rmtree(work, ignore_errors=True)
        trained = summary.get("networks", []) if entries else []
        if len(trained) < len(labels):
            probes = "; ".join(f"{p['networks']} networks {p['group_minutes']:.1f} min" for p in summary["probes"])
            raise RuntimeError(
                f"the stack {stack_name} trained {len(trained)} of its {len(labels)} networks"
                + (f" ({', '.join(trained)}, journalled)" if trained else "")
                + f" in the task's {(seconds or 0) / 60:.0f} min: {summary['status']}"
                + (f" (measured: {probes})" if probes else "") + ". Give a longer --time, or fewer --networks-per-task; "
                "the rerun submits only the networks not journalled")
        return stack_name


def journal_scratch(folder: Path, store: Any, key: str) -> Path:
    """Where a run on one machine checkpoints ``key`` (beside the journal, ``folder``'s parent): a task resumes from it."""
    return folder.parent / store.scratch(key).name


def unit_keys(chapter: str, cfg: Any, seed: int) -> list[str]:
    """The keys of the chapter's units under ``cfg``, in order (its ``units_keys`` where it has one, else the keys
    of its ``units``, built outside any run so that nothing is recorded)."""
    experiment = _config.experiment(chapter)
    if hasattr(experiment, "units_keys"):
        return list(experiment.units_keys(cfg, seed))
    previous = os.environ.pop(_results.STAGING_ENV, None)
    try:
        return list(units_of(chapter, "for --executor")(cfg, _results.Store(chapter, cfg), seed, "cpu"))
    finally:
        if previous is not None:
            os.environ[_results.STAGING_ENV] = previous


def merge(journal: Path) -> list[str]:
    """Append the finished unit files of the run of ``journal`` to it (the driver is its only writer) and remove
    them; the keys added. A unit file holds one entry, or a stack's (:class:`StackTask`) every epoch of its
    networks, added in one write. A unit the journal holds already is not added twice; a damaged unit file (a line
    cut short or not an entry) is left where it is, with a warning, and its units count as missing."""
    paths = sorted((cluster_folder(journal) / "units").glob("*.jsonl"))
    if not paths:
        return []
    have = set(_results.journal_units(journal))
    added, lines, merged = [], [], []
    for path in paths:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the warning below names the file
            entries = _results.journal_entries(path)
        if not entries or len(entries) != len([line for line in path.read_bytes().splitlines() if line.strip()]):
            print(f"gmp.runs: WARNING: {path} is not whole (a line is not a journal entry); left there, its units are "
                  "computed again", file=sys.stderr)
            continue
        merged.append(path)
        for entry in entries:
            if entry["key"] not in have:
                have.add(entry["key"])
                added.append(entry["key"])
                lines.append(json.dumps(entry))
    if lines:
        _results.append_journal(journal, lines)
    for path in merged:
        path.unlink(missing_ok=True)
    return added


def _cached_units(chapter: str, scale: str, cfg: Any, seed: int) -> list[dict[str, Any]]:
    """The unit entries of the chapter's cache at ``scale`` when it was computed with ``cfg`` and ``seed``."""
    import gzip

    root = _results.results_root()
    folder = root / chapter / scale if root else None
    if folder is None or not (folder / "units.jsonl.gz").is_file() or not (folder / "provenance.json").is_file():
        return []
    provenance = json.loads((folder / "provenance.json").read_text())
    if provenance.get("config_digest") != cfg.digest or provenance.get("seed") != seed:
        return []
    lines = gzip.decompress((folder / "units.jsonl.gz").read_bytes()).decode().splitlines()
    return [entry for line in lines if line and not _results.entry_problem(entry := json.loads(line))]


def _held(chapter: str, scale: str, cfg: Any, seed: int, journal: Path) -> dict[str, Any]:
    """The units the run of ``journal`` holds (key to value), once finished unit files are merged (:func:`merge`) and
    the units of the chapter's cache of the same config and seed journalled."""
    merge(journal)
    have = _results.journal_units(journal)
    cached = [entry for entry in _cached_units(chapter, scale, cfg, seed) if entry["key"] not in have]
    if cached:
        _results.append_journal(journal, [json.dumps(entry) for entry in cached])
        have = _results.journal_units(journal)
    return have


def plan(chapter: str, scale: str, seed: int, journal: Path, busy: Sequence[str] = ()) -> list[str]:
    """The units of the run of ``journal`` to submit, in the chapter's order: those that neither the journal, a
    finished unit file (merged first, :func:`merge`), nor ``busy`` (tasks still queued or running) holds. The
    units of the chapter's cache of the same config and seed are journalled first, so they count as held."""
    cfg = _config.load(chapter, scale)
    have = _held(chapter, scale, cfg, seed, journal)
    return [key for key in unit_keys(chapter, cfg, seed) if key not in have and key not in busy]


def plan_stacks(chapter: str, scale: str, seed: int, journal: Path, busy: Sequence[str] = (),
                per_task: int | None = None) -> list[Stack]:
    """The stacks of a :data:`STACKED` chapter's run of ``journal`` to submit, in its order: the networks of each
    group (:func:`gmp.gpu.lu_real.pending_groups`) with no epoch in the journal, a finished unit file or the cache
    (as :func:`plan`), nor busy (``busy``: the first-epoch keys of tasks still queued or running), at most
    ``per_task`` to a stack. A network partly journalled is a ValueError (it cannot be continued here)."""
    epoch_key = _config.experiment(chapter).epoch_key
    cfg = _config.load(chapter, scale)
    try:
        groups = _stacked(chapter).pending_groups(cfg, _held(chapter, scale, cfg, seed, journal), seed)
    except RuntimeError as err:
        raise ValueError(f"--executor trains {chapter}'s networks whole, and cannot continue one: {err}") from None
    stacks = []
    for dataset, labels in groups:
        labels = [label for label in labels if epoch_key(dataset, label, seed, 1) not in busy]
        size = per_task or len(labels) or 1
        for start in range(0, len(labels), size):
            chosen = tuple(labels[start:start + size])
            stacks.append(Stack(dataset, chosen, tuple(epoch_key(dataset, label, seed, 1) for label in chosen),
                                len(chosen) * int(cfg["epochs"][dataset])))
    return stacks


@dataclasses.dataclass
class Task:
    """A submitted task: its unit (or stack), its id (``<array>_<index>`` on Slurm) and where submitit writes its log
    and result."""

    key: str
    id: str
    log: str
    result: str
    keys: list[str] = dataclasses.field(default_factory=list)
    """A stack's task (:class:`StackTask`): ``key`` is the stack's name, ``keys`` the first epoch of each of its
    networks, journalled together once its unit file is merged."""

    @property
    def units(self) -> list[str]:
        """The units whose being journalled says that the task is done."""
        return self.keys or [self.key]


def signal_delay_s(time_min: int) -> int:
    """How long before a task's time limit of ``time_min`` minutes Slurm signals it (submitit then requeues a
    :class:`UnitTask`)."""
    return min(120, max(10, time_min * 6))


def _executor(options: Options, logs: Path, chapter: str, dependency: str | None = None,
              name: str | None = None) -> Any:
    import submitit

    if options.executor == "local":
        executor = submitit.LocalExecutor(folder=logs)
        executor.update_parameters(timeout_min=options.time_min, gpus_per_node=options.gpus_per_task)
        return executor
    executor = submitit.SlurmExecutor(folder=logs)
    parameters: dict[str, Any] = {"job_name": name or f"gmp-{chapter}", "time": options.time_min,
                                  "cpus_per_task": options.cpus_per_task,
                                  "signal_delay_s": signal_delay_s(options.time_min)}
    if options.gpus_per_task:
        parameters["gpus_per_task"] = options.gpus_per_task
    for key, value in (("partition", options.partition), ("account", options.account), ("dependency", dependency)):
        if value:
            parameters[key] = value
    if options.mem_gb:
        parameters["mem"] = f"{max(1, round(options.mem_gb * 1024))}M"
    if options.array_parallelism:
        parameters["array_parallelism"] = options.array_parallelism
    executor.update_parameters(**parameters)
    return executor


def submit(options: Options, chapter: str, scale: str, seed: int, device: str, journal: Path,
           keys: Sequence[str] | Sequence[Stack]) -> tuple[list[Task], list[Any]]:
    """Submit one task per unit of ``keys`` (or per :class:`Stack`, of a :data:`STACKED` chapter; one array on
    Slurm), each with ``options.cpus_per_task`` threads, and record them in ``submitted.json``; the tasks and
    submitit's jobs."""
    import submitit

    folder = cluster_folder(journal)
    logs = folder / "logs"
    n = len(keys)
    stacks = [k for k in keys if isinstance(k, Stack)]
    what = ([[s.dataset for s in stacks], [list(s.labels) for s in stacks]] if stacks else [list(keys)])
    try:
        jobs = _executor(options, logs, chapter).map_array(
            StackTask() if stacks else UnitTask(), [chapter] * n, [scale] * n, [seed] * n, [device] * n, *what,
            [str(folder)] * n, [options.cpus_per_task] * n,
            *([[60 * options.time_min - signal_delay_s(options.time_min)] * n] if stacks else []))
    except (submitit.core.utils.FailedJobError, RuntimeError) as err:  # no srun, or sbatch refused the array
        raise ValueError(f"--executor {options.executor} could not submit the units of {chapter}: "
                         f"{' '.join(str(err).split())}. On a cluster, run it where sbatch and srun work (a login "
                         "node); elsewhere use --executor local") from None
    tasks = [Task(key.name if isinstance(key, Stack) else key, str(job.job_id), str(job.paths.stderr),
                  str(job.paths.result_pickle), list(key.keys) if isinstance(key, Stack) else [])
             for key, job in zip(keys, jobs)]
    _record(folder, tasks)
    return tasks, jobs


def _record(folder: Path, tasks: Sequence[Task]) -> None:
    """Add ``tasks`` to ``folder/submitted.json``: a rerun waits on those still queued or running."""
    path = folder / "submitted.json"
    known = json.loads(path.read_text()) if path.is_file() else []
    known += [dataclasses.asdict(task) for task in tasks]
    _results.atomic_write_json(path, known)


def submitted(folder: Path) -> list[Task]:
    """The tasks recorded in ``folder/submitted.json``."""
    path = folder / "submitted.json"
    return [Task(**task) for task in json.loads(path.read_text())] if path.is_file() else []


SQUEUE_TRIES = 5


def queued(ids: Sequence[str]) -> set[str]:
    """Which of the Slurm task ids ``ids`` (``<array>_<index>`` or a job id) ``squeue`` still lists (queued,
    running, completing or requeued); a RuntimeError naming ``squeue``'s complaint when it fails
    :data:`SQUEUE_TRIES` times in a row."""
    arrays = sorted({i.split("_")[0] for i in ids})
    if not arrays:
        return set()
    for attempt in range(SQUEUE_TRIES):
        done = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)], capture_output=True,
                              text=True)
        if done.returncode == 0:
            listed = set(done.stdout.split())
            return {i for i in ids if i in listed}
        if "Invalid job id" in done.stderr:  # every job has left the queue (MinJobAge passed)
            return set()
        time.sleep(2**attempt)
    raise RuntimeError(f"squeue failed {SQUEUE_TRIES} times ({done.stderr.strip()}): is the Slurm controller "
                       "reachable? The tasks go on; rerun the same command to wait for them and assemble the cache")


def _ended_why(task: Task, units: Path) -> str:
    """What became of a task that left the queue without its unit file, read from submitit's result file and log."""
    import submitit

    result = Path(task.result)
    tail = ""
    with contextlib.suppress(OSError):
        lines = [line for line in Path(task.log).read_text(errors="replace").splitlines() if line.strip()]
        tail = f"; its log ends: {lines[-1].strip()[:300]}" if lines else ""
    if result.is_file():
        with contextlib.suppress(Exception):
            outcome, value = submitit.core.utils.pickle_load(result)
            if outcome == "success":
                return (f"finished, yet its unit file {units / unit_file_name(task.key)} is not there: is "
                        f"{units} on a filesystem that every node shares? (log: {task.log})")
            return f"failed: {str(value).strip().splitlines()[-1][:300] if str(value).strip() else outcome} (log: {task.log})"
    return (f"ended without a result (cancelled, out of time or memory, or its node failed): see its log "
            f"{task.log}{tail}")


def wait(options: Options, tasks: Sequence[Task], journal: Path, jobs: Sequence[Any] = (),
         poll: Callable[[int], float] = lambda n: min(30.0, 1.5**n)) -> list[Task]:
    """Wait until every task in ``tasks`` has written its unit file or left the queue, merging unit files into
    ``journal`` as they come (looked for every second); the tasks that ended without their unit file. Whether a
    task is still queued or running is asked less often, after ``poll(n)`` seconds the ``n``-th time (Slurm:
    ``squeue``, at most every 30 s by default; local: the processes of ``jobs``)."""
    local = {str(job.job_id): job for job in jobs}
    left = {task.id: task for task in tasks}
    have = set(_results.journal_units(journal))
    failed: list[Task] = []
    checks, ask = 0, time.monotonic() + poll(0)
    while left:
        have |= set(merge(journal))
        for task in [t for t in left.values() if all(k in have for k in t.units)]:
            del left[task.id]
        if left and time.monotonic() >= ask:
            running = queued(list(left)) if options.executor == "slurm" else {
                i for i in left if i in local and not local[i].done()}
            have |= set(merge(journal))  # a task that wrote its file and left the queue since the first look
            for task_id in [i for i in left if i not in running]:
                task = left.pop(task_id)
                if not all(k in have for k in task.units):
                    failed.append(task)
            checks += 1
            ask = time.monotonic() + poll(checks)
        if left:
            time.sleep(1.0)
    return failed


def check_chapter(chapter: str) -> None:
    """A ValueError unless ``chapter`` splits into units that ``--executor`` can run as tasks (independent ones, or
    the networks of a :data:`STACKED` chapter)."""
    units_of(chapter, "for --executor")


def assemble_command(chapter: str, scale: str, device: str, seed: int, options: Options) -> list[str]:
    """The command of ``--detach``'s assembling job: this run without ``--detach``, with the task's threads."""
    undetached = dataclasses.replace(options, detach=False)
    return ["env", f"OMP_NUM_THREADS={options.cpus_per_task}", sys.executable, "-m", "gmp.runs", chapter,
            "--scale", scale, "--device", device, "--seed", str(seed), *undetached.flags().split()]


def execute(options: Options, chapter: str, scale: str, device: str, seed: int, journal: Path) -> dict[str, Any]:
    """The executor's part of a run of ``chapter`` (called by :func:`gmp.runs.run` under the run's lock): merge
    finished unit files, submit the missing units (a unit whose task of an earlier submission is still queued or
    running is waited for instead), wait and merge; what it did, for the provenance (``journalled_units``: the
    units it added to the journal, from unit files, an earlier submission's too, and from a cache of the same
    config). A :data:`STACKED` chapter's tasks are stacks of networks (:func:`plan_stacks`). A :class:`TasksFailed`
    names each task that ended without its unit file, once all have ended. With ``options.detach``, submit the
    array and a job that runs :func:`assemble_command` once it succeeded, and raise :class:`Detached`."""
    import submitit

    check_chapter(chapter)
    folder = cluster_folder(journal)
    before = set(_results.journal_units(journal))
    earlier = [t for t in submitted(folder) if not all(k in before for k in t.units)]
    busy = queued([t.id for t in earlier]) if options.executor == "slurm" else set()
    waiting = [t for t in earlier if t.id in busy]
    held = [k for t in waiting for k in t.units]
    stacked = chapter in STACKED
    keys = (plan_stacks(chapter, scale, seed, journal, held, options.networks_per_task) if stacked
            else plan(chapter, scale, seed, journal, busy=held))
    what = "stacks of networks" if stacked else "units"
    started = time.time()
    tasks: list[Task] = []
    failed: list[Task] = []
    if not keys and not waiting:
        print(f"gmp.runs: every unit of {chapter} is journalled or cached already: nothing to submit, the notebook "
              f"assembles the cache from them", file=sys.stderr)
    if waiting:
        print(f"gmp.runs: {len(waiting)} {what} of {chapter} are still queued or running from an earlier submission; "
              f"waiting for them", file=sys.stderr)
    # submitit's local executor starts every task of an array at once: locally, a chunk at a time
    chunk = max(1, len(keys)) if options.executor == "slurm" else options.array_parallelism or max(
        1, len(os.sched_getaffinity(0)) // options.cpus_per_task)
    for start in range(0, len(keys), chunk):
        new, jobs = submit(options, chapter, scale, seed, device, journal, keys[start:start + chunk])
        tasks += new
        print(f"gmp.runs: submitted {len(new)} {what} of {chapter} as "
              f"{'Slurm array ' + new[0].id.split('_')[0] if options.executor == 'slurm' else 'local processes'} "
              f"(logs in {folder / 'logs'})", file=sys.stderr)
        if options.executor == "local":
            failed += wait(options, new, journal, jobs)
    if options.detach:
        arrays = sorted({t.id.split("_")[0] for t in waiting + tasks})
        if not arrays:
            raise ValueError(f"--detach: every unit of {chapter} is journalled already; run without --detach to "
                             "assemble the cache now")
        job = _executor(options, folder / "logs", chapter, dependency="afterok:" + ":".join(arrays),
                        name=f"gmp-{chapter}-assemble").submit(submitit.helpers.CommandFunction(
                            assemble_command(chapter, scale, device, seed, options), cwd=Path.cwd()))
        raise Detached(f"submitted {len(keys)} {what} of {chapter} as Slurm array {', '.join(arrays)} and the job "
                       f"{job.job_id} that assembles the cache once they all succeed (afterok): follow them with "
                       f"squeue; the logs are in {folder / 'logs'}")
    if options.executor == "slurm":
        failed += wait(options, waiting + tasks, journal)
    if failed:
        units = folder / "units"
        raise TasksFailed(f"{len(failed)} of {len(waiting) + len(tasks)} tasks of {chapter} ended without their unit "
                          f"file:\n  " + "\n  ".join(f"{'stack' if t.keys else 'unit'} {t.key!r} (task {t.id}) "
                                                     f"{_ended_why(t, units)}"
                                                     for t in failed)
                          + "\nThe units that finished are journalled; rerun the same command to submit only the rest")
    _clean(folder)
    return {"executor": options.executor, "options": options.flags(),
            "submitted_units": sum(k.units for k in keys) if stacked else len(keys), "submitted_tasks": len(tasks),
            "waited_units": len(waiting), "journalled_units": len(set(_results.journal_units(journal)) - before),
            "tasks_wall_s": round(time.time() - started, 1)}


def _clean(folder: Path) -> None:
    """Remove the executor's ``folder`` once its units are journalled, but for the log of the Slurm job this runs in
    (``--detach``'s assembling job, which submitit still writes to)."""
    own = os.environ.get("SLURM_JOB_ID")
    for path in sorted(folder.glob("*")) + sorted(folder.glob("logs/*")):
        if path.name == "logs" or (own and path.parent.name == "logs" and path.name.startswith(f"{own}_")):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for path in (folder / "logs", folder):
        with contextlib.suppress(OSError):
            path.rmdir()
