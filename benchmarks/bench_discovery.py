"""Discovery (``grouper bench discovery`` with its defaults, root: 200 jobs x 4 idle
connections, 60 probe connections, refresh 100 ms), for jobs known by their pids and by
their cgroup: the seconds from ``connect()`` to the first packet with the planned DSCP
(each probe connection a sample), and the agent's CPU in percent of one core with every
job registered and nothing changing (each fifth of the 10 s window a sample)."""

from __future__ import annotations

from benchmarks._common import bench_function, need_root, run_json, samples


def _part(result: dict, mechanism: str) -> dict:
    part = result if mechanism == "pids" else result.get("cgroup")
    if part is None:
        raise NotImplementedError(f"no {mechanism} mechanism on this host")
    return part


class Discovery:
    params = [["pids", "cgroup"]]
    param_names = ["jobs known by"]
    timeout = 900

    def setup_cache(self) -> dict:
        need_root()
        bench = bench_function("grouper.agent.discovery.bench:bench_discovery")
        return run_json(bench, 200, 4, 60, 0.1)

    def setup(self, result: dict, mechanism: str) -> None:
        need_root()
        _part(result, mechanism)

    def track_first_packet(self, result: dict, mechanism: str) -> dict:
        part = _part(result, mechanism)
        return samples(part.get("latencies_ms") or [part["p50_ms"]], 1e-3)

    track_first_packet.unit = "seconds"

    def track_agent_cpu_percent(self, result: dict, mechanism: str) -> dict:
        part = _part(result, mechanism)
        return samples(part.get("cpu_percent_parts") or [part["cpu_percent"]])

    track_agent_cpu_percent.unit = "%"
