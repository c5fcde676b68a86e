"""gRPC servicers: the local Registry (Unix socket) and the Agent API (coordinator)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from grouper.agent.core import AgentCore
from grouper.agent.peers import Caller
from grouper.agent.plan import patch_plan
from grouper.agent.probe import ProbeBusy, ProbeError, Prober
from grouper.agent.session import AgentSession, stage_event
from grouper.agent.updates import JobKey, UpdateSource, new_epoch
from grouper.common.errors import ConfigError
from grouper.common.registration import Flow, JobEntry, registration_dict
from grouper.common.wire import WireError
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg


def registration_msg(job: JobEntry, flows: list[Flow]) -> pb.JobRegistration:
    """What the coordinator sees of a job: its spec and the flows it sends (pids stay
    on the host)."""
    return pb.JobRegistration(
        cojob_id=job.cojob_id,
        job_id=job.job_id,
        arch=job.arch,
        stage_iterations=job.stage_iterations,
        model_bytes=job.model_bytes,
        flows=[
            pb.FlowSpec(
                src_host=f.src_host,
                dst_host=f.dst_host,
                dst_port=f.dst_port,
                src_port=f.src_port,
                bytes_per_iteration=f.bytes_per_iteration,
            )
            for f in flows
        ],
        compute_time=job.compute_time,
        arrival=job.arrival,
        weight=job.weight,
    )


def plan_dict(m: pb.Plan) -> dict[str, Any]:
    def inbound(items: Any) -> list[dict[str, Any]]:
        return [{"src_host": i.src_host, "port": i.port, "by_source": i.by_source} for i in items]

    out: dict[str, Any] = {
        "version": m.version,
        "host": m.host,
        "flows": [{"flow_id": f.flow_id, "band": f.band, "dscp": f.dscp} for f in m.flows],
        "inbound": inbound(m.inbound),
    }
    if m.base_version:  # a delta (agent.plan.patch_plan)
        out["base_version"] = m.base_version
        out["removed_flows"] = list(m.removed_flows)
        out["removed_inbound"] = inbound(m.removed_inbound)
    return out


def _ack(error: str) -> pb.Ack:
    return pb.Ack(ok=not error, error=error)


class RegistryServicer(pbg.RegistryServicer):
    """The jobs' calls, each under the identity the transport gives its caller
    (``callers(context.peer())``, from ``agent.peers.PeerRelay``); a call without one
    is refused."""

    def __init__(self, core: AgentCore, callers: Callable[[str], Caller | None]) -> None:
        self.core = core
        self.callers = callers

    def _call(self, kind: str, data: dict[str, Any], context: Any) -> pb.Ack:
        caller = self.callers(context.peer())
        if caller is None:
            return _ack("caller: not identified (call through the agent's registry socket)")
        return _ack(self.core.registry_call(kind, data, "grpc", caller))

    async def RegisterJob(self, request: pb.JobRegistration, context: Any) -> pb.Ack:
        return self._call("register", registration_dict(request), context)

    async def ReportProgress(self, request: pb.ProgressReport, context: Any) -> pb.Ack:
        done = {"iterations_done": request.iterations_done}
        return self._call("progress", _key(request) | done, context)

    async def StageFinished(self, request: pb.StageFinishedReport, context: Any) -> pb.Ack:
        return self._call("stage_finished", _key(request) | {"stage": request.stage}, context)

    async def JobFinished(self, request: pb.JobFinishedReport, context: Any) -> pb.Ack:
        return self._call("job_finished", _key(request) | {"pids": list(request.pids)}, context)


def _key(request: Any) -> dict[str, Any]:
    return {"cojob_id": request.cojob_id, "job_id": request.job_id}


def job_states(core: AgentCore, *, counters: bool = False) -> dict[JobKey, pb.JobState]:
    """Each job as the coordinator sees it; byte counters (which change every second)
    only for whole-state reports, not for the session's updates."""
    out = {}
    for j in core.registry.jobs.values():
        js = pb.JobState(
            job=registration_msg(j, core.report_flows(j)),
            iterations_done=j.iterations_done,
            stages_finished=j.stages_finished,
            finished=j.finished,
            owner_uid=j.owner,
        )
        if counters:
            js.bytes_sent, js.bytes_in_planned_band = core.band_share.get(j.key, (0, 0))
        out[j.key] = js
    return out


