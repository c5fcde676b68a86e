"""``grouper bench ...``: the benchmarks (they print figures and assert nothing)."""

from __future__ import annotations

import argparse

from grouper.cli import argtypes as T
from grouper.simulator.bench import add_bench_simulator


def _cmd_bench_pda(args: argparse.Namespace) -> int:
    from grouper.cli.bench_pda import bench_pda

    return bench_pda(args.hosts, args.stages, args.seed, args.runs, args.json)


def _cmd_bench_ratio(args: argparse.Namespace) -> int:
    from grouper.cli.bench_pda import bench_ratio

    return bench_ratio(args.instances, args.max_cojobs, args.max_stages, args.seed, args.json)


def _cmd_bench_agent(args: argparse.Namespace) -> int:
    from grouper.agent.bench import bench_agent

    return bench_agent(args.flows, args.runs, args.json)


def _cmd_bench_coordinator(args: argparse.Namespace) -> int:
    from grouper.common.cluster_config import SchedulingConfig
    from grouper.coordinator.bench import Knobs, bench_coordinator

    keep = args.keep_order_within
    knobs = Knobs(
        args.changed, args.iterations, args.started == "spread", args.delivery,
        SchedulingConfig.keep_order_within if keep is None else keep, args.progress_step,
        args.updates_per_period,
    )  # fmt: skip
    return bench_coordinator(args.agents, args.stages, args.seed, args.runs, args.json, knobs)


