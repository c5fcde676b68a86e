"""``grouper agent``: one asyncio process per host.

Serves the Registry on a Unix socket for local jobs (each caller known by its peer
credentials: agent.peers), the Agent API and the gRPC health service for the
coordinator, tails the JSON-lines directory, drops priorities after ``plan_ttl``
without a plan, repairs kernel drift, and on SIGTERM or SIGINT removes exactly what it
installed (in ``finally``, whatever happened).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from grouper.agent.authz import coordinator_only
from grouper.agent.cgroup_watch import CgroupWatch
from grouper.agent.cgroups import NFT_ROOT, Cgroups
from grouper.agent.core import AgentCore
from grouper.agent.discovery.sockdiag import SockDiag, tcp_opens, tcp_segments
from grouper.agent.discovery.tracker import Tracker
from grouper.agent.enforcer import KernelThread
from grouper.agent.jsonl import JsonlTailer
from grouper.agent.kernel import features
from grouper.agent.metrics import AgentMetrics
from grouper.agent.peers import PeerRelay
from grouper.agent.probe import Prober
from grouper.agent.registry import Registry
from grouper.agent.service import AgentServicer, RegistryServicer
from grouper.common.binding import EXCLUSIVE_PORT, bind
from grouper.common.cluster_config import ClusterConfig, load_cluster_config
from grouper.common.errors import ConfigError
from grouper.v1 import agent_pb2_grpc as pbg

log = logging.getLogger("grouper.agent")
RECONCILE_EVERY = 10.0
POLL_EVERY = 0.2
MEASURE_EVERY = 1.0  # seconds between byte counts (tcp_info) and process liveness checks


@dataclass
class AgentOptions:
    host: str
    nic: str
    listen: str  # host:port or unix:PATH
    socket: str
    jobs_dir: str
    state_file: str
    backend: str
    metrics_port: int
    link_mbps: float
    multiqueue: bool = True
    # where listen, socket and metrics_port came from, for error messages
    fields: dict[str, str] = field(default_factory=dict)


def options_from(cfg: ClusterConfig, args: argparse.Namespace) -> AgentOptions:
    h = cfg.host(args.host)
    nic = args.nic or h.nic
    try:
        socket.if_nametoindex(nic)
    except OSError:
        index = next(i for i, x in enumerate(cfg.hosts) if x.name == h.name)
        where = "--nic" if args.nic else f"hosts[{index}].nic ({h.name})"
        raise ConfigError(where, f"no interface {nic!r} on this host") from None
    return AgentOptions(
        host=h.name,
        nic=nic,
        listen=args.listen or f"0.0.0.0:{cfg.agent.port}",
        socket=args.socket or cfg.agent.socket,
        jobs_dir=args.jobs_dir or cfg.agent.jobs_dir,
        state_file=args.state_file or cfg.agent.state_file,
        backend=args.backend or cfg.agent.backend,
        metrics_port=cfg.agent.metrics_port if args.metrics_port is None else args.metrics_port,
        link_mbps=args.link_mbps or h.link_mbps,
        multiqueue=(args.multiqueue or cfg.agent.multiqueue) == "per-queue",
        fields={
            "listen": "--listen" if args.listen else "agent.port",
            "socket": "--socket" if args.socket else "agent.socket",
            "metrics_port": "agent.metrics_port" if args.metrics_port is None else "--metrics-port",
        },
    )


def _build_core(
    cfg: ClusterConfig, opts: AgentOptions, metrics: AgentMetrics, diag: SockDiag
) -> tuple[AgentCore, KernelThread]:
    """The agent's state and its kernel thread; nothing is installed yet."""
    kernel = KernelThread(
        opts.nic,
        cfg.queues,
        opts.link_mbps,
        backend=opts.backend,
        control_ports=cfg.control_ports,
        multiqueue=opts.multiqueue,
    )
    cgroups, why = _cgroups(kernel)
    registry = Registry(
        opts.state_file,
        known_hosts={h.name for h in cfg.hosts},
        host=opts.host,
        host_of=cfg.host_of,
        cgroups=cgroups,
        no_cgroups=why,
        policy=cfg.agent.registry,
    )
    core = AgentCore(
        opts.host,
        registry,
        kernel,
        cfg.queues,
        cfg.addresses,
        cfg.failure.plan_ttl,
        metrics,
        tracker=Tracker(opts.host, cfg.host_of, diag, opens=tcp_opens, segments=tcp_segments),
        addresses6={host: a for a, host in cfg.host_of.items() if ":" in a},
    )
    metrics.backend.labels(opts.host, kernel.backend).set(1)
    metrics.discovery.labels(opts.host, "pids").set(1)
    metrics.discovery.labels(opts.host, "cgroup").set(int(cgroups is not None))
    if cgroups is not None:
        core.watch = CgroupWatch()
    log.info(
        "jobs known by %s",
        f"cgroup (cgroup2 at {cgroups.mount}) or pids" if cgroups else "pids",
    )
    return core, kernel


