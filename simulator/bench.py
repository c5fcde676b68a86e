"""``grouper bench simulator --trace PATH``: every policy on a coflow-benchmark trace.

Each (fraction of the trace, policy) runs in a fresh interpreter, which loads
the trace itself and reports its own peak resident memory, so a run's seconds and
megabytes include loading and nothing of the runs before it.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

from grouper.common.errors import ConfigError
from grouper.common.interpreter import python_argv
from grouper.common.output import table, write_json
from grouper.simulator import plots

POLICIES = ("fs", "baraat", "sincronia", "sptf", "grouper")


def run_one(
    path: str, policy: str, fraction: float, link_gbps: float, offline: bool, timeout: float,
    perf_map: bool = False,
) -> dict:  # fmt: skip
    """One policy on the first ``fraction`` of the trace (all at time 0: ``offline``);
    a run past ``timeout`` wall seconds stops and says where it was. With ``perf_map``
    the process's compiled functions are named for ``perf`` at the end (``perfmap``)."""
    try:
        return _run_one(path, policy, fraction, link_gbps, offline, timeout)
    finally:
        if perf_map:
            from grouper.simulator.perfmap import write_perf_map

            try:
                print(f"bench: perf map {write_perf_map()}", file=sys.stderr)
            except OSError as exc:  # the run's result stands without its map
                print(f"bench: perf map not written: {exc}", file=sys.stderr)


