"""``python -m grouper.cli``: the ``grouper`` command."""

import sys

from grouper.cli.main import main

sys.exit(main())
