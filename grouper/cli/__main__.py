"""``python -m grouper.cli``: the ``grouper`` command."""

import sys

from grouper.cli.main import main

if __name__ == "__main__":  # not when multiprocessing's spawn imports it again
    sys.exit(main())
