"""gmp.cluster: a chapter's units as a Slurm job array through submitit, checked on a real single-node Slurm
(tests/single_node_slurm.py; the tests named test_slurm_* share it, on one pytest-xdist worker), and the
executor's messages and options without one."""

import gzip
import json
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import single_node_slurm
from gmp import cluster, config, results, runs, verification

ROOT = Path(__file__).resolve().parents[1]


def _cache_differences(a: Path, b: Path) -> list[str]:
    """Where the caches in folders ``a`` and ``b`` differ: their JSON payloads and arrays, and their units' values
    (wall-clock fields, those ending in ``_s`` and ``seconds``, aside; the provenance and notebook aside)."""
    def names(folder):
        return sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".npz") and p.name != "provenance.json")

    def units(folder):
        lines = gzip.decompress((folder / "units.jsonl.gz").read_bytes()).decode().splitlines()
        return {entry["key"]: entry["value"] for entry in map(json.loads, lines)}

    if names(a) != names(b):
        return [f"files: {names(a)} and {names(b)}"]
    out = []
    for name in names(a):
        if name.endswith(".json"):
            out += verification.compare(json.loads((a / name).read_text()), json.loads((b / name).read_text()), 0, 0,
                                        name)
        else:
            x, y = np.load(a / name), np.load(b / name)
            out += [f"{name}: arrays {sorted(x.files)} and {sorted(y.files)}"] if sorted(x.files) != sorted(y.files) \
                else [f"{name}[{k}]" for k in x.files if not np.array_equal(x[k], y[k], equal_nan=True)]
    return out + verification.compare(units(a), units(b), 0, 0, "units")


