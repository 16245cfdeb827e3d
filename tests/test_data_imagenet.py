"""ImageNet32 (npz batches) and ImageNet (ImageFolder) loaders on files the tests write."""

import numpy as np
import pytest
import torch

import gmp
from gmp.data.imagenet import (IMAGENET32_MEAN, IMAGENET_MEAN, IMAGENET_STD, ImageArrays, RandomSquareResize,
                               batch_collate, imagenet, imagenet32, imagenet32_arrays)


def write_imagenet32(root, n_per_file=6, train_files=2, seed=0):
    """Files in the public ImageNet32 npz format: 'data' (N, 3072) uint8, 'labels' 1-based."""
    rng = np.random.default_rng(seed)
    folder = root / "imagenet32"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"train_data_batch_{i}.npz" for i in range(1, train_files + 1)] + ["val_data.npz"]
    written = {}
    for name in names:
        data = rng.integers(0, 256, size=(n_per_file, 3072), dtype=np.uint8)
        labels = rng.integers(1, 1001, size=n_per_file).tolist()  # the public files store a list
        np.savez(folder / name, data=data, labels=labels)
        written[name] = (data, np.asarray(labels))
    return written


def test_imagenet32_layout_labels_and_normalisation(tmp_path):
    written = write_imagenet32(tmp_path)
    files = ["train_data_batch_1.npz", "train_data_batch_2.npz"]
    images, labels = imagenet32_arrays(True, tmp_path, files=files)
    assert images.shape == (12, 3, 32, 32) and images.dtype == np.uint8
    data, raw = written["train_data_batch_2.npz"]
    # row layout: 1,024 red, then green, then blue pixels, row-major within a channel
    assert images[6 + 1, 2, 3, 4] == data[1, 2 * 1024 + 3 * 32 + 4]
    assert np.array_equal(labels[6:], raw - 1)
    dataset = imagenet32(False, tmp_path)
    assert len(dataset) == 6 and not dataset.flip
    x, y = dataset.__getitems__([0, 5])
    val_data, val_labels = written["val_data.npz"]
    expected = val_data[[0, 5]].reshape(2, 3, 32, 32) / 255.0 - np.array(IMAGENET32_MEAN).reshape(1, 3, 1, 1)
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32
    assert np.allclose(x.numpy(), expected, atol=1e-6)
    assert y.tolist() == (val_labels[[0, 5]] - 1).tolist()


def test_imagenet32_training_flip_is_seeded_per_epoch_and_index(tmp_path):
    write_imagenet32(tmp_path, n_per_file=64, train_files=1)
    files = ["train_data_batch_1.npz"]
    flipped = imagenet32(True, tmp_path, files=files, seed=3)
    plain = imagenet32(True, tmp_path, files=files, flip=False)
    x, _ = flipped.__getitems__(range(64))
    reference, _ = plain.__getitems__(range(64))
    is_flipped = [bool(torch.equal(x[i], reference[i].flip(-1))) for i in range(64)]
    assert all(is_flipped[i] or torch.equal(x[i], reference[i]) for i in range(64))
    assert 16 < sum(is_flipped) < 48
    again, _ = imagenet32(True, tmp_path, files=files, seed=3).__getitems__(range(64))
    assert torch.equal(again, x)  # same seed and epoch: same flips
    single = torch.stack([flipped[i][0] for i in (5, 9)])
    assert torch.equal(single, x[[5, 9]])  # a flip depends on the index, not on the batch
    flipped.set_epoch(1)
    assert not torch.equal(flipped.__getitems__(range(64))[0], x)


def test_imagenet32_missing_or_malformed_files_raise(tmp_path):
    with pytest.raises(gmp.data.DataUnavailableError, match="val_data.npz.*GMP_DATA"):
        imagenet32(False, tmp_path)
    (tmp_path / "imagenet32").mkdir()
    np.savez(tmp_path / "imagenet32" / "val_data.npz", data=np.zeros((2, 3071), np.uint8), labels=[1, 2])
    with pytest.raises(ValueError, match="3072"):
        imagenet32(False, tmp_path)
    np.savez(tmp_path / "imagenet32" / "val_data.npz", data=np.zeros((2, 3072), np.uint8), labels=[0, 2])
    with pytest.raises(ValueError, match="1 to 1000"):
        imagenet32(False, tmp_path)


def test_image_arrays_loader_batches_and_bad_input():
    images = torch.arange(2 * 1 * 2 * 2, dtype=torch.float32).view(2, 1, 2, 2)
    dataset = ImageArrays(images, torch.tensor([0, 1]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, collate_fn=batch_collate)
    x, y = next(iter(loader))
    assert torch.equal(x, images) and y.tolist() == [0, 1] and dataset.num_classes == 2
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        ImageArrays(torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="one value per channel"):
        ImageArrays(images, torch.tensor([0, 1]), mean=(0.1, 0.2))


def test_imagenet_image_folder_with_the_papers_augmentation(tmp_path):
    from PIL import Image

    colours = {"n01": (200, 10, 60), "n02": (0, 128, 255)}
    for split in ("train", "val"):
        for name, colour in colours.items():
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("RGB", (300, 200), colour).save(tmp_path / split / name / "a.JPEG", quality=100)
    train, val = imagenet(True, tmp_path), imagenet(False, tmp_path)
    assert train.classes == ["n01", "n02"] and len(val) == 2
    for dataset in (train, val):
        x, label = dataset[1]
        assert x.shape == (3, 224, 224)
        expected = (torch.tensor(colours["n02"]) / 255.0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
        assert torch.allclose(x.mean(dim=(1, 2)), expected, atol=0.03) and label == 1
    resize = RandomSquareResize(256, 480)
    sizes = {resize(Image.new("RGB", (500, 300))).size for _ in range(40)}
    assert all(w == h and 256 <= w <= 480 for w, h in sizes) and len(sizes) > 5
    with pytest.raises(gmp.data.DataUnavailableError, match="ImageFolder"):
        imagenet(True, tmp_path / "missing")
