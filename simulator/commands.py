"""``grouper simulate`` and ``grouper simulate sweep``."""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from grouper.common import validate as v
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.common.queues import QueueConfig
from grouper.pda.lowerbound import lp_lower_bound
from grouper.pda.snapshot import build_snapshot
from grouper.simulator import report
from grouper.simulator.bench import fell_back
from grouper.simulator.limits import RunLimits
from grouper.simulator.run import link_goodput, run_policies, topology_of
from grouper.workloads import load_workload
from grouper.workloads.checks import check_runnable
from grouper.workloads.schema import Workload

SWEEPS = {
    "load": ("load", [0.25, 0.5, 1.0, 1.5, 2.0]),
    "comm-ratio": ("comm_ratio", [0.25, 0.5, 1.0, 2.0, 4.0]),
    "period": ("period", [0.0, 0.5, 1.0, 2.0, 5.0, 10.0]),
    "online": ("load", [0.25, 0.5, 1.0, 1.5, 2.0]),
}


def _max_sim_time(args: object) -> float:
    """``--max-sim-time`` (simulated time units); no limit when not given."""
    value = getattr(args, "max_sim_time", None)
    return math.inf if value is None else value


def _params(args: object) -> dict:
    out = {"seed": args.seed}
    for name in ("load", "comm_ratio", "scale"):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    if getattr(args, "link_gbps", None) is not None:  # a coflow trace's port rate
        if not str(args.workload).startswith("coflow:"):
            raise ConfigError("--link-gbps", "only with --workload coflow:PATH")
        out["link_gbps"] = args.link_gbps
    return out


def _offline(wl: Workload) -> bool:
    return (
        not wl.release_after
        and all(c.arrival == 0 for c in wl.cojobs)
        and all(j.compute_time == 0 for c in wl.cojobs for j in c.jobs)
    )


def cluster_queues(args: object) -> QueueConfig | None:
    """``--config CLUSTER.yaml``: the cluster's queues and admission constants (e.g. as
    ``grouper calibrate --write`` measured them) instead of the workload's. The CLI
    reads the file (the cluster config belongs to it) into ``args.cluster_queues``."""
    return getattr(args, "cluster_queues", None)


def simulate(args: object) -> int:
    policies = [p for p in args.policies.split(",") if p]
    if not policies:
        raise ConfigError("--policies", "name at least one policy")
    wl = load_workload(args.workload, **_params(args))
    period = wl.period if args.period is None else args.period
    check_runnable(wl, _max_sim_time(args), period)
    queues = cluster_queues(args)
    used = queues or wl.queues  # what the runs schedule with (defaults when None)
    runs = run_policies(
        wl,
        policies,
        period=args.period,
        queues=queues,
        seed=args.seed,
        contention=not args.no_contention,
        calibrated=queues is not None,  # --config: constants measured on the network
        limits=RunLimits.after(_max_sim_time(args), getattr(args, "timeout", None)),
        keep_within=args.keep_order_within,
        progress_step=args.progress_step,
    )
    results = {p: dict(r.summary, seconds=r.seconds) for p, r in runs.items()}
    model = (used.admission if used else None) or ContentionModel()
    goodput = link_goodput(wl, model, topology_of(wl, args.seed), queues is not None)
    out = Path(args.out or f"results/simulate/{wl.name}")
    files = [str(p) for p in report.write_csv(runs, out)]
    files.append(str(report.plot_cdf(runs, out / "slowdown_cdf.png", wl.name)))
    files.append(str(report.plot_normalized(results, out / "normalized.png", wl.name)))
    result = {
        "workload": wl.name,
        "time_unit": wl.time_unit,
        "params": wl.meta,
        "period": wl.period if args.period is None else args.period,
        "keep_order_within": args.keep_order_within,
        "progress_step": args.progress_step,
        "contention": "none" if args.no_contention else wl.contention,
        "ps_mode": wl.ps_mode,
        "ring_mode": wl.ring_mode,
        "local_traffic": wl.local_traffic,
        "goodput": goodput,
        "queues": used.queues if used else None,
        "admission": _admission(used),
        "results": results,
        "files": files,
    }
    if _offline(wl):
        _add_lp_bound(result, wl, goodput)
    write_json(result, args.json)
    if args.json != "-":
        _print_runs(results, wl.time_unit)
        print(f"files in {out}/")
    return 0


def _add_lp_bound(result: dict, wl: Workload, goodput: float) -> None:
    """An offline workload's LP lower bound on the average SCT, and each policy's ratio
    to it."""
    snap = build_snapshot(wl.cojobs, wl.hosts, known_survivors=True)
    capacity = wl.capacity * goodput
    lb = lp_lower_bound(snap, capacity=capacity).value / max(len(snap.stage_ids), 1)
    result["lp_lower_bound_avg_sct"] = lb
    for r in result["results"].values():
        r["ratio_to_lp_bound"] = r["avg_sct"] / lb if lb else math.nan


def _print_runs(results: dict[str, dict], time_unit: str) -> None:
    """The table of ``grouper simulate``: one row per policy."""
    rows = [
        [
            p,
            f"{r['avg_sct']:.4g}",
            f"{r['avg_jct']:.4g}",
            f"{r['avg_slowdown']:.3f}",
            f"{r['avg_sct'] / results['fs']['avg_sct']:.3f}"
            if results.get("fs", {}).get("avg_sct")
            else "-",
            fell_back(r),
            f"{r['seconds']:.1f}",
        ]
        for p, r in results.items()
    ]
    print(
        table(
            rows,
            [
                "policy",
                f"avg SCT ({time_unit})",
                "avg JCT",
                "avg slowdown",
                "SCT / fs",
                "fell back",
                "run s",
            ],
        )
    )


