"""The command line's cross-field rules, checked once argparse has read every flag and
before any work starts (argtypes checks each number alone): output paths that could not
be written at the end, and flags the chosen mode or workload would silently ignore.

Every refusal is a :class:`ConfigError` naming the flag (one line, exit 2).
"""

from __future__ import annotations

import argparse
import inspect

from grouper.common.errors import ConfigError, short
from grouper.common.output import check_output_dir, check_output_file

# subcommands whose --out names a file (elsewhere --out is a directory of results)
OUT_IS_FILE = ("switch-config",)
SWEEP_ONLY = ("what", "values", "dask")  # simulate flags that only a sweep reads
JOBS_ONLY = (
    "iteration_batch",
    "hold_gpus",
    "rules",
    "reference_poll",
)  # and those only --mode jobs reads
# simulate flags that --mode jobs ignores
STAGES_ONLY = (
    "period", "load", "comm_ratio", "scale", "no_contention", "max_sim_time",
    "timeout",
)  # fmt: skip
GENERATOR_PARAMS = ("load", "comm_ratio", "scale")  # go to a generated builtin


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False


def check_flags(args: argparse.Namespace) -> None:
    """Every rule that applies to the parsed ``args`` of one subcommand."""
    check_outputs(args)
    if args.command == "simulate":
        check_simulate(args)


def check_outputs(args: argparse.Namespace) -> None:
    """``--json`` and ``--out`` can be written, checked before the work: a long run must
    not fail at its end because one names a directory, a device or a missing place."""
    check_output_file(getattr(args, "json", None), "--json")
    check_output_file(getattr(args, "trace", None), "--trace")  # the coordinator's
    if args.command in OUT_IS_FILE:
        check_output_file(getattr(args, "out", None), "--out")
    else:
        check_output_dir(getattr(args, "out", None), "--out")


def check_simulate(args: argparse.Namespace) -> None:
    """Flags of ``simulate`` that the chosen action, mode or workload would ignore."""
    if args.action != "sweep":
        for dest in SWEEP_ONLY:
            if given(args, dest):
                raise ConfigError(flag(dest), "only with simulate sweep")
    elif args.what is None:
        raise ConfigError("--what", "simulate sweep needs one: load, comm-ratio, period, online")
    if args.mode == "jobs":
        for dest in STAGES_ONLY:
            if given(args, dest):
                raise ConfigError(flag(dest), "not used with --mode jobs")
        return
    for dest in JOBS_ONLY:
        if given(args, dest):
            raise ConfigError(flag(dest), "only with --mode jobs")
    swept = {"load": "load", "online": "load", "comm-ratio": "comm_ratio"}.get(args.what or "")
    wanted = [(flag(d), d) for d in GENERATOR_PARAMS if given(args, d)]
    if swept and args.action == "sweep":
        wanted.append(("--what", swept))
    if wanted:
        check_generator_params(args.workload or "builtin:sim60", wanted)


def check_generator_params(spec: str, wanted: list[tuple[str, str]]) -> None:
    """A generated builtin takes each (flag, parameter) of ``wanted`` (``--load`` and
    the like); a YAML file or a fixed builtin takes none of them."""
    from grouper.workloads.generators import GENERATORS

    name = spec.split(":", 1)[1] if spec.startswith("builtin:") else ""
    generator = GENERATORS.get(name)
    takes = set(inspect.signature(generator).parameters) if generator else set()
    for option, dest in wanted:
        if dest in takes:
            continue
        users = [n for n, g in GENERATORS.items() if dest in inspect.signature(g).parameters]
        raise ConfigError(
            option,
            f"workload {short(spec)} has no {dest.replace('_', '-')} parameter (only "
            f"builtin:{', builtin:'.join(users)})",
        )
