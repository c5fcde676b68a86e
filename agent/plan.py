"""Plans from the coordinator -> the desired classification rules (pure, no kernel).

A plan lists, for flows this host sends, the band on the NIC and the DSCP to carry.
``desired_rules`` validates it against the registry and the queue config and returns
the rules keyed the way the kernel matches packets: (match, destination address, port)
where match is ``dport`` (destination port) or ``sport`` (source port).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.registry import Flow
from grouper import validate as v
from grouper.errors import ConfigError
from pda.priorities import QueueConfig

RuleKey = tuple[str, str, int]  # ("dport" | "sport", dst address, port)


@dataclass(frozen=True)
class Rule:
    band: int
    dscp: int


def rule_key(flow: Flow, addresses: dict[str, str]) -> RuleKey:
    addr = addresses[flow.dst_host]
    if flow.dst_port:
        return ("dport", addr, flow.dst_port)
    return ("sport", addr, flow.src_port)


def desired_rules(
    plan: Any,
    *,
    host: str,
    in_force: int,
    flows: dict[str, Flow],
    addresses: dict[str, str],
    queues: QueueConfig,
    finished: set[str] | None = None,
) -> tuple[int, dict[RuleKey, Rule]]:
    """Validate ``plan`` (version, host, flows[]) and return (version, rules).

    Raises :class:`ConfigError` naming the field for a stale version, another host's
    plan, an unknown flow, a band out of range or a DSCP outside the table. Two flows
    that the kernel cannot tell apart (same destination and port) get the higher
    priority of the two. Entries for flows of jobs that already finished (the plan was
    computed before the coordinator heard of it) are skipped, not refused.
    """
    m = v.mapping(plan, "plan", ("version", "host", "flows"))
    version = v.integer(v.get(m, "version", "plan"), "plan.version", minimum=1)
    if version <= in_force:
        raise ConfigError("plan.version", f"stale: {version} is not newer than {in_force} in force")
    target = v.string(v.get(m, "host", "plan"), "plan.host")
    if target != host:
        raise ConfigError("plan.host", f"plan is for {target!r}, this agent is {host!r}")
    table = queues.dscp_table
    rules: dict[RuleKey, Rule] = {}
    seen: set[str] = set()
    for i, raw in enumerate(v.sequence(m.get("flows", []), "plan.flows")):
        path = f"plan.flows[{i}]"
        e = v.mapping(raw, path, ("flow_id", "band", "dscp"))
        fid = v.string(v.get(e, "flow_id", path), f"{path}.flow_id")
        if finished and fid in finished:
            continue
        if fid not in flows:
            raise ConfigError(f"{path}.flow_id", f"unknown flow {fid!r}")
        if fid in seen:
            raise ConfigError(f"{path}.flow_id", f"flow {fid!r} appears twice")
        seen.add(fid)
        band = v.integer(v.get(e, "band", path), f"{path}.band", minimum=0)
        if band >= queues.queues:
            raise ConfigError(f"{path}.band", f"{band} out of range 0..{queues.queues - 1}")
        dscp = v.integer(v.get(e, "dscp", path), f"{path}.dscp", minimum=0)
        if dscp not in table:
            raise ConfigError(f"{path}.dscp", f"{dscp} is not in the DSCP table {list(table)}")
        flow = flows[fid]
        if flow.dst_host not in addresses:
            raise ConfigError(f"{path}.flow_id", f"no address for host {flow.dst_host!r}")
        key = rule_key(flow, addresses)
        rule = Rule(band, dscp)
        if key in rules and rules[key].band <= band:
            continue
        rules[key] = rule
    return version, rules
