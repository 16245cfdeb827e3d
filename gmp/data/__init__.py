"""Dataset loaders. Files are looked up under ``GMP_DATA`` (default ``~/.cache/gmp``) and
downloaded from their original public source, with a sha256 check, when missing."""

from gmp.data._fetch import DataUnavailableError, data_root, fetch
from gmp.data.uci import DATASETS as UCI_DATASETS
from gmp.data.uci import UCISplit, uci
from gmp.data.classification import cifar10, digits, mnist, mnist1d
from gmp.data.toy import ToyData, banana, levy, levy_function
from gmp.data.images import cameraman, coordinate_grid, grey_image, image_fitting_data
from gmp.data.imagenet import ImageArrays, imagenet, imagenet32
