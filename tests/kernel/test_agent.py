"""The agent in a real namespace: bands split a bottleneck, DSCP on the wire, only our
connections remarked, cleanup on SIGTERM and reconciling on restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.all import IP, TCP

from grouper.agent.kernel.layout import HANDLE_MAJOR, BandLayout
from grouper.common.queues import QueueConfig
from tests.capture import Capture
from tests.kernel.agent_calls import apply, collect, register
from tests.netns import (
    backend_params,
    nft_map,
    nft_tables,
    pin_tx_queue,
    root_qdisc,
    tc_json,
)

TABLE = list(QueueConfig().dscp_table)  # what the test cluster config gets by default


def receiver_rates(server_json: str) -> list[tuple[float, float, float]]:
    data = json.loads(server_json)
    return [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bytes"]) for i in data["intervals"]]


QUEUES = pytest.mark.parametrize("pair", [1, 4], indirect=True, ids=["1txq", "4txq"])
BACKENDS = pytest.mark.parametrize("backend", backend_params())
LINK_MBPS = 30.0


def bottleneck_params() -> list:
    """(backend, pair) per TX queue count and backend. ``htb`` shapes at the host, so the
    NIC is the bottleneck; ``prio`` does not shape (a veth never queues at it), so a
    switch beyond the host, shaped to the link rate with DSCP-keyed strict priority,
    is: the plan's DSCP decides there, as at a real cluster's switches."""
    out = []
    for b in backend_params():
        backend = b.values[0]
        for txq in (1, 4):
            pair = (txq, LINK_MBPS) if backend == "prio" else txq
            out.append(pytest.param(backend, pair, id=f"{txq}txq-{backend}", marks=b.marks))
    return out


@pytest.mark.parametrize(("backend", "pair"), bottleneck_params(), indirect=["pair"])
def test_bands_split_bottleneck_and_swap_within_a_second(pair, agent_env, backend):
    """On a multi-queue NIC both flows are pinned to one TX queue: the band qdisc of
    that queue splits them (priority holds among the packets of one queue). Under
    ``prio`` the bottleneck is the switch port toward b, keyed by the plan's DSCP."""
    agent = agent_env(backend=backend, link_mbps=LINK_MBPS).start()
    if pair.txqueues > 1:
        pin_tx_queue(pair.a, pair.nic_a, 1, pair.txqueues)
    register(agent, "c1", [5201])
    register(agent, "c2", [5202])
    f1, f2 = "c1/j1/b:5201", "c2/j1/b:5202"
    assert apply(agent, 1, [(f1, 1, 48), (f2, 2, 40)]).applied
    handle_before = root_qdisc(pair.a, pair.nic_a)["handle"]
    servers = [
        pair.popen(
            pair.b, "iperf3", "-s", "-1", "-J", "-p", str(p), stdout=subprocess.PIPE, text=True
        )
        for p in (5201, 5202)
    ]
    time.sleep(0.7)
    duration, swap_at = 8.0, 3.5
    clients = [
        pair.popen(
            pair.a,
            "iperf3",
            "-c",
            pair.addr_b,
            "-p",
            str(p),
            "-t",
            str(duration),
            "-i",
            "0.5",
            stdout=subprocess.DEVNULL,
        )
        for p in (5201, 5202)
    ]
    t0 = time.monotonic()
    time.sleep(swap_at)
    res = apply(agent, 2, [(f1, 2, 40), (f2, 1, 48)])
    swapped = time.monotonic() - t0
    assert res.applied, res.error
    for c in clients:
        c.wait(timeout=30)
    r1, r2 = (receiver_rates(s.communicate(timeout=30)[0]) for s in servers)

    def share(lo: float, hi: float) -> tuple[float, float]:
        """Flow 1's share and the Mbit/s both carried, over iperf3's intervals inside
        [lo, hi]: the rate is over the time those intervals cover, not the window's."""
        inside = [(s, e) for s, e, _ in r1 if s >= lo and e <= hi]
        b1 = sum(b for s, e, b in r1 if s >= lo and e <= hi)
        b2 = sum(b for s, e, b in r2 if s >= lo and e <= hi)
        covered = sum(e - s for s, e in inside)
        return b1 / (b1 + b2), (b1 + b2) * 8 / covered / 1e6

    before, mbps = share(1.0, swapped - 0.1)
    after, _ = share(swapped + 1.0, duration)
    assert before >= 0.9, f"band 1 flow got {before:.1%} before the swap"
    assert 1 - after >= 0.9, f"band 1 flow got {1 - after:.1%} from 1 s after the swap"
    assert 20 <= mbps <= 32, f"bottleneck carried {mbps:.1f} Mbit/s"
    assert root_qdisc(pair.a, pair.nic_a)["handle"] == handle_before


