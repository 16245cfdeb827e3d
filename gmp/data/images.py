"""The cameraman test image as an implicit-representation fitting problem (SIREN, SBSNN).

As in SIREN's public image-fitting notebook: scikit-image's ``camera()`` (512 x 512, 8 bit)
is resized to ``side x side`` (bilinear with antialiasing), pixel values are mapped to
``[-1, 1]``, and the inputs are the coordinates of a ``linspace(-1, 1, side)`` grid in
row-major order, ``(row coordinate, column coordinate)`` per pixel.
"""

from __future__ import annotations

import torch
from torch import Tensor


def coordinate_grid(side: int, dim: int = 2) -> Tensor:
    """``(side**dim, dim)`` grid of ``linspace(-1, 1, side)`` coordinates, row-major (``ij`` indexing)."""
    if side < 2 or dim < 1:
        raise ValueError(f"need side >= 2 and dim >= 1, got side={side!r}, dim={dim!r}")
    axis = torch.linspace(-1.0, 1.0, side)
    grid = torch.stack(torch.meshgrid(*([axis] * dim), indexing="ij"), dim=-1)
    return grid.reshape(-1, dim)


def cameraman(side: int = 256) -> Tensor:
    """The cameraman image resized to ``side x side`` with values in ``[-1, 1]``, shape ``(side, side)``."""
    if side < 2:
        raise ValueError(f"side must be at least 2 pixels, got {side!r}")
    try:
        from skimage.data import camera
    except ImportError as err:
        raise ImportError("the cameraman image comes with scikit-image: pip install scikit-image "
                          "(or the book extra: pip install 'gmp[book]')") from err
    from torchvision.transforms.functional import InterpolationMode, resize

    image = torch.from_numpy(camera()).to(torch.float32).div(255.0)
    image = resize(image[None], [side, side], interpolation=InterpolationMode.BILINEAR, antialias=True)[0]
    return (image * 2.0 - 1.0).clamp(-1.0, 1.0)


def image_fitting_data(side: int = 256) -> tuple[Tensor, Tensor]:
    """Coordinates ``(side^2, 2)`` and pixel values ``(side^2, 1)`` of the cameraman image."""
    return coordinate_grid(side), cameraman(side).reshape(-1, 1)
