"""Every Prometheus metric the agent exports, declared in one place."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

# what each label's values are (the metrics reference shows them; a test checks that
# every label of every metric below has one)
LABELS = {
    "host": "the host's name in the cluster config",
    "band": "the qdisc band, 0 highest (queues.count bands)",
    "source": "where the refused input came from: grpc (the registry socket) or jsonl "
    "(agent.jobs_dir's files)",
    "reason": "the rule that refused the call, one of agent.ownership.REASONS",
    "backend": "prio or htb",
    "mechanism": "cgroup or pids",
}


class AgentMetrics:
    def __init__(self, host: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.band_bytes = Gauge(
            "grouper_agent_band_bytes", "Bytes sent per band (qdisc)", ["host", "band"], registry=r
        )
        self.band_packets = Gauge(
            "grouper_agent_band_packets", "Packets sent per band", ["host", "band"], registry=r
        )
        self.band_drops = Gauge(
            "grouper_agent_band_drops", "Drops per band", ["host", "band"], registry=r
        )
        self.plan_version = Gauge(
            "grouper_agent_plan_version", "Plan version in force", ["host"], registry=r
        )
        self.priorities_active = Gauge(
            "grouper_agent_priorities_active",
            "1 while a plan is in force, 0 after plan_ttl",
            ["host"],
            registry=r,
        )
        self.jobs = Gauge(
            "grouper_agent_jobs", "Registered jobs not finished", ["host"], registry=r
        )
        self.plans_refused = Counter(
            "grouper_agent_plans_refused_total",
            "Plans refused (stale or malformed)",
            ["host"],
            registry=r,
        )
        self.input_errors = Counter(
            "grouper_agent_input_errors_total",
            "Registry inputs refused",
            ["host", "source"],
            registry=r,
        )
        self.refusals = Counter(
            "grouper_agent_registry_refusals_total",
            "Registry calls refused by an ownership rule or a per-user limit, by reason "
            "(agent.ownership.REASONS)",
            ["host", "reason"],
            registry=r,
        )
        self.backend = Gauge(
            "grouper_agent_backend",
            "1 for the qdisc backend in use: prio, or htb (strict priority emulated)",
            ["host", "backend"],
            registry=r,
        )
        self.discovery = Gauge(
            "grouper_agent_discovery",
            "1 for the ways this agent knows jobs: mechanism cgroup (cgroup v2: the kernel "
            "classifies from the first packet) and pids (connections found by polling)",
            ["host", "mechanism"],
            registry=r,
        )
        self.host = host

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        if port:
            start_http_server(port, addr=addr, registry=self.registry)

    def set_counters(self, counters: dict[int, dict]) -> None:
        for band, c in counters.items():
            self.band_bytes.labels(self.host, str(band)).set(c["bytes"])
            self.band_packets.labels(self.host, str(band)).set(c["packets"])
            self.band_drops.labels(self.host, str(band)).set(c["drops"])
