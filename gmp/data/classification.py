"""Image-classification data for the real-data experiments of Lu et al. (Sec. 3.2, Table 2).

Every loader returns one split as a pair ``(x, y)``: ``x`` a float32 tensor of flattened,
standardised inputs, shape (rows, features), and ``y`` an int64 tensor of class labels in
``0 .. 9``. The statistics of the standardisation always come from the training split,
so a test split is transformed exactly like the training split.

* :func:`mnist`, :func:`cifar10`: the data sets of Lu et al., read with
  ``torchvision.datasets`` from ``GMP_DATA`` (downloaded there by torchvision when
  missing). Pixels are scaled to [0, 1], then each colour channel is standardised with
  the mean and standard deviation of the training split (the usual
  ``transforms.Normalize`` convention; the paper states no preprocessing beyond "we do
  not use data augmentation") and the image is flattened (784 / 3072 features) for the
  fully connected networks of the paper.
* :func:`mnist1d`, :func:`digits`: small stand-ins that run on a CPU in seconds and need
  no download in this project (see the data README). Each feature is standardised with
  the training mean and standard deviation (``ddof=0``); a feature that is constant on
  the training rows (the border pixels of ``digits``) is only centred, as scikit-learn's
  ``StandardScaler`` does.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import torch

from gmp.data._fetch import DataUnavailableError, data_root, fetch

MNIST1D_NPZ = "mnist1d/mnist1d_data.npz"
MNIST1D_NPZ_SHA256 = "0c12143d1b0adcce13fe66055175f153069ab179a66006f3df15afade9876237"
"""Our lossless npz conversion of the original MNIST-1D pickle (data README, section 4)."""

MNIST1D_COMMIT = "7878d96082abd200c546a07a4101fa90b30fdf7e"
MNIST1D_PKL = "mnist1d/mnist1d_data.pkl"
MNIST1D_PKL_URL = f"https://raw.githubusercontent.com/greydanus/mnist1d/{MNIST1D_COMMIT}/mnist1d_data.pkl"
MNIST1D_PKL_SHA256 = "e95257676e9fb04568e46dda007da22cc8664ccba1451456afde55d7f6dd6aa5"
"""The original file of ``greydanus/mnist1d`` that ``mnist1d.data.get_dataset()`` downloads."""

NUM_CLASSES = 10


def _standardize(train: np.ndarray, split: np.ndarray) -> torch.Tensor:
    """``(split - mean) / std`` per feature with the statistics of ``train`` (constant features centred only)."""
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(np.ptp(train, axis=0) == 0, 1.0, std)
    return torch.as_tensor((split - mean) / std, dtype=torch.float32)


def _labels(y: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(y), dtype=torch.int64)


def _check_train(train: bool) -> None:
    if not isinstance(train, bool):
        raise ValueError(f"train must be True (training split) or False (test split), got {train!r}")


def digits(train: bool = True, seed: int = 0, test_fraction: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8x8 handwritten digits (1,797 images, 64 features), one split.

    Offline: the data ship inside the scikit-learn wheel. The split is stratified by class
    (``train_test_split(test_size=test_fraction, random_state=seed, stratify=y)``), so a
    seed always gives the same rows.
    """
    _check_train(train)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as err:
        raise ImportError("gmp.data.digits needs scikit-learn: pip install 'gmp[book]'") from err
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float64), y, test_size=test_fraction, random_state=int(seed), stratify=y)
    return _standardize(x_train, x_train if train else x_test), _labels(y_train if train else y_test)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers of NumPy arrays and refuses every other global."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"), ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the MNIST-1D pickle")
        return super().find_class(module, name)


