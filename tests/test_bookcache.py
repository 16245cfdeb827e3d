"""A chapter's cached execution is dropped when gmp or its cached results change; the pages without one are
executed several at a time before the build (``make book``), and a Ctrl-C keeps those that finished."""

import itertools
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn

from conftest import ROOT
from gmp import bookcache


def _repo(tmp_path):
    (tmp_path / "_toc.yml").write_text("root: book/intro\n")
    (tmp_path / "gmp").mkdir()
    (tmp_path / "gmp" / "layers.py").write_text("A = 1\n")
    page = tmp_path / "book" / "part1" / "chen_levy.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Levy\n")
    other = tmp_path / "book" / "part1" / "chen_uci.md"
    other.write_text("# UCI\n")
    return page, other


def _cache_pages(tmp_path, *pages):
    cache = get_cache(tmp_path / "_build" / ".jupyter_cache")
    for i, page in enumerate(pages):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {i}")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(page)), check_validity=False)
    return cache


def test_results_of_one_chapter_invalidate_only_that_chapter_and_the_ledger(tmp_path):
    page, other = _repo(tmp_path)
    ledger = tmp_path / "book" / "claims.md"
    ledger.write_text("# Claims\n")
    _cache_pages(tmp_path, page, other)
    assert len(bookcache.invalidate(tmp_path, tmp_path)) == 3  # first call: nothing known, all change
    cache = _cache_pages(tmp_path, page, other)
    assert bookcache.invalidate(tmp_path, tmp_path) == []
    for p in (page, other, ledger):
        os.utime(p, (1_000_000, 1_000_000))
    results = tmp_path / "book" / "_results" / "chen_levy" / "paper"
    results.mkdir(parents=True)
    (results / "fig2.json").write_text("{}")
    assert bookcache.invalidate(tmp_path, tmp_path) == [str(page.resolve()), str(ledger.resolve())]
    assert [r.uri for r in cache.list_cache_records()] == [str(other)]
    assert page.stat().st_mtime > 1_000_000 and ledger.stat().st_mtime > 1_000_000
    assert other.stat().st_mtime == 1_000_000


def test_journal_of_an_unfinished_run_does_not_invalidate(tmp_path):
    page, _ = _repo(tmp_path)
    before = bookcache.fingerprint(page, tmp_path)
    partial = tmp_path / "book" / "_results" / "chen_levy" / "_partial"
    partial.mkdir(parents=True)
    (partial / "paper-abc.jsonl").write_text('{"key": 1}\n')
    assert bookcache.fingerprint(page, tmp_path) == before
    (tmp_path / "gmp" / "layers.py").write_text("A = 2\n")
    assert bookcache.fingerprint(page, tmp_path) != before


def test_a_page_that_reads_another_chapters_cache_is_invalidated_by_it(tmp_path):
    page, other = _repo(tmp_path)
    page.write_text('# Levy\n\n```{code-cell} ipython3\narms = gmp.results.cached("chen_levy_arms", "arms")\n```\n')
    before, other_before = bookcache.fingerprint(page, tmp_path), bookcache.fingerprint(other, tmp_path)
    results = tmp_path / "book" / "_results" / "chen_levy_arms" / "paper"
    results.mkdir(parents=True)
    (results / "arms.json").write_text("{}")
    assert bookcache.fingerprint(page, tmp_path) != before
    assert bookcache.fingerprint(other, tmp_path) == other_before  # chen_uci names no other chapter


@pytest.mark.parametrize("source", ['earlier_design=EarlierDesign(kept_as="x", chapter="chen_levy_arms")',
                                    'entry = _results.cached(\n    "chen_levy_arms", "arms", cfg.scale)'])
def test_a_page_whose_experiment_module_reads_another_chapters_cache_is_invalidated_by_it(tmp_path, source):
    """chen_banana's page shows the verdict of its earlier design kept as a check in chen_banana_arms, and an arms
    page the chapter's runs read from its cache, through their modules: the page names neither chapter."""
    page, other = _repo(tmp_path)
    (tmp_path / "gmp" / "experiments").mkdir()
    (tmp_path / "gmp" / "experiments" / "chen_levy.py").write_text(f"CLAIMS = [Claim({source})]\n")
    results = tmp_path / "book" / "_results" / "chen_levy_arms" / "paper"
    results.mkdir(parents=True)
    (results / "arms.json").write_text("{}")
    before, other_before = bookcache.fingerprint(page, tmp_path), bookcache.fingerprint(other, tmp_path)
    (results / "arms.json").write_text('{"rerun": true}')
    assert bookcache.fingerprint(page, tmp_path) != before
    assert bookcache.fingerprint(other, tmp_path) == other_before
    assert bookcache.reads(page, tmp_path) == ["chen_levy_arms"] and bookcache.reads(other, tmp_path) == []


def test_a_notebook_page_whose_last_execution_failed_is_read_again(tmp_path):
    """A failed execution is not cached; unless the page is read again, Sphinx keeps its empty outputs."""
    page, other = _repo(tmp_path)
    page.write_text("# Levy\n\n```{code-cell} ipython3\nx = 1\n```\n")
    assert len(bookcache.invalidate(tmp_path, tmp_path)) == 2  # first call: nothing known
    for p in (page, other):
        os.utime(p, (1_000_000, 1_000_000))
    assert bookcache.invalidate(tmp_path, tmp_path) == [str(page.resolve())]  # not executed, nor cached
    assert page.stat().st_mtime > 1_000_000 and other.stat().st_mtime == 1_000_000
    _cache_pages(tmp_path, page)
    assert bookcache.invalidate(tmp_path, tmp_path) == []


