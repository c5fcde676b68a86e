"""The incremental protocol on real agents and kernels: updates lost or reordered on
their way in, an agent restarting and a coordinator restarting. No stage is lost and
every kernel converges to the plan pda/ computes for the jobs' true progress."""

from __future__ import annotations

import signal

from grouper.coordinator.loop import Coordinator
from grouper.v1 import agent_pb2 as pb
from tests.kernel.star_cluster import (
    HOSTS,
    TTL,
    InProcessCoordinator,
    agents_on,
    config,
    kernels_converged,
    metric,
    metrics_address,
    register_all,
    report_progress,
    start_coordinator,
    stop_all,
    version,
    wait_for,
)
from tests.netns import nft_map


class LossyCoordinator(InProcessCoordinator):
    """A coordinator in this process whose updates pass a bad channel: of every four,
    one is dropped and one held back and delivered after the next (reordered)."""

    def __init__(self, path) -> None:  # noqa: ANN001
        self.seen = {"delivered": 0, "dropped": 0, "reordered": 0, "gaps": 0}
        super().__init__(path)

    def tamper(self, coord: Coordinator) -> None:
        deliver = coord._on_update
        held: dict[str, pb.StateUpdate] = {}
        n = 0

        def lossy(link, up: pb.StateUpdate) -> str:  # noqa: ANN001
            nonlocal n
            n += 1
            if n % 4 == 1 and n > 1:
                self.seen["dropped"] += 1
                return "stale"
            if n % 4 == 2 and link.host.name not in held:
                held[link.host.name] = up
                return "stale"
            verdict = deliver(link, up)
            late = held.pop(link.host.name, None)
            if late is not None:
                self.seen["reordered"] += 1
                if deliver(link, late) == "gap":
                    verdict = "gap"
            self.seen["delivered"] += 1
            self.seen["gaps"] += verdict == "gap"
            return verdict

        coord._on_update = lossy


def test_lost_and_reordered_updates_cost_a_resync_and_nothing_else(star, tmp_path):
    path, addrs = config(star, tmp_path)
    agents = agents_on(star, path, tmp_path)
    coord = LossyCoordinator(path)
    try:
        for a in agents.values():
            a.start()
        register_all(agents)
        coord.start()
        converged = kernels_converged(star, addrs)
        wait_for(lambda: converged({}), 20, "the first plan in every kernel")
        # A's first stage ends: B goes first; A nearly done: A goes first again (each
        # step changes every host's plan). B's progress changes no plan, only state.
        for step, (cojob, done) in enumerate((("A", 4), ("B", 1), ("B", 2), ("A", 11))):
            report_progress(agents, cojob, done)
            if step == 0:
                wait_for(lambda: converged({"A": 4}), 20, "the plan for A's second stage")
        wait_for(lambda: converged({"A": 11, "B": 2}), 20, "the plan for A nearly done")

        def held(host: str) -> dict:
            return {r.job.key: r.iterations_done for r in coord.coord.links[host].jobs}

        want = {("A", "j"): 11, ("B", "j"): 2}
        # every host's last update arrives, or its loss is seen as a gap and a resync
        # brings the state: no progress is lost (h3's lost update once took longer than
        # h1's wait, so each host gets its own)
        wait_for(lambda: held("h1") == want, 5, "h1's progress held by the coordinator")
        wait_for(lambda: held("h2") == want, 5, "h2's progress held by the coordinator")
        wait_for(lambda: held("h3") == {("B", "j"): 2}, 5, "h3's progress held")
        assert coord.seen["dropped"] >= 2 and coord.seen["reordered"] >= 2
        assert coord.seen["gaps"] >= 1, "a lost update was noticed as a gap"
        pushed = coord.coord.metrics.registry.get_sample_value
        assert pushed("grouper_coordinator_plans_pushed_total", {"form": "delta"}) > 0, (
            "the plans after the first went as deltas"
        )
    finally:
        coord.close()
        for a in agents.values():
            if a.proc and a.proc.poll() is None:
                a.stop()


