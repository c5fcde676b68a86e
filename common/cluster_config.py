"""The per-cluster YAML config shared by the coordinator, the agents and the
experiment tools. See ``docs/cluster.sample.yaml`` for a commented example.

Unknown keys are rejected; every error is a :class:`ConfigError` naming the path of the
bad field (``hosts[3].nic: required``).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouper.common import limits as L
from grouper.common import validate as v
from grouper.common.errors import ConfigError, short
from grouper.common.progress import MAX_PROGRESS_STEP
from grouper.common.queues import QueueConfig
from grouper.common.registry_policy import RegistryPolicy, parse_registry_policy
from grouper.common.scheduling import POLICIES, parse_admission, parse_queues
from grouper.common.yamlfile import load_yaml_file

BACKENDS = ("auto", "prio", "htb")
MULTIQUEUE = ("per-queue", "single")


@dataclass(frozen=True)
class HostConfig:
    name: str
    address: str  # data-plane IPv4 address
    agent: str  # agent gRPC address host:port (or unix:PATH)
    nic: str
    link_mbps: float
    address6: str = ""  # optional data-plane IPv6 address (traffic to it is classified too)


@dataclass(frozen=True)
class SchedulingConfig:
    policy: str = "grouper"
    period: float = 1.0
    event_driven: bool = True
    min_gap: float = 0.1
    # a fresh order keeps the last one's relative order of known stages when its
    # weighted completion bound is within this share of PDA's new order (0: never;
    # docs/results/coordinator.md, "A steadier order", has the measurements behind 0.001)
    keep_order_within: float = 0.001
    # agents report a job's progress in steps of this share of its stage (0: every
    # change; docs/results/coordinator.md, "Progress in steps", has the cost at scale)
    progress_step: float = 0.0
    # agents send progress at most this often, in seconds (0: a quarter of the period;
    # stage events go at once whatever it is)
    progress_interval: float = 0.0


@dataclass(frozen=True)
class FailureConfig:
    agent_timeout: float = 5.0  # an agent silent this long is marked down
    plan_ttl: float = 10.0  # an agent with no valid plan this long drops priorities


@dataclass(frozen=True)
class TlsConfig:
    ca: str
    cert: str
    key: str
    coordinator_name: str = "coordinator"  # the only identity agents take plans from


@dataclass(frozen=True)
class AgentSettings:
    port: int = 7070
    socket: str = "/run/grouper/agent.sock"
    jobs_dir: str = "/run/grouper/jobs"
    state_file: str = "/var/lib/grouper/agent-state.json"
    backend: str = "auto"
    metrics_port: int = 9101
    discovery_interval: float = 0.1  # seconds between scans for jobs' new connections
    multiqueue: str = "per-queue"  # per-queue: a band qdisc per TX queue; single: one root
    registry: RegistryPolicy = field(default_factory=RegistryPolicy)  # who may register


@dataclass(frozen=True)
class ClusterConfig:
    cluster: str
    hosts: tuple[HostConfig, ...]
    queues: QueueConfig
    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)
    failure: FailureConfig = field(default_factory=FailureConfig)
    agent: AgentSettings = field(default_factory=AgentSettings)
    coordinator_listen: str = "0.0.0.0:7000"
    coordinator_metrics: str = "0.0.0.0:9100"
    tls: TlsConfig | None = None

    def host(self, name: str) -> HostConfig:
        for h in self.hosts:
            if h.name == name:
                return h
        raise ConfigError("--host", f"no host {name!r} in cluster {self.cluster!r}")

    @property
    def addresses(self) -> dict[str, str]:
        return {h.name: h.address for h in self.hosts}

    @property
    def host_of(self) -> dict[str, str]:
        """Every data-plane address (IPv4 and IPv6) -> its host's name."""
        out = {h.address: h.name for h in self.hosts}
        out.update({h.address6: h.name for h in self.hosts if h.address6})
        return out

    @property
    def control_ports(self) -> tuple[int, ...]:
        """TCP ports of control traffic (agent and coordinator gRPC), band 0."""
        ports = {self.agent.port}
        _, _, port = self.coordinator_listen.rpartition(":")
        if port.isdigit():
            ports.add(int(port))
        return tuple(sorted(ports))


def load_cluster_config(path: str | Path) -> ClusterConfig:
    cfg = parse_cluster_config(load_yaml_file(path, "config"))
    check_agent_endpoints(cfg.hosts)
    check_tls_files(cfg.tls)
    return cfg


def check_agent_endpoints(hosts: tuple[HostConfig, ...]) -> None:
    """A cluster's file gives every host an agent of its own (a benchmark's fleet of
    virtual agents, built in code, may share one endpoint)."""
    seen: dict[str, int] = {}
    for i, h in enumerate(hosts):
        if h.agent in seen:
            raise ConfigError(
                f"hosts[{i}].agent", f"{short(h.agent)} is also hosts[{seen[h.agent]}].agent"
            )
        seen[h.agent] = i