def _runner(chapter: str, results_root: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gmp.runs", chapter, "--scale", "smoke", "--device", "cpu", *extra],
                            cwd=ROOT, env={**os.environ, **(env or {}), results.ROOT_ENV: str(results_root),
                                           "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out + err


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A single-node Slurm cluster in a temporary folder, its daemons stopped at the end whatever happens; skips
    (with the command that installs the packages) where it cannot start."""
    why = single_node_slurm.missing()
    if why:
        pytest.skip(f"the real-Slurm test {why} (make test runs .ci/slurm, which installs them as root)")
    with single_node_slurm.cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield {**os.environ, **env}


def test_slurm_detached_array_assembles_the_cache_a_local_run_assembles_without_sacct(slurm, tmp_path):
    """Part I's chen_levy at smoke scale with ``--detach``: its units as a Slurm array on a cluster without
    accounting (``sacct`` fails there) and a job that assembles the cache after it (afterok) give the cache of a
    plain run on this machine; only the assembling job's log is left beside the journal."""
    accounting = subprocess.run(["sacct"], capture_output=True, text=True, env=slurm)
    assert accounting.returncode != 0 and "accounting storage is disabled" in accounting.stderr
    local = _runner("chen_levy", tmp_path / "local")
    started = time.monotonic()
    code, output = _finish(_runner("chen_levy", tmp_path / "slurm", "--executor", "slurm", "--detach", env=slurm))
    assert code == 0 and "that assembles the cache once they all succeed (afterok)" in output, output
    slurm_cache = tmp_path / "slurm" / "chen_levy" / "smoke"
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=slurm, check=True).stdout.strip():
        assert time.monotonic() < started + 900, "the array and its assembling job did not end within 15 minutes"
        time.sleep(0.5)
    print(f"chen_levy smoke: submit to cache on the single-node Slurm in {time.monotonic() - started:.1f} s")
    assert _finish(local)[0] == 0
    logs = sorted((tmp_path / "slurm" / "chen_levy" / "_partial").glob("*/cluster/logs/*"))
    assert slurm_cache.is_dir(), "\n".join(p.read_text() for p in logs if p.suffix == ".err")
    assert _cache_differences(tmp_path / "local" / "chen_levy" / "smoke", slurm_cache) == []
    provenance = json.loads((slurm_cache / "provenance.json").read_text())
    keys = cluster.unit_keys("chen_levy", config.load("chen_levy", "smoke"), 0)
    assert provenance["executor"]["submitted_units"] == 0 and provenance["resumed_units"] == 0
    assert provenance["executor"]["journalled_units"] == len(keys) == 4
    assert provenance["command"].endswith("--executor slurm --time 60 --cpus-per-task 1")
    entries = [json.loads(line) for line in gzip.decompress((slurm_cache / "units.jsonl.gz").read_bytes()).splitlines()]
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert {(e["node"], e["device"], e["threads"]) for e in entries} == {(host, "cpu", 1)}
    assert sorted(e["task"].split("_")[1] for e in entries) == ["0", "1", "2", "3"]
    array = entries[0]["task"].split("_")[0]
    assert logs and all(not p.name.startswith(f"{array}_") for p in logs)  # the tasks' logs removed, not the job's


def test_slurm_a_cancelled_array_resumes_with_only_its_missing_units(slurm, tmp_path):
    """Part III's sbsnn_gap: cancelling its array once some units finished makes the driver name the cancelled
    tasks and exit 1 with the finished units journalled; the rerun submits only the others, and the cache equals
    a plain run's."""
    local = _runner("sbsnn_gap", tmp_path / "local")
    cfg = config.load("sbsnn_gap", "smoke")
    keys = cluster.unit_keys("sbsnn_gap", cfg, 0)
    journal = tmp_path / "slurm" / "sbsnn_gap" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    driver = _runner("sbsnn_gap", tmp_path / "slurm", "--executor", "slurm", env=slurm)
    deadline = time.monotonic() + 300
    while len(results.journal_entries(journal)) < 2 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    array = cluster.submitted(cluster.cluster_folder(journal))[0].id.split("_")[0]
    subprocess.run(["scancel", array], check=True, env=slurm)
    code, output = _finish(driver)
    done = results.journal_units(journal)
    assert code == 1 and 2 <= len(done) < len(keys), output
    assert f"{len(keys) - len(done)} of {len(keys)} tasks of sbsnn_gap ended without their unit file" in output
    assert output.count("ended without a result (cancelled, out of time or memory, or its node failed)") \
        == len(keys) - len(done)
    assert "rerun the same command to submit only the rest" in output
    code, output = _finish(_runner("sbsnn_gap", tmp_path / "slurm", "--executor", "slurm", env=slurm))
    assert code == 0, output
    assert f"submitted {len(keys) - len(done)} units of sbsnn_gap as Slurm array" in output
    assert _finish(local)[0] == 0
    slurm_cache = tmp_path / "slurm" / "sbsnn_gap" / "smoke"
    assert _cache_differences(tmp_path / "local" / "sbsnn_gap" / "smoke", slurm_cache) == []
    provenance = json.loads((slurm_cache / "provenance.json").read_text())
    assert provenance["executor"]["submitted_units"] == provenance["executor"]["journalled_units"] == len(keys) - len(done)
    assert provenance["resumed_units"] == len(done)


def test_slurm_trains_lu_reals_last_stack_as_one_task_whose_unit_file_holds_its_networks_epochs(slurm, tmp_path,
                                                                                                  monkeypatch):
    """lu_real at smoke scale on the single-node Slurm, three of its four stacks journalled already: the driver
    submits one task, which trains the last stack whole (:class:`gmp.cluster.StackTask`), and merges its unit file:
    every epoch of its four networks, each equal to the stacked trainer's here (one thread), with the node, the
    device and the Slurm task. No notebook runs (the local-executor test compares the caches)."""
    import torch

    from gmp.experiments.lu_real import epoch_key
    from gmp.gpu.lu_real import pending_groups, train_stack

    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    cfg = config.load("lu_real", "smoke")
    journal = results.journal_path("lu_real", "smoke", cfg.digest)
    *done, (dataset, labels) = pending_groups(cfg, {}, 0)
    results.append_journal(journal, [json.dumps({"key": epoch_key(d, label, 0, 1), "value": {"diverged": False}})
                                     for d, group in done for label in group])
    started = time.monotonic()
    out = cluster.execute(cluster.Options("slurm"), "lu_real", "smoke", "cpu", 0, journal)
    print(f"lu_real smoke, one stack on the single-node Slurm: {time.monotonic() - started:.1f} s")
    assert (out["submitted_tasks"], out["submitted_units"], out["journalled_units"]) == (1, 4, 4)
    entries = results.journal_entries(journal)[12:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here, _ = train_stack(tmp_path / "work", cfg, "cpu", 0, dataset, labels)
    finally:
        torch.set_num_threads(threads)
    assert [e["key"] for e in entries] == [e["key"] for e in here] == [epoch_key(dataset, label, 0, 1)
                                                                        for label in labels]
    for entry, want in zip(entries, here):
        assert verification.compare({k: v for k, v in entry["value"].items() if k != "seconds"},
                                    {k: v for k, v in want["value"].items() if k != "seconds"}, 0, 0) == []
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert {(e["node"], e["device"], e["threads"]) for e in entries} == {(host, "cpu", 1)}
    # one task: submitit sends it as a plain job, whose id the entries record (before, "local <pid>")
    assert len({e["task"] for e in entries}) == 1 and entries[0]["task"].isdigit()
    assert not cluster.cluster_folder(journal).exists()


def _fake_slurm(folder: Path, squeue: str = "exit 0", sbatch: str = "exit 1") -> None:
    """``squeue`` and ``sbatch`` running the shell code given, an ``srun`` and an ``sacct`` that fails and leaves
    ``sacct-called``."""
    folder.mkdir(exist_ok=True)
    for name, body in (("squeue", squeue), ("sbatch", sbatch), ("srun", "exit 0"),
                       ("sacct", f"touch {folder}/sacct-called; exit 1")):
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)


def test_failed_cancelled_and_lost_tasks_are_named_with_their_logs_and_finished_units_kept(tmp_path, monkeypatch):
    """Without sacct (it fails and is never called): a task whose unit raised, one that left the queue without a
    result, and one that succeeded but whose unit file is not there are each named with what became of it and its
    log; the unit that finished is journalled, and the rerun plans only the other three."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    _fake_slurm(tmp_path / "bin", "exit 0")  # an empty queue: every task has ended
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    cfg = config.load("chen_levy", "smoke")
    journal = results.journal_path("chen_levy", "smoke", cfg.digest)
    keys = cluster.unit_keys("chen_levy", cfg, 0)
    logs = cluster.cluster_folder(journal) / "logs"

    def submit(options, chapter, scale, seed, device, journal_, todo):
        logs.mkdir(parents=True)
        tasks = [cluster.Task(key, f"7_{i}", str(logs / f"7_{i}_0_log.err"), str(logs / f"7_{i}_0_result.pkl"))
                 for i, key in enumerate(todo)]
        for task, outcome in zip(tasks, ("unit", ("error", "Traceback ...\nValueError: GMP_DATA has no levy.npz"),
                                         ("success", keys[2]), None)):
            Path(task.log).write_text("starting\nsrun: error: task 0: Killed\n")
            if outcome == "unit":
                line = json.dumps({"key": task.key, "value": {"loss": 1.0}, "seconds": 0.1})
                results.atomic_write_bytes(cluster.cluster_folder(journal) / "units" / cluster.unit_file_name(task.key),
                                           (line + "\n").encode())
            elif outcome is not None:
                Path(task.result).write_bytes(pickle.dumps(outcome))
        return tasks, []

    monkeypatch.setattr(cluster, "submit", submit)
    with pytest.raises(cluster.TasksFailed) as failed:
        cluster.execute(cluster.Options("slurm"), "chen_levy", "smoke", "cpu", 0, journal)
    message = str(failed.value)
    assert message.startswith("3 of 4 tasks of chen_levy ended without their unit file")
    assert f"unit {keys[1]!r} (task 7_1) failed: ValueError: GMP_DATA has no levy.npz (log: {logs}/7_1_0_log.err)" in message
    assert (f"unit {keys[2]!r} (task 7_2) finished, yet its unit file "
            f"{cluster.cluster_folder(journal) / 'units' / cluster.unit_file_name(keys[2])} is not there: is") in message
    assert "on a filesystem that every node shares?" in message
    assert (f"unit {keys[3]!r} (task 7_3) ended without a result (cancelled, out of time or memory, or its node "
            f"failed): see its log {logs}/7_3_0_log.err; its log ends: srun: error: task 0: Killed") in message
    assert results.journal_units(journal) == {keys[0]: {"loss": 1.0}}
    assert not (tmp_path / "bin" / "sacct-called").exists()
    assert cluster.plan("chen_levy", "smoke", 0, journal) == keys[1:]


def test_a_failing_squeue_is_retried_then_named(tmp_path, monkeypatch):
    _fake_slurm(tmp_path / "bin", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(cluster, "SQUEUE_TRIES", 2)
    with pytest.raises(RuntimeError, match=r"squeue failed 2 times \(slurm_load_jobs error: Unable to contact slurm "
                                           r"controller\): is the Slurm controller reachable\? The tasks go on; rerun"):
        cluster.queued(["12_0", "12_1"])
    _fake_slurm(tmp_path / "bin", "echo '12_1'; echo '13_0'")
    assert cluster.queued(["12_0", "12_1"]) == {"12_1"}


def test_merge_adds_each_unit_once_and_leaves_a_damaged_unit_file(tmp_path, capsys):
    journal = tmp_path / "_partial" / "smoke-abc.jsonl"
    units = cluster.cluster_folder(journal) / "units"
    results.append_journal(journal, [json.dumps({"key": "a", "value": 1})])
    for key, text in (("a", json.dumps({"key": "a", "value": 2})), ("b", json.dumps({"key": "b", "value": 3})),
                      ("c", '{"key": "c", "val')):
        results.atomic_write_bytes(units / cluster.unit_file_name(key), (text + "\n").encode())
    assert cluster.merge(journal) == ["b"]
    assert results.journal_units(journal) == {"a": 1, "b": 3}
    assert [p.name for p in units.iterdir()] == [cluster.unit_file_name("c")]
    assert f"{units / cluster.unit_file_name('c')} is not whole (a line is not a journal entry)" in capsys.readouterr().err
    assert cluster.unit_file_name("x/y") != cluster.unit_file_name("x_y")


def test_a_refused_submission_is_named_with_what_to_do(tmp_path, monkeypatch, capsys):
    _fake_slurm(tmp_path / "bin", sbatch="echo 'sbatch: error: Batch job submission failed: Invalid account' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    with pytest.raises(SystemExit):
        runs.main(["chen_levy", "--scale", "smoke", "--executor", "slurm", "--account", "nobody"])
    assert ("--executor slurm could not submit the units of chen_levy: sbatch: error: Batch job submission failed: "
            "Invalid account. On a cluster, run it where sbatch and srun work") in capsys.readouterr().err


@pytest.mark.parametrize("text, minutes", [("90", 90), ("1:30", 2), ("1:30:00", 90), ("2-0", 2880),
                                           ("1-12:00", 2160), ("0-0:0:30", 1)])
def test_time_limits_in_slurms_forms_are_whole_minutes(text, minutes):
    assert cluster.time_minutes(text) == minutes


@pytest.mark.parametrize("args, message", [
    (["--partition", "gpu"], "--partition goes with --executor slurm (or local)"),
    (["--executor", "local", "--detach"], "--detach submits a Slurm job that assembles the cache later"),
    (["--executor", "slurm", "--time", "soon"], "--time 'soon' is not a Slurm time limit"),
    (["--executor", "slurm", "--mem", "0G"], "--mem '0G' is not an amount of memory"),
    (["--executor", "slurm", "--cpus-per-task", "0"], "--cpus-per-task must be at least 1"),
    (["--executor", "slurm", "--jobs", "2"], "--jobs and --executor are two ways to compute the units"),
    (["--executor", "slurm", "--verify"], "--executor computes a run's units; --verify"),
    (["--executor", "local", "--networks-per-task", "3"], "--networks-per-task sizes the stacks of networks of "
                                                          "lu_real; each task of chen_levy is one unit"),
    (["--executor", "local", "--chapter", "lu_real", "--networks-per-task", "0"], "--networks-per-task must be at "
                                                                                  "least 1"),
    (["--executor", "local", "--chapter", "chen_vgg"], "chen_vgg does not split into independent units for --executor"),
    (["--executor", "slurm", "--mem", "-3G"], "--mem '-3G' is not an amount of memory"),
    (["--executor", "local", "--partition", "gpu"], "--partition ask Slurm for something, and --executor local runs "
                                                    "no Slurm job: drop them, or use --executor slurm"),
    (["--executor", "local", "--mem", "3G", "--account", "a"], "--mem, --account ask Slurm for something"),
    (["--executor", "slurm", "--device", "cpu", "--gpus-per-task", "1"], "--gpus-per-task 1 gives each task GPUs "
                                                                         "that --device cpu leaves idle"),
    (["--executor", "local", "--chapter", "book/part3/sbsnn_gap.md"], "give the chapter by its name, sbsnn_gap, "
                                                                      "not as the path book/part3/sbsnn_gap.md"),
])
def test_cluster_options_are_checked_before_anything_is_submitted(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    chapter = args[args.index("--chapter") + 1] if "--chapter" in args else "chen_levy"
    args = [a for a in args if a not in ("--chapter", chapter)]
    with pytest.raises(SystemExit):
        runs.main([chapter, "--scale", "smoke", *args])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_chapters_offered_for_executor_are_those_it_can_run(tmp_path, monkeypatch, capsys):
    """Issue #48's probe: the refusal of chen_vgg offered lu_real, which --executor refuses too."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    with pytest.raises(SystemExit):
        runs.main(["chen_vgg", "--scale", "smoke", "--executor", "local"])
    offered = capsys.readouterr().err.split("(these split: ")[1].split(")")[0].split(", ")
    assert "chen_levy" in offered
    for chapter in offered:
        cluster.check_chapter(chapter)


def test_an_executor_with_nothing_to_submit_says_so(tmp_path, monkeypatch, capsys):
    """Issue #48's probe: --executor slurm where sbatch is missing ran and cached without a word when the cache
    held every unit (nothing was submitted)."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    cfg = config.load("chen_levy", "smoke")
    journal = results.journal_path("chen_levy", "smoke", cfg.digest)
    results.append_journal(journal, [json.dumps({"key": key, "value": 0.0})
                                     for key in cluster.unit_keys("chen_levy", cfg, 0)])
    assert cluster.execute(cluster.Options("local"), "chen_levy", "smoke", "cpu", 0, journal)["submitted_units"] == 0
    assert "every unit of chen_levy is journalled or cached already: nothing to submit" in capsys.readouterr().err


def test_the_local_executor_journals_the_unit_a_run_on_one_machine_computes(tmp_path, monkeypatch):
    """``--executor local``: submitit's local executor runs each missing unit in its own process with
    ``--cpus-per-task`` threads; the journal then holds the value that ``Store.memo`` computes here, with the node
    and device. Three of chen_levy's four units are journalled first, so that one process starts."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    cfg = config.load("chen_levy", "smoke")
    journal = results.journal_path("chen_levy", "smoke", cfg.digest)
    from gmp.experiments import chen_levy

    here = chen_levy.units(cfg, results.Store("chen_levy", cfg), 0, "cpu")
    *first, last = here
    results.append_journal(journal, [json.dumps({"key": key, "value": here[key]()}) for key in first])
    done = cluster.execute(cluster.Options("local", cpus_per_task=1), "chen_levy", "smoke", "cpu", 0, journal)
    assert done["submitted_units"] == 1 and not cluster.cluster_folder(journal).exists()
    entry = results.journal_entries(journal)[-1]
    assert entry["key"] == last and len(results.journal_entries(journal)) == 4
    assert verification.compare(entry["value"], json.loads(json.dumps(here[last]())), 0, 0) == []
    assert entry["threads"] == 1 and entry["device"] == "cpu" and entry["task"].startswith("local ")
    assert cluster.plan("chen_levy", "smoke", 0, journal) == []
    for executor in cluster.EXECUTORS:  # nothing left to submit: the run goes on to its notebook
        assert cluster.execute(cluster.Options(executor), "chen_levy", "smoke", "cpu", 0, journal)["submitted_units"] == 0


def test_costs_sum_the_measured_unit_seconds_and_estimate_the_unmeasured_from_them(tmp_path, monkeypatch):
    """gmp.costs (the running page's table): a cache's units are summed by the device that computed them; a chapter
    with only a journal, some of its units measured, is estimated at their mean times its units."""
    from gmp import costs

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    lines = [{"key": "a", "value": 1, "seconds": 60.0, "threads": 1},
             {"key": "b", "value": 1, "seconds": 180.0, "device": "cuda (NVIDIA H200)", "threads": 16}]
    cache = tmp_path / "chen_levy" / "paper" / "units.jsonl.gz"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in lines).encode()))
    cost = costs.unit_costs("chen_levy")
    assert cost["units"] == len(cluster.unit_keys("chen_levy", config.load("chen_levy", "paper"), 0))
    assert (cost["measured"], cost["seconds"], cost["longest_s"], cost["threads"], cost["source"]) == (2, 240.0, 180.0,
                                                                                                       [1, 16], "cache")
    assert cost["devices"] == {"cpu": 1, "cuda (NVIDIA H200)": 1} and cost["estimated_s"] == 120.0 * cost["units"]
    journal = tmp_path / "sbsnn_gap" / "_partial" / "paper-0123.jsonl"
    results.append_journal(journal, [json.dumps({"key": "full-0", "value": 1, "seconds": 900.0})])
    row = costs.cost_table(["chen_levy", "sbsnn_gap"])[1]
    assert (row["source"], row["units"], row["hours"], row["longest_min"]) == ("journal", 7, 900.0 * 7 / 3600, 15.0)
    table = costs.markdown(costs.cost_table(["chen_levy", "sbsnn_gap", "chen_uci"]))
    assert "| sbsnn_gap | 7 | cpu | 1.75 (est. from 1) | 15.0 |" in table
    assert "| chen_uci | " in table and "not yet measured" in table