@BACKENDS
def test_dscp_on_the_wire_for_every_band(pair, agent_env, tmp_path, backend):
    agent = agent_env(backend=backend).start()
    ports = list(range(6001, 6008))  # data bands 1..6 and the scavenger band 7
    register(agent, "c1", ports)
    plan = [(f"c1/j1/b:{p}", band, TABLE[band]) for band, p in enumerate(ports, start=1)]
    assert apply(agent, 1, plan).applied
    pair.sink(pair.b, *ports, 7070)
    cap = Capture(pair.popen, pair.b, pair.nic_b, tmp_path / "b.pcap")
    for p in [*ports, 7070]:  # 7070 is the agent port: control traffic, band 0
        pair.run(pair.a, sys.executable, "tests/tcp_tool.py", "send", pair.addr_b, str(p), "20000")
    seen: dict[int, set[int]] = {}
    acks: set[int] = set()
    setup: set[int] = set()
    for pkt in cap.stop():
        if IP not in pkt or TCP not in pkt or pkt[IP].dst != pair.addr_b:
            continue
        if len(pkt[TCP].payload) > 0:
            seen.setdefault(pkt[TCP].dport, set()).add(pkt[IP].tos >> 2)
        elif pkt[TCP].flags == "A":  # pure ACKs ride the control band
            acks.add(pkt[IP].tos >> 2)
        elif pkt[TCP].flags.S or pkt[TCP].flags.F:  # so do handshakes and teardowns
            setup.add(pkt[IP].tos >> 2)
    expected = {p: {TABLE[band]} for band, p in enumerate(ports, start=1)} | {7070: {TABLE[0]}}
    assert seen == expected
    assert len({d for s in seen.values() for d in s}) == 8
    assert acks == {TABLE[0]}, "pure ACKs ride the control band"
    assert setup == {TABLE[0]}, "SYN and FIN segments ride the control band"


def dscp_by_kind(packets: list, src: str) -> dict[tuple[str, int], set[int]]:
    """(kind, port) -> DSCPs seen from ``src``; kind is "data" or "tiny" (pure ACK, SYN,
    FIN, RST); port is the destination port for data and the lower of the two for tiny
    segments (our ports are below the ephemeral range)."""
    out: dict[tuple[str, int], set[int]] = {}
    for pkt in packets:
        if IP not in pkt or TCP not in pkt or pkt[IP].src != src:
            continue
        t = pkt[TCP]
        kind = "data" if len(t.payload) > 0 else "tiny"
        port = t.dport if kind == "data" else min(t.sport, t.dport)
        out.setdefault((kind, port), set()).add(pkt[IP].tos >> 2)
    return out


