"""The ``grouper`` console script: one entry point, one subcommand per tool."""

from __future__ import annotations

import argparse
import sys

from grouper.cli import argtypes as T
from grouper.cli.agent import add_arguments as add_agent_arguments
from grouper.cli.bench import add_bench
from grouper.cli.flags import check_flags
from grouper.cli.simulate import add_simulate
from grouper.cli.status import add_status
from grouper.cli.switch_config import add_switch_config
from grouper.common import limits as L
from grouper.common.errors import ConfigError
from grouper.common.output import stdout_reserved_for_json


def _cmd_order(args: argparse.Namespace) -> int:
    from grouper.cli.schedule import order

    return order(args.workload, args.policy, args.online, args.json)


def _cmd_lower_bound(args: argparse.Namespace) -> int:
    from grouper.cli.schedule import lower_bound

    return lower_bound(args.workload, args.json, args.seconds)


def _cmd_agent(args: argparse.Namespace) -> int:
    from grouper.agent.daemon import run

    return run(args)


def _cmd_check_config(args: argparse.Namespace) -> int:
    from grouper.common.cluster_config import load_cluster_config

    cfg = load_cluster_config(args.file)
    warning = cfg.queues.unmarked_warning()
    if warning:
        print(f"grouper: warning: {warning}", file=sys.stderr)
    print(
        f"{args.file}: ok (cluster {cfg.cluster}, {len(cfg.hosts)} hosts, "
        f"{cfg.queues.queues} queues, policy {cfg.scheduling.policy})"
    )
    return 0


def _cmd_coordinator(args: argparse.Namespace) -> int:
    from grouper.coordinator.daemon import run

    return run(args)


def _cmd_run(args: argparse.Namespace) -> int:
    from grouper.launcher import UsageError, run

    try:
        return run(args)
    except UsageError as exc:
        raise ConfigError(exc.path, exc.problem) from None


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from grouper.cli.calibrate import calibrate

    return calibrate(args)


def _cmd_emulate(args: argparse.Namespace) -> int:
    from grouper.experiments.emulate import emulate

    return emulate(args)


def _add_order(add: T.Add) -> None:
    """`grouper order` and its options."""
    o = add("order", _cmd_order, "PDA order of a workload's stages and every host's plan")
    o.add_argument("--workload", required=True, help="builtin:NAME or a YAML file")
    o.add_argument(
        "--policy",
        default="grouper",
        help="grouper (default), grouper-offline, baraat, sincronia, sptf, fs",
    )
    o.add_argument(
        "--online",
        action="store_true",
        help="ignore declared job stage counts: assume every job runs all stages",
    )
    T.add_json(o)


def _add_lower_bound(add: T.Add) -> None:
    """`grouper lower-bound`."""
    lb = add(
        "lower-bound",
        _cmd_lower_bound,
        "LP lower bound on the sum/average of stage completion times (offline)",
    )
    lb.add_argument("--workload", required=True, help="builtin:NAME or a YAML file")
    lb.add_argument(
        "--seconds",
        type=T.real(0, 1e6, lo_open=True),
        default=55.0,
        help="seconds from the start, loading included, after which the LP rounds stop "
        "(default 55, so that the command with its imports ends within a minute; the "
        "first round always ends): the bound of the last round solved, "
        "weaker if cuts were left but still valid; the output says so",
    )
    T.add_json(lb)


def _add_emulate(add: T.Add) -> None:
    """`grouper emulate`: the Mininet leaf-spine with agents and coordinator."""
    em = add(
        "emulate",
        _cmd_emulate,
        "run agents, coordinator and real TCP traffic on a Mininet leaf-spine (root)",
    )
    em.add_argument("--experiment", default="builtin:small", help="builtin:NAME or YAML file")
    em.add_argument("--policies", default="fs,baraat,sincronia,grouper", help=T.POLICIES_HELP)
    em.add_argument(
        "--period",
        type=T.real(L.MIN_LIVE_PERIOD, 60),
        default=0.5,
        help="scheduling period (s)",
    )
    em.add_argument(
        "--seed",
        type=T.SEED,
        default=1,
        help="not used by the emulation: its traffic comes from the experiment file",
    )
    em.add_argument(
        "--backend",
        choices=("htb", "prio"),
        default="htb",
        help="the agents' qdisc; prio (what real hosts use) puts a NIC node with the host's "
        "rate and DSCP queues between each host and its leaf",
    )
    em.add_argument(
        "--runs",
        type=T.count(1, 20),
        default=1,
        help="runs per policy, interleaved; times are the mean over runs",
    )
    em.add_argument(
        "--min-share",
        dest="min_share",
        type=T.real(0, 0.5, lo_open=True),
        default=0.001,
        help="share of each link guaranteed to every band (anti-starvation)",
    )
    em.add_argument(
        "--config",
        metavar="CLUSTER.yaml",
        help="contention constants measured on this fabric (grouper calibrate --write): the "
        "coordinator's admission and the prediction use them",
    )
    em.add_argument("--out", help="directory for logs and plots")
    T.add_cc(em)
    T.add_json(em)


