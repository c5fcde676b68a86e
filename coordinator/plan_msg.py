"""Plans on the wire: a host's plan as a whole, or as a delta on the one it holds.

Between two periods a host's plan changes in a few entries (a median of 5 of 114 at
2,000 agents with 5% of jobs progressing), so once an agent has acknowledged a plan
the next one goes as the entries added or changed and the keys removed, on top of that
version (``base_version``). The agent rebuilds the whole plan and checks it as one
(``agent.plan.patch_plan``); if the base is not what it holds, it answers
``need_full`` and the whole plan follows.
"""

from __future__ import annotations

from functools import lru_cache

from grouper.common.flows import parse_inbound_key
from grouper.coordinator.planner import HostPlan
from grouper.v1 import agent_pb2 as pb


@lru_cache(maxsize=1 << 20)  # a key per inbound flow of the cluster; parsed once
def _inbound_fields(key: str) -> tuple[str, int, bool] | None:
    return parse_inbound_key(key)


def plan_request(
    host: str,
    version: int,
    plan: HostPlan,
    base: HostPlan | None = None,
    base_version: int = 0,
    changed: list[str] | None = None,
) -> pb.SessionRequest:
    """The message carrying ``plan``: whole, or (``base`` given) what differs from
    ``base``, the plan the agent acknowledged as ``base_version``. ``changed``: the
    keys set in ``plan`` since it was copied from ``base`` (``planner.PlanPatch``), so the
    delta is those entries and the two plans need not be compared."""
    msg = pb.SessionRequest()
    p = msg.plan
    p.version, p.host = version, host
    if base is None:
        items, gone = sorted(plan.items()), []
    elif changed is not None:
        p.base_version = base_version
        items, gone = sorted((f, plan[f]) for f in set(changed)), []
    else:
        p.base_version = base_version
        get = base.get  # faster than set algebra on the views (16 against 30 us at 114)
        items = sorted((f, bd) for f, bd in plan.items() if get(f) != bd)
        gone = sorted(f for f in base if f not in plan)
    add, add_inbound = p.flows.add, p.inbound.add
    for f, (b, d) in items:
        inbound = _inbound_fields(f)
        if inbound is None:
            add(flow_id=f, band=b, dscp=d)
        else:
            add_inbound(src_host=inbound[0], port=inbound[1], by_source=inbound[2])
    for f in gone:
        inbound = _inbound_fields(f)
        if inbound is None:
            p.removed_flows.append(f)
        else:
            p.removed_inbound.add(src_host=inbound[0], port=inbound[1], by_source=inbound[2])
    return msg
