"""Every Prometheus metric the coordinator exports, declared in one place."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

# what each label's values are (the metrics reference shows them; a test checks that
# every label of every metric below has one)
LABELS = {
    "step": "the cycle's step: ingest, collect, order, map, push, or total",
    "trigger": "what started the cycle: period or event",
    "order": "new (PDA's fresh order) or kept (the last one, within keep_order_within)",
    "how": "completed or killed",
    "form": "whole or delta",
    "host": "the agent's host name in the cluster config",
    "stage": "the stage's id, COJOB/STAGE (stages numbered from 1)",
    "kind": "bad_report, update_gap, agent_down, plan_refused, cycle, or config_reload",
}


class CoordinatorMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.cycle_seconds = Gauge(
            "grouper_coordinator_cycle_seconds",
            "Duration of the last scheduling cycle, by step",
            ["step"],
            registry=r,
        )
        self.cycles = Counter(
            "grouper_coordinator_cycles_total", "Scheduling cycles run", ["trigger"], registry=r
        )
        self.fresh_orders = Counter(
            "grouper_coordinator_fresh_orders_total",
            "Fresh orders (one per scheduling period): PDA's new order, or the last one kept "
            "within scheduling.keep_order_within",
            ["order"],
            registry=r,
        )
        self.stages = Gauge("grouper_coordinator_stages", "Unfinished stages scheduled", registry=r)
        self.jobs_ended = Counter(
            "grouper_coordinator_jobs_ended_total",
            "Jobs seen ending: completed (every stage) or killed (pruned before its last)",
            ["how"],
            registry=r,
        )
        self.plans_pushed = Counter(
            "grouper_coordinator_plans_pushed_total",
            "Plans sent to agents (written; with --trace, applied), whole or as a delta",
            ["form"],
            registry=r,
        )
        self.agents_up = Gauge("grouper_coordinator_agents_up", "Agents answering", registry=r)
        self.agent_up = Gauge(
            "grouper_coordinator_agent_up", "1 if the agent answers", ["host"], registry=r
        )
        self.stage_rank = Gauge(
            "grouper_coordinator_stage_rank",
            "Position of a stage in the global order in force (1 = first), for the first "
            "1,000 stages",
            ["stage"],
            registry=r,
        )
        self.errors = Counter(
            "grouper_coordinator_errors_total", "Errors by kind", ["kind"], registry=r
        )

    def serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if port and int(port):
            start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