def _admission(queues: QueueConfig | None) -> dict | None:
    m = queues.admission if queues else None
    return None if m is None else {"a": m.a, "b": m.b, "eta": m.eta}


def sweep(args: object) -> int:
    if args.what not in SWEEPS:
        raise ConfigError("--what", f"must be one of {', '.join(SWEEPS)}; got {args.what!r}")
    param, values = SWEEPS[args.what]
    policies = [p for p in args.policies.split(",") if p]
    if args.what == "online":
        policies = ["fs", "grouper", "grouper-offline"]
    # every point is normalised by fair sharing's average SCT: fs always runs, first
    policies = ["fs", *([p for p in policies if p != "fs"] or ["grouper"])]
    if args.values:
        values = _sweep_values(args.values, param)
    out = Path(args.out or f"results/sweep/{args.what}")
    summaries, where = _run_points(
        _sweep_tasks(args, param, values, policies),
        args.jobs or os.cpu_count() or 1,
        getattr(args, "dask", None),
    )
    table_rows, series = [], {p: [] for p in policies}
    points = []
    for x, res in zip(values, summaries, strict=True):
        points.append({param: x, "results": res})
        for p in policies:
            series[p].append(res[p]["avg_sct"] / res["fs"]["avg_sct"])
        table_rows.append([x, *(f"{series[p][-1]:.3f}" for p in policies)])
    label = {
        "load": "load",
        "comm_ratio": "communication / computation",
        "period": "scheduling period (s)",
    }[param]
    png = report.plot_sweep(
        values,
        series,
        label,
        "avg SCT / fs",
        out / f"{args.what}.png",
        f"sweep over {args.what} ({args.workload})",
    )
    result = {
        "what": args.what,
        "workload": args.workload,
        "points": points,
        "normalized_avg_sct": series,
        "ran_on": where,
        "files": [str(png)],
    }
    if args.what == "online":
        gap = [
            (on - off) / off * 100
            for on, off in zip(series["grouper"], series["grouper-offline"], strict=True)
        ]
        result["online_offline_gap_percent"] = gap
        table_rows = [[*r, f"{g:.1f}%"] for r, g in zip(table_rows, gap, strict=True)]
    write_json(result, args.json)
    if args.json != "-":
        header = [param, *policies] + (["online gap"] if args.what == "online" else [])
        print(table(table_rows, header))
        print(f"plot: {png}")
    return 0


def _sweep_tasks(args: object, param: str, values: list[float], policies: list[str]) -> list:
    """One task per point: the workload with ``param`` (or the period) set to a value."""
    queues = cluster_queues(args)
    timeout = getattr(args, "timeout", None)
    ends = (_max_sim_time(args), time.time() + timeout if timeout else None)
    tasks = []
    for x in values:
        params = _params(args)
        period = args.period
        if param == "period":
            period = x
        else:
            params[param] = x
        tasks.append(
            (args.workload, params, policies, period, args.seed, not args.no_contention, queues)
            + ends
        )
    return tasks


def _sweep_values(text: str, param: str) -> list[float]:
    """``--values``: numbers; periods as ``scheduling.period`` (0, or at least a
    millisecond), the workload's own parameters are checked by its generator."""
    if param == "period":
        return [v.period(x.strip(), "--values") for x in text.split(",")]
    return [v.number(x.strip(), "--values") for x in text.split(",")]


def _point(task: tuple) -> dict[str, dict]:
    """One sweep point (a process of its own): the summaries of every policy."""
    workload, params, policies, period, seed, contention, queues, max_time, end = task
    wl = load_workload(workload, **params)
    check_runnable(wl, max_time, wl.period if period is None else period)
    timeout = None if end is None else max(end - time.time(), 1e-3)
    runs = run_policies(
        wl,
        policies,
        period=period,
        queues=queues,
        seed=seed,
        contention=contention,
        progress=False,
        calibrated=queues is not None,  # --config: constants measured on the network
        limits=RunLimits.after(max_time, timeout),
    )
    return {p: r.summary for p, r in runs.items()}


def _run_points(
    tasks: list[tuple], jobs: int, dask: str | None = None
) -> tuple[list[dict[str, dict]], list[str]]:
    """Every point, on ``jobs`` local processes or on the Dask cluster at ``dask``, with
    a progress bar (points, ETA) on a terminal. Each point is seeded on its own, so the
    results do not depend on where or how many at once run. Returns the summaries in
    task order and where they ran."""
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), unit="point", desc="sweep", disable=None)
    try:
        if dask:
            return _on_dask(tasks, dask, bar)
        if jobs <= 1 or len(tasks) <= 1:
            out = []
            for t in tasks:
                out.append(_point(t))
                bar.update()
            return out, ["local"]
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            futures = [pool.submit(_point, t) for t in tasks]
            for f in as_completed(futures):
                f.result()  # a failed point stops the sweep with its error
                bar.update()
            return [f.result() for f in futures], [f"local x{min(jobs, len(tasks))}"]
    finally:
        bar.close()


def _on_dask(tasks: list[tuple], address: str, bar: object) -> tuple[list[dict], list[str]]:
    """The points on an existing Dask cluster (``pip install 'grouper[dask]'`` on the
    client and on every worker, with the same grouper version)."""
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise ConfigError("--dask", "needs the dask extra: pip install 'grouper[dask]'") from None
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError("--dask", f"no Dask scheduler at {address!r}: {exc}") from None
    try:
        futures = client.map(_point, tasks, pure=False)
        for f in dask_completed(futures):
            f.result()  # a failed point stops the sweep with its error
            bar.update()
        where = sorted({w for ws in client.who_has(futures).values() for w in ws})
        return client.gather(futures), where
    finally:
        client.close()
