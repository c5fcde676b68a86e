"""Cross-field rules of a workload, checked once it is parsed (and on any workload a
command is about to run): units and orders of magnitude, jobs that would never touch
the network, and how long a simulation of it must at least take.

Every rule raises :class:`ConfigError` naming the field, the value and what would do.
"""

from __future__ import annotations

import math

import numpy as np

from grouper.common import limits as L
from grouper.common.errors import ConfigError, short
from grouper.pda.flow_table import flow_arrays, network_bytes
from grouper.pda.model import Cojob, Job
from grouper.workloads.model import Workload


def capacity_range(time_unit: str) -> tuple[float, float]:
    """Bytes per time unit a host port may move: in seconds, 1 kB/s to 100 TB/s (a
    capacity outside is a unit mistake, bits for bytes or Mbit/s for bytes/s)."""
    return L.CAPACITY_SECONDS if time_unit == "s" else L.CAPACITY_UNITS


def check_capacity(capacity: float, time_unit: str, path: str = "capacity") -> None:
    lo, hi = capacity_range(time_unit)
    if not lo <= capacity <= hi:
        unit = "bytes per second" if time_unit == "s" else f"bytes per {time_unit[:20]}"
        raise ConfigError(path, f"{capacity:g} {unit} is outside {lo:g} to {hi:g}")


def check_workload(wl: Workload, paths: bool = True) -> None:
    """Every job reaches the network, and one iteration is not too short to time."""
    local_on_ports = wl.local_traffic == "ports"
    flows = sum(len(job.flows) for cj in wl.cojobs for job in cj.jobs)
    if flows > L.MAX_FLOWS:
        raise ConfigError("cojobs", f"{flows} flows in all, at most {L.MAX_FLOWS:.0e}")
    for g, cj in enumerate(wl.cojobs):
        for i, job in enumerate(cj.jobs):
            path = f"cojobs[{g}].jobs[{i}]" if paths else f"cojob {cj.cojob_id} job {job.job_id}"
            check_job(job, path, wl.capacity, wl.time_unit, local_on_ports)


def check_job(job: Job, path: str, capacity: float, unit: str, local_on_ports: bool) -> None:
    for key, hosts in (("workers", job.workers), ("servers", job.servers)):
        seen: set[str] = set()
        for k, h in enumerate(hosts):
            if h in seen:
                raise ConfigError(f"{path}.{key}[{k}]", f"host {short(h)} is listed twice")
            seen.add(h)
    network = network_bytes(job.flows, local_on_ports)
    if not len(network):
        where = {"ps": "servers", "ring": "workers"}.get(job.arch, "flows")
        raise ConfigError(
            f"{path}.{where}",
            f"every flow stays on host {short(job.flows[0].src)}: the job never uses the "
            "network (a host other than the source, or model.local_traffic: ports)",
        )
    alone = job.compute_time + float(network.max()) / capacity
    if alone < L.MIN_ITERATION_TIME:
        raise ConfigError(
            path,
            f"one iteration takes {alone:.3g} {unit[:20]} alone, under {L.MIN_ITERATION_TIME:g} "
            "(bytes or compute_time too small for the capacity)",
        )


def iterations_run(cj: Cojob, job: Job) -> int:
    return sum(cj.stage_iterations[: job.stages or len(cj.stage_iterations)])


def least_sim_time(wl: Workload) -> float:
    """A lower bound on the simulated time a run of ``wl`` takes: its last arrival plus
    the longest job alone, or the busiest host port's bytes at full capacity."""
    host = {h: i for i, h in enumerate(wl.hosts)}
    ports: list[np.ndarray] = []  # uplinks, then downlinks after the hosts
    moved: list[np.ndarray] = []
    end = 0.0
    for g, cj in enumerate(wl.cojobs):
        if not math.isfinite(cj.arrival):
            continue  # released by another cojob: after it, whatever it takes
        for i, job in enumerate(cj.jobs):
            n = iterations_run(cj, job)
            src, dst, nbytes = flow_arrays(job.flows, host, f"cojobs[{g}].jobs[{i}]")
            if wl.local_traffic != "ports":
                remote = src != dst
                src, dst, nbytes = src[remote], dst[remote], nbytes[remote]
            per = float(nbytes.max(initial=0.0)) / wl.capacity
            end = max(end, cj.arrival + n * (job.compute_time + per))
            ports += [src, dst + len(host)]
            moved += [n * nbytes, n * nbytes]
    if not ports:
        return end
    load = np.bincount(np.concatenate(ports), np.concatenate(moved))
    return max(end, float(load.max(initial=0.0)) / wl.capacity)


def sim_iterations(wl: Workload) -> int:
    """Job iterations a run simulates (each is at least one event)."""
    return sum(iterations_run(cj, job) for cj in wl.cojobs for job in cj.jobs)


def check_runnable(wl: Workload, max_sim_time: float, period: float) -> None:
    """Refuse, before any work, a run that cannot finish within ``max_sim_time``
    simulated time units or the simulator's event budget."""
    least = least_sim_time(wl)
    if least > max_sim_time:
        raise ConfigError(
            "--max-sim-time",
            f"workload {wl.name} needs at least {least:.3g} {wl.time_unit[:20]} of simulated "
            f"time, over the limit {max_sim_time:g} (raise it, or shorten the stages)",
        )
    iterations = sim_iterations(wl)
    rounds = least / period if period > 0 else 0.0
    if iterations + rounds > L.MAX_SIM_EVENTS:
        raise ConfigError(
            "workload",
            f"{wl.name}: {iterations:.3g} iterations and {rounds:.3g} scheduling rounds (at "
            f"least {least:.3g} {wl.time_unit[:20]} at period {period:g}) to simulate, over "
            f"the {L.MAX_SIM_EVENTS:.0e} one run may take (fewer iterations, a coarser "
            "--scale, a longer --period)",
        )
