"""What changes in the hosts' plans when a share of the jobs progress (issue #31).

In process, no gRPC: the bench's instance (``coordinator.fleet.fleet_states``) merged as
the coordinator merges it, planned as it plans (``coordinator.planner.plan_hosts``,
every plan ordering afresh), then per period a share of the jobs gains one iteration.
Prints per period the hosts whose plan (what their kernel enforces: band and DSCP per
flow) changed, the flow rows whose band or DSCP changed, and per port whether the
relative order of the stages active there changed (all of them, the first 6, which
own the 6 data bands, or the first 7, with the one overflow stage admitted next to
the last band's owner).

    python scripts/plan_churn.py --agents 1000 --changed 0.05
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grouper.pda.planning as planning  # noqa: E402
from grouper.common.queues import QueueConfig  # noqa: E402
from grouper.coordinator.fleet import fleet_states  # noqa: E402
from grouper.coordinator.merge import Merger  # noqa: E402
from grouper.coordinator.planner import plan_hosts  # noqa: E402
from grouper.coordinator.state import AgentState  # noqa: E402
from grouper.pda.planning import Planner  # noqa: E402
from grouper.pda.snapshot import FlowTables  # noqa: E402
from grouper.v1 import agent_pb2 as pb  # noqa: E402

SCHEDULES: list = []  # (snapshot, schedule) of every plan, for the per-port orders
_schedule = planning.schedule


def _kept(snap, policy, order):  # noqa: ANN001, ANN202
    sched = _schedule(snap, policy, order)
    SCHEDULES.append((snap, sched))
    return sched


planning.schedule = _kept


def port_orders(snap, sched) -> dict[int, tuple[str, ...]]:  # noqa: ANN001
    """Sending host -> the stages active there, in the global order."""
    pos = np.empty(len(sched.unit_ids), dtype=np.int64)
    pos[sched.order] = np.arange(len(sched.order))
    unit = np.asarray(sched.flow_unit)
    src, dst = np.asarray(snap.flow_src), np.asarray(snap.flow_dst)
    ok = (unit >= 0) & (src != dst)
    by_host: dict[int, set[int]] = {}
    for h, u in zip(src[ok].tolist(), unit[ok].tolist(), strict=True):
        by_host.setdefault(h, set()).add(u)
    return {h: tuple(sched.unit_ids[u] for u in sorted(us, key=lambda u: pos[u]))
            for h, us in by_host.items()}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--stages-per-agent", type=int, default=10)
    ap.add_argument("--changed", type=float, default=0.05)
    ap.add_argument("--periods", type=int, default=3)
    ap.add_argument(
        "--keep-within",
        type=float,
        default=0.0,
        help="the planner's keep_within (scheduling.keep_order_within)",
    )
    args = ap.parse_args()
    states = fleet_states(args.agents, args.agents * args.stages_per_agent, 1)
    hosts = tuple(sorted(states))
    held = {h: AgentState(h) for h in hosts}
    merger = Merger(hosts)
    seq = dict.fromkeys(hosts, 1)
    for h in hosts:
        up = pb.StateUpdate(host=h, epoch=7, seq=1, full=True, jobs=list(states[h].values()))
        held[h].apply(up, set(hosts))
        merger.set_host(h, *held[h].take_dirty())
    planner = Planner("grouper", QueueConfig(), 1.0, keep_within=args.keep_within)
    tables, now = FlowTables(), 100.0
    last = plan_hosts(merger.model(), planner, now, tables)
    holders: dict = {}
    for h, jobs in states.items():
        for k in jobs:
            holders.setdefault(k, []).append(h)
    keys, rng = sorted(holders), np.random.default_rng(1)
    for period in range(args.periods):
        touched: dict[str, list] = {}
        for i in rng.choice(len(keys), size=round(args.changed * len(keys)), replace=False):
            for h in holders[keys[int(i)]]:
                js = states[h][keys[int(i)]]
                js.iterations_done = min(js.iterations_done + 1, sum(js.job.stage_iterations))
                touched.setdefault(h, []).append(js)
        for h, jobs in touched.items():
            seq[h] += 1
            held[h].apply(pb.StateUpdate(host=h, epoch=7, seq=seq[h], jobs=jobs), set(hosts))
            merger.set_host(h, *held[h].take_dirty())
        now += 1.0
        new = plan_hosts(merger.model(), planner, now, tables, last)
        changed = sum(new.plans.get(h, {}) != last.plans.get(h, {}) for h in hosts)
        rows = int(((new.band != last.band) | (new.dscp != last.dscp)).sum())
        a, b = (port_orders(*s) for s in SCHEDULES[-2:])
        ports = set(a) | set(b)
        diff = {k: sum(a.get(p, ())[:k] != b.get(p, ())[:k] for p in ports) for k in (6, 7)}
        whole = sum(a.get(p) != b.get(p) for p in ports)
        sizes = [len(v) for v in b.values()]
        print(f"period {period}: plans changed at {changed} of {len(hosts)} hosts "
              f"({changed / len(hosts):.1%}); {rows} of {len(new.band)} flow rows changed band "
              f"or DSCP; relative order of the stages active at a sending port changed at "
              f"{whole} of {len(ports)} ports, in its first 6 at {diff[6]}, first 7 at "
              f"{diff[7]} (median {int(np.median(sizes))} stages active per port)")  # fmt: skip
        last = new
    print(f"fresh orders that kept the last one: {planner.kept} of {args.periods}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
