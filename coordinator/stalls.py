"""Time the coordinator could not hear its agents: its event loop blocked (a long
synchronous step, a first compile) or its process stopped (SIGSTOP, a paused VM).

Agents' updates sent meanwhile wait unread in the sockets, so that time must not count
as the agents' silence: a coordinator that stalls for longer than ``agent_timeout``
would otherwise declare every agent down when it resumes and resync the whole fleet.
:class:`StallClock` sums the stalls (``deaf``); a link notes the sum when it hears its
agent, and its silence is the time since then minus the stalls since then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class StallClock:
    """``poll()`` at least every ``tick`` while the loop runs (``run()`` does); a gap
    between polls longer than ``2 * tick`` is a stall, and all of it past one tick is
    added to ``deaf``."""

    def __init__(self, tick: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self.tick = tick
        self.clock = clock
        self.last = clock()
        self.deaf = 0.0

    def poll(self) -> float:
        """The seconds of stall so far, counting one that ends now."""
        now = self.clock()
        gap = now - self.last
        if gap > 2 * self.tick:
            self.deaf += gap - self.tick
        self.last = now
        return self.deaf

    def heard(self) -> tuple[float, float]:
        """(now, ``deaf`` now): what to note when an agent is heard from."""
        deaf = self.poll()
        return self.last, deaf

    def silence(self, last_heard: float, deaf_then: float) -> float:
        """Seconds an agent last heard at ``last_heard`` (when ``deaf`` was
        ``deaf_then``) has been silent while the coordinator was listening."""
        now, deaf = self.heard()
        return now - last_heard - (deaf - deaf_then)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            self.poll()
