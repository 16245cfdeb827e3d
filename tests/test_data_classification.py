"""Classification loaders of the real-data chapter of Lu et al.: shapes, classes, splits,
standardisation, determinism, and MNIST / CIFAR-10 read through torchvision from small
files in torchvision's own on-disk formats."""

import gzip
import hashlib
import pickle
import struct

import numpy as np
import pytest
import torch

import gmp
from gmp.data import DataUnavailableError, classification
from gmp.data._fetch import sha256_of


# ---------------------------------------------------------------- digits (offline, sklearn)

def test_digits_split_sizes_classes_and_standardisation():
    x, y = gmp.data.digits(train=True, seed=0)
    xt, yt = gmp.data.digits(train=False, seed=0)
    assert x.shape == (1437, 64) and xt.shape == (360, 64)
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert set(y.tolist()) == set(range(10)) and set(yt.tolist()) == set(range(10))
    # stratified: every class keeps its share of the 1,797 images within one row
    counts = torch.bincount(torch.cat([y, yt]), minlength=10)
    assert (torch.bincount(yt, minlength=10).float() - 0.2 * counts.float()).abs().max() <= 1.0
    mean, std = x.mean(0), x.std(0, unbiased=False)
    assert mean.abs().max() < 1e-5
    constant = std < 1e-6
    assert 0 < constant.sum() < 64  # the always-blank border pixels are only centred
    assert torch.allclose(std[~constant], torch.ones(int((~constant).sum())), atol=1e-4)


def test_digits_is_deterministic_and_the_seed_picks_the_split():
    a, ya = gmp.data.digits(train=False, seed=3)
    b, yb = gmp.data.digits(train=False, seed=3)
    c, _ = gmp.data.digits(train=False, seed=4)
    assert torch.equal(a, b) and torch.equal(ya, yb)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("kwargs", [dict(train="yes"), dict(seed=-1), dict(test_fraction=1.0)])
def test_digits_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gmp.data.digits(**kwargs)


# ---------------------------------------------------------------- MNIST-1D

@pytest.fixture
def shared_mnist1d():
    path = gmp.data.data_root() / classification.MNIST1D_NPZ
    if not path.is_file():
        pytest.skip(f"{path} not available offline")
    return path


def test_shared_mnist1d_file_is_the_documented_one(shared_mnist1d):
    assert sha256_of(shared_mnist1d) == classification.MNIST1D_NPZ_SHA256


