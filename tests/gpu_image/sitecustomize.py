"""Started by every Python process with this folder on ``PYTHONPATH``: the packages that the GPU
machine's image lacks cannot be imported (an import blocker first on ``sys.meta_path``), as there.
The rehearsal of ``python -m gmp.gpu`` (tests/test_lu_stacked.py) and the tests of its chapter runner
run under it."""

import sys

ABSENT = frozenset({"IPython", "ipykernel", "papermill", "nbformat", "nbclient", "nbconvert", "jupytext", "myst_nb",
                    "myst_parser", "sphinx", "jupyter_book", "submitit"})


class Blocker:
    """A finder that refuses the packages in :data:`ABSENT` and their submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r} (the GPU image lacks it)", name=name)
        return None


sys.meta_path.insert(0, Blocker())