def _add_calibrate(add: T.Add) -> None:
    """`grouper calibrate`: the contention model, emulated or on a cluster."""
    ca = add(
        "calibrate",
        _cmd_calibrate,
        "measure the contention model (a, b, eta) on the emulated fabric (root), or between "
        "a cluster's hosts through their agents (--config)",
    )
    ca.add_argument("--experiment", help="its topology is emulated (default builtin:small)")
    ca.add_argument(
        "--config",
        metavar="CLUSTER.yaml",
        help="measure between this cluster's hosts instead: their agents run the traffic "
        "(run where the coordinator's TLS identity is)",
    )
    ca.add_argument(
        "--hosts",
        help="the two hosts, e.g. h1,h4 (default: across the fabric, or the config's first "
        "and last)",
    )
    ca.add_argument("--sizes", default="0.25,0.5,1", help="all-reduce sizes in MB")
    ca.add_argument(
        "--max-k", dest="max_k", type=T.count(2, 16), default=8, help="measure k = 1 to this"
    )
    ca.add_argument("--reps", type=T.count(1, 20), default=3, help="timed rounds per point")
    ca.add_argument(
        "--pattern",
        choices=("pair", "star"),
        default="pair",
        help="k tasks between the same two hosts (pair), or from k different hosts to the "
        "first one (star: incast, as PS pushes)",
    )
    ca.add_argument("--write", metavar="CLUSTER.yaml", help="store a, b, eta in its admission")
    ca.add_argument("--out", help="directory for the plot")
    T.add_cc(ca)
    T.add_json(ca)


def _add_daemons(add: T.Add) -> None:
    """The daemons (`agent`, `coordinator`) and `check-config`."""
    add_agent_arguments(add("agent", _cmd_agent, "run the host agent (root)"))
    co = add("coordinator", _cmd_coordinator, "run the cluster coordinator")
    co.add_argument("--config", required=True, help="cluster YAML")
    co.add_argument(
        "--listen", type=T.address(), help="health service address (default: coordinator.listen)"
    )
    co.add_argument(
        "--metrics",
        type=T.address(zero_port_off=True),
        help="Prometheus address HOST:PORT (port 0 = off)",
    )
    co.add_argument("--log-level", type=T.log_level, default="INFO", help=T.LOG_LEVEL_HELP)
    co.add_argument(
        "--trace", metavar="FILE", help="append a JSON line per cycle: events, plans, timings"
    )
    cc = add("check-config", _cmd_check_config, "validate a cluster config file")
    cc.add_argument("file", help="the cluster YAML to check")


def _add_run(add: T.Add) -> None:
    """`grouper run`: a command as a job of a cojob (options in grouper.launcher)."""
    from grouper.launcher import add_arguments

    add_arguments(
        add("run", _cmd_run, "run a command as a grouper job (registers it with the local agent)")
    )


def build_parser() -> argparse.ArgumentParser:
    p = T.Parser(prog="grouper", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    add = T.adder(sub)
    for part in (
        _add_order,
        _add_lower_bound,
        add_simulate,
        _add_emulate,
        _add_calibrate,
        _add_daemons,
        _add_run,
        add_switch_config,
        add_status,
    ):
        part(add)
    add_bench(sub.add_parser("bench", help="benchmarks (print figures, assert nothing)"))
    return p


def main(argv: list[str] | None = None, *, dry_run: bool = False) -> int:
    """Run one subcommand; ``dry_run`` stops after every check of the flags."""
    args = build_parser().parse_args(argv)
    try:
        check_flags(args)
        if dry_run:
            return 0
        with stdout_reserved_for_json(getattr(args, "json", None) == "-"):
            return int(args.fn(args) or 0)
    except ConfigError as exc:
        print(f"grouper: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
