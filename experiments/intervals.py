"""Means with their 95% confidence intervals, and ratios of paired runs.

Runs of an emulation are interleaved (run i of every policy, then run i + 1), so run i
of two policies saw the machine in the same spell: a ratio is taken pair by pair and
reported with its interval (Student's t over the pairs).
"""

from __future__ import annotations

import statistics

from scipy import stats


def mean_ci95(values: list[float]) -> dict[str, float | None]:
    """``{"mean", "ci95"}``: the half-width of the 95% interval (None for one value)."""
    mean = statistics.mean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": None}
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return {"mean": mean, "ci95": float(half)}


def paired_ratios(runs: dict[str, list[float]], base: str = "fs") -> dict[str, dict]:
    """``{"<policy>/<base>": {"mean", "ci95", "runs"}}`` of every policy against ``base``,
    from the runs' average SCTs taken pair by pair."""
    if base not in runs:
        return {}
    out = {}
    for policy, values in runs.items():
        if policy == base:
            continue
        ratios = [v / b for v, b in zip(values, runs[base], strict=True)]
        out[f"{policy}/{base}"] = mean_ci95(ratios) | {"runs": ratios}
    return out
