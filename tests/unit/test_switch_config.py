"""``grouper switch-config``: the one DSCP -> queue mapping, written for SONiC, EOS and
Cumulus, and the same mapping in the emulated fabric's tc queues.

No vendor validator runs here (docs/how-to/switches.md: SONiC's output was checked once with
yanglint against SONiC's YANG models); these tests hold each output to the structure of
the vendors' worked examples and to the mapping itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grouper.cli.main import main
from grouper.cli.switch_config import cumulus, eos, sonic_tables
from grouper.common.cluster_config import parse_cluster_config
from grouper.pda.switch_queues import switch_queue_map
from grouper.topologies.leafspine import switch_queue_commands

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "cluster.sample.yaml"
HOSTS = [{"name": "a", "address": "10.0.0.1", "nic": "eth0"}]
QUEUE_CONFIGS = [
    {},  # the default table: 8 bands, DSCP 0 in the lowest data band, CS1 scavenger
    {"count": 4, "reserved": [], "scavenger": None, "dscp": [46, 26, 10, 0]},
    {"count": 5, "reserved": [0], "scavenger": 4, "dscp": [48, 40, 20, 12, 8]},  # no 0
]


def qconfig(queues: dict):
    return parse_cluster_config({"cluster": "c", "hosts": HOSTS, "queues": queues}).queues


def emulated_bands(queues) -> dict[int, int]:
    """DSCP -> band as the emulated switch port classifies it (u32 filters, htb default)."""
    cmds = switch_queue_commands("p", 100, queues)
    default = int(re.search(r"htb default (\w+)", cmds[0]).group(1), 16) - 0x10
    filters = {}
    for c in cmds:
        m = re.search(r"dsfield (\w+) 0xfc flowid 1:(\w+)", c)
        if m:
            filters[int(m.group(1), 16) >> 2] = int(m.group(2), 16) - 0x10
    return {d: filters.get(d, default) for d in range(64)}


@pytest.mark.parametrize("queues", QUEUE_CONFIGS)
def test_sonic_map_is_what_the_emulated_fabric_does(queues):
    """Every code point lands, on a SONiC switch configured from our output, in the queue
    of the band the emulated switch port gives it: queue = n - 1 - band."""
    q = qconfig(queues)
    tables = sonic_tables(switch_queue_map(q), ["Ethernet0"])
    dscp_tc = tables["DSCP_TO_TC_MAP"]["GROUPER"]
    tc_queue = tables["TC_TO_QUEUE_MAP"]["GROUPER"]
    on_switch = {int(d): int(tc_queue[tc]) for d, tc in dscp_tc.items()}
    emulated = emulated_bands(q)
    assert sorted(on_switch) == list(range(64))
    assert on_switch == {d: q.queues - 1 - b for d, b in emulated.items()}
    for band, dscp in enumerate(q.dscp_table):  # the table itself, band by band
        assert on_switch[dscp] == q.queues - 1 - band


def test_strict_priority_order_follows_the_bands():
    """Band 0 (control) in the highest queue, the scavenger band in queue 0, unmarked
    traffic (DSCP 0) in the lowest data queue, above CS1."""
    m = switch_queue_map(qconfig({}))
    to_queue = m.dscp_to_queue()
    assert to_queue[56] == 7 and to_queue[8] == 0 and to_queue[0] == 1
    assert to_queue[46] == to_queue[0]  # a code point the table does not name: default


def test_sonic_tables_have_config_db_shape():
    """Shape of SONiC's config_db QoS tables (as in SONiC's qos.json examples and its YANG
    models: string values, QUEUE keyed PORT|INDEX, maps referenced by name)."""
    ports = ["Ethernet0", "Ethernet4"]
    t = sonic_tables(switch_queue_map(qconfig({})), ports)
    assert set(t) == {"DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "SCHEDULER", "QUEUE", "PORT_QOS_MAP"}
    name_re = re.compile(r"[a-zA-Z0-9][-a-zA-Z0-9_]{0,31}")  # the YANG models' map name
    for table in ("DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP"):
        assert all(name_re.fullmatch(n) for n in t[table])
    entries = next(iter(t["DSCP_TO_TC_MAP"].values()))
    assert all(re.fullmatch(r"6[0-3]|[1-5][0-9]?|[0-9]?", k) for k in entries)
    assert all(isinstance(v, str) and 0 <= int(v) <= 7 for v in entries.values())
    assert [s["type"] for s in t["SCHEDULER"].values()] == ["STRICT"]
    assert set(t["QUEUE"]) == {f"{p}|{q}" for p in ports for q in range(8)}
    for row in t["QUEUE"].values():
        assert row["scheduler"] in t["SCHEDULER"]
    assert set(t["PORT_QOS_MAP"]) == set(ports)
    for row in t["PORT_QOS_MAP"].values():
        assert row["dscp_to_tc_map"] in t["DSCP_TO_TC_MAP"]
        assert row["tc_to_queue_map"] in t["TC_TO_QUEUE_MAP"]


def test_eos_cli_maps_every_code_point_once():
    m = switch_queue_map(qconfig(QUEUE_CONFIGS[1]))
    text = eos(m, ["Ethernet1", "Ethernet2/1"])
    seen: dict[int, int] = {}
    for values, tc in re.findall(r"^qos map dscp ([\d ]+) to traffic-class (\d)$", text, re.M):
        assert len(values.split()) <= 8
        for d in values.split():
            assert int(d) not in seen
            seen[int(d)] = int(tc)
    assert seen == m.dscp_to_queue()
    tx = re.findall(r"^qos map traffic-class (\d) to tx-queue (\d)$", text, re.M)
    assert sorted(tx) == [(str(q), str(q)) for q in range(4)]
    blocks = text.split("interface ")[1:]
    assert [b.split("\n")[0] for b in blocks] == ["Ethernet1", "Ethernet2/1"]
    for block in blocks:
        assert "\n   qos trust dscp\n" in block
        queues = re.findall(r"^   tx-queue (\d)\n      priority strict$", block, re.M)
        assert sorted(map(int, queues)) == [0, 1, 2, 3]


def test_cumulus_nvue_maps_every_code_point_once():
    m = switch_queue_map(qconfig(QUEUE_CONFIGS[2]))
    lines = [x for x in cumulus(m, ["swp1", "swp2"]).splitlines() if not x.startswith("#")]
    assert all(x.startswith("nv ") for x in lines) and lines[-1] == "nv config apply"
    assert "nv set qos mapping grouper trust l3" in lines
    seen: dict[int, int] = {}
    for x in lines:
        got = re.fullmatch(r"nv set qos mapping grouper dscp ([\d,]+) switch-priority (\d)", x)
        if got:
            for d in got.group(1).split(","):
                assert int(d) not in seen
                seen[int(d)] = int(got.group(2))
    assert seen == m.dscp_to_queue()
    assert "nv set qos egress-scheduler grouper traffic-class 0,1,2,3,4 mode strict" in lines
    assert "nv set interface swp1,swp2 qos mapping profile grouper" in lines
    assert "nv set interface swp1,swp2 qos egress-scheduler profile grouper" in lines


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_writes_sonic_json_to_stdout_and_file(tmp_path, capsys):
    base = ["switch-config", "--config", str(SAMPLE), "--os", "sonic"]
    code, out, _ = run_cli([*base, "--ports", "Ethernet0,Ethernet4"], capsys)
    assert code == 0
    assert set(json.loads(out)["PORT_QOS_MAP"]) == {"Ethernet0", "Ethernet4"}
    ports = tmp_path / "ports"
    ports.write_text("# leaf01\nEthernet0\n\nEthernet8  # uplink\n")
    dest = tmp_path / "qos.json"
    code, out, _ = run_cli([*base, "--ports-file", str(ports), "--out", str(dest)], capsys)
    assert code == 0 and out == ""
    assert set(json.loads(dest.read_text())["PORT_QOS_MAP"]) == {"Ethernet0", "Ethernet8"}


@pytest.mark.parametrize(
    "extra, field",
    [
        ([], "--ports"),
        (["--ports", "Ethernet0", "--ports-file", "x"], "--ports"),
        (["--ports", "Ethernet0,bad port"], "--ports[1]"),
        (["--ports", "Ethernet0,Ethernet0"], "--ports[1]"),
        (["--ports", ""], "--ports[0]"),
        (["--ports-file", "/nonexistent/ports"], "--ports-file"),
        (["--ports", "Ethernet0", "--out", "/nonexistent/dir/out.json"], "--out"),
    ],
)
def test_bad_input_exits_2_naming_the_field(extra, field, capsys):
    args = ["switch-config", "--config", str(SAMPLE), "--os", "eos", *extra]
    code, out, err = run_cli(args, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"grouper: error: {field}: ")


def test_more_queues_than_switches_have_exits_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster: c\nhosts: [{name: a, address: 10.0.0.1, nic: eth0}]\n"
        f"queues: {{count: 12, dscp: {list(range(12))}}}\n"
    )
    args = ["switch-config", "--config", str(cfg), "--os", "sonic", "--ports", "Ethernet0"]
    code, _, err = run_cli(args, capsys)
    assert code == 2
    assert err.startswith("grouper: error: queues.count: switches have 8 egress queues")
