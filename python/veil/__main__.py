"""``python -m veil``: the same command line as ``veil``."""

import sys

from veil.cli import main

if __name__ == "__main__":
    sys.exit(main())
