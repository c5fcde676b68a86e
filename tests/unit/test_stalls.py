"""StallClock: the coordinator's own stalls do not count as its agents' silence."""

from __future__ import annotations

import asyncio
import time

from grouper.coordinator.stalls import StallClock


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_stall_is_not_the_agents_silence_but_time_listening_is():
    clock = Clock()
    stalls = StallClock(tick=0.05, clock=clock)
    heard_at, deaf_then = clock.t, stalls.poll()  # an agent heard now
    for _ in range(10):  # 0.5 s of a running loop: silence grows
        clock.t += 0.05
        stalls.poll()
    assert abs(stalls.silence(heard_at, deaf_then) - 0.5) < 1e-9
    clock.t += 30.0  # stopped for 30 s (SIGSTOP): the agent's updates wait unread
    assert abs(stalls.silence(heard_at, deaf_then) - 0.55) < 1e-9  # one tick of it counts
    assert abs(stalls.deaf - 29.95) < 1e-9
    # an agent silent since before the stall: only the time listening counts, and it
    # keeps growing afterwards
    for _ in range(20):
        clock.t += 0.05
        stalls.poll()
    assert abs(stalls.silence(heard_at, deaf_then) - 1.55) < 1e-9


def test_polls_within_two_ticks_are_no_stall():
    clock = Clock()
    stalls = StallClock(tick=0.05, clock=clock)
    for _ in range(100):
        clock.t += 0.09
        stalls.poll()
    assert stalls.deaf == 0.0


def test_a_blocked_event_loop_is_measured_as_a_stall():
    async def main() -> float:
        stalls = StallClock(tick=0.02)
        watch = asyncio.create_task(stalls.run())
        await asyncio.sleep(0.1)
        time.sleep(0.6)  # a synchronous step blocks the loop (a first numba compile)
        await asyncio.sleep(0.1)
        watch.cancel()
        return stalls.deaf

    start = time.monotonic()
    deaf = asyncio.run(main())
    wall = time.monotonic() - start
    # the block is counted once, less one tick; a loaded machine's extra gaps count in
    # both, and the loop listened for at least a tick between polls in the sleeps
    assert 0.5 < deaf < wall - 0.1, (deaf, wall)
