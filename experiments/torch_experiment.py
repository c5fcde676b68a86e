"""``grouper emulate --experiment builtin:torch-small``: real PyTorch DDP searches.

Each search is an Optuna study run by synchronous successive halving
(:class:`grouper.integrations.optuna.SyncHalving`); each trial is a DDP job over Gloo
with one rank per listed host, every rank started with ``grouper run`` in its Mininet
host (:class:`experiments.ddp_runner.DdpRunner`). Nobody registers a port. Searches start
their first stage at their ``arrival`` offsets once every rank of every search is up.

Measured per policy: each stage's completion time (the last trial of the search ending
it) minus the search's arrival, each trial's completion, and per trial the share of its
bytes sent in its planned band (agents' ``bytes_in_planned_band``). The simulator
predicts the same jobs (ring all-reduce of the measured gradient size, the stages each
trial ran) on the same topology.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
import yaml

from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.experiments.emulation import ROOT, Emulation
from grouper.topologies.leafspine import LeafSpine
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

TORCH_EXPERIMENTS = ("torch-small",)


@dataclass(frozen=True)
class Search:
    id: str
    arrival: float
    width: int
    stages: tuple[int, ...]
    trials: tuple[tuple[str, ...], ...]  # hosts of each trial's ranks, rank order


@dataclass(frozen=True)
class TorchExperiment:
    name: str
    topology: str
    port: int
    searches: tuple[Search, ...]


def gradient_bytes(width: int) -> int:
    """Gradient bytes of ``experiments.ddp_trial``'s MLP (64 -> w -> w -> 10, float32)."""
    return 4 * (64 * width + width + width * width + width + width * 10 + 10)


def load_torch_experiment(name: str) -> TorchExperiment:
    key = name.split(":", 1)[1]
    text = (resources.files("grouper.experiments") / "builtin" / f"{key}.yaml").read_text()
    m = v.mapping(yaml.safe_load(text), "", ("name", "description", "topology", "port", "searches"))
    searches = []
    for i, raw in enumerate(v.sequence(v.get(m, "searches", ""), "searches", min_len=1)):
        p = f"searches[{i}]"
        s = v.mapping(raw, p, ("id", "arrival", "width", "stages", "trials"))
        trials = tuple(
            tuple(v.string(h, f"{p}.trials[{j}][{k}]") for k, h in enumerate(v.sequence(t, "")))
            for j, t in enumerate(v.sequence(v.get(s, "trials", p), f"{p}.trials", min_len=1))
        )
        searches.append(
            Search(
                v.string(v.get(s, "id", p), f"{p}.id"),
                v.number(s.get("arrival", 0), f"{p}.arrival", minimum=0),
                v.integer(v.get(s, "width", p), f"{p}.width", minimum=1),
                tuple(v.integer(x, f"{p}.stages", minimum=1) for x in v.sequence(s["stages"], "")),
                trials,
            )
        )
    return TorchExperiment(
        v.label(v.get(m, "name", ""), "name"),
        v.string(v.get(m, "topology", ""), "topology"),
        v.integer(m.get("port", 29500), "port", minimum=1024),
        tuple(searches),
    )


def run_policy(
    exp: TorchExperiment, spec: LeafSpine, policy: str, period: float, work: Path
) -> dict:
    """One emulated run of every search under ``policy``; raw measurements."""
    em = Emulation(spec, policy, period, work)
    drivers: list[Any] = []
    try:
        em.start()
        out = _run_searches(exp, spec, em, work, drivers)
        time.sleep(2 * period + 1.5)  # agents' last byte counts (read once a second)
        out["band_share"] = _band_share(em, spec)
    finally:
        for d in drivers:
            d.close()
        em.stop()
    # each host's congestion control as its namespace said, each connection's path and
    # TCP state (experiments/connections.py)
    return out | {"congestion_control": em.host_cc, "connections": em.connections}