def _book(tmp_path, pages):
    """A book whose pages are MyST notebooks with the given code cells (a ``force`` page is executed by the build
    on every read)."""
    (tmp_path / "_toc.yml").write_text("root: book/intro\n")
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    for name, code in pages.items():
        force = name.startswith("force")
        (tmp_path / "book" / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "book" / f"{name}.md").write_text(
            "---\nkernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n"
            + ("mystnb:\n  execution_mode: force\n" if force else "")
            + f"---\n\n# {name}\n\n```{{code-cell}} ipython3\n{code}\n```\n")
    return {name: (tmp_path / "book" / f"{name}.md").resolve() for name in pages}


def _rendezvous(me, other):
    """A cell that passes only while the page ``other`` runs at the same time as this one."""
    return (f"import pathlib, time\npathlib.Path('{me}.ready').touch()\nfor _ in range(600):\n"
            f"    if pathlib.Path('{other}.ready').exists():\n        break\n    time.sleep(0.1)\n"
            f"else:\n    raise RuntimeError('{other} did not run beside {me}')\nprint('{me} met {other}')")


def test_pages_without_a_cached_execution_run_side_by_side_and_are_kept_for_the_build(tmp_path, capfd):
    """``--jobs 2`` runs two pages at the same time (each waits for the other), keeps each executed notebook under
    the key the build looks it up by, leaves a page that failed uncached with its traceback (also one whose kernel
    died, as the kernel of a page out of memory does; that stopped the command with a traceback), and leaves alone
    the pages the build executes on every read and those already cached. What a kernel writes to its own stderr is
    passed on, less the notice each kernel prints as it starts."""
    pages = _book(tmp_path, {"part1/a": _rendezvous("a", "b"), "part1/b": _rendezvous("b", "a"),
                             "part1/bad": "import os\nos.write(2, b'said by the kernel itself\\n')\n"
                                          "raise ValueError('no data here')", "force_ledger": "x = 1",
                             "part1/dies": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"})
    lines = []
    failed = bookcache.execute_pending(tmp_path, tmp_path, 2, echo=lines.append)
    kernel_err = capfd.readouterr().err
    assert "said by the kernel itself" in kernel_err and "Kernel is running over TCP" not in kernel_err
    assert sorted(failed) == [str(pages["part1/bad"]), str(pages["part1/dies"])]
    assert "ValueError: no data here" in failed[str(pages["part1/bad"])]
    assert "DeadKernelError" in failed[str(pages["part1/dies"])]
    cache = get_cache(tmp_path / "_build" / ".jupyter_cache")
    assert sorted(r.uri for r in cache.list_cache_records()) == [str(pages["part1/a"]), str(pages["part1/b"])]
    for name in ("part1/a", "part1/b"):
        _, merged = cache.merge_match_into_notebook(bookcache.read_page(pages[name], tmp_path))
        code = [cell for cell in merged.cells if cell.cell_type == "code"]
        assert [output.get("text") for output in code[0].outputs] == [f"{name[-1]} met {'ba'[name[-1] == 'b']}\n"]
        assert (pages[name].parent / f"{name[-1]}.ready").is_file()  # in the page's own folder, as the build runs it
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // 2))
    assert lines[0] == f"gmp.bookcache: executing 4 page(s), 2 at a time, {threads} thread(s) each"
    assert any("bad: FAILED" in line and "ValueError: no data here" in line for line in lines)
    again = []
    assert sorted(bookcache.execute_pending(tmp_path, tmp_path, 1, echo=again.append)) == sorted(failed)
    assert again[0].startswith("gmp.bookcache: executing 2 page(s), 1 at a time")


def test_a_ctrl_c_keeps_the_pages_executed_stops_the_others_and_leaves_no_kernel_behind(tmp_path):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) while one page runs and another is
    done: the command says what it kept and exits with 130 at once, without a traceback; the finished page stays in
    the cache, the stopped one is not there, and no process is left in the pages' folder (a page's kernel runs there,
    in a process group of its own that the Ctrl-C does not reach)."""
    pages = _book(tmp_path, {"part1/a": "print('quick')", "part1/b": "import time\ntime.sleep(600)"})
    command = subprocess.Popen([sys.executable, "-m", "gmp.bookcache", "--path-output", ".", "--jobs", "2"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    said = [line for line in itertools.takewhile(lambda line: "part1/a:" not in line, command.stdout)]
    os.killpg(command.pid, signal.SIGINT)
    said += command.stdout.readlines()
    assert command.wait(timeout=60) == 130, "".join(said)
    assert said[-1] == "gmp.bookcache: interrupted; 1 page(s) executed and kept, the next build executes the other 1\n"
    assert not any("Traceback" in line for line in said), "".join(said)
    cache = get_cache(tmp_path / "_build" / ".jupyter_cache")
    assert [record.uri for record in cache.list_cache_records()] == [str(pages["part1/a"])]
    folder = str(pages["part1/a"].parent)
    for _ in range(100):  # the kernel's own exit may trail the command's by a moment
        left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cwd(pid) == folder]
        if not left:
            break
        time.sleep(0.1)
    assert not left


def _cwd(pid):
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def test_jobs_that_are_not_a_whole_number_of_one_or_more_are_refused_saying_what_to_give(capsys):
    for wrong in ("0", "two", "-1"):
        with pytest.raises(SystemExit) as stop:
            bookcache.main(["--jobs", wrong])
        assert stop.value.code == 2
        assert capsys.readouterr().err.endswith(f"argument --jobs: give a whole number of pages to run at a time (1 or "
                                                f"more) or auto, not {wrong!r}\n")