def _cgroups(kernel: KernelThread) -> tuple[Cgroups | None, str]:
    """This host's cgroup2 when the agent can know jobs by cgroup here, else None and
    why not (logged, and said to jobs that give a cgroup)."""
    cgroups = Cgroups.probe()
    why = "" if cgroups else "no cgroup2 mount"
    if cgroups is not None and cgroups.nft_prefix is None:
        why = f"cgroup2 at {cgroups.mount} is outside {NFT_ROOT}"
    if not why:
        why = kernel.run_sync(features.cgroup_match, kernel.enforcer.nft)
        why = why and f"Linux {features.kernel_release()}: nftables socket cgroupv2: {why}"
    if why:
        log.warning("jobs known by pids only: %s", why)
        return None, why
    return cgroups, ""


def _listen_public(server: grpc.aio.Server, cfg: ClusterConfig, opts: AgentOptions) -> None:
    """The coordinator's port: plain, or mutual TLS where only certificates from our CA
    get in."""
    if cfg.tls is None:
        listen = partial(server.add_insecure_port, opts.listen)
    else:
        creds = grpc.ssl_server_credentials(
            [(Path(cfg.tls.key).read_bytes(), Path(cfg.tls.cert).read_bytes())],
            root_certificates=Path(cfg.tls.ca).read_bytes(),
            require_client_auth=True,
        )
        listen = partial(server.add_secure_port, opts.listen, creds)
    bind(listen, opts.fields.get("listen", "--listen"), opts.listen)


def _listen_local(server: grpc.aio.Server, relay: PeerRelay, opts: AgentOptions) -> None:
    """The jobs' Registry: gRPC on the relay's private socket, behind the public one
    (stale sockets of a crash are replaced)."""

    def listen() -> None:
        relay.public.parent.mkdir(parents=True, exist_ok=True)
        server.add_insecure_port(relay.prepare())

    bind(listen, opts.fields.get("socket", "--socket"), f"unix:{relay.public}")


async def _housekeeping(
    core: AgentCore, kernel: KernelThread, tailer: JsonlTailer, stop: asyncio.Event
) -> None:
    """Until ``stop``: tail job events, drop expired plans, repair kernel drift."""
    since_reconcile = 0.0
    while not stop.is_set():
        tailer.poll()
        await core.check_ttl()
        since_reconcile += POLL_EVERY
        if since_reconcile >= RECONCILE_EVERY:
            since_reconcile = 0.0
            await kernel.call(kernel.enforcer.reconcile)
            await core.counters()
        try:
            await asyncio.wait_for(stop.wait(), POLL_EVERY)
        except TimeoutError:
            pass


def _log_started(cfg: ClusterConfig, opts: AgentOptions, kernel: KernelThread) -> None:
    shape = "per TX queue" if kernel.enforcer.shape == "mq" else "single root"
    log.info(
        "agent %s on %s: backend %s (%s), %d queues, link %.0f Mbit/s",
        *(opts.host, opts.nic, kernel.backend, shape, cfg.queues.queues, opts.link_mbps),
    )
    log.info("backend %s: %s", kernel.backend, kernel.enforcer.backend_reason)


