"""Image-classification data for the real-data experiments of Lu et al. (Sec. 3.2, Table 2).

Every loader returns one split as a pair ``(x, y)``: ``x`` a float32 tensor of flattened,
standardised inputs, shape (rows, features), and ``y`` an int64 tensor of class labels in
``0 .. 9``. The statistics of the standardisation always come from the training split,
so a test split is transformed exactly like the training split.

* :func:`mnist`, :func:`cifar10`: the data sets of Lu et al. MNIST is read from its four
  packed ``.gz`` files under ``GMP_DATA/MNIST/raw`` (fetched and sha256-verified like every
  other file, decompressed in memory, so a read-only data folder works); CIFAR-10 with
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

import gzip
import io
import math
import pickle
from pathlib import Path

import numpy as np
import torch

from gmp.data._fetch import DataUnavailableError, data_root, fetch, verify

MNIST1D_NPZ = "mnist1d/mnist1d_data.npz"
MNIST1D_NPZ_SHA256 = "0c12143d1b0adcce13fe66055175f153069ab179a66006f3df15afade9876237"
"""Our lossless npz conversion of the original MNIST-1D pickle (data README, section 4)."""

MNIST1D_COMMIT = "7878d96082abd200c546a07a4101fa90b30fdf7e"
MNIST1D_PKL = "mnist1d/mnist1d_data.pkl"
MNIST1D_PKL_URL = f"https://raw.githubusercontent.com/greydanus/mnist1d/{MNIST1D_COMMIT}/mnist1d_data.pkl"
MNIST1D_PKL_SHA256 = "e95257676e9fb04568e46dda007da22cc8664ccba1451456afde55d7f6dd6aa5"
"""The original file of ``greydanus/mnist1d`` that ``mnist1d.data.get_dataset()`` downloads."""

MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/{name}"
"""The first mirror of ``torchvision.datasets.MNIST``."""

MNIST_SHA256: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
"""The four original MNIST files of LeCun et al. (data README, section 6)."""

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
        raise ImportError("gmp.data.digits needs scikit-learn: pip install 'gmp[notebook]'") from err
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
        verify(npz, MNIST1D_NPZ_SHA256, restore="No public URL serves this npz: copy the original over it "
               f"(data README, section 4), or delete it so that the original pickle {MNIST1D_PKL} is "
               f"downloaded from {MNIST1D_PKL_URL} instead.")
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


def _cifar10_sets(root: str | Path | None, train: bool, download: bool):
    """torchvision's CIFAR-10 training set and the requested split."""
    _check_train(train)
    from torchvision.datasets import CIFAR10

    folder = Path(root) if root is not None else data_root()
    try:
        train_set = CIFAR10(str(folder), train=True, download=download)
        split = train_set if train else CIFAR10(str(folder), train=False, download=False)
    except (RuntimeError, OSError) as err:
        raise DataUnavailableError(
            f"CIFAR10 is not available under {folder / 'cifar-10-batches-py'} ({err}). torchvision downloads it there from its "
            f"public source when download=True and the internet is reachable; set GMP_DATA (now "
            f"{data_root()}) or pass root= to the folder that holds it.") from None
    return train_set, split


def _idx(path: Path) -> np.ndarray:
    """The uint8 array of a gzipped IDX file (magic ``0 0 0x08 ndim``, big-endian uint32 sizes)."""
    raw = gzip.decompress(path.read_bytes())
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    if raw[:3] != b"\x00\x00\x08" or len(raw) != 4 + 4 * ndim + math.prod(shape):
        raise DataUnavailableError(f"{path} is not a uint8 IDX file of the size its header states")
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape).copy()  # writable


def mnist_arrays(prefix: str, root: str | Path | None = None, download: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Images (rows, 28, 28) and labels (rows,) of MNIST's ``prefix`` split ("train" or "t10k"),
    from ``root/MNIST/raw/<prefix>-*-idx?-ubyte.gz`` (``root`` defaults to ``GMP_DATA``),
    downloaded from :data:`MNIST_URL` when missing and checked against :data:`MNIST_SHA256`.
    Nothing is written next to them (the unpacked copies torchvision makes are not needed)."""
    def read(kind: str) -> np.ndarray:
        name = f"{prefix}-{kind}.gz"
        return _idx(fetch(f"MNIST/raw/{name}", MNIST_URL.format(name=name), MNIST_SHA256[name],
                          root=root, download=download))

    return read("images-idx3-ubyte"), read("labels-idx1-ubyte")


def mnist(root: str | Path | None = None, train: bool = True,
          download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST (60,000 training / 10,000 test images), flattened to 784 standardised features.

    Read by :func:`mnist_arrays` from the packed files in ``root/MNIST/raw`` (``root``
    defaults to ``GMP_DATA``). Standardised with the training split's pixel mean and std.
    """
    _check_train(train)
    train_images, train_labels = mnist_arrays("train", root, download)
    images, labels = (train_images, train_labels) if train else mnist_arrays("t10k", root, download)
    return _per_channel(train_images[..., None], images[..., None]), _labels(labels)


def cifar10(root: str | Path | None = None, train: bool = True,
            download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 (50,000 training / 10,000 test images), flattened to 3,072 features.

    Read by ``torchvision.datasets.CIFAR10`` from ``root/cifar-10-batches-py`` (``root``
    defaults to ``GMP_DATA``; torchvision checks the md5 of every batch file). Each colour
    channel is standardised with the training split's mean and std; features are ordered
    channel, row, column, like the tensor ``transforms.ToTensor`` would give.
    """
    train_set, split = _cifar10_sets(root, train, download)
    return _per_channel(train_set.data, split.data), _labels(np.asarray(split.targets))