TOP = (
    "cluster",
    "hosts",
    "queues",
    "scheduling",
    "admission",
    "failure",
    "tls",
    "metrics",
    "agent",
    "coordinator",
)


def parse_cluster_config(data: Any) -> ClusterConfig:
    top = v.mapping(data, "", TOP)
    name = v.string(v.get(top, "cluster", ""), "cluster")
    hosts = _hosts(v.get(top, "hosts", ""))
    admission = parse_admission(top.get("admission", {}))
    queues = parse_queues(top.get("queues", {}), admission)
    sched = _scheduling(top.get("scheduling", {}))
    failure = _failure(top.get("failure", {}))
    _against_period(failure, sched.period)
    _against_heartbeat(sched, failure)
    agent = _agent(top.get("agent", {}))
    coord = v.mapping(top.get("coordinator", {}), "coordinator", ("listen",))
    listen = v.address(coord.get("listen", "0.0.0.0:7000"), "coordinator.listen")
    metrics = v.mapping(top.get("metrics", {}), "metrics", ("coordinator",))
    coord_metrics = v.address(
        metrics.get("coordinator", "0.0.0.0:9100"), "metrics.coordinator", zero_port_off=True
    )
    tls = None
    if "tls" in top and top["tls"] is not None:
        t = v.mapping(top["tls"], "tls", ("ca", "cert", "key", "coordinator_name"))
        tls = TlsConfig(
            *(v.string(v.get(t, k, "tls"), f"tls.{k}") for k in ("ca", "cert", "key")),
            v.string(t.get("coordinator_name", "coordinator"), "tls.coordinator_name"),
        )
    _check_ports(agent, listen, coord_metrics)
    return ClusterConfig(name, hosts, queues, sched, failure, agent, listen, coord_metrics, tls)


def _port(address: str) -> int:
    _, _, port = address.rpartition(":")
    return int(port) if port.isdigit() else 0


def _check_ports(agent: AgentSettings, listen: str, metrics: str) -> None:
    """Ports that one host may need at once (an agent, and the coordinator beside it)."""
    used: dict[int, str] = {}
    for path, port in (
        ("agent.port", agent.port),
        ("agent.metrics_port", agent.metrics_port),
        ("coordinator.listen", _port(listen)),
        ("metrics.coordinator", _port(metrics)),
    ):
        if not port:
            continue  # off, or a Unix socket
        if port in used:
            raise ConfigError(path, f"port {port} is also {used[port]}")
        used[port] = path


def check_tls_files(tls: TlsConfig | None) -> None:
    """The TLS files exist and can be read, and the private key is not world-readable."""
    if tls is None:
        return
    for key in ("ca", "cert", "key"):
        path = Path(getattr(tls, key))
        if not path.is_file() or not os.access(path, os.R_OK):
            raise ConfigError(f"tls.{key}", f"cannot read {str(path)[:80]}")
    if Path(tls.key).stat().st_mode & 0o004:
        raise ConfigError("tls.key", f"{tls.key[:80]} is readable by every user (chmod 600)")


def _hosts(raw: Any) -> tuple[HostConfig, ...]:
    """Every host, unique in name and data-plane addresses."""
    out: list[HostConfig] = []
    seen: dict[tuple[str, str], str] = {}  # (kind, value) -> the field that has it
    for i, item in enumerate(v.sequence(raw, "hosts", min_len=1)):
        host = _host(item, f"hosts[{i}]")
        for key, kind, value in (
            ("name", "name", host.name),
            ("address", "ip", host.address),
            ("address6", "ip", host.address6),
        ):
            if not value:
                continue
            if (kind, value) in seen:
                other = seen[kind, value]
                raise ConfigError(f"hosts[{i}].{key}", f"{short(value)} is also {other}")
            seen[kind, value] = f"hosts[{i}].{key}"
        out.append(host)
    return tuple(out)


HOST_KEYS = ("name", "address", "address6", "agent", "nic", "link_mbps")


def _host(item: Any, path: str) -> HostConfig:
    m = v.mapping(item, path, HOST_KEYS)
    name = v.hostname(v.get(m, "name", path), f"{path}.name")
    address = v.string(v.get(m, "address", path), f"{path}.address")
    try:
        v.unusable(ipaddress.IPv4Address(address), f"{path}.address")
    except ipaddress.AddressValueError:
        raise ConfigError(
            f"{path}.address", f"expected an IPv4 address, got {short(address)}"
        ) from None
    address6 = ""
    if "address6" in m:
        raw6 = v.string(m["address6"], f"{path}.address6")
        try:
            ip6 = ipaddress.IPv6Address(raw6)
        except ValueError:
            raise ConfigError(
                f"{path}.address6", f"expected an IPv6 address, got {short(raw6)}"
            ) from None
        v.unusable(ip6, f"{path}.address6")
        address6 = ip6.compressed
    agent = v.address(v.get(m, "agent", path, f"{address}:7070"), f"{path}.agent", connect=True)
    nic = v.interface_name(v.get(m, "nic", path), f"{path}.nic")
    link = v.number(
        v.get(m, "link_mbps", path, 10000),
        f"{path}.link_mbps",
        minimum=L.MIN_LINK_MBPS,
        maximum=L.MAX_LINK_MBPS,
    )
    return HostConfig(name, address, agent, nic, link, address6)


