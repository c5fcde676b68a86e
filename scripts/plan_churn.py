"""What changes in the hosts' plans from one period to the next (issue #31).

In process, no gRPC: the bench's fleet (``coordinator.fleet.Fleet``: its instance, its
progress per period, jobs spread over their first stage or all at iteration 0) merged
as the coordinator merges it and planned as it plans (``coordinator.planner.plan_hosts``).
Prints per period the stages that ended, the hosts whose plan (what their kernel
enforces: band and DSCP per flow) changed, the flow rows whose band or DSCP changed and
the commonest band moves (old -> new), and per port whether the relative order of the
stages active there changed (all of them, the first 6, which own the 6 data bands, or
the first 7, with the one overflow stage admitted next to the last band's owner).

    python scripts/plan_churn.py --agents 1000 --changed 0.05 --started together
    python scripts/plan_churn.py --agents 1000 --changed 1 --iterations 10 --keep-within 0.001
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grouper.pda.planning as planning  # noqa: E402
from grouper.common.queues import QueueConfig  # noqa: E402
from grouper.coordinator.fleet import Fleet  # noqa: E402
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


class _Out(list):
    def put_nowait(self, item: bytes) -> None:
        self.append(item)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--stages-per-agent", type=int, default=10)
    ap.add_argument("--changed", type=float, default=0.05)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--started", choices=("spread", "together"), default="spread")
    ap.add_argument("--periods", type=int, default=3)
    ap.add_argument(
        "--keep-within",
        type=float,
        default=0.0,
        help="the planner's keep_within (scheduling.keep_order_within)",
    )
    args = ap.parse_args()
    fleet = Fleet(args.agents, args.agents * args.stages_per_agent, 1, args.changed,
                  args.iterations, args.started == "spread")  # fmt: skip
    hosts = tuple(sorted(fleet.states))
    held = {h: AgentState(h) for h in hosts}
    merger = Merger(hosts)
    for h in hosts:
        held[h].apply(pb.SessionReply.FromString(fleet.full(h)).update, set(hosts))
        merger.set_host(h, *held[h].take_dirty())
    planner = Planner("grouper", QueueConfig(), 1.0, keep_within=args.keep_within)
    tables, now = FlowTables(), 100.0
    last = plan_hosts(merger.model(), planner, now, tables)
    for period in range(args.periods):
        fleet.out = {h: _Out() for h in hosts}
        fleet.progress()
        for h in hosts:
            for raw in fleet.out[h]:
                held[h].apply(pb.SessionReply.FromString(raw).update, set(hosts))
            merger.set_host(h, *held[h].take_dirty())
        now += 1.0
        new = plan_hosts(merger.model(), planner, now, tables, last)
        changed = sum(new.plans.get(h, {}) != last.plans.get(h, {}) for h in hosts)
        print(f"period {period}: {last.stages - new.stages} stages ended; plans changed at "
              f"{changed} of {len(hosts)} hosts ({changed / len(hosts):.1%})")  # fmt: skip
        if last.rows is new.rows:  # the same flow rows: which moved, and how
            moved = (new.band != last.band) | (new.dscp != last.dscp)
            pairs = Counter(zip(last.band[moved].tolist(), new.band[moved].tolist(), strict=True))
            print(f"  {int(moved.sum())} of {len(new.band)} flow rows changed band or DSCP; "
                  f"band moves (old, new): {pairs.most_common(6)}")  # fmt: skip
        a, b = (port_orders(*s) for s in SCHEDULES[-2:])
        ports = set(a) | set(b)
        diff = {k: sum(a.get(p, ())[:k] != b.get(p, ())[:k] for p in ports) for k in (6, 7)}
        whole = sum(a.get(p) != b.get(p) for p in ports)
        sizes = [len(v) for v in b.values()]
        print(f"  relative order of the stages active at a sending port changed at {whole} "
              f"of {len(ports)} ports, in its first 6 at {diff[6]}, first 7 at {diff[7]} "
              f"(median {int(np.median(sizes))} stages active per port)")  # fmt: skip
        last = new
    print(f"fresh orders that kept the last one: {planner.kept} of {args.periods}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