def test_mnist1d_shapes_classes_and_train_statistics(shared_mnist1d):
    x, y = gmp.data.mnist1d(train=True)
    xt, yt = gmp.data.mnist1d(train=False)
    assert x.shape == (4000, 40) and xt.shape == (1000, 40)
    assert set(y.tolist()) == set(range(10)) and set(yt.tolist()) == set(range(10))
    assert x.mean(0).abs().max() < 1e-5
    assert torch.allclose(x.std(0, unbiased=False), torch.ones(40), atol=1e-4)
    raw = classification.mnist1d_arrays()
    mean, std = raw["x"].mean(0), raw["x"].std(0)
    np.testing.assert_allclose(xt.numpy(), (raw["x_test"] - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(yt.numpy(), raw["y_test"])
    x2, y2 = gmp.data.mnist1d(train=True)
    assert torch.equal(x, x2) and torch.equal(y, y2)


def _fake_mnist1d(rng):
    return {"x": rng.normal(size=(50, 40)), "y": rng.integers(0, 10, 50),
            "x_test": rng.normal(size=(20, 40)), "y_test": rng.integers(0, 10, 20),
            "t": np.linspace(0, 1, 40), "templates": {"x": rng.normal(size=(10, 12))}}


@pytest.fixture(autouse=True)
def _own_verification_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _put(path, blob: bytes, monkeypatch, table=None, key=None, attr=None) -> None:
    """Write a stand-in data file and make the loader expect its sha256 (for this test only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    if table is not None:
        monkeypatch.setitem(table, key, digest)
    else:
        monkeypatch.setattr(classification, attr, digest)


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_mnist1d_reads_the_original_pickle_when_the_npz_is_missing(tmp_path, monkeypatch, protocol):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    fake = _fake_mnist1d(np.random.default_rng(protocol))
    _put(tmp_path / classification.MNIST1D_PKL, pickle.dumps(fake, protocol=protocol), monkeypatch,
         attr="MNIST1D_PKL_SHA256")
    xt, yt = gmp.data.mnist1d(train=False)
    assert xt.shape == (20, 40)
    np.testing.assert_array_equal(yt.numpy(), fake["y_test"])
    mean, std = fake["x"].mean(0), fake["x"].std(0)
    np.testing.assert_allclose(xt.numpy(), (fake["x_test"] - mean) / std, rtol=1e-5, atol=1e-5)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_mnist1d_pickle_with_anything_but_arrays_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    _put(tmp_path / classification.MNIST1D_PKL, pickle.dumps({"x": _Evil()}), monkeypatch,
         attr="MNIST1D_PKL_SHA256")
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        gmp.data.mnist1d()


def test_a_pickle_that_is_not_the_original_is_refused_before_unpickling(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    (tmp_path / "mnist1d").mkdir()
    (tmp_path / classification.MNIST1D_PKL).write_bytes(pickle.dumps({"x": _Evil()}))
    with pytest.raises(DataUnavailableError, match=classification.MNIST1D_PKL_SHA256):
        gmp.data.mnist1d()


@pytest.mark.parametrize("corrupt", ["flipped byte", "wrong shape"])
def test_a_corrupt_mnist1d_npz_is_refused_by_name(shared_mnist1d, tmp_path, monkeypatch, corrupt):
    npz = tmp_path / "data" / classification.MNIST1D_NPZ
    npz.parent.mkdir(parents=True)
    if corrupt == "flipped byte":
        blob = bytearray(shared_mnist1d.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        npz.write_bytes(bytes(blob))
    else:
        rng = np.random.default_rng(0)
        np.savez(npz, x=rng.normal(size=(4000, 39)), y=np.zeros(4000), x_test=rng.normal(size=(1000, 39)),
                 y_test=np.zeros(1000))
    monkeypatch.setenv("GMP_DATA", str(tmp_path / "data"))
    with pytest.raises(DataUnavailableError) as info:
        gmp.data.mnist1d()
    message = str(info.value)
    assert str(npz) in message and classification.MNIST1D_NPZ_SHA256 in message and "copy the original" in message


def test_mnist1d_offline_without_files_names_both_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    monkeypatch.setattr(classification, "MNIST1D_PKL_URL", "http://127.0.0.1:9/mnist1d_data.pkl")
    with pytest.raises(DataUnavailableError) as err:
        gmp.data.mnist1d()
    message = str(err.value)
    assert "mnist1d_data.npz" in message and "mnist1d_data.pkl" in message and "GMP_DATA" in message


# ---------------------------------------------------------------- MNIST via torchvision

def _idx(array: np.ndarray) -> bytes:
    """The big-endian IDX ("ubyte") format of the MNIST files: magic 0x08 (uint8), ndim, dims."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


@pytest.fixture
def mnist_root(tmp_path, monkeypatch):
    """Small stand-ins for the four packed MNIST files (only the .gz, as downloaded)."""
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    data = {"train": (rng.integers(0, 256, (30, 28, 28)), rng.integers(0, 10, 30)),
            "t10k": (rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 10, 12))}
    for prefix, (images, labels) in data.items():
        for name, array in ((f"{prefix}-images-idx3-ubyte.gz", images), (f"{prefix}-labels-idx1-ubyte.gz", labels)):
            _put(raw / name, gzip.compress(_idx(array), mtime=0), monkeypatch, classification.MNIST_SHA256, name)
    return tmp_path, data


def test_mnist_reads_idx_files_flattens_and_standardises_with_training_statistics(mnist_root, monkeypatch):
    root, data = mnist_root
    monkeypatch.setenv("GMP_DATA", str(root))
    x, y = gmp.data.mnist(train=True, download=False)
    xt, yt = gmp.data.mnist(root=root, train=False, download=False)
    assert x.shape == (30, 784) and xt.shape == (12, 784) and x.dtype == torch.float32
    np.testing.assert_array_equal(y.numpy(), data["train"][1])
    np.testing.assert_array_equal(yt.numpy(), data["t10k"][1])
    pixels = data["train"][0] / 255.0
    expected = (data["t10k"][0] / 255.0 - pixels.mean()) / pixels.std()
    np.testing.assert_allclose(xt.numpy(), expected.reshape(12, 784), rtol=1e-5, atol=1e-5)
    assert abs(float(x.mean())) < 1e-5 and abs(float(x.std(unbiased=False)) - 1) < 1e-4


def test_mnist_reads_the_packed_files_and_writes_nothing_into_the_data_folder(mnist_root):
    root, _ = mnist_root
    before = sorted(p.name for p in (root / "MNIST").rglob("*"))
    gmp.data.mnist(root=root, train=False, download=False)
    assert sorted(p.name for p in (root / "MNIST").rglob("*")) == before  # a read-only GMP_DATA works


def test_mnist_with_a_flipped_byte_is_refused_by_name(mnist_root):
    root, _ = mnist_root
    path = root / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    blob = bytearray(path.read_bytes())
    blob[100] ^= 0x01
    path.write_bytes(bytes(blob))
    with pytest.raises(DataUnavailableError) as info:
        gmp.data.mnist(root=root, train=False, download=False)
    assert str(path) in str(info.value) and classification.MNIST_SHA256[path.name] in str(info.value)


def test_shared_mnist_gz_decodes_to_the_unpacked_original():
    raw = gmp.data.data_root() / "MNIST" / "raw"
    if not (raw / "t10k-labels-idx1-ubyte").is_file():
        pytest.skip(f"{raw} not available offline")
    images, labels = classification.mnist_arrays("t10k", download=False)
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert images.tobytes() == (raw / "t10k-images-idx3-ubyte").read_bytes()[16:]
    assert labels.tobytes() == (raw / "t10k-labels-idx1-ubyte").read_bytes()[8:]


def test_mnist_missing_offline_raises_data_unavailable(tmp_path):
    with pytest.raises(DataUnavailableError, match="MNIST"):
        gmp.data.mnist(root=tmp_path, download=False)


def test_mnist_reads_the_shared_files_from_gmp_data_offline(monkeypatch):
    """The four original files under GMP_DATA/MNIST/raw (data README, section 6): read with the
    default download=True and no network (a download would fail), sha256-checked by fetch."""
    raw = gmp.data.data_root() / "MNIST" / "raw"
    if not all((raw / name).is_file() for name in classification.MNIST_SHA256):
        pytest.skip(f"{raw} not available offline")
    monkeypatch.setattr(classification, "MNIST_URL", "http://127.0.0.1:9/{name}")
    x, y = gmp.data.mnist(train=True)
    xt, yt = gmp.data.mnist(train=False)
    assert x.shape == (60000, 784) and xt.shape == (10000, 784)
    assert torch.bincount(y).tolist()[:2] == [5923, 6742] and torch.bincount(yt).tolist()[:2] == [980, 1135]
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std()) - 1) < 1e-3


