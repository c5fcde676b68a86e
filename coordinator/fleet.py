"""The virtual agents of ``grouper bench coordinator``: one gRPC server in a process of
its own answers for all of them, told apart by the ``x-grouper-host`` header, over the
Session protocol real agents speak. Each one holds its jobs, sends a full update on a
sync and a delta for its jobs that progressed, and keeps its own plan: it checks every
plan it receives as an agent does (the version must grow; a delta must name the plan
it holds as its base, else it answers ``need_full``), patches it into the plan it
holds, and acknowledges it: with a result, or, for a plan acknowledged by update,
with its next update (due within the progress interval the sync asked for; a
progress update that goes first carries it).
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

import grpc
import numpy as np

from grouper.common.progress import reported_done
from grouper.v1 import agent_pb2 as pb
from grouper.workloads.random_instance import random_cojobs

Key = tuple[str, str]


def fleet_states(hosts: int, stages: int, seed: int) -> dict[str, dict[Key, pb.JobState]]:
    """Each virtual agent's jobs: the flows each host sends of a random instance."""
    names, cojobs = random_cojobs(hosts, stages, seed)
    per_host: dict[str, dict[Key, pb.JobState]] = {h: {} for h in names}
    for cj in cojobs:
        for job in cj.jobs:
            by_src: dict[str, list[pb.FlowSpec]] = {}
            for k, f in enumerate(job.flows):
                if f.src != f.dst:
                    by_src.setdefault(f.src, []).append(
                        pb.FlowSpec(
                            src_host=f.src,
                            dst_host=f.dst,
                            dst_port=20000 + k,
                            bytes_per_iteration=f.bytes,
                        )
                    )
            for src, flows in by_src.items():
                per_host[src][cj.cojob_id, job.job_id] = pb.JobState(
                    job=pb.JobRegistration(
                        cojob_id=cj.cojob_id,
                        job_id=job.job_id,
                        arch="flows",
                        stage_iterations=list(cj.stage_iterations),
                        arrival=1.0 + len(per_host),
                        flows=flows,
                    )
                )
    return per_host


