"""Run ``grouper bench coordinator`` at several cluster sizes, for each delivery; write
the measured figures as CSV, a plot, and the fit of cycle time against agents
(docs/figures/coordinator-growth.*).

    python scripts/coordinator_scaling.py --agents 1000,3000,10000 --changed 0.05 \\
        --lock /tmp/grouper-heavy.lock

Each bench runs as a process of its own (``--lock``: under ``flock`` on that file, so
that heavy runs never overlap); the script itself holds nothing between runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from pathlib import Path

import numpy as np

from grouper.common.interpreter import python_argv
from grouper.simulator import plots

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("delivery", "agents", "stages", "changed", "seconds", "collect_seconds",
          "order_seconds", "map_seconds", "deliver_seconds", "acknowledged_seconds",
          "ingest_seconds", "coordinator_cpu_seconds", "fleet_cpu_seconds",
          "updates_per_period", "plans_pushed", "hosts_changed_share",
          "empty_push_seconds", "max_rss_mb")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="1000,3000,10000")
    ap.add_argument("--stages-per-agent", type=int, default=10)
    ap.add_argument("--changed", type=float, default=0.05)
    ap.add_argument("--delivery", default="update,result")
    ap.add_argument("--lock", default="", help="run each bench under flock on this file")
    ap.add_argument("--keep-order-within", default="", help="the bench's flag (default: config's)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "coordinator-growth"))
    args = ap.parse_args()
    rows = []
    for delivery in args.delivery.split(","):
        for n in (int(x) for x in args.agents.split(",")):
            cmd = [*python_argv("-m", "grouper.cli", "bench", "coordinator"), "--agents",
                   str(n), "--stages", str(n * args.stages_per_agent), "--changed",
                   str(args.changed), "--delivery", delivery, "--json", "-"]  # fmt: skip
            if args.keep_order_within:
                cmd += ["--keep-order-within", args.keep_order_within]
            if args.lock:
                cmd = ["flock", args.lock, *cmd]
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
            rows.append({k: json.loads(out)[k] for k in FIELDS})
            print({k: rows[-1][k] for k in FIELDS}, flush=True)
    with open(f"{args.out}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    fits = {d: fit(rows, d) for d in args.delivery.split(",")}
    Path(f"{args.out}-fit.json").write_text(json.dumps(fits, indent=1) + "\n")
    print(json.dumps(fits, indent=1))
    _plot(rows, fits, f"{args.out}.png")
    return 0


def fit(rows: list[dict], delivery: str) -> dict:
    """Per measured quantity: the power law t = a * agents^b (least squares in log-log;
    b = 1 is linear) and the linear fit t = c + d * agents with its largest residual."""
    sel = [r for r in rows if r["delivery"] == delivery]
    n = np.array([r["agents"] for r in sel], dtype=float)
    out = {}
    for key in ("seconds", "coordinator_cpu_seconds", "acknowledged_seconds"):
        t = np.array([r[key] for r in sel], dtype=float)
        b, log_a = np.polyfit(np.log(n), np.log(t), 1)
        d, c = np.polyfit(n, t, 1)
        resid = float(np.max(np.abs(c + d * n - t)))
        out[key] = {
            "exponent": float(b),
            "a": float(np.exp(log_a)),
            "linear_intercept": float(c),
            "linear_per_1000_agents": float(d * 1000),
            "linear_max_residual": resid,
        }
    return out


def _plot(rows: list[dict], fits: dict, path: str) -> None:
    fig, ax = plots.figure((6.5, 4.5))
    for delivery, style in (("update", "-"), ("result", "--")):
        sel = [r for r in rows if r["delivery"] == delivery]
        if not sel:
            continue
        x = [r["agents"] for r in sel]
        for key, label in (("seconds", "cycle"), ("coordinator_cpu_seconds", "CPU per period")):
            b = fits[delivery][key]["exponent"]
            ax.plot(x, [r[key] for r in sel], style, marker="o",
                    label=f"{label}, ack by {delivery} (~agents^{b:.2f})")  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle=":", label="1 s cycle goal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    title = f"coordinator, {rows[0]['changed']:.0%} of jobs progressing per period"
    plots.label(ax, "agents (10 stages each)", "seconds (median of 3 periods)", title, grid=None)
    plots.save(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
