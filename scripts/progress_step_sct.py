"""What ``scheduling.progress_step`` costs in stage completion time, by simulation.

Runs ``grouper simulate`` (grouper, the general engine) with the planner seeing
progress as agents report it in steps, against exact progress, over seeds and loads,
and prints the average SCT and p95 slowdown of each step relative to step 0 (mean of
the seeds, and their range), as the table in docs/results/coordinator.md ("Progress in
steps"). Example::

    python scripts/progress_step_sct.py --steps 0,0.02,0.05,0.1 --loads 0.5,1,2 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import mean

GROUPER = str(Path(sys.executable).with_name("grouper"))


def run(workload: str, load: float, seed: int, period: float, keep: float, step: float) -> dict:
    out = subprocess.run(
        [GROUPER, "simulate", "--workload", workload, "--load", str(load), "--seed", str(seed),
         "--policies", "grouper", "--period", str(period), "--keep-order-within", str(keep),
         "--progress-step", str(step), "--out", f"/tmp/progress-step-sct/{seed}-{load}-{step}",
         "--json", "-"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout)["results"]["grouper"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="builtin:sim60")
    ap.add_argument("--steps", default="0,0.02,0.05,0.1")
    ap.add_argument("--loads", default="0.5,1,2")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--keep", type=float, default=0.001, help="scheduling.keep_order_within")
    args = ap.parse_args()
    steps = [float(x) for x in args.steps.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    print("| load | step 0 (avg SCT) | " + " | ".join(f"{s:g}" for s in steps[1:]) + " |")
    print("|---" * (len(steps) + 1) + "|")
    for load in (float(x) for x in args.loads.split(",")):
        res = {(s, seed): run(args.workload, load, seed, args.period, args.keep, s)
               for s in steps for seed in seeds}  # fmt: skip
        cells = [f"{mean(res[steps[0], sd]['avg_sct'] for sd in seeds):.2f}"]
        for s in steps[1:]:
            ratio = [res[s, sd]["avg_sct"] / res[steps[0], sd]["avg_sct"] for sd in seeds]
            p95 = mean(res[s, sd]["p95_slowdown"] / res[steps[0], sd]["p95_slowdown"]
                       for sd in seeds)  # fmt: skip
            cells.append(f"x{mean(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}), p95 x{p95:.2f}")
        print(f"| {load:g} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