def _cmd_bench_reaction(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from grouper.experiments.reaction import bench_reaction

    with tempfile.TemporaryDirectory(prefix="grouper-reaction-") as tmp:  # removed after
        return bench_reaction(
            args.events, args.period, args.gap, args.seed, args.json, Path(tmp) / "run", args.cc
        )


def _cmd_bench_discovery(args: argparse.Namespace) -> int:
    from grouper.agent.discovery.bench import bench_discovery

    return bench_discovery(args.jobs, args.connections, args.samples, args.interval, args.json)


def _cmd_bench_datapath(args: argparse.Namespace) -> int:
    from grouper.agent.datapath_bench import bench_datapath

    return bench_datapath(
        args.entries, args.streams, args.seconds, args.runs, args.json, args.txqueues
    )


def _cmd_bench_pooled_queue(args: argparse.Namespace) -> int:
    from grouper.experiments.pooled_queue import bench_pooled_queue

    return bench_pooled_queue(args.cases, args.mbps, args.seconds, args.json)


def _cases(text: str) -> list[str]:
    """Some of ``experiments/pooled_queue.py``'s cases, comma-separated."""
    from grouper.experiments.pooled_queue import CASES

    cases = text.split(",")
    if not all(c in CASES for c in cases):
        raise argparse.ArgumentTypeError(f"must be some of {','.join(CASES)}; got {text[:20]!r}")
    return cases


SEED_HELP = "seed of the random instance"
RUNS = T.count(3, 1000)  # timed runs; the median of at least three is reported


def add_bench(bench: argparse.ArgumentParser) -> None:
    """Every ``bench`` subcommand, on the ``bench`` parser."""
    bsub = bench.add_subparsers(dest="what", required=True)

    add = T.adder(bsub, json_option=True)
    _add_planning_benches(add)
    _add_kernel_benches(add)
    add_bench_simulator(add)  # grouper bench simulator --trace PATH (simulator/bench.py)


def _add_planning_benches(add: T.Add) -> None:
    """Benchmarks of the planner and the coordinator: no root needed."""
    bp = add("pda", _cmd_bench_pda, "time PDA on a random cluster-scale instance")
    bp.add_argument(
        "--hosts", type=T.count(2, T.MAX_BENCH_HOSTS), default=1000, help="hosts of the instance"
    )
    bp.add_argument(
        "--stages", type=T.count(1, T.MAX_BENCH_STAGES), default=10000, help="stages to order"
    )
    bp.add_argument("--seed", type=T.SEED, default=1, help=SEED_HELP)
    bp.add_argument("--runs", type=RUNS, default=5, help="timed runs (median reported, min 3)")
    bc = add(
        "coordinator",
        _cmd_bench_coordinator,
        "coordinator cycles against a fleet of virtual agents (another process, loopback gRPC)",
    )
    bc.add_argument(
        "--agents", type=T.count(2, T.MAX_BENCH_HOSTS), default=1000, help="virtual agents"
    )
    bc.add_argument(
        "--stages", type=T.count(1, T.MAX_BENCH_STAGES), default=10000, help="stages scheduled"
    )
    bc.add_argument("--seed", type=T.SEED, default=1, help=SEED_HELP)
    bc.add_argument("--runs", type=RUNS, default=3, help="timed runs (min 3)")
    bc.add_argument(
        "--changed", type=T.FRACTION, default=1.0, help="share of jobs progressing per period"
    )
    bc.add_argument(
        "--iterations",
        type=T.count(1, 10**6),
        default=1,
        help="iterations each progressing job gains per period",
    )
    bc.add_argument(
        "--updates-per-period",
        dest="updates_per_period",
        type=T.count(1, 20),
        default=1,
        help="progress sent this many times a period, the iterations split over them (agents "
        "with scheduling.progress_interval = period / N; 4 with the default interval)",
    )
    bc.add_argument(
        "--started",
        choices=("spread", "together"),
        default="spread",
        help="jobs somewhere in their first stage, so stages end every period as on a "
        "cluster (default), or all at iteration 0",
    )
    bc.add_argument(
        "--progress-step",
        dest="progress_step",
        type=T.PROGRESS_STEP,
        default=0.0,
        help="the cluster's scheduling.progress_step (0: agents report every change)",
    )
    bc.add_argument(
        "--delivery",
        choices=("update", "result"),
        default="update",
        help="plans acknowledged by the agents' next update (default) or each by a result",
    )
    bc.add_argument(
        "--keep-order-within",
        dest="keep_order_within",
        type=T.FRACTION,
        default=None,
        help="the cluster's scheduling.keep_order_within (default: the config's default; "
        "0: PDA's new order every period)",
    )
    br = add(
        "ratio",
        _cmd_bench_ratio,
        "distribution of PDA's sum of SCT over the LP bound on random one-port instances",
    )
    br.add_argument(
        "--instances", type=T.count(1, 100_000), default=200, help="random instances of each kind"
    )
    br.add_argument("--max-cojobs", type=T.count(2, 50), default=6, help="at least 2")
    br.add_argument(
        "--max-stages", type=T.count(1, 50), default=4, help="stages of a cojob, at most"
    )
    br.add_argument("--seed", type=T.SEED, default=1, help=SEED_HELP)


def _add_kernel_benches(add: T.Add) -> None:
    """Benchmarks of the agent and the datapath in real namespaces (root)."""
    ba = add("agent", _cmd_bench_agent, "plan apply latency of the agent (root)")
    ba.add_argument("--flows", type=T.count(10, 100_000), default=1000, help="at least 10")
    ba.add_argument("--runs", type=RUNS, default=5, help="timed runs (min 3)")
    br = add(
        "reaction",
        _cmd_bench_reaction,
        "stage event to new priorities in every kernel, on the emulated fabric (root)",
    )
    br.add_argument("--events", type=T.count(1, 10000), default=80, help="stage events timed")
    br.add_argument("--period", type=T.real(0.05, 3600), default=5.0, help="scheduling period")
    br.add_argument("--gap", type=T.real(0.05, 60), default=0.5, help="seconds between events")
    br.add_argument("--seed", type=T.SEED, default=1, help=SEED_HELP)
    T.add_cc(br)
    bd = add(
        "discovery",
        _cmd_bench_discovery,
        "connect() to planned band and DSCP, and agent CPU, with many jobs (root)",
    )
    bd.add_argument("--jobs", type=T.count(1, 2000), default=200, help="registered jobs")
    bd.add_argument("--connections", type=T.count(1, 64), default=4, help="per job")
    bd.add_argument("--samples", type=T.count(10, 10000), default=60, help="timed new connections")
    bd.add_argument(
        "--interval", type=T.real(0.01, 10), default=0.1, help="agent discovery interval (s)"
    )
    bp = add(
        "pooled-queue",
        _cmd_bench_pooled_queue,
        "flows whose NIC bands pool in a switch queue: TCP's rates, the rounds' and the "
        "rule's (root)",
    )
    bp.add_argument("--mbps", type=T.real(1, 1000), default=20.0, help="every link")
    bp.add_argument("--seconds", type=T.real(1, 600), default=10.0, help="measured, per case")
    bp.add_argument(
        "--cases", type=_cases, help="some of ab,ba,abc,cross,three,tied (default: all)"
    )
    bdp = add(
        "datapath",
        _cmd_bench_datapath,
        "TCP throughput through a veth with no agent, an idle agent and 10,000 rules (root)",
    )
    bdp.add_argument(
        "--entries", type=T.count(1, 100_000), default=10000, help="rules in the loaded state"
    )
    bdp.add_argument("--streams", type=T.count(1, 64), default=4, help="parallel TCP streams")
    bdp.add_argument("--seconds", type=T.real(1, 60), default=5.0, help="measured, per run")
    bdp.add_argument(
        "--runs",
        type=T.count(1, 20),
        default=5,
        help="rounds, every state once each (min 2 for a verdict)",
    )
    bdp.add_argument(
        "--txqueues",
        type=T.count(1, 64),
        default=1,
        help="TX queues of the veth (>1: also measures one root over all queues)",
    )
