"""``grouper simulate [run|sweep]``: its options and the command (the simulator itself
is ``grouper.simulator``, imported when the command runs)."""

from __future__ import annotations

import argparse

from grouper.cli import argtypes as T
from grouper.common import limits as L
from grouper.common.errors import ConfigError


def add_simulate(add: T.Add) -> None:
    """`grouper simulate [run|sweep]`: stage and job simulations, sweeps."""
    sim = add(
        "simulate",
        _cmd_simulate,
        "flow-level simulation of policies on a workload (or: simulate sweep ...)",
    )
    sim.add_argument(
        "action",
        nargs="?",
        default="run",
        choices=("run", "sweep"),
        help="run: each policy once; sweep: over --what's values, with plots",
    )
    sim.add_argument(
        "--mode",
        choices=("stages", "jobs"),
        default="stages",
        help="stages: cojob stages on a flow-level network (default); jobs: whole jobs on "
        "GPUs, placement and all-reduce scheduling (Wang et al., Yu et al.)",
    )
    sim.add_argument(
        "--workload", help="builtin:NAME or YAML file (default sim60, or wang-64gpu for jobs)"
    )
    sim.add_argument("--config", help="cluster YAML: its queues and admission (a, b, eta) are used")
    _add_simulate_jobs(sim)
    _add_simulate_scheduling(sim)
    _add_simulate_knobs(sim)
    _add_sweep_runners(sim)
    sim.add_argument("--out", help="directory for CSV and PNG files")
    T.add_json(sim)


def _add_simulate_scheduling(sim: argparse.ArgumentParser) -> None:
    """What `grouper simulate` schedules with: the policies, the period, keeping orders."""
    sim.add_argument("--policies", default="fs,baraat,sincronia,grouper", help=T.POLICIES_HELP)
    sim.add_argument("--what", help="sweep: load | comm-ratio | period | online")
    sim.add_argument("--values", help="sweep: comma-separated values to use instead")
    sim.add_argument("--period", type=T.PERIOD, help="scheduling period (0 = every event)")
    sim.add_argument(
        "--keep-order-within",
        dest="keep_order_within",
        type=T.FRACTION,
        default=0.0,
        help="keep the last order of known stages when within this share of PDA's new one "
        "(a cluster's scheduling.keep_order_within; default 0: always PDA's)",
    )
    sim.add_argument(
        "--progress-step",
        dest="progress_step",
        type=T.PROGRESS_STEP,
        default=0.0,
        help="plan with progress as agents report it in steps of this share of a stage "
        "(a cluster's scheduling.progress_step; default 0: exact)",
    )


def _add_simulate_knobs(sim: argparse.ArgumentParser) -> None:
    """Limits of a run and the knobs of the generated workloads."""
    sim.add_argument(
        "--max-sim-time",
        dest="max_sim_time",
        type=T.real(0, L.MAX_SIM_TIME, lo_open=True),
        help="stop a run past this simulated time (workload time units; default: none); "
        "a workload that needs more is refused before it starts",
    )
    sim.add_argument(
        "--timeout",
        type=T.real(0, 30 * 86400, lo_open=True),
        help="stop with an error after this many wall-clock seconds (default: none)",
    )
    sim.add_argument(
        "--seed", type=T.SEED, default=1, help="seed of generated workloads and of fabric paths"
    )
    sim.add_argument(
        "--load", type=T.real(0, 10, lo_open=True), help="sim60: arrival rate scale (0.1 to 2.0)"
    )
    sim.add_argument(
        "--comm-ratio",
        dest="comm_ratio",
        type=T.real(0, 100, lo_open=True),
        help="sim60: communication / computation time of one iteration",
    )
    sim.add_argument(
        "--scale", type=T.real(0, 100, lo_open=True), help="generated builtins: iteration scale"
    )
    sim.add_argument(
        "--link-gbps", type=T.real(0, 1e6, lo_open=True), help="coflow:PATH: port rate (default 1)"
    )
    sim.add_argument(
        "--no-contention",
        action="store_true",
        help="ideal fluid sharing instead of Eq. 5's contention model",
    )


def _add_simulate_jobs(sim: argparse.ArgumentParser) -> None:
    """Options of `--mode jobs` (whole jobs on GPUs)."""
    sim.add_argument("--placement", help="jobs: rand, ff, ls, lwf:K (comma-separated)")
    sim.add_argument("--scheduler", help="jobs: srsf:N, ada-srsf (comma-separated)")
    sim.add_argument(
        "--iteration-batch",
        dest="iteration_batch",
        type=T.count(1, 100000),
        help="jobs: simulate K iterations as one (default 1: exact)",
    )
    sim.add_argument(
        "--hold-gpus",
        dest="hold_gpus",
        action="store_true",
        help="jobs: a job's GPUs stay idle through its all-reduce (no sharing meanwhile)",
    )
    sim.add_argument("--rules", help="jobs: paper (default), code, or RULE=paper|code,...")
    sim.add_argument(
        "--reference-poll", action="store_true", help="jobs: the authors' poll artefact"
    )


def _add_sweep_runners(sim: argparse.ArgumentParser) -> None:
    """Where a sweep's points run: local cores or a Dask cluster."""
    sim.add_argument(
        "--jobs",
        type=T.count(1, 256),
        help="sweep: points run in parallel (default: every local core)",
    )
    sim.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="sweep: run the points on the Dask cluster at ADDRESS (tcp://HOST:8786)",
    )


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.dask and args.action != "sweep":
        raise ConfigError("--dask", "only with simulate sweep")
    if args.config:
        from grouper.common.cluster_config import load_cluster_config

        args.cluster_queues = load_cluster_config(args.config).queues
    if args.mode == "jobs":
        if args.action == "sweep":
            raise ConfigError("--mode", "jobs has no sweep; run simulate --mode jobs")
        from grouper.simulator.jobs.commands import simulate_jobs_cmd

        return simulate_jobs_cmd(args)
    poll = args.reference_poll or None
    jobs_only = (("--placement", args.placement), ("--scheduler", args.scheduler),
                 ("--rules", args.rules), ("--reference-poll", poll))  # fmt: skip
    for flag, value in jobs_only:
        if value is not None:
            raise ConfigError(flag, "only with --mode jobs")
    from grouper.simulator.commands import simulate, sweep

    args.workload = args.workload or "builtin:sim60"
    return sweep(args) if args.action == "sweep" else simulate(args)
