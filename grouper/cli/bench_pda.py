"""``grouper bench ...``: timing commands. They print figures and assert nothing."""

from __future__ import annotations

import statistics
import time

from grouper.common.errors import ConfigError
from grouper.common.output import write_json
from grouper.pda.order import pda_order
from grouper.pda.snapshot import build_snapshot
from grouper.workloads.random_instance import random_cojobs


def bench_pda(hosts: int, stages: int, seed: int, runs: int, json_path: str | None) -> int:
    if hosts < 2:
        raise ConfigError("--hosts", f"must be at least 2, got {hosts}")
    if stages < 1:
        raise ConfigError("--stages", f"must be at least 1, got {stages}")
    runs = max(runs, 3)
    names, cojobs = random_cojobs(hosts, stages, seed)
    t0 = time.perf_counter()
    snap = build_snapshot(cojobs, names)
    build = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        pda_order(snap)
        times.append(time.perf_counter() - t0)
    result = {
        "seconds": statistics.median(times),
        "runs": times,
        "snapshot_seconds": build,
        "hosts": hosts,
        "stages": len(snap.stage_ids),
        "cojobs": len(cojobs),
        "jobs": len(snap.job_ids),
        "nonzeros": int(snap.stage_loads.nnz),
        "seed": seed,
    }
    write_json(result, json_path)
    if json_path != "-":
        print(
            f"PDA on {hosts} hosts, {result['stages']} stages, {result['nonzeros']} nonzeros: "
            f"median {result['seconds'] * 1e3:.1f} ms over {runs} runs "
            f"(snapshot {build * 1e3:.0f} ms)"
        )
    return 0


def bench_ratio(
    instances: int, max_cojobs: int, max_stages: int, seed: int, json_path: str | None
) -> int:
    """Distribution of (sum of SCT of PDA's order-preserving schedule) / (LP bound) on
    random single-port instances: single-stage ones (Theorem 2 says <= 2) and
    multi-stage ones (where the stage-order rule leaves the proof's duals)."""
    import numpy as np

    from grouper.pda.lowerbound import lp_lower_bound, single_port_sct
    from grouper.pda.model import Cojob, FlowSpec, Job

    rng = np.random.default_rng(seed)
    ratios: dict[str, list[float]] = {"single_stage": [], "multi_stage": []}
    for kind in ratios:
        for _ in range(instances):
            cojobs = []
            for g in range(int(rng.integers(2, max_cojobs + 1))):
                k = 1 if kind == "single_stage" else int(rng.integers(1, max_stages + 1))
                # successive halving: job j survives j+1 stages; loads per job random
                jobs = tuple(
                    Job.explicit(
                        f"j{j}",
                        [FlowSpec("a", "b", float(rng.uniform(0.1, 10)))],
                        stages=min(j + 1, k),
                    )
                    for j in range(2 ** (k - 1) if k > 1 else int(rng.integers(1, 4)))
                )
                cojobs.append(Cojob(f"c{g}", tuple(2**i for i in range(k)), jobs))
            snap = build_snapshot(cojobs, ["a", "b"])
            sct = single_port_sct(snap.stage_loads.toarray()[:, 0], pda_order(snap).order)
            ratios[kind].append(sct / lp_lower_bound(snap).value)
    summary = {}
    for kind, vals in ratios.items():
        arr = np.asarray(vals)
        summary[kind] = {
            "instances": len(arr),
            "min": float(arr.min()),
            "p50": float(np.median(arr)),
            "p90": float(np.percentile(arr, 90)),
            "p99": float(np.percentile(arr, 99)),
            "max": float(arr.max()),
            "mean": float(arr.mean()),
        }
    result = {"ratio_sum_sct_to_lp_bound": summary, "seed": seed}
    write_json(result, json_path)
    if json_path != "-":
        for kind, s in summary.items():
            print(
                f"{kind:13s} n={s['instances']}: min {s['min']:.3f} p50 {s['p50']:.3f} "
                f"p90 {s['p90']:.3f} p99 {s['p99']:.3f} max {s['max']:.3f}"
            )
    return 0
