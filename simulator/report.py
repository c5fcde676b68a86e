"""Result files: the JSON contract, per-stage and per-job CSV, and PNG plots."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from grouper.simulator.run import PolicyRun  # noqa: E402

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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, run in runs.items():
        x = np.sort(
            [
                s["slowdown"]
                for s in run.result.stages
                if s.get("slowdown") and math.isfinite(s["slowdown"])
            ]
        )
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=policy)
    return finish(fig, ax, path, "stage slowdown (duration / duration alone)", "CDF", title)


def _ratio(value: float | None, base: float | None) -> float:
    """``value`` over ``base`` (or as is without a base); NaN (no bar) when unknown."""
    if value is None:
        return float("nan")
    return value / base if base else value


def plot_normalized(results: dict[str, dict], path: Path, title: str) -> Path:
    """Average SCT, JCT and stage slowdown normalised to fs (grouper paper, Figs. 10-11)."""
    metrics = ["avg_sct", "avg_jct", "avg_slowdown"]
    base = results.get("fs")
    policies = list(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(policies), 1)
    for i, p in enumerate(policies):
        vals = [_ratio(results[p].get(m), base.get(m) if base else None) for m in metrics]
        ax.bar(np.arange(len(metrics)) + i * width, vals, width, label=p)
    ax.set_xticks(np.arange(len(metrics)) + width * (len(policies) - 1) / 2)
    ax.set_xticklabels(["avg SCT", "avg JCT", "avg slowdown"])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("normalised to fs" if base else "value")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_sweep(
    xs: list[float],
    series: dict[str, list[float]],
    xlabel: str,
    ylabel: str,
    path: Path,
    title: str,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    return finish(fig, ax, path, xlabel, ylabel, title)


def finish(fig: plt.Figure, ax: plt.Axes, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    """Label, grid, legend and save one of our line plots; close the figure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
