"""Run ``grouper bench coordinator`` at several cluster sizes; write the measured
figures as CSV and a plot (docs/figures/coordinator-scaling.*).

    python scripts/coordinator_scaling.py --agents 1000,2000,5000,10000 --changed 0.05
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("agents", "stages", "changed", "seconds", "order_seconds", "push_seconds",
          "ingest_seconds", "cpu_seconds_per_period", "updates_per_period", "plans_pushed",
          "max_rss_mb")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="1000,2000,5000,10000")
    ap.add_argument("--stages-per-agent", type=int, default=10)
    ap.add_argument("--changed", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "coordinator-scaling"))
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.agents.split(",")):
        out = subprocess.run(
            [sys.executable, "-m", "grouper.cli", "bench", "coordinator", "--agents", str(n),
             "--stages", str(n * args.stages_per_agent), "--changed", str(args.changed),
             "--json", "-"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        r = json.loads(out)
        rows.append({k: r[k] for k in FIELDS})
        print({k: rows[-1][k] for k in ("agents", "seconds", "order_seconds", "push_seconds")})
    with open(f"{args.out}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    _plot(rows, f"{args.out}.png")
    return 0


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["agents"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("seconds", "cycle (order + push)"),
        ("order_seconds", "order"),
        ("push_seconds", "push"),
        ("cpu_seconds_per_period", "CPU per period"),
    ):
        ax.plot(x, [r[key] for r in rows], marker="o", label=label)  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle=":", label="1 s target")
    ax.set_xlabel("agents (10 stages each)")
    ax.set_ylabel("seconds (measured, median of 3 periods)")
    ax.set_title(f"coordinator, {rows[0]['changed']:.0%} of jobs progressing per period")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
