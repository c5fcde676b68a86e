"""Command-line numbers checked where argparse reads them, with documented limits.

A NaN period, a negative scale or a count that would need gigabytes is refused before
any work starts, as one line (``grouper: error: argument --period: ...``, exit 2).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

from grouper.common import limits as L
from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.progress import MAX_PROGRESS_STEP
from grouper.common.scheduling import POLICIES

MAX_PERIOD = L.MAX_PERIOD  # seconds
MAX_BENCH_HOSTS = 100_000
MAX_BENCH_STAGES = 1_000_000
MAX_SEED = 2**32 - 1
MAX_USAGE_ERROR = 300  # characters of an argparse message (it quotes whole arguments)


def real(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number in [lo, hi] (or (lo, hi] with ``lo_open``)."""
    span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"

    def parse(text: str) -> float:
        try:
            if not text.isascii():
                raise ValueError(text)
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number in ASCII digits, got {text[:20]!r}"
            ) from None
        if not math.isfinite(x) or x < lo or x > hi or (lo_open and x == lo):
            raise argparse.ArgumentTypeError(
                f"must be a finite number in {span}, got {text.strip()[:20]}"
            )
        return x

    parse.range = span  # type: ignore[attr-defined]  # shown by the CLI reference
    return parse


def count(lo: int, hi: int) -> Callable[[str], int]:
    """An integer in [lo, hi]."""

    def parse(text: str) -> int:
        n = v.ascii_int(text)
        if n is None:
            raise argparse.ArgumentTypeError(
                f"expected an integer in ASCII digits, got {text[:20]!r}"
            )
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(
                f"must be between {lo} and {hi}, got {text.strip()[:20]}"
            )
        return n

    parse.range = f"[{lo}, {hi}]"  # type: ignore[attr-defined]  # shown by the CLI reference
    return parse


def address(*, zero_port_off: bool = False) -> Callable[[str], str]:
    """HOST:PORT or unix:PATH, as the cluster config's addresses (port 0 = off with
    ``zero_port_off``)."""

    def parse(text: str) -> str:
        try:
            return v.address(text, "", zero_port_off=zero_port_off)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None

    return parse


def period(text: str) -> float:
    """A scheduling period: 0 (every event) or MIN_PERIOD to MAX_PERIOD seconds; a
    shorter one is a busy loop (and a simulation that never ends)."""
    x = real(0.0, MAX_PERIOD)(text)
    if 0 < x < L.MIN_PERIOD:
        raise argparse.ArgumentTypeError(
            f"must be 0 (every event) or {L.MIN_PERIOD:g} to {MAX_PERIOD:g} s, got {text[:20]}"
        )
    return x


def interface(text: str) -> str:
    """A network interface name the kernel takes (as the cluster config's ``nic``)."""
    try:
        return v.interface_name(text, "")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(LOG_LEVELS)}, got {text[:20]!r}"
        )
    return level


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PORT = count(0, 65535)
PERIOD = period
SEED = count(0, MAX_SEED)
LOG_LEVEL_HELP = "log level: " + ", ".join(LOG_LEVELS).lower()
POLICIES_HELP = "comma-separated policies to run, of " + ", ".join(POLICIES)
FRACTION = real(0.0, 1.0)
PROGRESS_STEP = real(0.0, MAX_PROGRESS_STEP)  # a cluster's scheduling.progress_step


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exits 2)."""

    def error(self, message: str) -> NoReturn:
        """One line of bounded length, however long the arguments it quotes."""
        text = " ".join(message.split())
        if len(text) > MAX_USAGE_ERROR:
            text = text[: MAX_USAGE_ERROR - 3] + "..."
        print(f"grouper: error: {text}", file=sys.stderr)
        sys.exit(2)


JSON_HELP = "write the result as JSON (- = stdout)"


def add_json(parser: argparse.ArgumentParser, help_: str = JSON_HELP) -> None:
    """``--json PATH`` on ``parser``, the one way a subcommand takes it (checked before
    the work by ``flags.check_outputs``, written by ``common.output.write_json``);
    ``help_`` when the subcommand writes something other than its result."""
    parser.add_argument("--json", metavar="PATH", help=help_)


def add_cc(parser: argparse.ArgumentParser) -> None:
    """``--cc``: the emulated hosts' TCP congestion control (``topologies/congestion.py``)."""
    from grouper.topologies import congestion

    parser.add_argument(
        "--cc",
        choices=congestion.CHOICES,
        default=congestion.DEFAULT,
        help=f"every emulated host's TCP congestion control (default {congestion.DEFAULT}); "
        "recorded in the results",
    )


# adds a subcommand: add(name, handler, help) -> its parser
Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def adder(sub: argparse._SubParsersAction, *, json_option: bool = False) -> Add:
    """``add(name, handler, help)`` for ``sub``: a subcommand whose help is also its
    description and that runs ``handler``; with ``json_option``, every one takes
    ``--json PATH``."""

    def add(
        name: str, fn: Callable[[argparse.Namespace], int], help_: str
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(fn=fn)
        if json_option:
            add_json(sp)
        return sp

    return add
