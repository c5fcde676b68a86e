"""nftables ruleset text for the agent's table (pure: rendering and diffing only).

One table, ``inet grouper``, holds everything the agent installs:

* maps ``band_dport`` / ``band_sport``: (destination address . port) -> ``meta priority``
  (the tc classid of the flow's band; the qdisc picks the class from it without filters);
* verdict maps ``dscp_dport`` / ``dscp_sport``: same keys -> ``goto dscp_<N>``, a chain
  that sets DSCP N (nft 1.0 cannot take ``ip dscp set`` from a map directly);
* maps ``band_conn`` / ``dscp_conn`` (IPv4) and ``band_conn6`` / ``dscp_conn6`` (IPv6):
  one element per connection the agent found for a job, keyed by (source . destination
  . source port . destination port);
* maps ``band_in_sport`` / ``band_in_dport`` (and their ``dscp_`` twins): the
  port-matched flows other hosts send to this one, keyed the way this host's ACKs on
  them look (peer address . our port, or . the peer's source port);
* sets ``ours_<match>``: the keys of ``band_<match>``, for membership tests. A map is
  never looked up as a set (``... @band_dport``): Debian 12's kernel (6.1) refuses such
  a rule with "Invalid argument" (6.18 takes it);
* control traffic (agent and coordinator gRPC ports) -> band 0 and its DSCP; so are
  pure TCP ACKs and short SYN, FIN and RST segments of *our* connections (a key in any
  ``ours_`` set): in a low band ACKs would stall a prioritized flow and handshakes would
  wait out SYN retransmission timers. Other applications' keep their DSCP and class.

A full apply replaces the table in one transaction; a plan change is one transaction
of element deletions and additions. Neither touches the qdisc.
"""

from __future__ import annotations

from collections.abc import Iterable

from grouper.agent.kernel import nft_cgroup
from grouper.agent.kernel.layout import BandLayout
from grouper.agent.plan import Rule, RuleKey
from grouper.common.queues import QueueConfig

TABLE = "grouper"
FAMILY = "inet"
COMMENT = "managed by grouper-agent"
ACK_MAX_LENGTH = 100  # IP length below which an ACK carries no payload (header + options)
ACK_MAX_PAYLOAD6 = 80  # the same for IPv6, whose length field excludes the 40-byte header
MATCHES = ("dport", "sport", "conn", "conn6", "in_sport", "in_dport")
_MAP_TYPES = {
    "dport": ("ip daddr . tcp dport", "ipv4_addr . inet_service"),
    "sport": ("ip daddr . tcp sport", "ipv4_addr . inet_service"),
    "conn": (
        "ip saddr . ip daddr . tcp sport . tcp dport",
        "ipv4_addr . ipv4_addr . inet_service . inet_service",
    ),
    "conn6": (
        "ip6 saddr . ip6 daddr . tcp sport . tcp dport",
        "ipv6_addr . ipv6_addr . inet_service . inet_service",
    ),
    "in_sport": ("ip daddr . tcp sport", "ipv4_addr . inet_service"),
    "in_dport": ("ip daddr . tcp dport", "ipv4_addr . inet_service"),
}
TINY_V4 = ("dport", "sport", "conn", "in_sport", "in_dport")  # maps whose keys are "ours"


def dscp_chain(match: str, dscp: int) -> str:
    return f"dscp6_{dscp}" if match == "conn6" else f"dscp_{dscp}"


def render_table(
    nic: str,
    queues: QueueConfig,
    layout: BandLayout,
    control_ports: Iterable[int],
    rules: dict[RuleKey, Rule],
) -> str:
    """Replace our table (if any) with a fresh one holding ``rules``, atomically."""
    ports = ", ".join(str(p) for p in sorted(set(control_ports)))
    ctl_band = queues.reserved[0] if queues.reserved else 0
    ctl_dscp = queues.dscp_table[ctl_band]
    ctl = f"meta priority set {layout.classid_text(ctl_band)} ip dscp set {ctl_dscp}"
    lines = [
        f"table {FAMILY} {TABLE} {{}}",  # make the delete below valid when absent
        f"delete table {FAMILY} {TABLE}",
        f"table {FAMILY} {TABLE} {{",
        f'  comment "{COMMENT}"',
    ]
    for match in MATCHES:
        typeof, types = _MAP_TYPES[match]
        lines.append(f"  map band_{match} {{ typeof {typeof} : meta priority; }}")
        lines.append(f"  map dscp_{match} {{ type {types} : verdict; }}")
        lines.append(f"  set ours_{match} {{ type {types}; }}")
    for d in sorted(set(queues.dscp_table)):
        lines.append(f"  chain dscp_{d} {{ ip dscp set {d}; }}")
        lines.append(f"  chain dscp6_{d} {{ ip6 dscp set {d}; }}")
    ctl6 = f"meta priority set {layout.classid_text(ctl_band)} ip6 dscp set {ctl_dscp}"
    lines += _tiny_chain("tiny", ctl, TINY_V4)
    lines += _tiny_chain("tiny6", ctl6, ("conn6",))
    lines += [
        "  chain postrouting {",
        "    type filter hook postrouting priority 0; policy accept;",
        f'    oifname "{nic}" meta nfproto ipv4 jump classify',
        f'    oifname "{nic}" meta nfproto ipv6 jump classify6',
        "  }",
        "  chain classify {",
    ]
    lines += _control_rules(ports, ctl, f"ip length < {ACK_MAX_LENGTH}", "tiny")
    for match in ("dport", "sport"):
        lines.append(f"    meta priority set ip daddr . tcp {match} map @band_{match}")
        lines.append(f"    ip daddr . tcp {match} vmap @dscp_{match}")
    conn = "ip saddr . ip daddr . tcp sport . tcp dport"
    lines.append(f"    meta priority set {conn} map @band_conn")
    lines.append(f"    {conn} vmap @dscp_conn")
    lines += ["  }", "  chain classify6 {"]
    lines += _control_rules(ports, ctl6, f"ip6 length < {ACK_MAX_PAYLOAD6}", "tiny6")
    conn6 = "ip6 saddr . ip6 daddr . tcp sport . tcp dport"
    lines.append(f"    meta priority set {conn6} map @band_conn6")
    lines.append(f"    {conn6} vmap @dscp_conn6")
    lines.append("  }")
    # jobs known by their cgroup: steered in the output hook, where packets have sockets
    lines += nft_cgroup.declarations(rules)
    short = {"4": f"ip length < {ACK_MAX_LENGTH}", "6": f"ip6 length < {ACK_MAX_PAYLOAD6}"}
    lines += nft_cgroup.chains(rules, nic, {"4": ctl, "6": ctl6}, short)
    lines.append("}")
    text = "\n".join(lines) + "\n"
    return (
        text
        + render_changes({}, rules, layout)
        + nft_cgroup.elements(rules, layout, f"{FAMILY} {TABLE}")
    )


