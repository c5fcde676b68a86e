"""``grouper switch-config``: the switches' DSCP maps and strict-priority queues, written
from the cluster config's ``queues:`` (README step 5) instead of typed by hand.

One mapping for everything (``pda.switch_queues``, also what the emulated fabric's tc
queues are built from): band b of n -> traffic class and hardware queue n-1-b (strict
priority serves the highest queue first), every DSCP the table does not name -> the
default band's queue. Three outputs:

- ``sonic``: config_db JSON (``DSCP_TO_TC_MAP``, ``TC_TO_QUEUE_MAP``, ``SCHEDULER`` of
  type ``STRICT``, ``QUEUE`` and ``PORT_QOS_MAP`` per port), for ``config load``;
- ``eos``: Arista EOS CLI (``qos map dscp ... to traffic-class``, ``qos map
  traffic-class ... to tx-queue``, per interface ``qos trust dscp`` and ``tx-queue N`` /
  ``priority strict``);
- ``cumulus``: Cumulus Linux NVUE commands (``nv set qos ...``, profiles bound to the
  ports), ending with ``nv config apply``.

How each was checked against its vendor's schema or examples: docs/how-to/switches.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from grouper.cli import argtypes as T
from grouper.common.errors import ConfigError, short
from grouper.pda.switch_queues import SwitchQueueMap, hardware_queue_map

OSES = ("sonic", "eos", "cumulus")
NAME = "GROUPER"  # SONiC map names: [a-zA-Z0-9][-a-zA-Z0-9_]{0,31}
SCHEDULER = "GROUPER_STRICT"
PROFILE = "grouper"  # Cumulus mapping and egress-scheduler profile
PORT_RE = re.compile(r"[A-Za-z][A-Za-z0-9/._:-]{0,63}")
MAX_PORTS = 4096
EOS_PER_LINE = 8  # code points per "qos map dscp" line, as in Arista's examples


def add_switch_config(add: T.Add) -> None:
    """Registers ``grouper switch-config``."""
    sc = add(
        "switch-config",
        _cmd_switch_config,
        "write the switches' DSCP-to-queue maps and strict-priority queues from the "
        "cluster config's queues: (SONiC config_db JSON, Arista EOS CLI, Cumulus NVUE)",
    )
    sc.add_argument("--config", required=True, metavar="CLUSTER.yaml", help="cluster YAML")
    sc.add_argument(
        "--os", required=True, choices=OSES, dest="switch_os", help="the switches' network OS"
    )
    sc.add_argument("--ports", help="comma-separated switch ports, e.g. Ethernet0,Ethernet4")
    sc.add_argument("--ports-file", dest="ports_file", help="file of ports, one per line")
    sc.add_argument("--out", help="write here instead of standard output")


def _cmd_switch_config(args: argparse.Namespace) -> int:
    from grouper.common.cluster_config import load_cluster_config

    ports = read_ports(args.ports, args.ports_file)
    qmap = hardware_queue_map(load_cluster_config(args.config).queues)
    text = render(args.switch_os, qmap, ports)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise ConfigError("--out", f"cannot write {args.out[:80]}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0


def read_ports(ports: str | None, ports_file: str | None) -> list[str]:
    """The ports from ``--ports`` or ``--ports-file`` (exactly one), checked."""
    if (ports is None) == (ports_file is None):
        raise ConfigError("--ports", "give the switch ports with --ports or --ports-file (one)")
    if ports is not None:
        return check_ports(ports.split(","), "--ports")
    assert ports_file is not None
    try:
        raw = Path(ports_file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--ports-file", f"cannot read {ports_file[:80]}: {exc}") from None
    names = [line.split("#", 1)[0].strip() for line in raw.splitlines()]
    return check_ports([n for n in names if n], "--ports-file")


def check_ports(names: list[str], path: str) -> list[str]:
    if not names:
        raise ConfigError(path, "no ports")
    if len(names) > MAX_PORTS:
        raise ConfigError(path, f"at most {MAX_PORTS} ports, got {len(names)}")
    seen: set[str] = set()
    for i, name in enumerate(names):
        name = name.strip()
        if not PORT_RE.fullmatch(name):
            raise ConfigError(f"{path}[{i}]", f"not a port name: {short(name)}")
        if name in seen:
            raise ConfigError(f"{path}[{i}]", f"duplicate port {name}")
        seen.add(name)
    return [n.strip() for n in names]


def render(switch_os: str, qmap: SwitchQueueMap, ports: list[str]) -> str:
    renderers: dict[str, Callable[[SwitchQueueMap, list[str]], str]] = {
        "sonic": sonic,
        "eos": eos,
        "cumulus": cumulus,
    }
    if switch_os not in renderers:
        raise ConfigError("--os", f"one of {', '.join(OSES)}, got {short(switch_os)}")
    return renderers[switch_os](qmap, ports)


def sonic_tables(qmap: SwitchQueueMap, ports: list[str]) -> dict[str, dict[str, object]]:
    """The config_db tables (``config load`` merges them into the running config)."""
    used = sorted(qmap.queue_of(b) for b in range(qmap.queues))
    return {
        "DSCP_TO_TC_MAP": {NAME: {str(d): str(q) for d, q in qmap.dscp_to_queue().items()}},
        "TC_TO_QUEUE_MAP": {NAME: {str(q): str(q) for q in used}},
        "SCHEDULER": {SCHEDULER: {"type": "STRICT"}},
        "QUEUE": {f"{p}|{q}": {"scheduler": SCHEDULER} for p in ports for q in used},
        "PORT_QOS_MAP": {p: {"dscp_to_tc_map": NAME, "tc_to_queue_map": NAME} for p in ports},
    }


def sonic(qmap: SwitchQueueMap, ports: list[str]) -> str:
    return json.dumps(sonic_tables(qmap, ports), indent=4) + "\n"


def _bands_by_queue(qmap: SwitchQueueMap) -> dict[int, list[int]]:
    """Hardware queue -> the code points that select it, every code point once."""
    out: dict[int, list[int]] = {}
    for dscp, queue in qmap.dscp_to_queue().items():
        out.setdefault(queue, []).append(dscp)
    return dict(sorted(out.items(), reverse=True))


def _header(qmap: SwitchQueueMap, comment: str) -> list[str]:
    pairs = ", ".join(
        f"band {b} DSCP {d} -> queue {qmap.queue_of(b)}" for b, d in enumerate(qmap.table)
    )
    return [
        f"{comment} grouper switch-config: {qmap.queues} strict-priority queues, highest first",
        f"{comment} {pairs}",
        f"{comment} other DSCP -> queue {qmap.queue_of(qmap.default_band)} "
        f"(band {qmap.default_band})",
    ]


def eos(qmap: SwitchQueueMap, ports: list[str]) -> str:
    lines = [*_header(qmap, "!"), "!"]
    for queue, dscps in _bands_by_queue(qmap).items():
        for i in range(0, len(dscps), EOS_PER_LINE):
            values = " ".join(str(d) for d in dscps[i : i + EOS_PER_LINE])
            lines.append(f"qos map dscp {values} to traffic-class {queue}")
    for queue in sorted(_bands_by_queue(qmap), reverse=True):
        lines.append(f"qos map traffic-class {queue} to tx-queue {queue}")
    lines.append("!")
    for port in ports:
        lines += [f"interface {port}", "   qos trust dscp"]
        for queue in sorted(_bands_by_queue(qmap), reverse=True):
            lines += [f"   tx-queue {queue}", "      priority strict"]
        lines.append("!")
    return "\n".join(lines) + "\n"


def cumulus(qmap: SwitchQueueMap, ports: list[str]) -> str:
    queues = sorted(_bands_by_queue(qmap), reverse=True)
    tcs = ",".join(str(q) for q in sorted(queues))
    port_list = ",".join(ports)
    lines = [*_header(qmap, "#"), f"nv set qos mapping {PROFILE} trust l3"]
    for queue, dscps in _bands_by_queue(qmap).items():
        lines.append(
            f"nv set qos mapping {PROFILE} dscp {','.join(map(str, dscps))} switch-priority {queue}"
        )
    lines.append("# switch priority N -> traffic class N (Cumulus' default, made explicit)")
    for queue in queues:
        lines.append(
            f"nv set qos egress-queue-mapping default-global switch-priority {queue} "
            f"traffic-class {queue}"
        )
    lines += [
        f"nv set qos egress-scheduler {PROFILE} traffic-class {tcs} mode strict",
        f"nv set interface {port_list} qos mapping profile {PROFILE}",
        f"nv set interface {port_list} qos egress-scheduler profile {PROFILE}",
        "nv config apply",
    ]
    return "\n".join(lines) + "\n"
