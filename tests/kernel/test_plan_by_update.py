"""Plans acknowledged by the agents' next update, on real agents and kernels: the plans
are written on the sessions and nobody waits for a result; each kernel holds its plan,
and the coordinator learns it from the agent's next update. A plan lost on its way (the
first delta to h1 after a stage's progress is dropped before it is written) is noticed
as unacknowledged and sent again whole, and h1's kernel holds the newest plan within two
periods. The progress goes by key, without the registrations (the sync allows it)."""

from __future__ import annotations

import time

from grouper.coordinator.loop import Coordinator
from tests.kernel.star_cluster import (
    HOSTS,
    PERIOD,
    InProcessCoordinator,
    agents_on,
    config,
    kernels_converged,
    register_all,
    report_progress,
    version,
    wait_for,
)


class InProcess(InProcessCoordinator):
    """The coordinator in this process; it counts the results it gets and, once
    ``armed``, drops the first delta meant for ``drop`` (before then a keepalive delta
    may go: on a slow guest one went before the progress and was the one dropped)."""

    def __init__(self, path, drop: str) -> None:  # noqa: ANN001
        self.results = 0
        self.by_key = 0  # job states that came by key, without their registration
        self.dropped: list[int] = []
        self.drop = drop
        self.armed = False
        super().__init__(path)

    def tamper(self, coord: Coordinator) -> None:
        assert coord.pusher.quiet and not coord.pusher.waits
        on_update = coord._on_update

        def counted_update(link, up):  # noqa: ANN001, ANN202
            self.by_key += sum(1 for js in up.jobs if not js.HasField("job"))
            return on_update(link, up)

        coord._on_update = counted_update
        for link in coord.links.values():
            on_result = link.on_result

            def counted(lk, res, on_result=on_result) -> None:  # noqa: ANN001
                self.results += 1
                on_result(lk, res)

            link.on_result = counted
        victim = coord.links[self.drop]
        post = victim.post

        async def lossy(msg) -> None:  # noqa: ANN001
            if self.armed and msg.plan.base_version and not self.dropped:
                self.dropped.append(msg.plan.version)  # lost on its way
                return
            await post(msg)

        victim.post = lossy


def test_plans_acknowledged_by_update_reach_the_kernels_and_a_lost_one_is_repaired(star, tmp_path):
    path, addrs = config(star, tmp_path)
    agents = agents_on(star, path, tmp_path)
    coord = InProcess(path, drop="h1")
    converged = kernels_converged(star, addrs)

    try:
        for a in agents.values():
            a.start()
        register_all(agents)
        coord.start()
        wait_for(lambda: converged({}), 20, "the first plan in every kernel")
        links = coord.coord.links
        wait_for(lambda: all(lk.track.confirmed for lk in links.values()), 5, "acknowledged")
        # the acknowledgement is the version in the agent's update: the agent's own (a
        # keepalive may raise it between the two reads, so both are read until they agree)
        wait_for(
            lambda: (
                {h: links[h].track.agent_version for h in HOSTS}
                == {h: version(a) for h, a in agents.items()}
            ),
            5,
            "the coordinator to hold each agent's own version",
        )
        assert coord.results == 0, "applied plans acknowledged by update get no result"
        before = version(agents["h1"])
        # A's first stage ends: every host's plan changes; h1's delta is lost
        coord.armed = True
        report_progress(agents, "A", 4)
        t = time.monotonic()

        def repaired() -> bool:  # h1 past the plan it lost, every kernel at the new plans
            lost = coord.dropped
            return bool(lost) and version(agents["h1"]) > lost[0] and converged({"A": 4})

        # (the kernels alone are not enough: h1's maps may not change with A's progress,
        # and a slow guest once matched them before h1's repair came)
        wait_for(repaired, 2 * PERIOD + 1.0, "the plans for A at 4, h1's lost one repaired")
        took = time.monotonic() - t
        assert coord.by_key > 0, "the agents sent A's progress by key (the sync allows it)"
        assert coord.dropped[0] > before, "the delta dropped was one after the progress"
        pushed = coord.coord.metrics.registry.get_sample_value
        assert pushed("grouper_coordinator_plans_pushed_total", {"form": "whole"}) >= 4
        assert pushed("grouper_coordinator_plans_pushed_total", {"form": "delta"}) >= 2
        print(f"converged {took:.2f} s after the progress (period {PERIOD} s)")
    finally:
        coord.close()
        for a in agents.values():
            if a.proc and a.proc.poll() is None:
                a.stop()
