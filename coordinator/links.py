"""One coordinator-side link per agent: channel, liveness, what it last acknowledged."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from common.errors import ConfigError
from common.registration import parse_registration, registration_dict
from coordinator.planner import HostPlan
from coordinator.snapshot import JobReport, ReportedFlow, ReportedJob
from grouper.cluster_config import ClusterConfig, HostConfig
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

log = logging.getLogger("grouper.coordinator")


def channel_for(host: HostConfig, cfg: ClusterConfig) -> grpc.aio.Channel:
    target = host.agent
    # gRPC backs off reconnects exponentially up to 2 minutes; an agent that restarts
    # must be re-synced within a couple of periods, so cap the backoff at one period
    backoff_ms = int(max(250, min(5000, cfg.scheduling.period * 1000)))
    options: list[tuple[str, Any]] = [
        ("grpc.initial_reconnect_backoff_ms", min(backoff_ms, 1000)),
        ("grpc.min_reconnect_backoff_ms", min(backoff_ms, 1000)),
        ("grpc.max_reconnect_backoff_ms", backoff_ms),
    ]
    if cfg.tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(cfg.tls.ca).read_bytes(),
        private_key=Path(cfg.tls.key).read_bytes(),
        certificate_chain=Path(cfg.tls.cert).read_bytes(),
    )
    # the agent's certificate must name its configured host
    options.append(("grpc.ssl_target_name_override", host.name))
    return grpc.aio.secure_channel(target, creds, options=options)


def parse_report(
    report: pb.HostReport,
    host: str,
    known_hosts: set[str],
    cache: dict[bytes, ReportedJob | str] | None = None,
) -> tuple[list[JobReport], list[str], dict[bytes, ReportedJob | str]]:
    """Validate an agent's report; bad jobs are dropped with an error each.

    Registrations never change once an agent accepted them, so the validated form of
    each (keyed by its serialized bytes) is reused from ``cache`` across cycles; only
    progress is read anew. Returns (jobs, errors, the cache for the next call).
    """
    if report.host != host:
        raise ConfigError("report.host", f"agent for {host!r} reported as {report.host!r}")
    cache = cache or {}
    fresh: dict[bytes, ReportedJob | str] = {}
    jobs, errors = [], []
    for i, js in enumerate(report.jobs):
        raw = js.job.SerializeToString()
        template = cache.get(raw) or fresh.get(raw)
        if template is None:
            template = _validate_job(js.job, host, known_hosts)
        fresh[raw] = template
        if isinstance(template, str):
            errors.append(f"report.jobs[{i}].{template}")
            continue
        done, total = js.iterations_done, template.total_iterations
        if done > total:
            errors.append(f"report.jobs[{i}].iterations_done: exceeds {total}: {done}")
            continue
        jobs.append(JobReport(template, done, js.finished))
    return jobs, errors, fresh


def _validate_job(job: pb.JobRegistration, host: str, known_hosts: set[str]) -> ReportedJob | str:
    try:
        entry = parse_registration(registration_dict(job), known_hosts)
    except ConfigError as exc:
        return str(exc)
    flows = {}
    for f in entry.flows:
        if f.src_host != host:
            continue  # an agent speaks for the flows its host sends
        fid = f.flow_id(entry.cojob_id, entry.job_id)
        flows[fid] = ReportedFlow(fid, f.src_host, f.dst_host, f.bytes_per_iteration)
    return ReportedJob(
        entry.cojob_id,
        entry.job_id,
        entry.arch,
        tuple(entry.stage_iterations),
        entry.model_bytes,
        entry.compute_time,
        entry.arrival,
        flows,
    )


class LinkError(Exception):
    """The agent did not answer: the gRPC status name, or why the session ended."""


def _why(exc: Exception) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code().name
    if isinstance(exc, asyncio.InvalidStateError):  # written to a stream that had ended
        return "session ended"
    return str(exc)


@dataclass
class AgentLink:
    host: HostConfig
    channel: grpc.aio.Channel
    stub: pbg.AgentStub
    up: bool = False
    last_ok: float = -math.inf
    jobs: list[JobReport] = field(default_factory=list)
    agent_version: int = 0  # version the agent says is in force
    pushed_version: int = 0
    acked: HostPlan | None = None
    last_push: float = -math.inf
    report_cache: dict[bytes, ReportedJob | str] = field(default_factory=dict)
    session: grpc.aio.StreamStreamCall | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def open(cls, host: HostConfig, cfg: ClusterConfig) -> AgentLink:
        ch = channel_for(host, cfg)
        return cls(host, ch, pbg.AgentStub(ch))

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Every call names the host it is meant for (agents and audits can check)."""
        return (("x-grouper-host", self.host.name),)

    async def request(self, req: pb.SessionRequest, timeout: float) -> pb.SessionReply:
        """One request/reply on the agent's Session stream, opened on first use.

        A stream that breaks is dropped; if it was an old one (the agent may have
        restarted since), one fresh stream is tried before giving up with LinkError.
        """
        async with self.lock:
            while True:
                fresh = self.session is None
                if fresh:
                    self.session = self.stub.Session(metadata=self.metadata)
                try:
                    async with asyncio.timeout(timeout):  # no extra task, unlike wait_for
                        return await self._round_trip(self.session, req)
                except TimeoutError as exc:
                    self.end_session()
                    raise LinkError("DEADLINE_EXCEEDED") from exc
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError, LinkError) as exc:
                    self.end_session()  # broken; a stale stream gets one fresh retry
                    if fresh:
                        raise LinkError(_why(exc)) from exc

    @staticmethod
    async def _round_trip(
        call: grpc.aio.StreamStreamCall, req: pb.SessionRequest
    ) -> pb.SessionReply:
        await call.write(req)
        reply = await call.read()
        if reply is grpc.aio.EOF:
            raise LinkError("session ended by the agent")
        return reply

    def end_session(self) -> None:
        if self.session is not None:
            self.session.cancel()
            self.session = None

    def next_version(self) -> int:
        return max(self.agent_version, self.pushed_version) + 1

    def needs_push(self, plan: HostPlan, keepalive: float) -> bool:
        if not self.up:
            return False
        restarted = self.agent_version < self.pushed_version
        stale = time.monotonic() - self.last_push > keepalive
        return restarted or stale or plan != self.acked

    def age_out(self, timeout: float) -> bool:
        """Forget a silent agent's jobs after ``timeout``; True when it just happened."""
        if self.jobs and time.monotonic() - self.last_ok > timeout:
            log.warning("agent %s silent for %.1fs: its stages age out", self.host.name, timeout)
            self.jobs = []
            return True
        return False
