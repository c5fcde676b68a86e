"""One planner: the coordinator and the simulator plan the same events the same way."""

from __future__ import annotations

import numpy as np
import pytest

from grouper.common.queues import QueueConfig
from grouper.coordinator.merge import inbound_of
from grouper.coordinator.planner import plan_hosts
from grouper.coordinator.snapshot import Model
from grouper.pda.planning import Planner
from grouper.pda.snapshot import build_snapshot
from grouper.simulator.run import engine_for, topology_of
from grouper.workloads.generators import testbed as make_testbed


def coordinator_model(hosts: tuple[str, ...], cojobs: list) -> Model:
    """What merge_reports would give for these cojobs: one flow id per snapshot flow."""
    ids, src = [], []
    for cj in cojobs:
        for job in cj.jobs:
            for k, f in enumerate(job.flows):
                ids.append(f"{cj.cojob_id}/{job.job_id}/{f.dst}:{k + 1}")
                src.append(f.src)
    inbound = [inbound_of(i, s) for i, s in zip(ids, src, strict=True)]
    return Model(
        hosts,
        list(cojobs),
        ids,
        src,
        [hosts.index(x[0]) if x else -1 for x in inbound],
        [x[1] if x else "" for x in inbound],
    )


@pytest.mark.parametrize(("period", "keep"), [(0.0, 0.0), (0.7, 0.0), (0.0, 0.05), (0.7, 0.05)])
def test_coordinator_and_simulator_make_the_same_plans_from_the_same_events(period, keep):
    """The simulator records every plan it makes (time, cojobs as it saw them, plan);
    the coordinator's planner gets the same sequence at the same times and must order
    afresh at the same moments and give every flow the same band and DSCP."""
    wl = make_testbed(rounds=1, scale=0.005)
    topo = topology_of(wl)
    eng = engine_for(wl, "grouper", topo, period, QueueConfig(), keep_within=keep)
    eng.trace = []
    eng.run()
    assert len(eng.trace) > 10
    assert (eng.planner.kept > 0) == (keep > 0)
    coordinator = Planner("grouper", QueueConfig(), period, keep_within=keep)
    remaps = 0
    for t, cojobs, sim in eng.trace:
        model = coordinator_model(topo.hosts, cojobs)
        planned = plan_hosts(model, coordinator, t)
        assert planned.order == sim.order, t
        assert coordinator.last_fresh == t if sim.fresh else coordinator.last_fresh < t
        remaps += not sim.fresh
        snap = build_snapshot(cojobs, topo.hosts, known_survivors=False)
        remote = np.flatnonzero(snap.flow_src != snap.flow_dst)
        got = {model.flow_ids[i]: planned.plans[model.flow_src[i]][model.flow_ids[i]]
               for i in remote}  # fmt: skip
        want = {model.flow_ids[i]: (int(sim.band[i]), int(sim.dscp[i])) for i in remote}
        assert got == want, t
    assert (remaps > 0) == (period > 0), "with a period, events between boundaries re-map"
    assert coordinator.kept == eng.planner.kept  # the same orders kept