def _run_searches(
    exp: TorchExperiment, spec: LeafSpine, em: Emulation, work: Path, runners: list
) -> dict:
    import optuna

    from grouper.experiments.ddp_runner import DdpRunner, Rank
    from grouper.integrations.optuna import SyncHalving

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    addr = spec.addresses
    logs = (work / "ranks.log").open("a")

    def spawn(host: str, argv: list[str], env_extra: dict, **kw: Any) -> subprocess.Popen:
        env = dict(os.environ, **env_extra)
        return em.fabric.popen(host, argv, env=env, cwd=ROOT, stderr=logs, **kw)

    barrier = threading.Barrier(len(exp.searches))
    t0: list[float] = []
    lock = threading.Lock()
    results: dict[str, dict] = {}
    errors: list[str] = []

    def search(i: int, s: Search) -> None:
        runner = DdpRunner(
            s.id,
            spawn,
            lambda n, s=s: [Rank(h, addr[h], f"{h}-eth0") for h in s.trials[n]],
            lambda h: str(em.sockets / f"{h}-registry.sock"),
            width=s.width,
            port=exp.port + 10 * i,
        )
        runners.append(runner)
        study = optuna.create_study(
            study_name=s.id, sampler=optuna.samplers.RandomSampler(seed=i + 1)
        )
        driver = SyncHalving(study, len(s.trials), s.stages)

        def aligned() -> None:
            barrier.wait(timeout=300)
            with lock:
                if not t0:
                    t0.append(time.time())
            time.sleep(max(0.0, t0[0] + s.arrival - time.time()))

        try:
            driver.run(runner, on_started=aligned)
        except Exception as exc:  # reported with the search's name; the run fails
            errors.append(f"{s.id}: {exc}")
            barrier.abort()
            return
        results[s.id] = {"runner": runner, "pruned": dict(driver.pruned)}

    threads = [
        threading.Thread(target=search, args=(i, s), daemon=True)
        for i, s in enumerate(exp.searches)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return _times(exp, results)


def _times(exp: TorchExperiment, results: dict[str, dict]) -> dict:
    stages, jobs, ran = [], [], {}
    for s in exp.searches:
        runner, pruned = results[s.id]["runner"], results[s.id]["pruned"]
        arrival = min(run.stage_go[0] for run in runner.trials.values())
        for k in range(len(s.stages)):
            ends = [run.stage_done[k] for run in runner.trials.values() if len(run.stage_done) > k]
            stages.append(
                {"cojob": s.id, "stage": k + 1, "sct": max(ends) - arrival, "arrival": arrival}
            )
        for n, run in runner.trials.items():
            jobs.append({"cojob": s.id, "job": f"trial-{n}", "jct": run.stage_done[-1] - arrival})
            ran[(s.id, f"trial-{n}")] = pruned.get(n, len(s.stages))
    first = min(st["arrival"] for st in stages)
    return {
        "stages": stages,
        "jobs": jobs,
        "ran": ran,
        "arrivals": {st["cojob"]: st["arrival"] - first for st in stages},
    }


def _band_share(em: Emulation, spec: LeafSpine) -> dict[str, float | None]:
    sent: dict[str, list[int]] = {}
    for h in spec.host_names:
        with grpc.insecure_channel(f"unix:{em.sockets}/{h}-agent.sock") as ch:
            rep = pbg.AgentStub(ch).Collect(pb.CollectRequest(), timeout=10)
        for j in rep.jobs:
            tally = sent.setdefault(f"{j.job.cojob_id}/{j.job.job_id}", [0, 0])
            tally[0] += j.bytes_sent
            tally[1] += j.bytes_in_planned_band
    return {k: (b / a if a else None) for k, (a, b) in sorted(sent.items())}


def simulator_workload(exp: TorchExperiment, run: dict) -> Path:
    """The jobs one run ran, as a workload file for the simulator."""
    cojobs = []
    for s in exp.searches:
        jobs = [
            {
                "id": f"trial-{n}",
                "arch": "ring",
                "model_bytes": float(gradient_bytes(s.width)),
                "workers": list(hosts),
                "stages": run["ran"][(s.id, f"trial-{n}")],
            }
            for n, hosts in enumerate(s.trials)
        ]
        arrival = round(run["arrivals"][s.id], 3)
        cojobs.append({"id": s.id, "arrival": arrival, "stages": list(s.stages), "jobs": jobs})
    data = {"name": exp.name, "topology": exp.topology, "cojobs": cojobs}
    fd, path = tempfile.mkstemp(prefix="grouper-torch-", suffix=".yaml")
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(data, fh)
    return Path(path)


def check_known(name: str) -> None:
    key = name.split(":", 1)[1]
    if key not in TORCH_EXPERIMENTS:
        raise ConfigError("--experiment", f"unknown builtin {key!r}")
