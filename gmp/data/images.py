"""The cameraman test image as an implicit-representation fitting problem (SIREN, SBSNN).

Three photographs go by that name here (``source``):

* ``"classic"``: the classic cameraman, 512 x 512, as scikit-image 0.17.2 shipped it
  (``skimage/data/camera.png``). SIREN (2020) fitted this photograph: its notebook resizes
  ``skimage.data.camera()`` to 256 x 256 (bilinear, antialiased here).
* ``"author"``: the SBSNN author's own 256 x 256 file of the classic cameraman
  (``cameraman_test_image.png`` of his public repository), which his code fits as it is.
  It is close to, not equal to, the classic photograph resized.
* ``"skimage"``: what ``skimage.data.camera()`` returns today. Since scikit-image 0.18 that
  is a **different photograph** under the same name; the book's first full-batch runs fitted
  it, and their chapters say so.

The first two are read from ``GMP_DATA/images/`` and downloaded from their public source
(sha256-checked) when missing. Pixel values are returned in ``[0, 1]`` (:func:`grey_image`,
the SBSNN author's range) or ``[-1, 1]`` (:func:`cameraman`, SIREN's range).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from gmp.data._fetch import fetch


class ImageFile(NamedTuple):
    """A data file of an image: its path under ``GMP_DATA``, public source and sha256."""

    relpath: str
    url: str
    sha256: str
    side: int


IMAGES: dict[str, ImageFile] = {
    "classic": ImageFile(
        "images/camera-skimage-0.17.2.png",
        "https://raw.githubusercontent.com/scikit-image/scikit-image/v0.17.2/skimage/data/camera.png",
        "361a6d56d22ee52289cd308d5461d090e06a56cb36007d8dfc3226cbe8aaa5db", 512),
    "author": ImageFile(
        "images/cameraman-sbsnn-author.png",
        "https://raw.githubusercontent.com/mlaang/Neural-Networks--All-of-Whose-Derivatives-are-Self-Normalizing-"
        "Neural-Networks/dd2052a/cameraman_test_image.png",
        "5c74b366aaeb7913a234be083fca97a58216c03523f059c8995ae7d097df226d", 256),
}
"""The image files of ``"classic"`` and ``"author"`` (see the module docstring)."""

SOURCES = ("classic", "author", "skimage")
"""The photographs :func:`grey_image` can load."""

TEXT_READING_IMAGE = "skimage"
"""The photograph of the book's full-batch chapters, which read the SBSNN text literally.

It is scikit-image's ``camera()`` of today, on which their paper-scale caches were computed,
not SIREN's photograph.
"""


def _pixels(source: str) -> Tensor:
    """The photograph ``source`` at its own size, 8-bit grey values as float64 in ``[0, 255]``."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if source == "skimage":
        try:
            from skimage.data import camera
        except ImportError as err:
            raise ImportError("source='skimage' needs scikit-image: pip install scikit-image") from err
        return torch.from_numpy(camera()).to(torch.float64)
    import numpy as np
    from PIL import Image

    image = IMAGES[source]
    with Image.open(fetch(image.relpath, image.url, image.sha256)) as png:
        if png.mode != "L" or png.size != (image.side, image.side):
            raise ValueError(f"{image.relpath} should be an 8-bit grey {image.side} x {image.side} image, "
                             f"got mode {png.mode} of size {png.size}")
        return torch.from_numpy(np.asarray(png, dtype=np.float64).copy())


def grey_image(side: int = 256, source: str = "classic") -> Tensor:
    """The cameraman photograph ``source`` as ``(side, side)`` float32 values in ``[0, 1]``.

    At its own size a photograph is returned exactly (``value / 255``, as the SBSNN author's
    code reads it); at another size it is resized bilinearly with antialiasing.
    """
    if not isinstance(side, int) or side < 2:
        raise ValueError(f"side must be an integer of at least 2 pixels, got {side!r}")
    image = _pixels(source) / 255.0
    if image.shape[-1] != side:
        from torchvision.transforms.functional import InterpolationMode, resize

        image = resize(image[None].float(), [side, side], interpolation=InterpolationMode.BILINEAR,
                       antialias=True)[0].clamp(0.0, 1.0)
    return image.to(torch.float32)


def coordinate_grid(side: int, dim: int = 2, indexing: str = "ij") -> Tensor:
    """``(side**dim, dim)`` grid of ``linspace(-1, 1, side)`` coordinates, pixels in row-major order.

    ``indexing="ij"`` (SIREN's code) gives each pixel ``(row coordinate, column coordinate)``;
    ``"xy"`` (the SBSNN author's ``meshgrid`` default, 2-D only) gives ``(column, row)``.
    """
    if side < 2 or dim < 1:
        raise ValueError(f"need side >= 2 and dim >= 1, got side={side!r}, dim={dim!r}")
    if indexing not in ("ij", "xy") or (indexing == "xy" and dim != 2):
        raise ValueError(f"indexing must be 'ij', or 'xy' for a 2-D grid; got {indexing!r} with dim={dim}")
    axis = torch.linspace(-1.0, 1.0, side)
    grid = torch.stack(torch.meshgrid(*([axis] * dim), indexing="ij"), dim=-1)
    if indexing == "xy":
        grid = grid.flip(-1)
    return grid.reshape(-1, dim)


def cameraman(side: int = 256, source: str = TEXT_READING_IMAGE) -> Tensor:
    """The cameraman photograph ``source`` at ``side x side`` with values in ``[-1, 1]`` (SIREN's range).

    The default ``"skimage"`` is what the book's first full-batch runs fitted (scikit-image's
    photograph of today); SIREN itself fitted ``"classic"``.
    """
    return (grey_image(side, source) * 2.0 - 1.0).clamp(-1.0, 1.0)


def image_fitting_data(side: int = 256, source: str = TEXT_READING_IMAGE) -> tuple[Tensor, Tensor]:
    """Coordinates ``(side^2, 2)`` and pixel values ``(side^2, 1)`` in ``[-1, 1]``, as in SIREN's notebook."""
    return coordinate_grid(side), cameraman(side, source).reshape(-1, 1)
