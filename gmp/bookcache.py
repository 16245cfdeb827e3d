"""Keep Jupyter Book's execution cache honest about inputs outside the notebooks.

Jupyter Book (``execute_notebooks: cache``) re-executes a page only when its code cells
change. A chapter's output also depends on the package ``gmp`` and on its cached
paper-scale results in ``book/_results/<chapter>/`` and on those of any chapter whose cache
it reads; when either changes, this drops the chapter's cached execution so the next build
runs it again. ``make book`` calls it first:

    python -m gmp.bookcache --path-output _build/smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

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

READS_OTHER = re.compile(r"""\bcached\(\s*["'](\w+)["']""")
"""A page's call ``gmp.results.cached("<chapter>", ...)``, by which it reads that chapter's cached results too."""


def fingerprint(page: Path, root: Path, package: str | None = None) -> str:
    """Hash of the package sources (``package``, computed when not given) and of the cached
    results the page reads: its own chapter's and those of every chapter it names in a
    ``cached("<chapter>", ...)`` call."""
    digest = hashlib.sha256((package or package_digest(root)).encode())
    chapters = sorted({page.stem, *READS_OTHER.findall(page.read_text(encoding="utf-8"))})
    for chapter in chapters:
        results = root / RESULTS_PATH / chapter
        if results.is_dir():
            kept = [p for p in results.rglob("*") if p.is_file()
                    and not any(part.startswith((".", "_")) for part in p.relative_to(results).parts)]
            _hash_files(digest, kept, root)
    return digest.hexdigest()


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
    pages = [p for p in sorted((root / "book").rglob("*.md")) if "_results" not in p.parts]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.bookcache", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path-output", default=".", help="the --path-output given to jupyter-book build")
    args = parser.parse_args(argv)
    root = repository_root()
    if root is None:
        parser.error("run it from inside the book's repository")
    changed = invalidate(Path(args.path_output), root)
    if changed:
        print(f"gmp.bookcache: {len(changed)} page(s) will be read and executed again "
              f"(gmp or their cached results changed, or they have no cached execution): "
              f"{', '.join(Path(u).stem for u in changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
