"""One module per chapter: its ``CONFIG`` (every knob per scale), the paper's reported
numbers (``PAPER``) and the claims it tests (``CLAIMS``). See :mod:`gmp.config`."""
