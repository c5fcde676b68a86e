"""The ``grouper`` console script of the ``grouper-client`` distribution.

The full command line where the full distribution is installed too (then
:mod:`grouper.cli` exists), else ``grouper run`` alone. Nothing imports this module:
it is the top of the training side, above :mod:`grouper.launcher`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from grouper.launcher import UsageError, add_arguments, run


def main(argv: list[str] | None = None) -> int:
    """``grouper`` as ``grouper-client`` installs it: the full command line when the
    full distribution is there too, else ``grouper run`` only."""
    argv = sys.argv[1:] if argv is None else argv
    if importlib.util.find_spec("grouper.cli") is not None:
        from grouper.cli.main import main as full_main

        return full_main(argv)
    p = argparse.ArgumentParser(
        prog="grouper",
        description="grouper-client: `grouper run` starts a command as a grouper job "
        "(the other subcommands come with the full grouper distribution)",
    )
    sub = p.add_subparsers(dest="subcommand", required=True)
    add_arguments(sub.add_parser("run", help="run a command as a grouper job"))
    args = p.parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"grouper: error: {exc}", file=sys.stderr)
        return 2