def _run_one(
    path: str, policy: str, fraction: float, link_gbps: float, offline: bool, timeout: float
) -> dict:
    from dataclasses import replace

    import numpy as np

    from grouper.common.contention import ContentionModel
    from grouper.pda.priorities import QueueConfig
    from grouper.simulator.run import engine_for, topology_of
    from grouper.workloads import load_workload

    t0 = time.perf_counter()
    wl = load_workload(f"coflow:{path}", link_gbps=link_gbps, fraction=fraction)
    if offline:
        wl = replace(wl, cojobs=tuple(replace(c, arrival=0.0) for c in wl.cojobs))
    loaded = time.perf_counter() - t0
    topo = topology_of(wl)
    engine = engine_for(
        wl, policy, topo, 0.0, wl.queues or QueueConfig(admission=ContentionModel())
    )
    try:
        result = engine.run(deadline=time.monotonic() + timeout)
    except ConfigError:
        return {
            "seconds": time.perf_counter() - t0,
            "stopped_at": engine.t,
            "events": engine.events,
            "fallbacks": engine.fallbacks,
            "allocations": engine.allocations,
            "flows": int(wl.meta["flows"]),
            "coflows": len(wl.cojobs),
            "peak_mb": _peak_mb(),
            "engine": type(engine).__name__,
        }
    seconds = time.perf_counter() - t0
    cct = np.asarray([s["sct"] for s in result.stages])
    return {
        "seconds": seconds,
        "load_seconds": loaded,
        "peak_mb": _peak_mb(),
        "events": result.events,
        # allocations whose rounds ran out: their rates are the worst-queue fallback's
        "fallbacks": result.fallbacks,
        "allocations": result.allocations,
        "coflows": len(wl.cojobs),
        "flows": int(wl.meta["flows"]),
        "engine": type(engine).__name__,
        "avg_cct": float(cct.mean()),
        "p95_cct": float(np.percentile(cct, 95)),
    }


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _in_child(args: tuple) -> dict:
    """``run_one`` in a fresh interpreter (not multiprocessing's spawn, which re-runs the
    caller's ``__main__``): arguments in on stdin, the result out on stdout, as JSON.
    ``seconds`` is the child's whole life, timed here (its start, imports, the trace's
    loading, the run, its exit), and ``events_per_second`` is over those seconds;
    ``run_seconds`` the child's own, from loading to the end of the run."""
    code = "import json,sys; from grouper.simulator.bench import run_one; " + (
        "print(json.dumps(run_one(*json.load(sys.stdin))))"
    )
    t0 = time.perf_counter()
    proc = subprocess.run(
        python_argv("-c", code),
        input=json.dumps(args), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ConfigError("--trace", f"a run failed: {tail[0]}")
    seconds = time.perf_counter() - t0
    sys.stderr.write("".join(x + "\n" for x in proc.stderr.splitlines() if x.startswith("bench:")))
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    run["run_seconds"], run["seconds"] = run["seconds"], seconds
    if "stopped_at" not in run:  # a finished run: its events over the same seconds
        run["events_per_second"] = run["events"] / seconds
    return run


def bench_simulator(
    path: str,
    policies: list[str],
    fractions: list[float],
    link_gbps: float,
    offline: bool,
    json_path: str | None,
    plot: str | None = None,
    timeout: float = math.inf,
    perf_map: bool = False,
) -> int:
    """Every policy at every fraction, one fresh process each; the last fraction's runs
    are ``policies`` in the JSON, every fraction's are in ``growth``."""
    from grouper.workloads import load_workload

    load_workload(f"coflow:{path}", link_gbps=link_gbps)  # a bad trace fails here, once
    growth = []
    for fraction in fractions:
        runs = {}
        for p in policies:
            runs[p] = _in_child((path, p, fraction, link_gbps, offline, timeout, perf_map))
            print(f"bench: {fraction:g} {p} {runs[p]['seconds']:.2f} s", file=sys.stderr)
        _vs_fs(runs)
        first = next(iter(runs.values()))
        growth.append(
            {"fraction": fraction, "coflows": first["coflows"], "flows": first["flows"],
             "policies": runs}
        )  # fmt: skip
    out = {"trace": path, "link_gbps": link_gbps, "offline": offline,
           "policies": growth[-1]["policies"], "growth": growth}  # fmt: skip
    write_json(out, json_path)
    if json_path != "-":
        _print(growth)
    if plot:
        plot_growth(growth, plot)
    return 0


def plot_growth(growth: list[dict], path: str) -> str:
    """Wall seconds and peak MB of every policy against the flows of each fraction."""
    flows = [g["flows"] for g in growth]
    fig, (ax1, ax2) = plots.figure((9, 3.6), ncols=2)
    for p in growth[-1]["policies"]:
        ax1.plot(flows, [g["policies"][p]["seconds"] for g in growth], "o-", label=p)
        ax2.plot(flows, [g["policies"][p]["peak_mb"] for g in growth], "o-", label=p)
    for ax, what in ((ax1, "wall seconds (the whole run's process)"), (ax2, "peak MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(flows, [f"{f:,}" for f in flows])  # the prefixes, not 2x10^5 etc.
        ax.set_xticks([], minor=True)
        plots.label(ax, "flows in the trace prefix", what, grid="both", legend=ax is ax1)
    plots.save(fig, path, dpi=110)
    return path


def _vs_fs(runs: dict[str, dict]) -> None:
    """Every finished run's average and 95th-percentile CCT over fair sharing's."""
    fs = runs.get("fs", {})
    for r in runs.values():
        if "avg_cct" in r:
            r["avg_cct_vs_fs"] = r["avg_cct"] / fs["avg_cct"] if "avg_cct" in fs else math.nan
            r["p95_cct_vs_fs"] = r["p95_cct"] / fs["p95_cct"] if "p95_cct" in fs else math.nan


def _print(growth: list[dict]) -> None:
    rows = [
        [f"{g['fraction']:g}", str(g["flows"]), p, f"{r['seconds']:.2f}", f"{r['peak_mb']:.0f}",
         str(r["events"]), fell_back(r), f"{r.get('avg_cct', math.nan):.4g}",
         f"{r.get('p95_cct', math.nan):.4g}", f"{r.get('avg_cct_vs_fs', math.nan):.3f}"]
        for g in growth
        for p, r in g["policies"].items()
    ]  # fmt: skip
    header = ["fraction", "flows", "policy", "s", "peak MB", "events", "fell back", "avg CCT",
              "p95", "/fs"]  # fmt: skip
    print(table(rows, header))


def fell_back(run: dict) -> str:
    """The share of a run's allocations that fell back (rounds that did not settle: the
    worst-queue fallback's rates), for the tables of ``bench`` and ``simulate``. Here,
    not in ``report``: the command line imports this module at its start, and
    ``report`` brings the engines and numba (an agent must not load them)."""
    n = run.get("allocations", 0)
    return f"{run['fallbacks'] / n:.1%}" if n else "-"


def add_bench_simulator(add: object) -> None:
    """``grouper bench simulator`` on the CLI's ``bench`` adder (``grouper.cli.argtypes``)."""
    b = add("simulator", _cmd, "every policy on a coflow-benchmark trace: seconds, peak MB, events")
    b.add_argument("--trace", required=True, help="a coflow-benchmark file (FB2010-1Hr-150-0.txt)")
    b.add_argument(
        "--policies", default=",".join(POLICIES), help="comma-separated policies to time"
    )
    b.add_argument(
        "--fractions", default="1", help="first shares of the coflows, e.g. 0.0625,0.25,1"
    )
    b.add_argument("--link-gbps", dest="link_gbps", type=float, default=1.0, help="per port")
    b.add_argument("--offline", action="store_true", help="every coflow at time 0")
    b.add_argument("--timeout", type=float, help="wall seconds per run (stopped runs say where)")
    b.add_argument("--plot", help="PNG: seconds and peak MB against flows, per policy")
    b.add_argument(
        "--perf-map", dest="perf_map", action="store_true",
        help="name numba's compiled functions for `perf report` (/tmp/perf-PID.map per run)",
    )  # fmt: skip


def _cmd(args: argparse.Namespace) -> int:
    from grouper.simulator.run import SIM_POLICIES

    policies = [p for p in args.policies.split(",") if p]
    for p in policies:
        if p not in SIM_POLICIES:
            raise ConfigError("--policies", f"unknown policy {p!r}")
    try:
        fractions = [float(x) for x in args.fractions.split(",") if x]
    except ValueError:
        raise ConfigError("--fractions", f"expected numbers, got {args.fractions!r}") from None
    if not fractions or not all(0 < f <= 1 for f in fractions):
        raise ConfigError("--fractions", "every fraction must be in (0, 1]")
    if not (0 < args.link_gbps < 1e6):
        raise ConfigError("--link-gbps", f"must be in (0, 1e6), got {args.link_gbps!r}")
    return bench_simulator(
        args.trace, policies, fractions, args.link_gbps, args.offline, args.json, args.plot,
        args.timeout or math.inf, args.perf_map,
    )  # fmt: skip