def test_agent_and_coordinator_restarts_lose_no_stage(star, tmp_path):
    path, addrs = config(star, tmp_path)
    agents = agents_on(star, path, tmp_path)
    log = tmp_path / "coordinator.log"
    coord = start_coordinator(path, log)
    try:
        for a in agents.values():
            a.start()
        register_all(agents)
        converged = kernels_converged(star, addrs)
        wait_for(lambda: converged({}), 20, "the first plan in every kernel")
        report_progress(agents, "A", 4)  # B's stages go first now
        wait_for(lambda: converged({"A": 4}), 10, "A's second stage planned")

        # the agent on h1 is killed and restarts from its state file (A at 4): the new
        # process (a new epoch) starts with no plan; it is re-synced and gets the plan
        # for A's second stage, not the one for A's first
        agents["h1"].stop(signal.SIGKILL)
        agents["h1"].start()
        wait_for(lambda: version(agents["h1"]) > 0, 10, "a plan for the restarted agent")
        wait_for(lambda: converged({"A": 4}), 10, "h1's plan after its restart")

        # the coordinator is killed and a new one starts: it knows nothing but what the
        # agents' full updates tell it; once it pushed its own plans (versions grow),
        # the kernels hold the plan for A at 4 again
        before = {h: version(a) for h, a in agents.items()}
        coord.kill()
        coord.wait(timeout=10)
        coord = start_coordinator(path, log)
        wait_for(
            lambda: all(version(a) > before[h] for h, a in agents.items()),
            10,
            "plans from the new coordinator",
        )
        assert converged({"A": 4})
        report_progress(agents, "A", 11)  # A nearly done: its stage goes first again
        wait_for(lambda: converged({"A": 11}), 10, "the new coordinator following progress")
    finally:
        stop_all(coord, agents)


def test_a_coordinator_paused_past_plan_ttl_restores_the_kernels_with_whole_plans(star, tmp_path):
    """Agents drop their plans at plan_ttl while the coordinator is stopped (SIGSTOP);
    when it resumes it still holds their version, so a delta it sends is refused
    (need_full: no plan in force to patch), and the whole plan restores the kernel. The
    coordinator's own stop does not count as the agents' silence: none is marked down
    (coordinator/stalls.py)."""
    path, addrs = config(star, tmp_path)
    agents = agents_on(star, path, tmp_path)
    log_path = tmp_path / "coordinator.log"
    coord = start_coordinator(path, log_path)
    ns = dict(zip(HOSTS, star.hosts, strict=True))
    try:
        for a in agents.values():
            a.start()
        register_all(agents)
        converged = kernels_converged(star, addrs)
        wait_for(lambda: converged({}), 20, "the first plan in every kernel")
        report_progress(agents, "A", 4)
        wait_for(lambda: converged({"A": 4}), 10, "A's second stage planned")
        whole = 'grouper_coordinator_plans_pushed_total{form="whole"}'
        whole_before = metric(metrics_address(path), whole)
        coord.send_signal(signal.SIGSTOP)
        try:
            wait_for(
                lambda: all(nft_map(ns[h], "band_dport") == {} for h in HOSTS),
                TTL + 5,
                "every agent dropping its plan at plan_ttl",
            )
        finally:
            coord.send_signal(signal.SIGCONT)
        wait_for(lambda: converged({"A": 4}), 15, "the plans restored after the pause")
        text = log_path.read_text()
        # its own stop is not the agents' silence: none is taken for down and resynced
        assert "no update for" not in text, text[-2000:]
        # an agent without a plan takes only a whole one: a delta sent meanwhile is
        # refused (need_full), or the plan went whole as a repair (unconfirmed)
        assert metric(metrics_address(path), whole) >= whole_before + len(HOSTS), text[-2000:]
    finally:
        stop_all(coord, agents)
