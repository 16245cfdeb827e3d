"""Keep Jupyter Book's execution cache honest about inputs outside the notebooks.

Jupyter Book (``execute_notebooks: cache``) re-executes a page only when its code cells
change. A chapter's output also depends on the package ``gmp`` and on its cached
paper-scale results in ``book/_results/<chapter>/``; when either changes, this drops the
chapter's cached execution so the next build runs it again. ``make book`` calls it first:

    python -m gmp.bookcache --path-output _build/smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from gmp.results import repository_root


def _hash_files(digest: "hashlib._Hash", files: list[Path], root: Path) -> None:
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())


def fingerprint(page: Path, root: Path) -> str:
    """Hash of the package sources and of the page's cached results."""
    digest = hashlib.sha256()
    _hash_files(digest, list((root / "gmp").rglob("*.py")), root)
    results = root / "book" / "_results" / page.stem
    if results.is_dir():
        kept = [p for p in results.rglob("*") if p.is_file()
                and not any(part.startswith((".", "_")) for part in p.relative_to(results).parts)]
        _hash_files(digest, kept, root)
    return digest.hexdigest()


def invalidate(path_output: Path, root: Path) -> list[str]:
    """Drop cached executions whose fingerprint changed; return the pages dropped."""
    cache_dir = path_output / "_build" / ".jupyter_cache"
    state_file = path_output / "_build" / ".gmp-fingerprints.json"
    pages = sorted((root / "book").rglob("*.md"))
    current = {str(p.resolve()): fingerprint(p, root) for p in pages if "_results" not in p.parts}
    dropped = []
    if cache_dir.is_dir():
        from jupyter_cache import get_cache

        stored = json.loads(state_file.read_text()) if state_file.is_file() else {}
        cache = get_cache(cache_dir)
        for record in cache.list_cache_records():
            uri = str(Path(record.uri).resolve())
            if stored.get(uri) != current.get(uri):
                cache.remove_cache(record.pk)
                dropped.append(uri)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(current, indent=1))
    return dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp.bookcache", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path-output", default=".", help="the --path-output given to jupyter-book build")
    args = parser.parse_args(argv)
    root = repository_root()
    if root is None:
        parser.error("run it from inside the book's repository")
    for uri in invalidate(Path(args.path_output), root):
        print(f"gmp.bookcache: {Path(uri).relative_to(root)} will be re-executed (gmp or its results changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
