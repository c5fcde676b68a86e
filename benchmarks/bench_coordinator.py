"""The coordinator's cycle at 1,000 agents (``grouper bench coordinator`` with its
defaults: 10,000 stages, every job progressing each period, jobs spread over their
first stage): each measured period's cycle seconds, and the CPU seconds the coordinator
process spent in it (from the fleet's progress to the last acknowledgement)."""

from __future__ import annotations

import inspect

from benchmarks._common import bench_function, run_json, samples

AGENTS, STAGES, SEED, RUNS = 1000, 10000, 1, 6


class CoordinatorCycle:
    unit = "seconds"
    timeout = 600

    def setup_cache(self) -> dict:
        bench = bench_function("grouper.coordinator.bench:bench_coordinator")
        if "knobs" in inspect.signature(bench).parameters:
            return run_json(bench, AGENTS, STAGES, SEED, RUNS)
        return run_json(bench, AGENTS, STAGES, SEED, RUNS, 1.0)  # before Knobs: changed

    def track_cycle(self, result: dict) -> dict:
        return samples(result["runs"])

    def track_cpu_per_period(self, result: dict) -> dict:
        runs = result.get("cpu_seconds_runs") or [
            result.get("coordinator_cpu_seconds", result.get("cpu_seconds_per_period"))
        ]
        return samples(runs)
