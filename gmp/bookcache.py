"""Keep Jupyter Book's execution cache honest about inputs outside the notebooks.

Jupyter Book (``execute_notebooks: cache``) re-executes a page only when its code cells
change. A chapter's output also depends on the package ``gmp`` and on its cached
paper-scale results in ``book/_results/<chapter>/`` and on those of any chapter whose cache
it or its experiment module reads; when either changes, this drops the chapter's cached execution so the next build
runs it again. With ``--jobs``, it then executes the pages that have no cached execution, that
many at a time, each in its own kernel, and keeps each in the cache as it finishes, so the
build that follows only renders them. ``make book`` calls it first:

    python -m gmp.bookcache --path-output _build/smoke --jobs 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

from gmp.results import RESULTS_PATH, repository_root


def _hash_files(digest: "hashlib._Hash", files: list[Path], root: Path) -> None:
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())


def package_digest(root: Path) -> str:
    """Hash of the package sources and of the records of modules rewritten with the same function
    (``gmp/same_function.json``, which every cached page's note reads), on which every page depends."""
    digest = hashlib.sha256()
    _hash_files(digest, list((root / "gmp").rglob("*.py")) + list((root / "gmp").glob("same_function.json")), root)
    return digest.hexdigest()


CODE_CELL = re.compile(r"^```\{code-cell\}", re.M)
"""A code cell of a MyST-NB page: a page with one is a notebook that Jupyter Book executes."""

ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""A terminal colour code, as IPython colours a traceback: taken out of the tracebacks this module reports."""

KERNEL_NOTICE = re.compile(r"WARNING \| Kernel is running over TCP without encryption")
"""The notice each Jupyter kernel prints on its stderr as it starts (on a local machine, nothing to act on)."""

READS_OTHER = re.compile(r"""\bcached\(\s*["'](\w+)["']""")
"""A page's call ``gmp.results.cached("<chapter>", ...)``, by which it reads that chapter's cached results too."""

MODULE_READS = re.compile(r"""(?:\bcached\(\s*|\bchapter=)["'](\w+)["']""")
"""In a chapter's experiment module, a call that reads another chapter's cached results (an arms chapter's reference
runs), or the chapter of an earlier design kept as a check (``EarlierDesign(chapter=...)``), whose verdict on that
chapter's cache the page shows."""


def _module_sources(chapter: str, root: Path) -> list[Path]:
    """The sources of ``gmp/experiments/<chapter>.py``, or of the package ``gmp/experiments/<chapter>/``."""
    experiments = root / "gmp" / "experiments"
    module = experiments / f"{chapter}.py"
    return [module] if module.is_file() else sorted((experiments / chapter).rglob("*.py"))


def reads(page: Path, root: Path) -> list[str]:
    """The chapters that have cached results which the page shows: its own, those it names in a
    ``cached("<chapter>", ...)`` call, and those its experiment module reads (:data:`MODULE_READS`)."""
    found = {page.stem, *READS_OTHER.findall(page.read_text(encoding="utf-8"))}
    for source in _module_sources(page.stem, root):
        found.update(MODULE_READS.findall(source.read_text(encoding="utf-8")))
    return sorted(name for name in found if (root / RESULTS_PATH / name).is_dir())


def fingerprint(page: Path, root: Path, package: str | None = None) -> str:
    """Hash of the package sources (``package``, computed when not given) and of the cached
    results the page shows (:func:`reads`)."""
    digest = hashlib.sha256((package or package_digest(root)).encode())
    for chapter in reads(page, root):
        results = root / RESULTS_PATH / chapter
        kept = [p for p in results.rglob("*") if p.is_file()
                and not any(part.startswith((".", "_")) for part in p.relative_to(results).parts)]
        _hash_files(digest, kept, root)
    return digest.hexdigest()


def _pages(root: Path) -> list[Path]:
    """The book's MyST pages, ``book/**/*.md`` less the folders of cached results."""
    return [p for p in sorted((root / "book").rglob("*.md")) if "_results" not in p.parts]


def invalidate(path_output: Path, root: Path) -> list[str]:
    """Mark the pages whose fingerprint changed for re-execution; return their paths.

    A changed page has its cached execution dropped and its modification time refreshed,
    so that Sphinx reads it again (Sphinx only re-reads sources newer than its last read).
    The claims ledger reads every chapter's results, so it joins any change. A page with code
    cells that has no cached execution (its last one failed, say for want of data, or it is
    executed on every read) is read again too: else Sphinx keeps the outputs of the failed
    execution, and the next build passes with them missing.
    """
    cache_dir = path_output / "_build" / ".jupyter_cache"
    state_file = path_output / "_build" / ".gmp-fingerprints.json"
    pages = _pages(root)
    package = package_digest(root)
    current = {str(p.resolve()): fingerprint(p, root, package) for p in pages}
    stored = json.loads(state_file.read_text()) if state_file.is_file() else {}
    changed = [uri for uri, value in current.items() if stored.get(uri) != value]
    ledger = str((root / "book" / "claims.md").resolve())
    if changed and ledger in current and ledger not in changed:
        changed.append(ledger)
    records = []
    if cache_dir.is_dir():
        from jupyter_cache import get_cache

        cache = get_cache(cache_dir)
        records = cache.list_cache_records()
        for record in records:
            if str(Path(record.uri).resolve()) in changed:
                cache.remove_cache(record.pk)
    executed = {str(Path(record.uri).resolve()) for record in records}
    changed += [uri for uri in current if uri not in changed and uri not in executed
                and CODE_CELL.search(Path(uri).read_text(encoding="utf-8"))]
    for uri in changed:
        os.utime(uri)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(current, indent=1))
    return changed


def _book_config(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def read_page(page: Path, root: Path):
    """The page's MyST source as Jupyter Book (myst-nb) reads it into a notebook to execute and cache."""
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    extensions = set(_book_config(root)["parse"]["myst_enable_extensions"])
    return read_myst_markdown_notebook(page.read_text(encoding="utf-8"), config=MdParserConfig(
        enable_extensions=extensions), add_source_map=True, path=str(page))


def _uninterrupted(write: Callable[[], Any]) -> None:
    """``write()`` with a Ctrl-C held back until it is done (then raised), so that no half-kept page is left."""
    held = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        write()
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def _execute(page: Path, root: Path, threads: str) -> tuple[str, float, str | None]:
    """Run ``page`` as the build would (in its own folder, by jupyter-cache's executor, with the book's timeout
    and error setting) on ``threads`` threads; return the executed notebook as JSON, its seconds and the error's
    traceback or None. Where its kernel dies, it raises (nbclient's ``DeadKernelError``)."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
    execute = _book_config(root)["execute"]
    notebook = read_page(page, root)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Ctrl-C stops this page and shuts its kernel down
    with tempfile.TemporaryFile("w+") as kernel_err:  # the kernel's own stderr: passed on, less its TCP notice
        saved = os.dup(2)
        os.dup2(kernel_err.fileno(), 2)
        try:
            done = single_nb_execution(notebook, cwd=str(page.parent), timeout=execute["timeout"],
                                       allow_errors=execute["allow_errors"], meta_override=True)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # idle, the worker waits for the pool to stop it
            os.dup2(saved, 2)
            os.close(saved)
        kernel_err.seek(0)
        sys.stderr.writelines(line for line in kernel_err if not KERNEL_NOTICE.search(line))
    error = ANSI.sub("", done.exc_string) if done.err is not None else None
    return nbformat.writes(notebook), done.time, error


def execute_pending(path_output: Path, root: Path, jobs: int, echo=print) -> dict[str, str]:
    """Execute every page with code cells that has no cached execution, ``jobs`` pages at a time, and keep each in
    Jupyter Book's execution cache as it finishes (this process is the cache's one writer); return the traceback of
    each page that failed, by page. A failed page is left uncached, so the build runs it again and reports it.
    Pages that the build executes on every read (``execution_mode: force``) are left to it. Each kernel runs on
    the cores divided among the jobs (``OMP_NUM_THREADS`` where that is set)."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(path_output / "_build" / ".jupyter_cache")
    mode = _book_config(root)["execute"]["execute_notebooks"]
    pending = []
    for page in _pages(root):
        if not CODE_CELL.search(page.read_text(encoding="utf-8")):
            continue
        notebook = read_page(page, root)
        if notebook.metadata.get("mystnb", {}).get("execution_mode", mode) != "cache":
            continue  # executed by the build itself, on every read (the ledger, which reads the git history)
        try:
            cache.match_cache_notebook(notebook)
        except KeyError:
            pending.append(page.resolve())
    failed: dict[str, str] = {}
    if not pending:
        return failed
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // jobs))
    echo(f"gmp.bookcache: executing {len(pending)} page(s), {jobs} at a time, {threads} thread(s) each")
    start = time.monotonic()
    finished = 0
    with ProcessPoolExecutor(max_workers=min(jobs, len(pending)), mp_context=get_context("spawn"),
                             initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN)) as pool:
        running = {pool.submit(_execute, page, root, threads): page for page in pending}
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    page = running.pop(future)
                    try:
                        text, seconds, error = future.result()
                    except Exception as err:  # its kernel or worker died (out of memory, say): the page fails
                        text, seconds, error = None, None, f"{type(err).__name__}: {err}"
                    name = page.relative_to(root / "book").with_suffix("")
                    if error is None:
                        _uninterrupted(lambda: cache.cache_notebook_bundle(CacheBundleIn(
                            nbformat.reads(text, nbformat.NO_CONVERT), str(page), data={"execution_seconds": seconds}),
                            check_validity=False, overwrite=True))
                        finished += 1
                        echo(f"  [{finished + len(failed)}/{len(pending)}] {name}: {seconds:.0f} s")
                    else:
                        failed[str(page)] = error
                        echo(f"  [{finished + len(failed)}/{len(pending)}] {name}: FAILED"
                             + (f" after {seconds:.0f} s" if seconds is not None else "")
                             + "; the build runs it again and reports the error. Its last lines:\n"
                             + "\n".join(error.splitlines()[-8:]))
        except KeyboardInterrupt:
            pool.shutdown(cancel_futures=True)
            echo(f"gmp.bookcache: interrupted; {finished} page(s) executed and kept, the next build executes the "
                 f"other {len(pending) - finished}")
            raise
    echo(f"gmp.bookcache: {len(pending) - len(failed)} page(s) executed in {time.monotonic() - start:.0f} s"
         + (f", {len(failed)} failed" if failed else ""))
    return failed


def _jobs(text: str) -> int:
    if text == "auto":
        return max(1, min(os.cpu_count() or 1, AUTO_JOBS))
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"give a whole number of pages to run at a time (1 or more) or auto, "
                                         f"not {text!r}")
    return int(text)


AUTO_JOBS = 4
"""The most pages ``--jobs auto`` executes at a time (one per core up to this): each kernel holds up to about
1.5 GB of memory (measured at small scale)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.bookcache", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path-output", default=".", help="the --path-output given to jupyter-book build")
    parser.add_argument("--jobs", type=_jobs, default=None,
                        help="then execute the pages without a cached execution, this many at a time (auto: one per "
                             f"core, at most {AUTO_JOBS}), at the scale GMP_SCALE names")
    args = parser.parse_args(argv)
    root = repository_root()
    if root is None:
        parser.error("run it from inside the book's repository")
    changed = invalidate(Path(args.path_output), root)
    if changed:
        print(f"gmp.bookcache: {len(changed)} page(s) will be read and executed again "
              f"(gmp or their cached results changed, or they have no cached execution): "
              f"{', '.join(Path(u).stem for u in changed)}")
    if args.jobs is not None:
        try:
            execute_pending(Path(args.path_output), root, args.jobs, echo=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
