"""``coordinator --trace FILE``: a JSON line per cycle, with the stage events that led
to it and every plan it pushed; all times are unix seconds on this host's clock, the
agents' stamps (plan received, kernel holding it) on theirs. ``grouper bench reaction``
reads it to split an event's reaction time into its steps."""

from __future__ import annotations

import json
import time
from typing import Any, TextIO

from grouper.v1 import agent_pb2 as pb


class CycleTrace:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.events: list[dict] = []
        self.pushes: list[dict] = []

    def event(self, host: str, ev: pb.StageEvent) -> None:
        self.events.append({
            "host": host, "kind": pb.StageEvent.Kind.Name(ev.kind), "cojob": ev.cojob_id,
            "job": ev.job_id, "stage": ev.stage, "time": ev.time, "received": time.time(),
        })  # fmt: skip

    def push(self, host: str, version: int, sent: float, res: Any) -> None:
        self.pushes.append({
            "host": host, "version": version, "changed": res.changed, "sent": sent,
            "received": res.received_at, "applied": res.applied_at, "acked": time.time(),
        })  # fmt: skip

    def take_events(self) -> list[dict]:
        """The events merged so far: the cycle starting now plans for them (events that
        come while it runs belong to the next one)."""
        events, self.events = self.events, []
        return events

    def cycle(self, trigger: str, events: list[dict], planned_at: float) -> None:
        line = {"trigger": trigger, "planned": planned_at, "events": events,
                "pushes": self.pushes}  # fmt: skip
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()
        self.pushes = []
