"""The lock of one chapter's run at one config (its journal): one writer of a journal and its cache at a time.

Held by a run of :mod:`gmp.runs` for its whole length, and by what else writes the same results (a re-stamp,
:func:`gmp.verification.restamp`; a merge of a GPU lease, :func:`gmp.gpu.returned.merge`), so that none of them writes
beside another.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
from collections.abc import Iterator
from pathlib import Path

from gmp import results as _results


@contextlib.contextmanager
def run_lock(journal: Path) -> Iterator[None]:
    """Hold the lock of a run of one chapter at one config (its ``journal``) for the whole run, or refuse.

    Two runs that share a journal would each resume, cache and then delete the other's units, so
    the second to start is refused with a ValueError (on systems without POSIX locks, nothing
    stops them). The lock is a file in the run's scratch folder beside the journal; at the end
    it is removed, and so are that folder and ``_partial`` when nothing else is left in them.
    """
    scratch = journal.with_suffix("")
    if _results.fcntl is None:
        try:
            yield
        finally:
            remove_if_empty(scratch, scratch.parent)
        return
    lock = scratch / "run.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as held:
        try:
            _results.fcntl.flock(held, _results.fcntl.LOCK_EX | _results.fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            who = held.read().strip() or "another process"
            raise ValueError(f"another gmp.runs of this chapter with the same config is running ({who}; it holds "
                             f"{lock}): two runs would share one journal and one cache, so this one does not "
                             f"start. Wait for it to finish, or stop it, then rerun") from None
        held.truncate(0)
        held.write(f"pid {os.getpid()} on {platform.node()}, since "
                   f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
        held.flush()
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)  # still held: a run that opens it now gets a new file, after this one
            remove_if_empty(scratch, scratch.parent)


def remove_if_empty(*folders: Path) -> None:
    """Remove each of ``folders`` (the units' scratch folder, then ``_partial``) that is empty, in turn."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()