class Fleet:
    """Every virtual agent's end of the Session."""

    def __init__(
        self, hosts: int, stages: int, seed: int, changed: float, iterations: int = 1,
        spread: bool = True,
    ) -> None:  # fmt: skip
        self.states = fleet_states(hosts, stages, seed)
        self.holders: dict[Key, list[str]] = {}
        for h, jobs in self.states.items():
            for key in jobs:
                self.holders.setdefault(key, []).append(h)
        self.keys = sorted(self.holders)
        # ``spread``: jobs started at different times, each somewhere in its first stage
        # (the same on all its hosts), so steps are crossed and stages end at different
        # periods, as on a cluster; else all at iteration 0 (no stage ends for a while)
        phase = np.random.default_rng(seed + 1)
        for key in self.keys if spread else ():
            states = [self.states[h][key] for h in self.holders[key]]
            done = int(phase.integers(0, states[0].job.stage_iterations[0]))
            for js in states:
                js.iterations_done = done
        self.changed = changed
        self.iterations = iterations  # each changing job's iterations per period
        self.rng = np.random.default_rng(seed)
        self.seq = dict.fromkeys(self.states, 0)
        self.version = dict.fromkeys(self.states, 0)  # the plan each agent holds
        self.plans: dict[str, dict[str, tuple[int, int]]] = {}  # and its flows
        self.unacked: set[str] = set()  # applied a plan acknowledged by update
        self.interval = 0.25
        self.step = 0.0  # progress in steps of a stage, as the coordinator's sync says
        self.by_key = False  # known jobs' progress by key, without registration (the sync)
        self.out: dict[str, asyncio.Queue[bytes]] = {}
        self.picked: Any = []  # the jobs progressing this period

    def _update(self, host: str, full: bool, jobs: list[pb.JobState]) -> bytes:
        self.seq[host] += 1
        self.unacked.discard(host)  # every update carries the version in force
        up = pb.StateUpdate(host=host, epoch=7, seq=self.seq[host], full=full, jobs=jobs,
                            plan_version=self.version[host], priorities_active=True)  # fmt: skip
        return pb.SessionReply(update=up).SerializeToString()

    def full(self, host: str) -> bytes:
        """``host``'s full update (the answer to a sync), as sent."""
        return self._update(host, True, list(self.states[host].values()))

    def progress(self, part: int = 0, parts: int = 1) -> tuple[int, int]:
        """One period's progress, or its ``part`` of ``parts`` (agents send progress
        every ``interval``, up to ``parts`` = period / interval times a period): a share
        of all jobs (picked at part 0) gains ``iterations`` over the period, split as
        evenly as whole iterations allow. The updates sent, and the job states in them."""
        if part == 0:
            n = round(self.changed * len(self.keys))
            self.picked = self.rng.choice(len(self.keys), size=n, replace=False) if n else []
        gain = self.iterations * (part + 1) // parts - self.iterations * part // parts
        touched: dict[str, list[pb.JobState]] = {}
        for i in self.picked if gain else ():
            key = self.keys[int(i)]
            for h in self.holders[key]:
                js = self.states[h][key]
                stages, was = js.job.stage_iterations, js.iterations_done
                js.iterations_done = min(was + gain, sum(stages))
                if self.step <= 0 or reported_done(js.iterations_done, stages, self.step) != (
                    reported_done(was, stages, self.step)
                ):  # a real agent's ``UpdateSource``: a change only once a step is crossed
                    touched.setdefault(h, []).append(self._progressed(key, js))
        for h, jobs in touched.items():
            if h in self.out:
                self.out[h].put_nowait(self._update(h, False, jobs))
        return len(touched), sum(map(len, touched.values()))

    def _progressed(self, key: Key, js: pb.JobState) -> pb.JobState:
        """A progressed job's state as an agent's delta carries it: whole, or by its key
        when the sync allows (its registration, sent in the full update, is unchanged)."""
        if not self.by_key:
            return js
        return pb.JobState(
            key=pb.JobKey(cojob_id=key[0], job_id=key[1]), iterations_done=js.iterations_done,
            stages_finished=js.stages_finished, finished=js.finished,
        )  # fmt: skip

    def apply(self, host: str, plan: pb.Plan) -> pb.ApplyResult | None:
        """Check and hold a plan as an agent does; the result to send, if any."""
        held = self.version[host]
        if plan.version <= held:
            error = f"plan.version: {plan.version} is not above {held}"
            return pb.ApplyResult(applied=False, version=held, answers=plan.version, error=error)
        if plan.base_version:
            flows = self.plans.get(host)
            if flows is None or plan.base_version != held:
                return pb.ApplyResult(applied=False, version=held, need_full=True,
                                      answers=plan.version, error="plan.base_version")  # fmt: skip
            flows = dict(flows)
            for f in plan.removed_flows:
                flows.pop(f, None)
        else:
            flows = {}
        for f in plan.flows:
            flows[f.flow_id] = (f.band, f.dscp)
        self.plans[host], self.version[host] = flows, plan.version
        if plan.ack_by_update:
            self.unacked.add(host)
            return None
        return pb.ApplyResult(applied=True, version=plan.version, answers=plan.version)

    async def acknowledge(self) -> None:
        """Every interval, an update from each agent that holds an unacknowledged plan
        (a real agent's update loop does this on its own clock)."""
        while True:
            await asyncio.sleep(self.interval)
            for h in list(self.unacked):
                if h in self.out:
                    self.out[h].put_nowait(self._update(h, False, []))

    async def session(self, requests: Any, context: Any) -> Any:
        host = dict(context.invocation_metadata())["x-grouper-host"]
        q: asyncio.Queue[bytes] = asyncio.Queue()
        self.out[host] = q

        async def read() -> None:
            async for raw in requests:
                req = pb.SessionRequest.FromString(raw)
                if req.HasField("plan"):
                    res = self.apply(host, req.plan)
                    if res is not None:
                        q.put_nowait(pb.SessionReply(result=res).SerializeToString())
                elif req.HasField("sync"):
                    self.interval = req.sync.interval or self.interval
                    self.step = req.sync.progress_step
                    self.by_key = req.sync.jobs_by_key
                    q.put_nowait(self.full(host))

        reader = asyncio.create_task(read())
        try:
            while True:
                yield await q.get()
        finally:
            reader.cancel()

    def handler(self) -> grpc.GenericRpcHandler:
        ident = lambda b: b  # noqa: E731 - raw bytes in and out
        return grpc.method_handlers_generic_handler(
            "grouper.v1.Agent",
            {"Session": grpc.stream_stream_rpc_method_handler(self.session, ident, ident)},
        )


def raise_nofile(agents: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * agents + 1024)), hard))


def fleet_main(
    conn: Any, agents: int, stages: int, seed: int, changed: float, iterations: int = 1,
    spread: bool = True,
) -> None:  # fmt: skip
    """The fleet's process: serves until told "stop" on ``conn``."""

    async def main() -> None:
        raise_nofile(agents)
        fleet = Fleet(agents, stages, seed, changed, iterations, spread)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((fleet.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        acks = asyncio.create_task(fleet.acknowledge())
        conn.send((port, sorted(fleet.states)))
        loop = asyncio.get_running_loop()
        while True:  # ("tick", part, parts): progress; "cpu": CPU seconds so far; "stop"
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            conn.send(time.process_time() if cmd == "cpu" else fleet.progress(*cmd[1:]))
        acks.cancel()
        await server.stop(None)

    asyncio.run(main())