def test_a_task_cut_by_its_time_limit_is_requeued_with_the_same_unit():
    """On Slurm's warning signal submitit asks the task's function for its checkpoint and requeues what it returns:
    the same unit, which then resumes from the checkpoint its fit left in the task's work folder."""
    args = ("chen_levy", "paper", 0, "cpu", "SP-seed0", "/shared/cluster", 4)
    again = cluster.UnitTask().checkpoint(*args)
    assert isinstance(again.function, cluster.UnitTask) and again.args == args


def test_lu_real_through_the_local_executor_trains_only_the_stacks_without_a_unit_file_and_caches_the_stacked_run(
        tmp_path):
    """lu_real at smoke scale through ``--executor local``: each task trains a stack of networks whole (a data set,
    without or with BN) and writes one unit file with every epoch of its networks. Three of the four stacks' unit
    files are there before the run (written by :class:`gmp.cluster.StackTask` here, as tasks that finished before
    an interruption leave them): the run merges them and submits only the last. Its cache equals that of a plain
    run (``python -m gmp.runs lu_real --scale smoke``) whose journal holds the same stacks trained here with the
    stacked trainer (:func:`gmp.gpu.lu_real.train_stack`, one thread): bitwise, wall-clock fields aside (those
    ending in ``_s`` and ``seconds``, and cost.json's hours, which the notebook derives from a step it times). (The
    one-network trainer of a plain run without that journal differs from the stacked one by float32 rounding only:
    at smoke scale up to 3e-6 relative, in drift; lu_real declares no unit tolerance, so that is not compared.)"""
    import torch

    from gmp.gpu.lu_real import pending_groups, train_stack

    cfg = config.load("lu_real", "smoke")
    groups = pending_groups(cfg, {}, 0)
    assert [(d, len(labels)) for d, labels in groups] == [("digits", 4), ("digits", 4), ("mnist1d", 4), ("mnist1d", 4)]
    journal = tmp_path / "executor" / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    units = cluster.cluster_folder(journal) / "units"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each task, with --cpus-per-task 1
    try:
        for dataset, labels in groups[:3]:
            cluster.StackTask()("lu_real", "smoke", 0, "cpu", dataset, labels, str(units.parent), 1)
        finished = [line for path in sorted(units.glob("*.jsonl")) for line in path.read_text().splitlines()]
        rest = [json.dumps(e) for e in train_stack(tmp_path / "work", cfg, "cpu", 0, *groups[3])[0]]
    finally:
        torch.set_num_threads(threads)
    assert (len(finished), len(rest)) == (12, 4)
    assert not list((units.parent / "work").iterdir())  # each task removes its own work folder
    results.append_journal(tmp_path / "plain" / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl", finished + rest)
    started = time.monotonic()
    plain = _runner("lu_real", tmp_path / "plain")
    code, output = _finish(_runner("lu_real", tmp_path / "executor", "--executor", "local"))
    assert code == 0, output
    assert "submitted 1 stacks of networks of lu_real as local processes" in output  # only the rest
    assert _finish(plain)[0] == 0
    print(f"lu_real smoke: the plain run and the executor's in {time.monotonic() - started:.1f} s")
    cache = tmp_path / "executor" / "lu_real" / "smoke"
    timed = re.compile(r"cost\.json\['\w+_hours'\]: ")  # derived from the step the notebook times
    assert [d for d in _cache_differences(tmp_path / "plain" / "lu_real" / "smoke", cache) if not timed.match(d)] == []
    provenance = json.loads((cache / "provenance.json").read_text())
    assert (provenance["executor"]["submitted_tasks"], provenance["executor"]["submitted_units"],
            provenance["executor"]["journalled_units"]) == (1, 4, 16)
    entries = [json.loads(line) for line in gzip.decompress((cache / "units.jsonl.gz").read_bytes()).splitlines()]
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert {(e["node"], e["device"], e["precision"], e["threads"]) for e in entries} == {
        (host, "cpu", "float32, TF32 off", 1)}
    tasks = {e["task"] for e in entries if e["key"].startswith("mnist1d/") and e["key"].endswith("-BN/seed0/epoch1")}
    assert len(tasks) == 1 and tasks.pop().startswith("local ")
    assert all(e["value"]["stacked"] == 4 for e in entries)


def test_lu_reals_stacks_are_its_groups_networks_without_an_epoch_cut_to_the_networks_per_task(tmp_path, monkeypatch):
    """What ``--executor`` submits for lu_real: per group (a data set, without or with BN), the networks with no
    journalled epoch, none busy in a task still queued, at most ``--networks-per-task`` to a stack; a network with
    some of its epochs journalled is refused with what to do, before anything is submitted."""
    from gmp.experiments.lu_real import epoch_key

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    cfg = config.load("lu_real", "smoke")
    journal = results.journal_path("lu_real", "smoke", cfg.digest)
    results.append_journal(journal, [json.dumps({"key": epoch_key("digits", label, 0, 1), "value": {"diverged": False}})
                                     for label in ("ReLU", "GELU")])
    stacks = cluster.plan_stacks("lu_real", "smoke", 0, journal, busy=[epoch_key("mnist1d", "GELU-BN", 0, 1)],
                                 per_task=3)
    assert [(s.dataset, s.labels, s.units) for s in stacks] == [
        ("digits", ("ReLU-GPN", "GELU-GPN"), 2), ("digits", ("ReLU-BN", "ReLU-GPN-BN", "GELU-BN"), 3),
        ("digits", ("GELU-GPN-BN",), 1), ("mnist1d", ("ReLU", "ReLU-GPN", "GELU"), 3), ("mnist1d", ("GELU-GPN",), 1),
        ("mnist1d", ("ReLU-BN", "ReLU-GPN-BN", "GELU-GPN-BN"), 3)]
    assert stacks[0].keys == (epoch_key("digits", "ReLU-GPN", 0, 1), epoch_key("digits", "GELU-GPN", 0, 1))
    assert len({cluster.unit_file_name(s.name) for s in stacks}) == len(stacks)
    longer = config.Config("lu_real", "smoke", {**cfg.as_dict(), "epochs": {"digits": 2, "mnist1d": 2}})
    monkeypatch.setattr(cluster._config, "load", lambda chapter, scale=None: longer)
    with pytest.raises(ValueError, match=r"--executor trains lu_real's networks whole, and cannot continue one: "
                                         r"digits ReLU: the journal holds 1 of 2 epochs"):
        cluster.plan_stacks("lu_real", "smoke", 0, results.journal_path("lu_real", "smoke", cfg.digest))


def test_a_stacks_unit_file_is_merged_whole_or_left_where_it_is(tmp_path, capsys):
    """A stack's unit file holds every epoch of its networks: merged in one write, or, with a line cut short, left
    there with a warning and none of its entries journalled."""
    journal = tmp_path / "_partial" / "smoke-abc.jsonl"
    units = cluster.cluster_folder(journal) / "units"
    whole = "".join(json.dumps({"key": f"d/{n}/seed0/epoch{e}", "value": e}) + "\n" for n in "ab" for e in (1, 2))
    results.atomic_write_bytes(units / cluster.unit_file_name("d: a, b"), whole.encode())
    results.atomic_write_bytes(units / cluster.unit_file_name("d: c"), (json.dumps(
        {"key": "d/c/seed0/epoch1", "value": 1}) + '\n{"key": "d/c/seed0/epo').encode())
    assert cluster.merge(journal) == [f"d/{n}/seed0/epoch{e}" for n in "ab" for e in (1, 2)]
    assert [p.name for p in units.iterdir()] == [cluster.unit_file_name("d: c")]
    assert "is not whole (a line is not a journal entry); left there" in capsys.readouterr().err
    assert "d/c/seed0/epoch1" not in results.journal_units(journal)


def test_a_stack_whose_measured_time_exceeds_its_task_journals_the_networks_that_fit_and_names_the_rest(
        tmp_path, monkeypatch):
    """A stack's task probes the stack first (as a GPU lease does): where the measured time of its four networks
    exceeds the task's time, it trains as many as fit, writes their unit file and fails naming the others, which
    the rerun plans; where not even one fits, it trains nothing and says so with the measured time."""
    from gmp import gpu
    from gmp.experiments.lu_real import epoch_key

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    cfg = config.load("lu_real", "smoke")
    journal = results.journal_path("lu_real", "smoke", cfg.digest)
    folder = cluster.cluster_folder(journal)
    first = cluster.plan_stacks("lu_real", "smoke", 0, journal)[0]
    dataset, labels = first.dataset, list(first.labels)
    step = {4: 60.0, 3: 45.0, 1: 1e9}  # seconds per step, by networks in the stack (4 steps an epoch at smoke)
    monkeypatch.setattr(gpu.lu_real, "probe", lambda chosen, *args, **kwargs: {
        "mode": "stacked kernels", "networks": len(chosen), "seconds_per_step": step[len(chosen)],
        "epoch_eval_seconds": 0.0, "final_seconds": 0.0})
    with pytest.raises(RuntimeError, match=r"trained 3 of its 4 networks \(ReLU, ReLU-GPN, GELU, journalled\) in the "
                                           r"task's 5 min: 3 networks journalled whole \(measured: 4 networks 4\.0 "
                                           r"min; 3 networks 3\.0 min\)\. Give a longer --time, or fewer"):
        cluster.StackTask()("lu_real", "smoke", 0, "cpu", dataset, labels, str(folder), 1, 240 + cluster.STACK_MARGIN_S)
    assert cluster.merge(journal) == [epoch_key(dataset, label, 0, 1) for label in labels[:3]]
    assert [s.labels for s in cluster.plan_stacks("lu_real", "smoke", 0, journal)][0] == ("GELU-GPN",)
    with pytest.raises(RuntimeError, match=r"trained 0 of its 1 networks in the task's 2 min: not even one network "
                                           r"finishes its 1 epochs"):
        cluster.StackTask()("lu_real", "smoke", 0, "cpu", dataset, ["GELU-GPN"], str(folder), 1, 100)
    assert not list((folder / "units").iterdir())
