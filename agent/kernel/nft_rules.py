"""nftables ruleset text for the agent's table (pure: rendering and diffing only).

One table, ``inet grouper``, holds everything the agent installs:

* maps ``band_dport`` / ``band_sport``: (destination address . port) -> ``meta priority``
  (the tc classid of the flow's band; the qdisc picks the class from it without filters);
* verdict maps ``dscp_dport`` / ``dscp_sport``: same keys -> ``goto dscp_<N>``, a chain
  that sets DSCP N (nft 1.0 cannot take ``ip dscp set`` from a map directly);
* control traffic (agent and coordinator gRPC ports), pure TCP ACKs and short SYN, FIN
  and RST segments -> band 0 and its DSCP (they are tiny; in a low band ACKs would stall
  a prioritized flow and handshakes would wait out SYN retransmission timers).

A full apply replaces the table in one transaction; a plan change is one transaction
of element deletions and additions. Neither touches the qdisc.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.kernel.layout import BandLayout
from agent.plan import Rule, RuleKey
from pda.priorities import QueueConfig

TABLE = "grouper"
FAMILY = "inet"
COMMENT = "managed by grouper-agent"
ACK_MAX_LENGTH = 100  # IP length below which an ACK carries no payload (header + options)


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
    for match in ("dport", "sport"):
        lines.append(f"  map band_{match} {{ typeof ip daddr . tcp {match} : meta priority; }}")
        lines.append(f"  map dscp_{match} {{ type ipv4_addr . inet_service : verdict; }}")
    for d in sorted(set(queues.dscp_table)):
        lines.append(f"  chain dscp_{d} {{ ip dscp set {d}; }}")
    lines += [
        "  chain postrouting {",
        "    type filter hook postrouting priority 0; policy accept;",
        f'    oifname "{nic}" meta nfproto ipv4 jump classify',
        "  }",
        "  chain classify {",
    ]
    if ports:
        lines.append(f"    tcp dport {{ {ports} }} {ctl} return")
        lines.append(f"    tcp sport {{ {ports} }} {ctl} return")
    # pure ACKs (ACK alone, no PSH, short) ride the control band: a flow whose reverse path is
    # congested must not stall on its own ACK clock
    lines.append(
        f"    ip length < {ACK_MAX_LENGTH} "
        f"tcp flags & (syn | fin | rst | psh | ack) == ack {ctl} return"
    )
    # so do handshakes and teardowns: a new job's SYN in a starved low band waits out
    # TCP's 1 s, 3 s, ... SYN retransmission timers before the plan even knows the flow
    lines.append(
        f"    ip length < {ACK_MAX_LENGTH} tcp flags & (syn | fin | rst) != 0 {ctl} return"
    )
    for match in ("dport", "sport"):
        lines.append(f"    meta priority set ip daddr . tcp {match} map @band_{match}")
        lines.append(f"    ip daddr . tcp {match} vmap @dscp_{match}")
    lines += ["  }", "}"]
    text = "\n".join(lines) + "\n"
    return text + render_changes({}, rules, layout)


def render_changes(old: dict[RuleKey, Rule], new: dict[RuleKey, Rule], layout: BandLayout) -> str:
    """Element deletions and additions that turn ``old`` into ``new`` (one transaction)."""
    out: list[str] = []
    for field in ("band", "dscp"):
        for match in ("dport", "sport"):
            dels, adds = [], []
            for key in old.keys() | new.keys():
                if key[0] != match:
                    continue
                a, b = old.get(key), new.get(key)
                va = None if a is None else getattr(a, field)
                vb = None if b is None else getattr(b, field)
                if va == vb:
                    continue
                elem = f"{key[1]} . {key[2]}"
                if va is not None:
                    dels.append(elem)
                if vb is not None:
                    value = layout.classid_text(vb) if field == "band" else f"goto dscp_{vb}"
                    adds.append(f"{elem} : {value}")
            name = f"{field}_{match}"
            if dels:
                out.append(
                    f"delete element {FAMILY} {TABLE} {name} {{ {', '.join(sorted(dels))} }}"
                )
            if adds:
                out.append(f"add element {FAMILY} {TABLE} {name} {{ {', '.join(sorted(adds))} }}")
    return "\n".join(out) + ("\n" if out else "")


def count_changes(old: dict[RuleKey, Rule], new: dict[RuleKey, Rule]) -> int:
    return sum(1 for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def delete_table() -> str:
    return f"table {FAMILY} {TABLE} {{}}\ndelete table {FAMILY} {TABLE}\n"
