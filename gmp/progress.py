"""Progress bars that show in a terminal, also from inside a papermill-run notebook.

``python -m gmp.runs`` sets ``GMP_PROGRESS=1``; bars then write to the kernel process's
real stderr, which is the runner's terminal. Elsewhere a bar shows only when its stream
is a terminal, so book builds and notebooks stay quiet.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm

PROGRESS_ENV = "GMP_PROGRESS"


def bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """A ``tqdm`` bar; ``disable=True`` from the caller always wins."""
    if os.environ.get(PROGRESS_ENV) == "1":
        kwargs.setdefault("file", sys.__stderr__)
        kwargs.setdefault("mininterval", 1.0)
        if kwargs.get("disable") is None:
            kwargs["disable"] = False
    else:
        kwargs.setdefault("disable", None)
    return tqdm(iterable, **kwargs)
