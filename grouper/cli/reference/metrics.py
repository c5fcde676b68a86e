"""The metrics reference: every Prometheus metric the agent and the coordinator export,
read from the classes that declare them (``agent/metrics.py``,
``coordinator/metrics.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics import MetricWrapperBase

from grouper.agent import metrics as agent_metrics
from grouper.agent.metrics import AgentMetrics
from grouper.coordinator import metrics as coordinator_metrics
from grouper.coordinator.metrics import CoordinatorMetrics


@dataclass(frozen=True)
class Metric:
    name: str  # as exported (a counter's with _total)
    kind: str
    labels: tuple[str, ...]
    help: str


def declared(owner: object) -> list[Metric]:
    """The metrics an AgentMetrics or CoordinatorMetrics instance declares, in order."""
    out = []
    for m in vars(owner).values():
        if isinstance(m, MetricWrapperBase):
            name = m._name + ("_total" if m._type == "counter" else "")
            out.append(Metric(name, m._type, tuple(m._labelnames), m._documentation))
    return out


def every_metric() -> dict[str, list[Metric]]:
    return {
        "agent": declared(AgentMetrics("host")),
        "coordinator": declared(CoordinatorMetrics()),
    }


LABELS = {"agent": agent_metrics.LABELS, "coordinator": coordinator_metrics.LABELS}

WHERE = {
    "agent": "Every agent, on `agent.metrics_port` (0: off) of its host.",
    "coordinator": "The coordinator, on `metrics.coordinator` (port 0: off).",
}


def metrics_page() -> str:
    lines = [
        "# Metrics",
        "",
        "Every Prometheus metric grouper exports, read from where it is declared. A "
        "Grafana dashboard over them is in `deploy/grafana/grouper-dashboard.json`.",
        "",
        "Each metric is a heading whose anchor is its name: `#grouper_agent_band_drops`.",
        "",
    ]
    for daemon, metrics in every_metric().items():
        lines += [f"## {daemon.capitalize()} {{#{daemon}}}", "", WHERE[daemon], ""]
        for m in metrics:
            labels = ", ".join(f"`{x}`" for x in m.labels) or "none"
            lines += [f"### `{m.name}` {{#{m.name}}}", "", f"**Type** {m.kind} · "
                      f"**Labels** {labels}", "", m.help + ".", ""]  # fmt: skip
            lines += [f"- `{x}`: {LABELS[daemon][x]}" for x in m.labels]
            lines += [""] if m.labels else []
    return "\n".join(lines)
