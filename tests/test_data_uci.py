"""The UCI loader of Table 1 of Chen & Ge: sizes, splits, standardisation, determinism."""

import math

import numpy as np
import pytest
import torch

import gmp
from gmp.data import DataUnavailableError, data_root
from gmp.data.uci import DATASETS, split_rows, uci_arrays

# rows, input features (data README, section 1; Naval without column 17, Energy without Y2)
SIZES = {"boston": (506, 13), "concrete": (1030, 8), "energy": (768, 8), "naval": (11934, 16),
         "power": (9568, 4), "wine": (1599, 11), "yacht": (308, 6)}


@pytest.fixture(scope="module")
def arrays():
    try:
        return {name: uci_arrays(name) for name in DATASETS}
    except DataUnavailableError as err:
        pytest.skip(f"UCI files not available offline: {err}")


def test_the_seven_benchmarks_of_table_1():
    assert set(DATASETS) == set(SIZES)
    assert gmp.data.UCI_DATASETS == DATASETS


@pytest.mark.parametrize("name", sorted(SIZES))
def test_rows_and_features(arrays, name):
    x, y = arrays[name]
    assert x.shape == SIZES[name]
    assert y.shape == (SIZES[name][0],)
    assert np.isfinite(x).all() and np.isfinite(y).all()


def test_naval_target_is_compressor_decay_and_turbine_decay_is_dropped(arrays):
    raw = np.loadtxt(data_root() / "uci/naval-propulsion-plant/data.txt")
    x, y = arrays["naval"]
    np.testing.assert_array_equal(y, raw[:, 16])
    np.testing.assert_array_equal(x, raw[:, :16])
    assert not np.array_equal(raw[:, 16], raw[:, 17])


def test_energy_target_is_heating_load_y1(arrays):
    raw_csv = data_root() / "uci_raw/energy/ENB2012_data.csv"
    if not raw_csv.is_file():
        pytest.skip("uci_raw/energy not available")
    import pandas as pd

    raw = pd.read_csv(raw_csv)
    _, y = arrays["energy"]
    np.testing.assert_allclose(y, raw["Y1"].to_numpy(), atol=0.01)
    assert np.abs(y - raw["Y2"].to_numpy()).max() > 1.0


@pytest.mark.parametrize("n,val", [(506, None), (9568, None), (308, 0.2), (1599, 0.25)])
def test_split_is_disjoint_covering_and_sized_like_sklearn(n, val):
    rows = split_rows(n, seed=3, test_fraction=0.2, validation_fraction=val)
    every = np.concatenate([rows["train"], rows["val"], rows["test"]])
    assert np.array_equal(np.sort(every), np.arange(n))
    assert len(rows["test"]) == math.ceil(0.2 * n)
    n_rest = n - len(rows["test"])
    assert len(rows["val"]) == (math.ceil(val * n_rest) if val else 0)


def test_split_is_deterministic_per_seed_and_differs_across_seeds():
    a, b, c = split_rows(1030, 7), split_rows(1030, 7), split_rows(1030, 8)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(a[part], b[part])
    assert not np.array_equal(np.sort(a["test"]), np.sort(c["test"]))


def test_split_is_numpy_generator_permutation():
    order = np.random.default_rng(5).permutation(308)
    rows = split_rows(308, 5)
    np.testing.assert_array_equal(rows["test"], order[:62])
    np.testing.assert_array_equal(rows["train"], order[62:])


@pytest.mark.parametrize("name", ["boston", "naval", "yacht"])
def test_inputs_standardised_with_training_statistics(arrays, name):
    split = gmp.data.uci(name, seed=1, validation_fraction=0.2)
    x, y = arrays[name]
    xt = split.x_train.numpy()
    varying = np.ptp(x[split.rows["train"]], axis=0) > 0
    np.testing.assert_allclose(xt.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(xt.std(axis=0)[varying], 1.0, rtol=1e-10)
    np.testing.assert_allclose(xt[:, ~varying], 0.0, atol=1e-12)
    # validation and test rows use the training statistics, not their own
    for part, tensor in (("val", split.x_val), ("test", split.x_test)):
        np.testing.assert_allclose(tensor.numpy() * split.scale + split.mean, x[split.rows[part]], rtol=1e-12)
    assert abs(split.x_test.numpy()[:, varying].mean()) > 1e-6


def test_targets_are_not_standardised(arrays):
    split = gmp.data.uci("concrete", seed=0)
    _, y = arrays["concrete"]
    np.testing.assert_array_equal(split.y_test.numpy()[:, 0], y[split.rows["test"]])
    assert split.y_train.mean() > 10.0  # concrete strength in MPa
    assert split.x_val is None and split.y_val is None and len(split.rows["val"]) == 0


def test_dtype_and_determinism():
    a = gmp.data.uci("yacht", seed=4, dtype=torch.float32)
    b = gmp.data.uci("yacht", seed=4, dtype=torch.float32)
    assert a.x_train.dtype == torch.float32 and a.y_test.dtype == torch.float32
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.n_features == 6


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="boston, concrete, energy, naval, power, wine, yacht"):
        gmp.data.uci("housing", seed=0)
    with pytest.raises(ValueError, match="test_fraction"):
        split_rows(100, 0, test_fraction=1.5)
    with pytest.raises(ValueError, match="validation_fraction"):
        split_rows(100, 0, validation_fraction=0.0)
    with pytest.raises(ValueError, match="seed"):
        split_rows(100, -1)


def _corrupt_yacht(edit, tmp_path, monkeypatch):
    """Copy the shared yacht files into a fresh GMP_DATA, change one with ``edit``, load it."""
    shared = data_root() / "uci" / "yacht"
    if not shared.is_dir():
        pytest.skip("UCI files not available offline")
    folder = tmp_path / "data" / "uci" / "yacht"
    folder.mkdir(parents=True)
    for name in ("data.txt", "index_features.txt", "index_target.txt"):
        (folder / name).write_bytes((shared / name).read_bytes())
    name, change = edit
    (folder / name).write_bytes(change((folder / name).read_bytes()))
    monkeypatch.setenv("GMP_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(DataUnavailableError) as info:
        uci_arrays("yacht")
    return str(info.value), folder / name


@pytest.mark.parametrize("edit", [
    ("data.txt", lambda b: b.replace(b"0.", b"1.", 1)),            # a changed digit
    ("data.txt", lambda b: b[: len(b) // 2].rsplit(b"\n", 1)[0] + b"\n"),  # half the rows
    ("data.txt", lambda b: b"#" + b),                                 # loadtxt would drop row 0
    ("index_target.txt", lambda b: b"5\n"),                           # the target would be a feature
], ids=["digit", "truncated", "comment", "target"])
def test_a_corrupt_uci_file_is_refused_not_loaded(edit, tmp_path, monkeypatch):
    message, path = _corrupt_yacht(edit, tmp_path, monkeypatch)
    assert str(path) in message and "sha256" in message and "Delete it" in message
