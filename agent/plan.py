"""Plans from the coordinator -> the desired classification rules (pure, no kernel).

A plan lists, for flows this host sends, the band on the NIC and the DSCP to carry.
``plan_entries`` validates it against the registry and the queue config; ``compose``
turns the entries into rules keyed the way the kernel matches packets:
``(match, destination address, port)`` where match is ``dport`` or ``sport`` for flows
with ports, and ``(conn | conn6, source, destination, source port, destination port)``
for each connection the agent found for a host flow (every connection of the job to
that host, whatever its ports). Connections come and go between plans; ``compose`` is
re-run for them with the entries in force.

A plan also lists the port-matched flows other hosts send to this one (``inbound``):
``compose`` turns each into an ``in_sport`` / ``in_dport`` key that sends this host's
pure ACKs, SYNs and FINs on that flow to the control band. Only those, and the ones of
flows the plan prioritizes, are re-marked: other applications' keep their DSCP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.flows import inbound_key, parse_host_flow, parse_inbound_key
from grouper.common.queues import QueueConfig
from grouper.common.registration import Flow

# ("dport" | "sport" | "in_sport" | "in_dport", peer address, port)
# or ("conn" | "conn6", src, dst, sport, dport)
# or ("cg4_<level>" | "cg6_<level>", cgroup path as nftables takes it, destination)
RuleKey = tuple
Connections = dict[tuple[tuple[str, str], str], list[tuple]]  # (job, dst host) -> keys


@dataclass(frozen=True)
class Rule:
    band: int
    dscp: int


def rule_key(flow: Flow, addresses: dict[str, str]) -> RuleKey:
    addr = addresses[flow.dst_host]
    if flow.dst_port:
        return ("dport", addr, flow.dst_port)
    return ("sport", addr, flow.src_port)


def plan_entries(
    plan: Any,
    *,
    host: str,
    in_force: int,
    flows: dict[str, Flow],
    addresses: dict[str, str],
    queues: QueueConfig,
    finished: set[str] | None = None,
    discovered: set[tuple[str, str]] | None = None,
    finished_jobs: set[tuple[str, str]] | None = None,
) -> tuple[int, dict[str, Rule]]:
    """Validate ``plan`` (version, host, flows[]) and return (version, flow id -> rule).

    Raises :class:`ConfigError` naming the field for a stale version, another host's
    plan, an unknown flow, a band out of range or a DSCP outside the table. Entries for
    flows of jobs that already finished (the plan was computed before the coordinator
    heard of it: ``finished`` flow ids, or ``finished_jobs`` for host flows) are skipped,
    not refused. A host flow (``<cojob>/<job>/<host>:*``) of a
    job in ``discovered`` (jobs known by their processes) is accepted for any cluster
    host: its connections may have opened or closed since the agent's last report.
    """
    m = v.mapping(plan, "plan", ("version", "host", "flows", "inbound"))
    version = v.integer(v.get(m, "version", "plan"), "plan.version", minimum=1)
    if version <= in_force:
        raise ConfigError("plan.version", f"stale: {version} is not newer than {in_force} in force")
    target = v.string(v.get(m, "host", "plan"), "plan.host")
    if target != host:
        raise ConfigError("plan.host", f"plan is for {target!r}, this agent is {host!r}")
    table = queues.dscp_table
    dscps = frozenset(table)
    entries: dict[str, Rule] = {}
    for i, raw in enumerate(v.sequence(m.get("flows", []), "plan.flows")):
        path = f"plan.flows[{i}]"
        valid = _valid_entry(raw, queues.queues, dscps)  # None: checked field by field
        if valid is None:
            e = v.mapping(raw, path, ENTRY_KEYS)
            fid = v.string(v.get(e, "flow_id", path), f"{path}.flow_id")
        else:
            fid = valid[0]
        if finished and fid in finished:
            continue
        hf = parse_host_flow(fid) if fid not in flows else None
        if hf and finished_jobs and (hf[0], hf[1]) in finished_jobs:
            continue
        if fid not in flows and not (
            hf and (hf[0], hf[1]) in (discovered or ()) and hf[2] in addresses
        ):
            raise ConfigError(f"{path}.flow_id", f"unknown flow {fid[:80]!r}")
        if fid in entries:
            raise ConfigError(f"{path}.flow_id", f"flow {fid!r} appears twice")
        if valid is None:
            band = v.integer(v.get(e, "band", path), f"{path}.band", minimum=0)
            if band >= queues.queues:
                raise ConfigError(f"{path}.band", f"{band} out of range 0..{queues.queues - 1}")
            dscp = v.integer(v.get(e, "dscp", path), f"{path}.dscp", minimum=0)
            if dscp not in table:
                raise ConfigError(f"{path}.dscp", f"{dscp} is not in the DSCP table {list(table)}")
        else:
            band, dscp = valid[1], valid[2]
        flow = flows.get(fid)
        if flow is not None and flow.dst_host not in addresses:
            raise ConfigError(f"{path}.flow_id", f"no address for host {flow.dst_host!r}")
        entries[fid] = Rule(band, dscp)
    entries.update(_inbound_entries(m.get("inbound", []), addresses, queues))
    return version, entries


ENTRY_KEYS = frozenset(("flow_id", "band", "dscp"))


def _valid_entry(raw: Any, queues: int, dscps: frozenset[int]) -> tuple[str, int, int] | None:
    """(flow id, band, DSCP) of a plan entry that is a plain dict whose fields all hold
    what the field-by-field checks accept unchanged; None sends it through them (which
    name the field of anything else). A plan of 1,000 entries is read in a fraction of
    the time those checks take."""
    if type(raw) is not dict or not raw.keys() <= ENTRY_KEYS:
        return None
    fid, band, dscp = raw.get("flow_id"), raw.get("band"), raw.get("dscp")
    if type(fid) is not str or not fid or type(band) is not int or type(dscp) is not int:
        return None
    if not 0 <= band < queues or dscp not in dscps:
        return None
    return fid, band, dscp


def patch_plan(base: dict | None, in_force: int, delta: Any) -> dict:
    """The whole plan a delta describes (``base_version`` set): ``base``, the plan in
    force (version ``in_force``, as it came), with the delta's flows and inbound
    entries set and its removed ones taken out. The result still goes through
    ``plan_entries``. Raises :class:`ConfigError` when the base is not the plan in force
    or a removed entry is not in it: the sender must send the whole plan."""
    keys = ("version", "host", "flows", "inbound", "base_version", "removed_flows",
            "removed_inbound")  # fmt: skip
    m = v.mapping(delta, "plan", keys)
    want = v.integer(v.get(m, "base_version", "plan"), "plan.base_version", minimum=1)
    if base is None or want != in_force:
        held = f"plan {in_force}" if base is not None else "no plan"
        raise ConfigError("plan.base_version", f"delta on plan {want}, but {held} is in force")
    flows = {f["flow_id"]: f for f in base.get("flows", [])}
    for i, raw in enumerate(v.sequence(m.get("flows", []), "plan.flows")):
        e = v.mapping(raw, f"plan.flows[{i}]", ENTRY_KEYS)
        flows[v.string(v.get(e, "flow_id", f"plan.flows[{i}]"), f"plan.flows[{i}].flow_id")] = e
    for i, fid in enumerate(v.sequence(m.get("removed_flows", []), "plan.removed_flows")):
        if flows.pop(fid, None) is None:
            raise ConfigError(f"plan.removed_flows[{i}]", f"{str(fid)[:80]!r} not in plan {want}")

    def ikey(e: dict) -> tuple:
        return e.get("src_host"), e.get("port"), bool(e.get("by_source", False))

    inbound = {ikey(e): e for e in base.get("inbound", [])}
    for i, raw in enumerate(v.sequence(m.get("inbound", []), "plan.inbound")):
        e = v.mapping(raw, f"plan.inbound[{i}]", ("src_host", "port", "by_source"))
        inbound[ikey(e)] = e
    gone = v.sequence(m.get("removed_inbound", []), "plan.removed_inbound")
    for i, raw in enumerate(gone):
        e = v.mapping(raw, f"plan.removed_inbound[{i}]", ("src_host", "port", "by_source"))
        if inbound.pop(ikey(e), None) is None:
            raise ConfigError(f"plan.removed_inbound[{i}]", f"{ikey(e)!r} is not in plan {want}")
    return {"version": m.get("version"), "host": m.get("host"),
            "flows": list(flows.values()), "inbound": list(inbound.values())}  # fmt: skip


def _inbound_entries(raw: Any, addresses: dict[str, str], queues: QueueConfig) -> dict:
    """``plan.inbound[]`` -> inbound key -> the control band's rule."""
    ctl_band = queues.reserved[0] if queues.reserved else 0
    ctl = Rule(ctl_band, queues.dscp_table[ctl_band])
    out = {}
    for i, item in enumerate(v.sequence(raw, "plan.inbound")):
        path = f"plan.inbound[{i}]"
        e = v.mapping(item, path, ("src_host", "port", "by_source"))
        src = v.string(v.get(e, "src_host", path), f"{path}.src_host")
        if src not in addresses:
            raise ConfigError(f"{path}.src_host", f"unknown host {src[:80]!r}")
        port = v.integer(v.get(e, "port", path), f"{path}.port", minimum=1)
        if port > 65535:
            raise ConfigError(f"{path}.port", f"must be at most 65535, got {port}")
        out[inbound_key(src, port, bool(e.get("by_source", False)))] = ctl
    return out


