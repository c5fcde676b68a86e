"""Result files: the JSON contract, per-stage and per-job CSV, and PNG plots."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from grouper.simulator import plots
from grouper.simulator.run import PolicyRun

STAGE_FIELDS = ["policy", "cojob", "stage", "start", "end", "sct", "duration", "alone", "slowdown"]
JOB_FIELDS = ["policy", "cojob", "job", "arrival", "end", "jct", "stages"]


def write_csv(runs: dict[str, PolicyRun], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fields, key in (
        ("stages.csv", STAGE_FIELDS, "stages"),
        ("jobs.csv", JOB_FIELDS, "jobs"),
    ):
        path = out / name
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            for policy, run in runs.items():
                for row in getattr(run.result, key):
                    w.writerow({"policy": policy, **{k: row.get(k) for k in fields[1:]}})
        paths.append(path)
    return paths


def plot_cdf(runs: dict[str, PolicyRun], path: Path, title: str) -> Path:
    fig, ax = plots.figure((6, 4))
    for policy, run in runs.items():
        x = [
            s["slowdown"]
            for s in run.result.stages
            if s.get("slowdown") and math.isfinite(s["slowdown"])
        ]
        if x:
            plots.cdf(ax, x, policy)
    return plots.finish(fig, ax, path, "stage slowdown (duration / duration alone)", "CDF", title)


def _ratio(value: float | None, base: float | None) -> float:
    """``value`` over ``base`` (or as is without a base); NaN (no bar) when unknown."""
    if value is None:
        return float("nan")
    return value / base if base else value


def plot_normalized(results: dict[str, dict], path: Path, title: str) -> Path:
    """Average SCT, JCT and stage slowdown normalised to fs (grouper paper, Figs. 10-11)."""
    metrics = ["avg_sct", "avg_jct", "avg_slowdown"]
    base = results.get("fs")
    fig, ax = plots.figure((7, 4))
    series = [
        (p, [_ratio(r.get(m), base.get(m) if base else None) for m in metrics])
        for p, r in results.items()
    ]
    plots.grouped_bars(ax, series, ["avg SCT", "avg JCT", "avg slowdown"])
    ax.axhline(1.0, color="grey", lw=0.8)
    plots.label(ax, None, "normalised to fs" if base else "value", title, grid=None)
    return plots.save(fig, path)


def plot_sweep(
    xs: list[float],
    series: dict[str, list[float]],
    xlabel: str,
    ylabel: str,
    path: Path,
    title: str,
) -> Path:
    fig, ax = plots.figure((6, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    return plots.finish(fig, ax, path, xlabel, ylabel, title)
