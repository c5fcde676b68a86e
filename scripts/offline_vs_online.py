"""Where does grouper-offline (knows which jobs die) lose to online grouper, and why?

Random textbook instances on one unit link (every flow h1 -> h2, all cojobs at time 0,
no compute, ideal sharing), so a stage order's average SCT is exact arithmetic: stages
run one after another at the link's rate, each taking its true load. For each instance
the script simulates grouper and grouper-offline (period 0: a fresh PDA order at every
event) and enumerates every order that keeps each cojob's stages in sequence for the
optimum. It prints how often offline is worse, and the smallest such instance in full
with both orders, their loads and PDA's weights.

    python scripts/offline_vs_online.py [INSTANCES] [SEED]
"""

from __future__ import annotations

import sys

import numpy as np

from grouper.pda.lowerbound import brute_force_single_port, single_port_sct
from grouper.pda.order import stage_weights
from grouper.simulator.run import run_policies
from grouper.workloads import parse_workload


def instance(rng: np.random.Generator, g: int) -> dict:
    cojobs = []
    for c in range(g):
        stages = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, 4)))]
        jobs = []
        for j in range(int(rng.integers(1, 4))):
            job = {"id": f"j{j}", "arch": "flows", "flows": [{"src": "h1", "dst": "h2",
                   "bytes": int(rng.integers(1, 5))}]}  # fmt: skip
            if j > 0:  # the first job survives every stage; the others may die earlier
                job["stages"] = int(rng.integers(1, len(stages) + 1))
            jobs.append(job)
        cojobs.append({"id": f"c{c}", "stages": stages, "jobs": jobs})
    return {"hosts": ["h1", "h2"], "time_unit": "unit", "model": {"contention": "none"},
            "cojobs": cojobs}  # fmt: skip


def true_loads(raw: dict) -> dict[tuple[str, int], float]:
    """Bytes every stage really moves: its iterations x the bytes of the jobs in it."""
    out = {}
    for c in raw["cojobs"]:
        for k, it in enumerate(c["stages"]):
            alive = [j for j in c["jobs"] if j.get("stages", len(c["stages"])) > k]
            out[(c["id"], k + 1)] = it * sum(j["flows"][0]["bytes"] for j in alive)
    return out


def order_value(order: list[tuple[str, int]], loads: dict) -> float:
    """Average SCT of running the stages one after another in ``order``."""
    keys = sorted(loads)
    return single_port_sct(
        np.array([loads[k] for k in keys]), [keys.index(s) for s in order]
    ) / len(order)


def best_order(loads: dict) -> float:
    """The optimum over every order that keeps each cojob's stages in sequence."""
    keys = sorted(loads)
    prev = np.array([i - 1 if i and keys[i - 1][0] == c else -1 for i, (c, _) in enumerate(keys)])
    total, _ = brute_force_single_port(np.array([loads[k] for k in keys], float), prev)
    return total / len(keys)


def simulated(raw: dict) -> dict[str, tuple[float, list]]:
    runs = run_policies(parse_workload(raw), ["grouper", "grouper-offline"], period=0.0,
                        progress=False)  # fmt: skip
    out = {}
    for p, r in runs.items():
        ends = sorted((s["end"], (s["cojob"], s["stage"])) for s in r.result.stages)
        out[p] = (r.summary["avg_sct"], [s for _, s in ends])
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    worse, smallest, gaps = 0, None, []
    for _ in range(n):
        raw = instance(rng, int(rng.integers(2, 4)))
        loads = true_loads(raw)
        sim = simulated(raw)
        on, off = sim["grouper"][0], sim["grouper-offline"][0]
        opt = best_order(loads)
        # the simulator runs stages one after another: the completion order it reports
        # must give the same average as the arithmetic (else the code is wrong)
        for p, (v, order) in sim.items():
            assert abs(order_value(order, loads) - v) < 1e-6, (p, v, order, raw)
        gaps.append((on / opt - 1, off / opt - 1))
        if off > on + 1e-9:
            worse += 1
            size = len(loads)
            if smallest is None or size < smallest[0]:
                smallest = (size, raw, loads, sim, opt)
    g = np.asarray(gaps) * 100
    print(f"{n} instances: offline worse than online in {worse}")
    print(f"above the optimum, mean / max %: online {g[:, 0].mean():.2f} / {g[:, 0].max():.1f}, "
          f"offline {g[:, 1].mean():.2f} / {g[:, 1].max():.1f}")  # fmt: skip
    print(
        f"optimal in: online {(g[:, 0] < 1e-6).mean():.0%}, offline {(g[:, 1] < 1e-6).mean():.0%}"
    )
    if smallest:
        _, raw, loads, sim, opt = smallest
        print("\nsmallest instance where offline loses:")
        for c in raw["cojobs"]:
            jobs = ", ".join(f"{j['id']} {j['flows'][0]['bytes']} B x {j.get('stages', 'all')}"
                             for j in c["jobs"])  # fmt: skip
            print(
                f"  {c['id']}: stages {c['stages']} iterations; "
                f"jobs (bytes/iter x stages run): {jobs}"
            )
        print(f"  true stage loads: {loads}")
        print(
            "  PDA stage weights by stage number:",
            dict(enumerate(stage_weights(np.arange(1, 4)).tolist(), 1)),
        )
        for p, (v, order) in sim.items():
            print(f"  {p}: avg SCT {v:.3f}, stages finish in order {order}")
        print(f"  optimum: avg SCT {opt:.3f}")


if __name__ == "__main__":
    main()
