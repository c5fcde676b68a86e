"""Plots of job-level runs, after Wang et al. Figs. 4-6: JCT CDF, GPU utilisation
distribution, and bars of average / median / 95th-percentile JCT and makespan (Yu et
al. Fig. 4). Measured values only."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from grouper.simulator.jobs.engine import JobsResult  # noqa: E402
from grouper.simulator.report import finish  # noqa: E402


def _label(r: JobsResult) -> str:
    return f"{r.placement} / {r.scheduler}"


def _cdf(runs: list[JobsResult], values: list[np.ndarray]) -> tuple:
    fig, ax = plt.subplots(figsize=(6, 4))
    for r, v in zip(runs, values, strict=True):
        x = np.sort(v)
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=_label(r))
    return fig, ax


def jct_cdf(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = _cdf(runs, [np.array([j["jct"] for j in r.jobs]) for r in runs])
    return finish(fig, ax, path, "job completion time (s)", "CDF", f"{title}: JCT")


def utilization(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = _cdf(runs, [np.asarray(r.gpu_utilization) * 100 for r in runs])
    return finish(
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
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(runs), 1)
    for i, r in enumerate(runs):
        ax.bar(
            np.arange(len(metrics)) + i * width,
            [r.summary[m] for m, _ in metrics],
            width,
            label=_label(r),
        )
    ax.set_xticks(np.arange(len(metrics)) + width * (len(runs) - 1) / 2)
    ax.set_xticklabels([name for _, name in metrics])
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