def mnist1d_arrays() -> dict[str, np.ndarray]:
    """The original MNIST-1D arrays ``x``, ``y`` (4,000 training rows of 40 features) and
    ``x_test``, ``y_test`` (1,000 rows), as published by Greydanus (``greydanus/mnist1d``).

    Looked up, in this order:

    1. ``GMP_DATA/mnist1d/mnist1d_data.npz``: this project's lossless npz conversion of
       the original pickle (sha256 ``0c12143d...``). No public URL serves that npz, so it
       is never downloaded.
    2. ``GMP_DATA/mnist1d/mnist1d_data.pkl``: the original pickle, downloaded from
       ``greydanus/mnist1d`` at commit ``7878d96`` when missing and checked against its
       sha256. It is read with an unpickler that accepts NumPy arrays only.

    The ``mnist1d`` package can regenerate the data (equal to within 1e-15), but we do
    not, so that every number in the book comes from a byte-identified file. Raises
    :class:`DataUnavailableError` naming both files when neither can be had.
    """
    npz = data_root() / MNIST1D_NPZ
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as data:
            return {k: data[k] for k in ("x", "y", "x_test", "y_test")}
    try:
        pkl = fetch(MNIST1D_PKL, MNIST1D_PKL_URL, MNIST1D_PKL_SHA256)
    except DataUnavailableError as err:
        raise DataUnavailableError(
            f"MNIST-1D is not available: neither {npz} (this project's npz conversion, sha256 "
            f"{MNIST1D_NPZ_SHA256}) nor the original pickle could be had. {err}") from None
    data = _NumpyOnlyUnpickler(io.BytesIO(Path(pkl).read_bytes())).load()
    return {k: np.asarray(data[k]) for k in ("x", "y", "x_test", "y_test")}


def mnist1d(train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-1D (Greydanus 2020), one split: 4,000 training or 1,000 test rows of 40
    features, 10 classes; the fixed split of the original file. See :func:`mnist1d_arrays`."""
    _check_train(train)
    data = mnist1d_arrays()
    x = data["x"] if train else data["x_test"]
    y = data["y"] if train else data["y_test"]
    return _standardize(data["x"].astype(np.float64), x.astype(np.float64)), _labels(y)


def _per_channel(train: np.ndarray, split: np.ndarray) -> torch.Tensor:
    """Images (rows, H, W, C) uint8 -> [0, 1] -> per-channel standardised with ``train``'s
    statistics -> flattened channel-first (rows, C*H*W) float32."""
    scaled = train.astype(np.float32) / 255.0
    mean = scaled.mean(axis=(0, 1, 2), dtype=np.float64)
    std = scaled.std(axis=(0, 1, 2), dtype=np.float64)
    out = (split.astype(np.float32) / 255.0 - mean.astype(np.float32)) / std.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)).reshape(len(split), -1))


def _torchvision(kind: str, root: str | Path | None, train: bool, download: bool):
    """The torchvision training set and the requested split of ``kind`` ("MNIST" or "CIFAR10")."""
    _check_train(train)
    from torchvision import datasets

    folder = Path(root) if root is not None else data_root()
    cls = getattr(datasets, kind)
    try:
        train_set = cls(str(folder), train=True, download=download)
        split = train_set if train else cls(str(folder), train=False, download=False)
    except (RuntimeError, OSError) as err:
        where = folder / ("MNIST/raw" if kind == "MNIST" else "cifar-10-batches-py")
        raise DataUnavailableError(
            f"{kind} is not available under {where} ({err}). torchvision downloads it there from its "
            f"public source when download=True and the internet is reachable; set GMP_DATA (now "
            f"{data_root()}) or pass root= to the folder that holds it.") from None
    return train_set, split


def mnist(root: str | Path | None = None, train: bool = True,
          download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST (60,000 training / 10,000 test images), flattened to 784 standardised features.

    Read by ``torchvision.datasets.MNIST`` from ``root/MNIST/raw`` (``root`` defaults to
    ``GMP_DATA``). Standardised with the training split's pixel mean and std.
    """
    train_set, split = _torchvision("MNIST", root, train, download)
    return (_per_channel(train_set.data.numpy()[..., None], split.data.numpy()[..., None]),
            _labels(split.targets.numpy()))


def cifar10(root: str | Path | None = None, train: bool = True,
            download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 (50,000 training / 10,000 test images), flattened to 3,072 features.

    Read by ``torchvision.datasets.CIFAR10`` from ``root/cifar-10-batches-py`` (``root``
    defaults to ``GMP_DATA``; torchvision checks the md5 of every batch file). Each colour
    channel is standardised with the training split's mean and std; features are ordered
    channel, row, column, like the tensor ``transforms.ToTensor`` would give.
    """
    train_set, split = _torchvision("CIFAR10", root, train, download)
    return _per_channel(train_set.data, split.data), _labels(np.asarray(split.targets))
