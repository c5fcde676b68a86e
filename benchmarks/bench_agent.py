"""The agent's plan apply (``grouper bench agent --flows 1000``, root): the command
makes a network namespace, applies a full plan of 1,000 flows and a change of 10 flows
``RUNS`` times in a child process inside it, and removes the namespace whatever happens.
Each run's milliseconds are a sample."""

from __future__ import annotations

from benchmarks._common import bench_function, need_root, run_json, samples

FLOWS = 1000
RUNS = 12


class AgentApply:
    unit = "seconds"
    timeout = 300

    def setup_cache(self) -> dict:
        need_root()
        bench_agent = bench_function("grouper.agent.bench:bench_agent")
        return run_json(bench_agent, FLOWS, RUNS)

    def setup(self, result: dict) -> None:
        need_root()

    def track_full_plan(self, result: dict) -> dict:
        return samples(result["apply_full_ms_all"], 1e-3)

    def track_change_of_10(self, result: dict) -> dict:
        return samples(result["apply_incremental_ms_all"], 1e-3)
