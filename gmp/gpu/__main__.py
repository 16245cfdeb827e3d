"""``python -m gmp.gpu``: :func:`gmp.gpu.command.main`."""

import sys

from gmp.gpu.command import main

sys.exit(main())
