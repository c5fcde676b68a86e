"""Where a simulated run stops with an error instead of running on: simulated time
(``--max-sim-time``), wall-clock time (``--timeout``) and events."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from grouper.common.errors import ConfigError
from grouper.common.limits import MAX_SIM_EVENTS


@dataclass(frozen=True)
class RunLimits:
    """Simulated time units, a ``time.monotonic()`` instant, and events per run."""

    max_time: float = math.inf
    deadline: float = math.inf
    max_events: int = MAX_SIM_EVENTS

    @staticmethod
    def after(max_time: float | None, timeout: float | None) -> RunLimits:
        """Limits from the flags: ``timeout`` wall seconds from now (None: none)."""
        return RunLimits(
            math.inf if max_time is None else max_time,
            math.inf if not timeout else time.monotonic() + timeout,
        )


def check_limits(policy: str, t: float, events: int, limits: RunLimits) -> None:
    """Raise a one-line ConfigError once a run passes one of its limits."""
    if t > limits.max_time:
        raise ConfigError(
            "--max-sim-time",
            f"{policy}: still running at simulated time {t:.4g}, over the limit "
            f"{limits.max_time:g} (raise it, or shorten the workload)",
        )
    if events > limits.max_events:
        raise ConfigError(
            "workload",
            f"{policy}: more than {limits.max_events:.0e} events at simulated time {t:.4g} "
            "(fewer iterations, or a longer --period)",
        )
    if events % 256 == 0 and time.monotonic() > limits.deadline:
        raise ConfigError(
            "--timeout",
            f"{policy}: stopped at simulated time {t:.4g} after {events} events (raise "
            "--timeout, or shorten the workload)",
        )
