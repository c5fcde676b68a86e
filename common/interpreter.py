"""The command line that runs Python code of ours in a fresh interpreter."""

from __future__ import annotations

import sys


def python_argv(*args: str) -> list[str]:
    """``python -P ARGS`` with this interpreter (``args``: ``-m``, a module and its
    arguments, or ``-c`` and code). ``-P`` keeps the working directory off the child's
    ``sys.path``, so the child imports grouper from where this process did: started from
    a checkout (which holds a ``grouper/`` folder), ``python -m`` would import that
    checkout's code instead, whatever was installed or put on ``PYTHONPATH``."""
    return [sys.executable, "-P", *args]
