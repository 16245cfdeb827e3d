"""ImageNet32 and ImageNet for the image-classification experiments of Chen & Ge (Sec. 5).

ImageNet32 (Chrabaszcz et al., 2017) in its public npz batch format: files
``train_data_batch_1.npz`` ... ``train_data_batch_10.npz`` and ``val_data.npz`` under
``GMP_DATA/imagenet32/``, each holding ``data`` (N, 3072) uint8, one image per row with the
1,024 red, then green, then blue pixels of a 32x32 image, and ``labels`` from 1 to 1,000.
:func:`imagenet32` returns them as images scaled by ``x / 255`` minus the channel means
(0.4811, 0.4575, 0.4079), as the official code of Chen & Ge does (no division by a
standard deviation), labels from 0, and a random horizontal flip for training.

ImageNet (ILSVRC 2012) through ``torchvision.datasets.ImageFolder`` with the augmentation of
Chen & Ge's ResNet-34 experiment: resize to ``L x L`` with ``L ~ U[256, 480]`` (aspect ratio
not kept), random 224x224 crop, random horizontal flip; validation images resized to
368x368 and centre-cropped to 224x224.

Both data sets need an ImageNet account to download, so they are never fetched: a missing
file raises :class:`gmp.data.DataUnavailableError` naming the file and ``GMP_DATA``.

:class:`ImageArrays` holds any in-memory image array (ImageNet32, or an offline stand-in)
and serves whole batches at once (``__getitems__``), with a horizontal flip that is a
deterministic function of ``(seed, epoch, index)``, so a run gives the same batches on one
device or on several.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from gmp.data._fetch import DataUnavailableError, data_root

__all__ = ["ImageArrays", "batch_collate", "imagenet32", "imagenet32_arrays", "imagenet", "RandomSquareResize",
           "IMAGENET32_MEAN", "IMAGENET32_TRAIN_FILES", "IMAGENET32_VAL_FILE", "IMAGENET_MEAN", "IMAGENET_STD"]

#: Channel means subtracted by the official code of Chen & Ge (after ``x / 255``).
IMAGENET32_MEAN: tuple[float, float, float] = (0.4811, 0.4575, 0.4079)
#: The training batches of ImageNet32 in the public npz format.
IMAGENET32_TRAIN_FILES: tuple[str, ...] = tuple(f"train_data_batch_{i}.npz" for i in range(1, 11))
#: The validation data of ImageNet32 (the ImageNet validation set, downsampled).
IMAGENET32_VAL_FILE = "val_data.npz"
#: torchvision's ImageNet normalisation, used for the ResNet-34 pipeline (the paper gives none).
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

_SOURCE = ("https://image-net.org/download-images (an ImageNet account is needed; "
           "Downsampled ImageNet 32x32, npz format)")


class ImageArrays(torch.utils.data.Dataset):
    """Images held in memory, served as normalised float batches.

    Args:
        images: array of shape (N, C, H, W), uint8 (scaled by 1/255) or float (used as is).
        labels: integer class labels (N,) starting at 0.
        mean: per-channel value subtracted after scaling (None: nothing).
        flip: flip each image horizontally with probability 1/2 (training augmentation).
        seed: seed of the flips; the flip of image ``i`` in epoch ``e`` depends only on
            ``(seed, e, i)`` (see :meth:`set_epoch`).

    ``dataset[i]`` is one ``(image, label)``; ``dataset.__getitems__(indices)`` (used by
    ``DataLoader``) returns one stacked batch ``(images, labels)``: collate it with
    :func:`batch_collate`.
    """

    def __init__(self, images: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor,
                 mean: Sequence[float] | None = None, flip: bool = False, seed: int = 0):
        images = torch.as_tensor(np.asarray(images)) if not isinstance(images, torch.Tensor) else images
        labels = torch.as_tensor(np.asarray(labels)).long() if not isinstance(labels, torch.Tensor) else labels.long()
        if images.dim() != 4:
            raise ValueError(f"images must have shape (N, C, H, W), got {tuple(images.shape)}")
        if labels.shape != images.shape[:1]:
            raise ValueError(f"labels must have shape ({images.shape[0]},), got {tuple(labels.shape)}")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise ValueError(f"images must be uint8 or floating point, got {images.dtype}")
        if mean is not None and len(mean) != images.shape[1]:
            raise ValueError(f"mean needs one value per channel ({images.shape[1]}), got {list(mean)}")
        self.images, self.labels = images, labels
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.flip, self.seed = bool(flip), int(seed)
        self.set_epoch(0)

    @property
    def num_classes(self) -> int:
        return int(self.labels.max().item()) + 1

    def set_epoch(self, epoch: int) -> None:
        """Draw the flips of epoch ``epoch`` (a fresh, seeded draw per epoch)."""
        self.epoch = int(epoch)
        if self.flip:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._flips = torch.rand(len(self), generator=generator) < 0.5

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(list(indices), dtype=torch.long)
        x = self.images[index]
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
        if self.mean is not None:
            x -= self.mean
        if self.flip:
            flips = self._flips[index]
            x[flips] = x[flips].flip(-1)
        return x, self.labels[index]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]


def batch_collate(batch):
    """The collate function for batches from ``ImageArrays.__getitems__`` (already stacked)."""
    return batch


def _imagenet32_file(name: str, root: Path | None) -> Path:
    folder = (root if root is not None else data_root()) / "imagenet32"
    path = folder / name
    if not path.is_file():
        raise DataUnavailableError(
            f"ImageNet32 file {name!r} is missing: expected {path} (set GMP_DATA to the folder that holds "
            f"imagenet32/; the files come from {_SOURCE} and are never downloaded automatically)")
    return path


def imagenet32_arrays(train: bool = True, root: str | Path | None = None,
                      files: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw ImageNet32 arrays: uint8 images (N, 3, 32, 32) and labels from 0 (N,).

    ``files`` overrides the npz files read (default: the ten training batches, or the
    validation file).
    """
    root = Path(root) if root is not None else None
    names = list(files) if files is not None else (list(IMAGENET32_TRAIN_FILES) if train else [IMAGENET32_VAL_FILE])
    images, labels = [], []
    for name in names:
        with np.load(_imagenet32_file(name, root), allow_pickle=False) as batch:
            if "data" not in batch.files or "labels" not in batch.files:
                raise ValueError(f"{name} must hold arrays 'data' and 'labels', found {batch.files}")
            data, label = batch["data"], np.asarray(batch["labels"]).reshape(-1)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != label.shape[0]:
            raise ValueError(f"{name}: expected 'data' (N, 3072) uint8 and N labels, got {data.dtype} "
                             f"{data.shape} and {label.shape}")
        if label.min() < 1 or label.max() > 1000:
            raise ValueError(f"{name}: ImageNet32 labels run from 1 to 1000, got {label.min()}..{label.max()}")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(label.astype(np.int64) - 1)
    return np.concatenate(images), np.concatenate(labels)


