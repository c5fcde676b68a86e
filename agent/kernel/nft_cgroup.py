"""nftables text for jobs known by their cgroup (pure: rendering only).

A rule key ``("cg4_<L>", nft_path, address)`` (IPv6: ``"cg6_<L>"``) steers the packets
of every socket in the cgroup ``nft_path`` (level ``L`` of the cgroup2 tree, its
descendants included) toward ``address``. Per level and family in use, the table
holds a map ``band_cg4_<L>`` (``socket cgroupv2 level L . ip daddr : meta priority``),
a verdict map ``dscp_cg4_<L>`` (-> ``goto dscp_<N>``) and, for membership, a set
``ours_cg4_<L>`` (Debian 12's kernel refuses a map used as a set).

``socket`` matches only where the packet still has its socket: the ``output`` hook. So
these rules live in an output chain; the postrouting chains (connection and port maps)
do not touch packets they have no key for. A pure ACK, SYN, FIN or RST of a job's
socket goes to the control band, as for connections found by discovery; the job's data,
from its first segment, to its band with its DSCP. The kernel resolves each path to a
cgroup id when the table loads, so every change to these rules (and a cgroup made
again under the same name) reloads the whole table in one transaction.
"""

from __future__ import annotations

from grouper.agent.kernel.layout import BandLayout
from grouper.agent.plan import Rule, RuleKey

_KEY = {"4": "ip daddr", "6": "ip6 daddr"}
_TUPLE = {
    "4": "ip saddr . ip daddr . tcp sport . tcp dport",
    "6": "ip6 saddr . ip6 daddr . tcp sport . tcp dport",
}
CONN_TIMEOUT = 120  # seconds a job's connection is remembered after its last handshake
# segment: longer than TIME-WAIT (60 s), so the final ACK is still known


def is_cgroup_key(key: RuleKey) -> bool:
    return key[0].startswith("cg")


def match_name(family: str, level: int) -> str:
    return f"cg{family}_{level}"


def _in_use(rules: dict[RuleKey, Rule]) -> list[tuple[str, int]]:
    """(family, level) pairs the rules use, deepest level first (the most specific
    cgroup decides; jobs' cgroups never nest, the registry refuses that)."""
    pairs = {(k[0][2], int(k[0][4:])) for k in rules if is_cgroup_key(k)}
    return sorted(pairs, key=lambda p: (p[0], -p[1]))


def _selector(family: str, level: int) -> str:
    return f"socket cgroupv2 level {level} . {_KEY[family]}"


def declarations(rules: dict[RuleKey, Rule]) -> list[str]:
    out = []
    for fam in sorted({f for f, _ in _in_use(rules)}):
        out.append(
            f"  set conns{fam} {{ typeof {_TUPLE[fam]}; flags dynamic, timeout; "
            f"timeout {CONN_TIMEOUT}s; }}"
        )
    for fam, level in _in_use(rules):
        name, typeof = match_name(fam, level), _selector(fam, level)
        out.append(f"  map band_{name} {{ typeof {typeof} : meta priority; }}")
        out.append(f"  map dscp_{name} {{ typeof {typeof} : verdict; }}")
        out.append(f"  set ours_{name} {{ typeof {typeof}; }}")
    return out


def chains(
    rules: dict[RuleKey, Rule], nic: str, ctl: dict[str, str], short: dict[str, str]
) -> list[str]:
    """The output hook and its per-family chains (none when no cgroup rule exists).
    ``ctl[family]`` sets the control band and DSCP; ``short[family]`` is the length test
    of a segment without payload."""
    used = _in_use(rules)
    if not used:
        return []
    proto = {"4": "ipv4", "6": "ipv6"}
    out = ["  chain output {", "    type filter hook output priority 0; policy accept;"]
    for fam in sorted({f for f, _ in used}):
        out.append(f'    oifname "{nic}" meta nfproto {proto[fam]} jump cgroups{fam}')
    out.append("  }")
    for fam in sorted({f for f, _ in used}):
        levels = [lv for f, lv in used if f == fam]
        out.append(f"  chain cgroups{fam} {{")
        out.append(
            f"    {short[fam]} tcp flags & (syn | fin | rst | psh | ack) == ack goto cg_tiny{fam}"
        )
        out.append(f"    {short[fam]} tcp flags & (syn | fin | rst) != 0 goto cg_tiny{fam}")
        for lv in levels:
            name, sel = match_name(fam, lv), _selector(fam, lv)
            out.append(f"    meta priority set {sel} map @band_{name}")
            out.append(f"    {sel} vmap @dscp_{name}")
        out.append("  }")
        out.append(f"  chain cg_tiny{fam} {{")
        tup = _TUPLE[fam]
        for lv in levels:
            sel, name = _selector(fam, lv), match_name(fam, lv)
            out.append(f"    {sel} @ours_{name} update @conns{fam} {{ {tup} }} {ctl[fam]} return")
        # segments of a job's connection its socket no longer sends (the last ACK from
        # TIME-WAIT comes from the kernel's own socket): known by their addresses
        out.append(f"    {tup} @conns{fam} {ctl[fam]} return")
        out.append("  }")
    return out


def elements(rules: dict[RuleKey, Rule], layout: BandLayout, table: str) -> str:
    """``add element`` lines for every cgroup rule (after ``table``, "family name", is
    declared)."""
    groups: dict[str, list[tuple[str, Rule]]] = {}
    for key, rule in rules.items():
        if is_cgroup_key(key):
            groups.setdefault(key[0], []).append((f'"{key[1]}" . {key[2]}', rule))
    out = []
    for name, items in sorted(groups.items()):
        items.sort()
        dscp_chain = "dscp6_" if name.startswith("cg6") else "dscp_"
        bands = ", ".join(f"{e} : {layout.classid_text(r.band)}" for e, r in items)
        dscps = ", ".join(f"{e} : goto {dscp_chain}{r.dscp}" for e, r in items)
        ours = ", ".join(e for e, _ in items)
        out.append(f"add element {table} band_{name} {{ {bands} }}")
        out.append(f"add element {table} dscp_{name} {{ {dscps} }}")
        out.append(f"add element {table} ours_{name} {{ {ours} }}")
    return "\n".join(out) + ("\n" if out else "")