def _control_rules(ports: str, ctl: str, short: str, tiny: str) -> list[str]:
    """Control traffic -> the control band (``ctl``); pure ACKs and handshakes -> ``tiny``."""
    out = []
    if ports:
        out.append(f"    tcp dport {{ {ports} }} {ctl} return")
        out.append(f"    tcp sport {{ {ports} }} {ctl} return")
    # pure ACKs (ACK alone, no PSH, short) and handshakes/teardowns go to the tiny
    # chain, which moves them to the control band only if the connection is ours;
    # either way they are done (goto: no data map applies to them)
    out.append(f"    {short} tcp flags & (syn | fin | rst | psh | ack) == ack goto {tiny}")
    out.append(f"    {short} tcp flags & (syn | fin | rst) != 0 goto {tiny}")
    return out


def _tiny_chain(name: str, ctl: str, matches: tuple[str, ...]) -> list[str]:
    """A pure ACK, SYN, FIN or RST of a connection in one of our maps -> control band.

    A prioritized flow must not stall on its own ACK clock, nor a new job's handshake
    wait out SYN timers behind bulk traffic; another application's segment falls off
    the end of the chain unchanged.
    """
    out = [f"  chain {name} {{"]
    for match in matches:
        out.append(f"    {_MAP_TYPES[match][0]} @ours_{match} {ctl} return")
    out.append("  }")
    return out


def render_changes(
    old: dict[RuleKey, Rule],
    new: dict[RuleKey, Rule],
    layout: BandLayout,
    diff: list[RuleKey] | None = None,
) -> str:
    """Element deletions and additions that turn ``old`` into ``new`` (one transaction).
    ``diff``: ``changed_keys(old, new)`` where the caller has it; only those keys are
    looked at, so a change of a few rules costs a few rules' work, not the table's."""
    if diff is None:
        diff = changed_keys(old, new)
    by_match: dict[str, list[RuleKey]] = {}
    for key in diff:
        by_match.setdefault(key[0], []).append(key)
    out: list[str] = []
    for match in MATCHES:  # membership: keys that come or go
        keys = by_match.get(match, [])
        gone = sorted(_element(k) for k in keys if k not in new)
        came = sorted(_element(k) for k in keys if k not in old)
        if gone:
            out.append(f"delete element {FAMILY} {TABLE} ours_{match} {{ {', '.join(gone)} }}")
        if came:
            out.append(f"add element {FAMILY} {TABLE} ours_{match} {{ {', '.join(came)} }}")
    for field in ("band", "dscp"):
        for match in MATCHES:
            dels, adds = [], []
            for key in by_match.get(match, []):
                a, b = old.get(key), new.get(key)
                va = None if a is None else getattr(a, field)
                vb = None if b is None else getattr(b, field)
                if va == vb:
                    continue
                elem = _element(key)
                if va is not None:
                    dels.append(elem)
                if vb is not None:
                    if field == "band":
                        value = layout.classid_text(vb)
                    else:
                        value = f"goto {dscp_chain(match, vb)}"
                    adds.append(f"{elem} : {value}")
            name = f"{field}_{match}"
            if dels:
                out.append(
                    f"delete element {FAMILY} {TABLE} {name} {{ {', '.join(sorted(dels))} }}"
                )
            if adds:
                out.append(f"add element {FAMILY} {TABLE} {name} {{ {', '.join(sorted(adds))} }}")
    return "\n".join(out) + ("\n" if out else "")


def _element(key: RuleKey) -> str:
    return " . ".join(str(x) for x in key[1:])


def changed_keys(old: dict[RuleKey, Rule], new: dict[RuleKey, Rule]) -> list[RuleKey]:
    """Keys added, removed or given another rule."""
    get = old.get
    return [k for k, r in new.items() if get(k) != r] + [k for k in old if k not in new]


def count_changes(old: dict[RuleKey, Rule], new: dict[RuleKey, Rule]) -> int:
    return len(changed_keys(old, new))


def delete_table() -> str:
    return f"table {FAMILY} {TABLE} {{}}\ndelete table {FAMILY} {TABLE}\n"
