"""Plots of job-level runs, after Wang et al. Figs. 4-6: JCT CDF, GPU utilisation
distribution, and bars of average / median / 95th-percentile JCT and makespan (Yu et
al. Fig. 4). Measured values only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grouper.simulator import plots
from grouper.simulator.jobs.engine import JobsResult


def _label(r: JobsResult) -> str:
    return f"{r.placement} / {r.scheduler}"


def _cdf(runs: list[JobsResult], values: list[np.ndarray]) -> tuple:
    fig, ax = plots.figure((6, 4))
    for r, v in zip(runs, values, strict=True):
        plots.cdf(ax, v, _label(r))
    return fig, ax


def jct_cdf(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = _cdf(runs, [np.array([j["jct"] for j in r.jobs]) for r in runs])
    return plots.finish(fig, ax, path, "job completion time (s)", "CDF", f"{title}: JCT")


def utilization(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = _cdf(runs, [np.asarray(r.gpu_utilization) * 100 for r in runs])
    return plots.finish(
        fig, ax, path, "GPU utilisation over the makespan (%)", "CDF of GPUs",
        f"{title}: GPU utilisation",
    )  # fmt: skip


def bars(runs: list[JobsResult], path: Path, title: str) -> Path:
    metrics = [
        ("avg_jct", "average JCT"),
        ("median_jct", "median JCT"),
        ("p95_jct", "95th pct JCT"),
        ("makespan", "makespan"),
    ]
    fig, ax = plots.figure((7, 4))
    series = [(_label(r), [r.summary[m] for m, _ in metrics]) for r in runs]
    plots.grouped_bars(ax, series, [name for _, name in metrics])
    plots.label(ax, None, "seconds", title, grid=None)
    return plots.save(fig, path)