async def host_report(core: AgentCore, *, with_plan: bool = False) -> pb.HostReport:
    jobs = list(job_states(core, counters=True).values())
    bands = [
        pb.BandCounter(band=b, bytes=c["bytes"], packets=c["packets"], drops=c["drops"])
        for b, c in sorted((await core.counters()).items())
    ]
    return pb.HostReport(
        host=core.host,
        jobs=jobs,
        bands=bands,
        plan_version=core.version,
        backend=core.kernel.backend,
        priorities_active=core.priorities_active,
        flows=[
            pb.FlowPriority(flow_id=f, band=r.band, dscp=r.dscp)
            for f, r in sorted(core.entries.items())
        ]
        if with_plan
        else [],
    )


class AgentServicer(pbg.AgentServicer):
    """The coordinator's API. With ``authorize`` (mutual TLS), plans, event streams and
    calibration probes are taken from the coordinator's identity only; reports
    (``Collect``) from any member of the cluster."""

    def __init__(
        self, core: AgentCore, authorize: Any = None, prober: Prober | None = None
    ) -> None:
        self.core = core
        self.authorize = authorize  # optional callable(context, method) -> error string
        self.epoch = new_epoch()  # this process's incarnation, in every state update
        self._prober = prober

    @property
    def prober(self) -> Prober:
        """Calibration probes (made on first use when the daemon gave none)."""
        if self._prober is None:
            self._prober = Prober(self.core.addresses.get(self.core.host, ""))
        return self._prober

    async def _check(self, context: grpc.aio.ServicerContext, method: str) -> None:
        if self.authorize is not None:
            err = self.authorize(context, method)
            if err:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, err)

    async def Collect(self, request: pb.CollectRequest, context: Any) -> pb.HostReport:
        return await host_report(self.core, with_plan=request.with_plan)

    async def ApplyPlan(self, request: pb.Plan, context: Any) -> pb.ApplyResult:
        await self._check(context, "ApplyPlan")
        return await self._apply(request)

    async def _apply(self, request: pb.Plan) -> pb.ApplyResult:
        received = time.time()
        plan = plan_dict(request)
        if request.base_version:
            try:
                plan = patch_plan(self.core.plan_in_force, self.core.version, plan)
            except ConfigError as exc:
                return pb.ApplyResult(
                    applied=False,
                    version=self.core.version,
                    error=str(exc),
                    need_full=True,
                    answers=request.version,
                )
        ok, error, changed = await self.core.apply_plan(plan)
        return pb.ApplyResult(
            applied=ok,
            version=self.core.version,
            error=error,
            changed=changed,
            received_at=received,
            applied_at=time.time(),
            answers=request.version,
        )

    async def Session(self, requests: AsyncIterator[pb.SessionRequest], context: Any) -> None:
        """State updates out, syncs and plans in (see ``agent.session``). An empty or
        unknown request is answered with a refusal so the caller's order holds."""

        async def apply(plan: pb.Plan, ctx: Any) -> pb.ApplyResult:
            await self._check(ctx, "Session plan")
            return await self._apply(plan)

        source = UpdateSource(self.core.host, self.epoch)
        session = AgentSession(self.core, source, lambda: job_states(self.core), apply)
        await session.run(context)

    async def WatchEvents(
        self, request: pb.WatchRequest, context: Any
    ) -> AsyncIterator[pb.StageEvent]:
        await self._check(context, "WatchEvents")
        q = self.core.hub.subscribe()
        try:
            while True:
                yield stage_event(self.core.host, await q.get())
        except asyncio.CancelledError:
            pass
        finally:
            self.core.hub.unsubscribe(q)

    async def ProbeListen(self, request: pb.ProbeListenRequest, context: Any) -> Any:
        await self._check(context, "ProbeListen")
        try:
            token, ports = self.prober.listen(request.tasks)
        except ProbeError as e:
            await _refuse(context, e)
        except OSError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"probe: listen: {e}")
        return pb.ProbeListenReply(token=token, ports=ports, address=self.prober.address)

    async def Probe(self, request: pb.ProbeRequest, context: Any) -> Any:
        await self._check(context, "Probe")
        try:
            seconds = await self.prober.run(
                request.token,
                request.peer_address,
                list(request.peer_ports),
                request.bytes,
                request.rounds,
            )
        except ProbeError as e:
            await _refuse(context, e)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, WireError) as e:
            what = type(e).__name__ if isinstance(e, TimeoutError) else str(e)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"probe: {what}")
        return pb.ProbeResult(round_seconds=seconds)


async def _refuse(context: Any, e: ProbeError) -> None:
    busy = isinstance(e, ProbeBusy)
    code = grpc.StatusCode.FAILED_PRECONDITION if busy else grpc.StatusCode.INVALID_ARGUMENT
    await context.abort(code, str(e))