def imagenet32(train: bool = True, root: str | Path | None = None, flip: bool | None = None,
               seed: int = 0, files: Sequence[str] | None = None) -> ImageArrays:
    """ImageNet32 as the official code of Chen & Ge feeds it to VGG-6.

    Images ``x / 255 - (0.4811, 0.4575, 0.4079)`` per channel, labels from 0; a random
    horizontal flip in training (``flip`` defaults to ``train``). Files are read from
    ``root`` (default ``GMP_DATA``) ``/imagenet32/``.
    """
    images, labels = imagenet32_arrays(train, root, files)
    return ImageArrays(images, labels, mean=IMAGENET32_MEAN, flip=train if flip is None else flip, seed=seed)


class RandomSquareResize(torch.nn.Module):
    """Resize to ``L x L`` with ``L`` uniform on the integers ``low..high`` (aspect ratio not kept).

    The scale augmentation of Chen & Ge's ResNet-34 run (``L ~ U[256, 480]``); ``L`` is drawn
    with Python's ``random``, which ``DataLoader`` seeds in every worker.
    """

    def __init__(self, low: int = 256, high: int = 480):
        super().__init__()
        if not 1 <= low <= high:
            raise ValueError(f"need 1 <= low <= high, got low={low}, high={high}")
        self.low, self.high = low, high

    def forward(self, image):
        from torchvision.transforms import functional as TF

        size = random.randint(self.low, self.high)
        return TF.resize(image, [size, size], antialias=True)


def imagenet(train: bool = True, root: str | Path | None = None, crop: int = 224,
             resize: tuple[int, int] = (256, 480), val_resize: int = 368):
    """ImageNet (ILSVRC 2012) as an ``ImageFolder`` with Chen & Ge's augmentation (Sec. 5).

    Expects ``root`` (default ``GMP_DATA/imagenet``) ``/train/<class>/*.JPEG`` and
    ``/val/<class>/*.JPEG``. Training: :class:`RandomSquareResize` to ``L ~ U[resize]``,
    random ``crop`` crop, random horizontal flip; validation: resize to
    ``val_resize x val_resize``, centre ``crop``. Both normalised with torchvision's
    ImageNet mean and standard deviation.
    """
    from torchvision import datasets, transforms

    folder = (Path(root) if root is not None else data_root() / "imagenet") / ("train" if train else "val")
    if not folder.is_dir():
        raise DataUnavailableError(
            f"ImageNet folder {folder} is missing: expected ImageFolder layout <root>/train/<class>/*.JPEG and "
            f"<root>/val/<class>/*.JPEG under GMP_DATA/imagenet (from https://image-net.org; never downloaded "
            f"automatically)")
    normalise = [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if train:
        pipeline = [RandomSquareResize(*resize), transforms.RandomCrop(crop), transforms.RandomHorizontalFlip()]
    else:
        pipeline = [transforms.Resize((val_resize, val_resize), antialias=True), transforms.CenterCrop(crop)]
    return datasets.ImageFolder(str(folder), transform=transforms.Compose(pipeline + normalise))