def test_only_our_connections_acks_and_handshakes_are_remarked(pair, agent_env, tmp_path):
    """Host a sends our flow to b:6001 and receives our flow from b at a:6300 (an inbound
    entry of its plan); a foreign application sends a->b:6002 with its own DSCP 34, and
    another b->a:6301. Captured at b: a's pure ACKs, SYNs and FINs ride the control band
    only on 6001 and 6300; the foreign ones keep DSCP 34 and 0."""
    agent = agent_env().start()
    register(agent, "c1", [6001])
    assert apply(agent, 1, [("c1/j1/b:6001", 1, TABLE[1])], inbound=[("b", 6300)]).applied
    pair.sink(pair.b, 6001, 6002)
    pair.sink(pair.a, 6300, 6301)
    cap = Capture(pair.popen, pair.b, pair.nic_b, tmp_path / "b.pcap")
    tool = (sys.executable, "tests/tcp_tool.py", "send")
    pair.run(pair.a, *tool, pair.addr_b, "6001", "300000")
    pair.run(pair.a, *tool, pair.addr_b, "6002", "300000", "--tos", str(34 << 2))
    pair.run(pair.b, *tool, pair.addr_a, "6300", "300000")
    pair.run(pair.b, *tool, pair.addr_a, "6301", "300000")
    seen = dscp_by_kind(cap.stop(), pair.addr_a)
    assert seen[("data", 6001)] == {TABLE[1]}
    assert seen[("tiny", 6001)] == {TABLE[0]}, "our flow's ACKs and handshakes: control"
    assert seen[("tiny", 6300)] == {TABLE[0]}, "ACKs of an inbound flow of ours: control"
    assert seen[("data", 6002)] == {34}
    assert seen[("tiny", 6002)] == {34}, "a foreign app's ACKs and handshakes keep DSCP 34"
    assert seen[("tiny", 6301)] == {0}, "a foreign app's ACKs keep DSCP 0"


@BACKENDS
@QUEUES
def test_sigterm_removes_everything_and_restart_reconciles_stale_state(pair, agent_env, backend):
    before_qdisc = root_qdisc(pair.a, pair.nic_a)["kind"]
    before_all = tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a)
    agent = agent_env(backend=backend).start()
    register(agent, "c1", [5201])
    assert apply(agent, 1, [("c1/j1/b:5201", 1, 48)]).applied
    root = root_qdisc(pair.a, pair.nic_a)
    assert root["handle"] == f"{HANDLE_MAJOR:x}:"
    assert root["kind"] == ("mq" if pair.txqueues > 1 else backend)
    handle = root["handle"]
    # killed agent: rules stay behind, and its registry's private directory
    mark = agent.registry.with_name(agent.registry.name + ".private")
    agent.stop(signal.SIGKILL)
    want = BandLayout(backend, 8).classid_text(1)
    assert nft_map(pair.a, "band_dport") == {(pair.addr_b, 5201): want}
    left = Path(os.readlink(mark))
    assert left.is_dir()
    # a new agent reconciles: same qdisc, our table replaced with an empty one; the
    # registry survived the restart through its state file; the directory is gone
    agent.start()
    assert not left.exists(), "the killed agent's private directory was left"
    private = Path(os.readlink(mark))
    assert root_qdisc(pair.a, pair.nic_a)["handle"] == handle
    assert nft_map(pair.a, "band_dport") == {}
    assert [j.job.cojob_id for j in collect(agent).jobs] == ["c1"]
    assert apply(agent, 1, [("c1/j1/b:5201", 2, 40)]).applied
    assert agent.stop() == 0
    assert not private.exists() and not mark.is_symlink()
    assert root_qdisc(pair.a, pair.nic_a)["kind"] == before_qdisc
    assert tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a) == before_all
    assert not any(
        q.get("handle", "").startswith(f"{HANDLE_MAJOR:x}")
        for q in tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a)
    )
    assert nft_tables(pair.a) == []


def test_a_running_agent_has_not_loaded_the_planners_libraries(pair, agent_env):
    """Every host runs an agent; the LP solver, SciPy and numba's compiler are the
    coordinator's and the simulator's. Read from the live process's memory map."""
    agent = agent_env().start()
    maps = Path(f"/proc/{agent.proc.pid}/maps").read_text()
    libs = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    assert any("/grpc/" in path for path in libs), "the map shows the agent's own libraries"
    heavy = sorted(p for p in libs if any(k in p for k in ("scipy", "highs", "llvmlite", "numba")))
    assert not heavy, heavy