def _scheduling(raw: Any) -> SchedulingConfig:
    keys = ("policy", "period", "event_driven", "min_gap", "keep_order_within", "progress_step",
            "progress_interval")  # fmt: skip
    m = v.mapping(raw, "scheduling", keys)
    policy = v.choice(m.get("policy", "grouper"), "scheduling.policy", POLICIES)
    period = v.number(
        m.get("period", 1.0),
        "scheduling.period",
        minimum=L.MIN_LIVE_PERIOD,
        maximum=L.MAX_PERIOD,
    )
    event = v.boolean(m.get("event_driven", True), "scheduling.event_driven")
    gap = v.number(m.get("min_gap", 0.1), "scheduling.min_gap", minimum=0)
    if gap > period:
        raise ConfigError(
            "scheduling.min_gap", f"{gap:g} s is longer than scheduling.period ({period:g} s)"
        )
    keep = v.number(
        m.get("keep_order_within", SchedulingConfig.keep_order_within),
        "scheduling.keep_order_within",
        minimum=0,
        maximum=1,
    )
    step = v.number(
        m.get("progress_step", SchedulingConfig.progress_step),
        "scheduling.progress_step",
        minimum=0,
        maximum=MAX_PROGRESS_STEP,
    )
    every = v.number(m.get("progress_interval", 0.0), "scheduling.progress_interval",
                     minimum=0, maximum=period)  # fmt: skip
    if 0 < every < L.MIN_PROGRESS_INTERVAL:
        raise ConfigError(
            "scheduling.progress_interval",
            f"must be 0 (a quarter of the period) or at least {L.MIN_PROGRESS_INTERVAL:g} s, "
            f"got {every:g}",
        )
    return SchedulingConfig(policy, period, event, gap, keep, step, every)


def _against_period(failure: FailureConfig, period: float) -> None:
    """A plan outlives the scheduling period that replaces it."""
    if failure.plan_ttl <= period:
        raise ConfigError(
            "failure.plan_ttl",
            f"{failure.plan_ttl:g} s is not longer than scheduling.period ({period:g} s): "
            "agents would drop their plans between two runs",
        )


def _against_heartbeat(sched: SchedulingConfig, failure: FailureConfig) -> None:
    """Progress goes at least as often as the heartbeat (a third of agent_timeout)."""
    beat = failure.agent_timeout / 3
    if sched.progress_interval > beat:
        raise ConfigError(
            "scheduling.progress_interval",
            f"{sched.progress_interval:g} s is longer than the agents' heartbeat, a third of "
            f"failure.agent_timeout ({beat:g} s)",
        )


def _failure(raw: Any) -> FailureConfig:
    m = v.mapping(raw, "failure", ("agent_timeout", "plan_ttl"))
    return FailureConfig(
        v.number(m.get("agent_timeout", 5.0), "failure.agent_timeout", positive=True),
        v.number(m.get("plan_ttl", 10.0), "failure.plan_ttl", positive=True),
    )


def _agent(raw: Any) -> AgentSettings:
    keys = (
        "port",
        "socket",
        "jobs_dir",
        "state_file",
        "backend",
        "metrics_port",
        "discovery_interval",
        "multiqueue",
        "registry",
    )
    m = v.mapping(raw, "agent", keys)
    d = AgentSettings()
    port = v.integer(m.get("port", d.port), "agent.port", minimum=1)
    mport = v.integer(m.get("metrics_port", d.metrics_port), "agent.metrics_port", minimum=0)
    for p, val in (("agent.port", port), ("agent.metrics_port", mport)):
        if val > 65535:
            raise ConfigError(p, f"must be at most 65535, got {val}")
    return AgentSettings(
        port,
        v.string(m.get("socket", d.socket), "agent.socket"),
        v.string(m.get("jobs_dir", d.jobs_dir), "agent.jobs_dir"),
        v.string(m.get("state_file", d.state_file), "agent.state_file"),
        v.choice(m.get("backend", d.backend), "agent.backend", BACKENDS),
        mport,
        _interval(m.get("discovery_interval", d.discovery_interval)),
        v.choice(m.get("multiqueue", d.multiqueue), "agent.multiqueue", MULTIQUEUE),
        parse_registry_policy(m.get("registry", {})),
    )


def _interval(raw: Any) -> float:
    x = v.number(raw, "agent.discovery_interval", positive=True)
    if not 0.01 <= x <= 10:
        raise ConfigError("agent.discovery_interval", f"must be between 0.01 and 10 s, got {x:g}")
    return x