def cgroup_keys(
    ref: Any, host: str, addresses: dict[str, str], addresses6: dict[str, str]
) -> list[RuleKey]:
    """The kernel keys of a cgroup job's traffic to ``host``: one per address family
    the host has, ``("cg4_<level>", cgroup, address)`` and ``cg6_``."""
    return [
        (f"cg{fam}_{ref.level}", ref.nft_path, table[host])
        for fam, table in (("4", addresses), ("6", addresses6))
        if host in table
    ]


def compose(
    entries: dict[str, Rule],
    flows: dict[str, Flow],
    addresses: dict[str, str],
    connections: Connections | None = None,
    cgroups: dict[tuple[str, str], Any] | None = None,
    addresses6: dict[str, str] | None = None,
) -> dict[RuleKey, Rule]:
    """Kernel rules for plan ``entries``. Two flows the kernel cannot tell apart (same
    match key) get the higher priority of the two. A host flow of a job known by its
    cgroup (``cgroups``: job -> ``agent.cgroups.CgroupRef``) becomes one key per
    address of the destination host, ``("cg4_<level>", cgroup, address)`` (and
    ``cg6_``), which the kernel matches from the first packet of every connection."""
    rules: dict[RuleKey, Rule] = {}

    def put(key: RuleKey, rule: Rule) -> None:
        if key not in rules or rule.band < rules[key].band:
            rules[key] = rule

    for fid, rule in entries.items():
        inbound = parse_inbound_key(fid)
        if inbound is not None:
            src, port, by_source = inbound
            put(("in_dport" if by_source else "in_sport", addresses[src], port), rule)
            continue
        flow = flows.get(fid)
        if flow is not None and not flow.host_flow:
            put(rule_key(flow, addresses), rule)
            continue
        hf = parse_host_flow(fid)
        ref = cgroups.get((hf[0], hf[1])) if hf is not None and cgroups else None
        if ref is not None:
            for key in cgroup_keys(ref, hf[2], addresses, addresses6 or {}):
                put(key, rule)
        elif hf is not None and connections:
            for key in connections.get(((hf[0], hf[1]), hf[2]), ()):
                put(key, rule)
    return rules


def desired_rules(plan: Any, **kw: Any) -> tuple[int, dict[RuleKey, Rule]]:
    """``plan_entries`` then ``compose`` (no connections): a plan of port flows."""
    version, entries = plan_entries(plan, **kw)
    return version, compose(entries, kw["flows"], kw["addresses"])
