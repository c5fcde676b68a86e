"""A job known only by its processes: the agent finds its connections and classifies them.

The job is two real processes in two namespaces (a sender on host a, a receiver on host
b listening on ports the kernel picked); nobody registers a port. Checked with
independent tools: ``nft -j`` for the agent's per-connection elements, ``tc -j -s`` for
the bytes in the planned band, and a tcpdump capture read with scapy for the DSCP.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from scapy.all import IP, TCP, IPv6

from grouper.agent.kernel.layout import BandLayout
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.capture import Capture
from tests.kernel.test_agent import TABLE, apply, collect
from tests.netns import GROUPER, ROOT, TIME_SCALE, nft_json, root_qdisc, sh

BAND = 2
# seconds, times the machine's slowness (the VM layer's); `grouper bench discovery`
# measures the real figure (p99 ~0.13 s)
RECLASSIFY_BOUND = 1.0 * TIME_SCALE
SENDING = 1.5 * TIME_SCALE  # seconds a job sends on a connection: past the bound


def conn_elements(ns: str) -> dict[int, str]:
    """Source port -> classid of the elements of our per-connection band map."""
    out = {}
    for o in nft_json(ns):
        m = o.get("map")
        if m and m["name"] == "band_conn":
            for key, value in m.get("elem", []):
                _, _, sport, _ = key["concat"]
                out[int(sport)] = value
    return out


def band_bytes(ns: str, dev: str, band: int) -> int:
    """Bytes sent by the band's class, read with ``tc -s class show`` (this iproute2
    prints classes as text even with ``-j``)."""
    layout = BandLayout(root_qdisc(ns, dev)["kind"], 8)
    want = layout.classid_text(band)
    lines = sh("ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev).stdout
    lines = lines.splitlines()
    for i, line in enumerate(lines):
        words = line.split()
        if len(words) > 2 and words[0] == "class" and words[2] == want:
            sent = lines[i + 1].split()
            assert sent[0] == "Sent", lines[i + 1]
            return int(sent[1])
    raise AssertionError(f"no class {want} on {dev}")


@pytest.fixture
def receiver(pair):
    sink = pair.popen(
        pair.b, sys.executable, "tests/tcp_tool.py", "sink", "0", "0",
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    words = sink.stdout.readline().split()
    assert words[0] == "ready"
    return [int(p) for p in words[1:]]


def start_capture(pair, path, bpf: str):
    """A capture on host b's NIC; the returned function stops it and reads the packets."""
    return Capture(pair.popen, pair.b, pair.nic_b, path, bpf).stop


@pytest.fixture
def capture(pair, tmp_path):
    read = start_capture(pair, tmp_path / "rx.pcap", "tcp")
    return lambda: [p for p in read() if IP in p and TCP in p and p[IP].dst == pair.addr_b]


def send(job: subprocess.Popen, port: int, seconds: float) -> dict:
    job.stdin.write(f"{port} {seconds}\n")
    job.stdin.flush()
    return json.loads(job.stdout.readline())