def test_mnist_missing_and_offline_names_the_file_the_source_and_gmp_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))
    monkeypatch.setattr(classification, "MNIST_URL", "http://127.0.0.1:9/{name}")
    with pytest.raises(DataUnavailableError) as err:
        gmp.data.mnist(train=False)
    message = str(err.value)
    assert "MNIST/raw/train-images-idx3-ubyte.gz" in message and "http://127.0.0.1:9/train-images-idx3-ubyte.gz" in message
    assert "GMP_DATA" in message and str(tmp_path) in message and "could not be downloaded" in message
    assert not list(tmp_path.rglob("*.gz"))  # nothing half-downloaded is left


# ---------------------------------------------------------------- CIFAR-10 via torchvision

@pytest.fixture
def cifar_root(tmp_path, monkeypatch):
    """Python-pickle batches as in cifar-10-python.tar.gz; the md5 sums torchvision checks are
    replaced (on the class, for this test only) by those of these small files."""
    from torchvision.datasets import CIFAR10

    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list]
    batches = {name: (rng.integers(0, 256, (6, 3072)).astype(np.uint8), rng.integers(0, 10, 6).tolist())
               for name in names}
    md5 = {}
    for name, (images, labels) in batches.items():
        blob = pickle.dumps({"batch_label": name, "data": images, "labels": labels, "filenames": []})
        (folder / name).write_bytes(blob)
        md5[name] = hashlib.md5(blob).hexdigest()
    meta = pickle.dumps({"label_names": [f"class{i}" for i in range(10)]})
    (folder / "batches.meta").write_bytes(meta)
    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5[n]] for n, _ in CIFAR10.train_list])
    monkeypatch.setattr(CIFAR10, "test_list", [[n, md5[n]] for n, _ in CIFAR10.test_list])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": hashlib.md5(meta).hexdigest()})
    return tmp_path, batches


def test_cifar10_reads_pickle_batches_channel_first_and_standardises_per_channel(cifar_root):
    root, batches = cifar_root
    x, y = gmp.data.cifar10(root=root, train=True, download=False)
    xt, yt = gmp.data.cifar10(root=root, train=False, download=False)
    assert x.shape == (30, 3072) and xt.shape == (6, 3072)
    np.testing.assert_array_equal(yt.numpy(), batches["test_batch"][1])
    assert y.tolist() == sum((batches[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    # a CIFAR row is 1024 red, 1024 green, 1024 blue values: the same order as ours
    train = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)]).reshape(30, 3, 1024) / 255.0
    mean, std = train.mean(axis=(0, 2)), train.std(axis=(0, 2))
    expected = (batches["test_batch"][0].reshape(6, 3, 1024) / 255.0 - mean[:, None]) / std[:, None]
    np.testing.assert_allclose(xt.numpy(), expected.reshape(6, 3072), rtol=1e-5, atol=1e-5)
    per_channel = x.reshape(30, 3, 1024)
    assert per_channel.mean(dim=(0, 2)).abs().max() < 1e-5


def test_cifar10_with_files_failing_torchvisions_md5_check_is_unavailable(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"not the real file")
    with pytest.raises(DataUnavailableError, match="cifar-10-batches-py"):
        gmp.data.cifar10(root=tmp_path, download=False)


def test_loaders_reject_a_non_boolean_split(tmp_path):
    with pytest.raises(ValueError, match="train"):
        gmp.data.cifar10(root=tmp_path, train="test", download=False)
