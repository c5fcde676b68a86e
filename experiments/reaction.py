"""``grouper bench reaction``: from a stage event to the new priorities in every kernel.

On the emulated leaf-spine (real agents, coordinator, kernels), one event at a time: a
new cojob registers, a stage finishes, or a job ends. For each, the time until every
host whose plan changed holds it in its kernel, seen by ``nft monitor`` in that host's
namespace (the kernel's own notification of the committed transaction). The time is
split with the coordinator's trace (``coordinator --trace``) and the agents' stamps in
each plan's result: agent -> coordinator (event to update merged), planning (to plans
computed), coordinator -> agent (to the plan received), kernel (to the commit seen).
Events that change no host's plan are counted, not timed. All processes share one
clock (one machine).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.experiments.emulation import Emulation
from grouper.topologies import congestion
from grouper.topologies.leafspine import LeafSpine
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

STEPS = ("agent_to_coordinator", "planning", "coordinator_to_agent", "kernel")
STAGES = [20, 40]


class KernelWatch:
    """``nft monitor`` in one host's namespace; a time for each committed transaction."""

    def __init__(self, emu: Emulation, host: str) -> None:
        self.commits: list[float] = []
        self.proc = emu.fabric.host(host).popen(
            ["nft", "monitor"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("# new generation"):
                self.commits.append(time.time())

    def first_after(self, t: float) -> float | None:
        return next((c for c in self.commits if c >= t), None)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


@dataclass
class Event:
    kind: str
    cojob: str
    host: str
    time: float


class Driver:
    """Makes events through the agents' registries: register, finish a stage, end a job."""

    def __init__(self, emu: Emulation, seed: int) -> None:
        self.emu = emu
        self.rng = random.Random(seed)
        self.hosts = emu.spec.host_names
        self.live: dict[str, tuple[str, str, int]] = {}  # cojob -> (src, dst, stages done)
        self.made = 0

    def _stub(self, host: str) -> tuple[grpc.Channel, pbg.RegistryStub]:
        ch = grpc.insecure_channel(f"unix:{self.emu.sockets}/{host}-registry.sock")
        return ch, pbg.RegistryStub(ch)

    def next(self) -> Event:
        if len(self.live) < 3 or (len(self.live) < 8 and self.rng.random() < 0.4):
            return self._register()
        cojob = self.rng.choice(sorted(self.live))
        src, dst, done = self.live[cojob]
        ch, stub = self._stub(src)
        t0 = time.time()
        with ch:
            if done == 0:
                ack = stub.StageFinished(
                    pb.StageFinishedReport(cojob_id=cojob, job_id="j", stage=1)
                )
                self.live[cojob] = (src, dst, 1)
                kind = "stage_finished"
            else:
                ack = stub.JobFinished(pb.JobFinishedReport(cojob_id=cojob, job_id="j"))
                del self.live[cojob]
                kind = "job_finished"
        if not ack.ok:
            raise RuntimeError(f"{kind} {cojob} refused: {ack.error}")
        return Event(kind, cojob, src, t0)

    def _register(self) -> Event:
        self.made += 1
        cojob = f"r{self.made}"
        src, dst = self.rng.sample(self.hosts, 2)
        size = self.rng.uniform(1e5, 4e6)
        reg = pb.JobRegistration(
            cojob_id=cojob, job_id="j", arch="flows", stage_iterations=STAGES,
            flows=[pb.FlowSpec(src_host=src, dst_host=dst, dst_port=30000 + self.made,
                               bytes_per_iteration=size)],
        )  # fmt: skip
        ch, stub = self._stub(src)
        t0 = time.time()
        with ch:
            ack = stub.RegisterJob(reg)
        if not ack.ok:
            raise RuntimeError(f"register {cojob} refused: {ack.error}")
        self.live[cojob] = (src, dst, 0)
        return Event("registered", cojob, src, t0)


def _cycle_of(ev: Event, cycles: list[dict]) -> dict | None:
    kinds = {"registered": "REGISTERED", "stage_finished": "STAGE_FINISHED",
             "job_finished": "JOB_FINISHED"}  # fmt: skip
    for c in cycles:
        for e in c["events"]:
            if e["cojob"] == ev.cojob and e["kind"] == kinds[ev.kind] and e["host"] == ev.host:
                return c | {"event": e}
    return None


def measure(ev: Event, cycle: dict | None, watches: dict[str, KernelWatch]) -> dict:
    row: dict[str, Any] = {"kind": ev.kind, "cojob": ev.cojob, "host": ev.host}
    if cycle is None:
        return row | {"status": "no cycle"}
    pushes = [p for p in cycle["pushes"] if p["changed"] > 0]
    if not pushes:
        return row | {"status": "no plan changed"}
    done = {p["host"]: watches[p["host"]].first_after(p["received"]) for p in pushes}
    if any(t is None for t in done.values()):
        return row | {"status": "kernel change not seen"}
    last = max(pushes, key=lambda p: done[p["host"]])
    received = cycle["event"]["received"]
    steps = {
        "agent_to_coordinator": received - ev.time,
        "planning": cycle["planned"] - received,
        "coordinator_to_agent": last["received"] - cycle["planned"],
        "kernel": done[last["host"]] - last["received"],
    }
    total = done[last["host"]] - ev.time
    return row | {"status": "ok", "hosts": sorted(done), "seconds": total, **steps}


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if r["status"] == "ok"]
    out: dict[str, Any] = {"events": len(rows), "measured": len(ok)}
    out["not_measured"] = {
        s: sum(r["status"] == s for r in rows) for s in {r["status"] for r in rows} - {"ok"}
    }
    for key in ("seconds", *STEPS):
        x = np.array([r[key] for r in ok]) if ok else np.zeros(1)
        out[key] = {
            "p50": float(np.percentile(x, 50)),
            "p99": float(np.percentile(x, 99)),
            "max": float(x.max()),
        }
    return out


def _first_cycle(trace: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if trace.exists() and trace.read_text().strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"the coordinator wrote no cycle to {trace} in {timeout:.0f} s")


def bench_reaction(events: int, period: float, gap: float, seed: int, json_path: str | None,
                   work: Path, cc: str = congestion.DEFAULT) -> int:  # fmt: skip
    if os.geteuid() != 0:
        raise ConfigError("bench reaction", "needs root (Mininet, namespaces, nftables)")
    if not shutil.which("mnexec"):
        raise ConfigError("bench reaction", "Mininet is not installed (apt-get install mininet)")
    congestion.check(cc)
    emu = Emulation(LeafSpine(cc=cc), "grouper", period, work)
    trace = work.parent / f"{work.name}-trace.jsonl"
    trace.unlink(missing_ok=True)
    emu.coordinator_args = ["--trace", str(trace)]
    watches: dict[str, KernelWatch] = {}
    made: list[Event] = []
    try:
        emu.start()
        watches = {h: KernelWatch(emu, h) for h in emu.spec.host_names}
        driver = Driver(emu, seed)
        _first_cycle(trace, 60.0)  # the coordinator is up, synced and has planned once
        for _ in range(events):
            made.append(driver.next())
            time.sleep(gap)
        time.sleep(1.0)
    finally:
        for w in watches.values():
            w.close()
        emu.stop()
    cycles = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    rows = [measure(ev, _cycle_of(ev, cycles), watches) for ev in made]
    result = {"period": period, "event_gap": gap, "seed": seed, "congestion_control": cc,
              **summary(rows), "rows": rows}  # fmt: skip
    write_json(result, json_path)
    if json_path != "-":
        print(f"{result['measured']} of {len(rows)} events changed a kernel "
              f"(period {period:g} s, events {gap:g} s apart)")  # fmt: skip
        print(table(
            [[k, *(f"{result[k][q] * 1e3:.1f}" for q in ("p50", "p99", "max"))]
             for k in ("seconds", *STEPS)],
            ["step", "p50 ms", "p99 ms", "max ms"],
        ))  # fmt: skip
    return 0