def wait_classified(ns: str, sport: int, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if sport in conn_elements(ns):
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def register_pids(agent, pids: list[int]) -> pb.Ack:
    with grpc.insecure_channel(f"unix:{agent.registry}") as ch:
        return pbg.RegistryStub(ch).RegisterJob(
            pb.JobRegistration(
                cojob_id="c1", job_id="j1", arch="flows", stage_iterations=[100], pids=pids
            ),
            timeout=5,
        )


def segments(packets: list, sport: int) -> list[tuple[float, int, int]]:
    """(time, DSCP, payload bytes as sent) of the connection's data segments, IPv4 or
    IPv6 (the capture keeps headers only)."""
    out = []
    for p in packets:
        if TCP not in p or p[TCP].sport != sport:
            continue
        if IP in p:
            size, dscp = p[IP].len - 4 * p[IP].ihl - 4 * p[TCP].dataofs, p[IP].tos >> 2
        elif IPv6 in p:
            size, dscp = p[IPv6].plen - 4 * p[TCP].dataofs, p[IPv6].tc >> 2
        else:
            continue
        if size > 0:
            out.append((float(p.time), dscp, size))
    return out


def check_marked(packets: list, sports: set[int], dscp: int) -> int:
    """Each connection's payload carries the planned DSCP from the moment the agent found
    it: unmarked (DSCP 0) payload only at its start, within RECLASSIFY_BOUND of its first
    byte, never after a marked segment. Returns the payload bytes sent marked: what left
    after the connection was classified, however long the finding took on this machine."""
    marked = 0
    for sport in sports:
        data = segments(packets, sport)
        marks = [d for _, d, _ in data]
        assert set(marks) <= {dscp, 0}, (sport, sorted(set(marks)))
        assert dscp in marks, f"port {sport}: no payload marked {dscp}"
        first = marks.index(dscp)
        assert 0 not in marks[first:], f"port {sport}: unmarked payload after marked"
        unmarked_for = data[first][0] - data[0][0]
        assert unmarked_for <= RECLASSIFY_BOUND, (sport, unmarked_for)
        marked += sum(size for _, _, size in data[first:])
    return marked


def test_job_found_by_pid_is_classified_and_a_reconnect_again(pair, agent_env, receiver, capture):
    agent = agent_env().start()
    job = pair.popen(
        pair.a, sys.executable, "tests/job_tool.py", pair.addr_b,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    ack = register_pids(agent, [job.pid])
    assert ack.ok, ack.error
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
    before = band_bytes(pair.a, pair.nic_a, BAND)
    first = send(job, receiver[0], SENDING)
    done1 = json.loads(job.stdout.readline())
    second = send(job, receiver[1], SENDING)  # a rank that reconnects, on a new port
    took = wait_classified(pair.a, second["sport"], RECLASSIFY_BOUND)
    assert took is not None, "the new connection was not classified"
    done2 = json.loads(job.stdout.readline())
    assert first["sport"] != second["sport"]
    sent = done1["bytes"] + done2["bytes"]
    moved = band_bytes(pair.a, pair.nic_a, BAND) - before
    # every byte sent after the connections were classified left in the planned band
    # (the band's count has headers on top); what went before is bounded by check_marked
    marked = check_marked(capture(), {first["sport"], second["sport"]}, TABLE[BAND])
    assert 0 < marked <= sent and moved >= marked, (moved, marked, sent)
    report = collect(agent)
    (state,) = [j for j in report.jobs if j.job.job_id == "j1"]
    # no figure declared and no progress to measure per iteration: nothing is reported,
    # so the coordinator does not plan a load it cannot know
    assert list(state.job.flows) == []


def test_traffic_of_other_processes_is_left_alone(pair, agent_env, receiver):
    agent = agent_env().start()
    job = pair.popen(
        pair.a, sys.executable, "tests/job_tool.py", pair.addr_b,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    stranger = pair.popen(
        pair.a, sys.executable, "tests/job_tool.py", pair.addr_b,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert register_pids(agent, [job.pid]).ok
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
    mine = send(job, receiver[0], SENDING)
    other = send(stranger, receiver[1], SENDING)
    assert wait_classified(pair.a, mine["sport"], RECLASSIFY_BOUND) is not None
    time.sleep(0.5)
    assert other["sport"] not in conn_elements(pair.a)


def test_bad_pids_are_refused_with_the_field_named(pair, agent_env):
    agent = agent_env().start()
    ack = register_pids(agent, [agent.proc.pid])
    assert not ack.ok and ack.error.startswith("pids[0]: ") and "agent's own" in ack.error
    ack = register_pids(agent, [2**22 + 7])
    assert not ack.ok and ack.error.startswith("pids[0]: no running process")


JOB_TOOL = ROOT / "tests" / "job_tool.py"


def job_under_grouper_run(
    pair, agent, receiver, capture, grouper: list[str], python: str, cwd: str | None = None,
    tool: Path = JOB_TOOL,
) -> subprocess.Popen:  # fmt: skip
    """``grouper`` (the launcher's argv) runs ``tool`` (tests/job_tool.py) with
    ``python``: the job registers, its connection is classified and marked, its
    progress and its end reach the agent. Returns the finished launcher."""
    run = pair.popen(
        pair.a, *grouper, "run", "--cojob", "c1", "--job", "j1", "--stages", "100000",
        "--socket", str(agent.registry), "--", python, str(tool),
        pair.addr_b, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while not [j for j in collect(agent).jobs if j.job.job_id == "j1"]:
        assert time.monotonic() < deadline, "grouper run did not register the job"
        time.sleep(0.1)
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
    conn = send(run, receiver[0], SENDING)
    assert wait_classified(pair.a, conn["sport"], RECLASSIFY_BOUND) is not None
    json.loads(run.stdout.readline())
    run.stdin.close()
    assert run.wait(timeout=15) == 0
    check_marked(capture(), {conn["sport"]}, TABLE[BAND])
    (state,) = [j for j in collect(agent).jobs if j.job.job_id == "j1"]
    assert state.finished, "the launcher reports the job finished when the command exits"
    assert state.iterations_done > 0, "the client under grouper run reported progress"
    return run


def test_job_started_with_grouper_run(pair, agent_env, receiver, capture):
    agent = agent_env().start()
    job_under_grouper_run(pair, agent, receiver, capture, GROUPER, sys.executable, cwd=ROOT)
    deadline = time.monotonic() + 2.0  # the next discovery round (100 ms) removes them
    while conn_elements(pair.a):
        assert time.monotonic() < deadline, "a finished job's connections stayed in the kernel"
        time.sleep(0.05)


def test_an_ipv6_connection_of_the_job_is_classified(pair, tmp_path):
    """Hosts with an ``address6``: the job's IPv6 connection gets its element in the
    ``conn6`` map and its packets the planned traffic class on the wire."""
    from tests.netns import AgentProc, ipv6_pair_config, ipv6_sink

    a6, b6 = "fd00:77::1", "fd00:77::2"
    cfg = ipv6_pair_config(pair, tmp_path / "cluster.yaml", a6, b6)
    agent = AgentProc(pair, pair.a, "a", cfg, tmp_path).start()
    try:
        port = ipv6_sink(pair)
        read = start_capture(pair, tmp_path / "rx6.pcap", "ip6 and tcp")
        job = pair.popen(
            pair.a, sys.executable, "-c",
            "import socket, sys, time\n"
            "s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
            "print(s.getsockname()[1], flush=True)\nend = time.monotonic() + float(sys.argv[3])\n"
            "while time.monotonic() < end:\n    s.send(b'x' * 1024); time.sleep(0.001)\n",
            b6, str(port), str(2 * TIME_SCALE), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert register_pids(agent, [job.pid]).ok
        assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
        sport = int(job.stdout.readline())
        deadline, found = time.monotonic() + RECLASSIFY_BOUND, False
        while time.monotonic() < deadline and not found:
            for o in nft_json(pair.a):
                m = o.get("map")
                if m and m["name"] == "band_conn6":
                    found = any(int(k["concat"][2]) == sport for k, _ in m.get("elem", []))
            time.sleep(0.02)
        assert found, "no conn6 element for the job's IPv6 connection"
        job.wait(timeout=10 * TIME_SCALE)
        time.sleep(0.3)
        # the planned traffic class from the moment the connection was found, only
        # unmarked before, within RECLASSIFY_BOUND of its first byte
        assert check_marked(read(), {sport}, TABLE[BAND]) > 0
    finally:
        agent.stop()


LATE_LISTENER = """
import socket, sys, time
srv = socket.socket()
srv.bind((sys.argv[1], 0))
srv.listen()
print(srv.getsockname()[1], flush=True)
sys.stdin.readline()  # the peer has connected: it waits in the accept queue until now
conn, _ = srv.accept()
end = time.monotonic() + 1.5
while time.monotonic() < end:
    conn.send(b"x" * 1024)
    time.sleep(0.0005)
print("done", flush=True)
"""
PEER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
while s.recv(65536):
    pass
"""


def test_a_connection_the_job_accepts_late_is_classified(pair, agent_env):
    """A job's listener that accept()s a connection well after the kernel established
    it (as Gloo's and a rendezvous store's do): before accept() the socket has inode 0
    in socket diagnostics and no owner; once accepted it must be found, not written off
    as another process's traffic."""
    agent = agent_env().start()
    job = pair.popen(
        pair.a, sys.executable, "-c", LATE_LISTENER, pair.addr_a,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    port = int(job.stdout.readline())
    assert register_pids(agent, [job.pid]).ok
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
    peer = pair.popen(
        pair.b, sys.executable, "-c", PEER, pair.addr_a, str(port),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert peer.stdout.readline().strip() == "connected"
    time.sleep(1.0)  # ten discovery rounds while the connection waits to be accepted
    assert port not in conn_elements(pair.a)
    job.stdin.write("accept\n")
    job.stdin.flush()
    assert wait_classified(pair.a, port, RECLASSIFY_BOUND) is not None, (
        "the accepted connection was written off while it waited for accept()"
    )
    assert job.stdout.readline().strip() == "done"