async def serve(cfg: ClusterConfig, opts: AgentOptions, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = AgentMetrics(opts.host)
    diag = SockDiag()
    try:
        core, kernel = _build_core(cfg, opts, metrics, diag)
    except BaseException:  # e.g. no such NIC: nothing was installed, close the socket
        diag.close()
        raise
    enforcer = kernel.enforcer
    discovery: asyncio.Task | None = None
    tailer = JsonlTailer(
        opts.jobs_dir, lambda ev, who: core.registry_call("event", ev, "jsonl", who)
    )
    public = grpc.aio.server(options=EXCLUSIVE_PORT)
    local = grpc.aio.server()
    prober = Prober(cfg.addresses.get(opts.host, ""))
    health_svc = health.aio.HealthServicer()
    relay = PeerRelay(Path(opts.socket))
    policy = cfg.agent.registry
    listening = False  # the registry's sockets are ours (not another agent's)
    started = False  # the kernel is ours to clean only once we began to install
    try:
        # ports first: one in use is refused before the kernel is touched
        authorize = None if cfg.tls is None else coordinator_only(cfg.tls.coordinator_name)
        pbg.add_AgentServicer_to_server(AgentServicer(core, authorize, prober), public)
        health_pb2_grpc.add_HealthServicer_to_server(health_svc, public)
        _listen_public(public, cfg, opts)
        pbg.add_RegistryServicer_to_server(RegistryServicer(core, relay.caller), local)
        gid = policy.socket_gid()  # a group that does not exist is refused before the kernel
        _listen_local(local, relay, opts)
        listening = True
        where = opts.fields.get("metrics_port", "--metrics-port")
        bind(partial(metrics.serve, opts.metrics_port), where, f"0.0.0.0:{opts.metrics_port}")
        started = True
        await kernel.call(enforcer.start)
        _log_started(cfg, opts, kernel)
        await public.start()
        await local.start()
        await relay.start(policy.socket_mode, gid)
        tailer.prepare()
        await health_svc.set("grouper.v1.Agent", health_pb2.HealthCheckResponse.SERVING)
        await health_svc.set("", health_pb2.HealthCheckResponse.SERVING)
        discovery = asyncio.create_task(discover_loop(core, cfg.agent.discovery_interval, stop))
        _watch_cgroups(core, loop)
        log.info("serving coordinator API on %s, registry on unix:%s (mode %o)", opts.listen,
                 relay.public, policy.socket_mode)  # fmt: skip
        await _housekeeping(core, kernel, tailer, stop)
    finally:
        log.info("shutting down: removing what this agent installed")
        if discovery is not None:
            discovery.cancel()
            await asyncio.gather(discovery, return_exceptions=True)
        diag.close()
        if core.watch is not None:
            loop.remove_reader(core.watch.fileno())
            core.watch.close()
        await health_svc.enter_graceful_shutdown()
        await public.stop(grace=1.0)
        if listening:
            await relay.close()
        await local.stop(grace=1.0)
        prober.close()
        try:
            if started:  # else another agent may own them: a refused start leaves them
                core.release_cgroups()
                kernel.run_sync(enforcer.stop)
        finally:
            kernel.close()


def _watch_cgroups(core: AgentCore, loop: asyncio.AbstractEventLoop) -> None:
    """A cgroup made or removed beside a job's: the core checks its jobs' cgroups."""
    watch = core.watch
    if watch is None:
        return

    def changed() -> None:
        if watch.drain():
            task = loop.create_task(core.cgroups_changed())
            task.add_done_callback(_log_failure)

    loop.add_reader(watch.fileno(), changed)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("following a cgroup change failed: %s", task.exception())


async def discover_loop(core: AgentCore, interval: float, stop: asyncio.Event) -> None:
    """Find jobs' new connections every ``interval``; measure bytes every second. A
    failing round is logged and the next one runs (the agent never stops classifying)."""
    every = max(1, round(MEASURE_EVERY / interval))
    n = 0
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        n += 1
        try:
            await core.discover(measure=n % every == 0)
        except Exception:
            log.exception("discovery round failed")
        await asyncio.sleep(max(0.0, interval - (loop.time() - start)))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    cfg = load_cluster_config(args.config)
    asyncio.run(serve(cfg, options_from(cfg, args)))
    return 0
