"""Jobs known by their cgroup: the kernel classifies their traffic from the first packet.

Real cgroups (made by the tests under the host's cgroup2 mount, laid out as the cluster
managers lay them out), a real agent in a namespace entered with nsenter (``ip netns
exec`` remounts /sys, where nftables resolves cgroup paths), real TCP, and independent
checks: ``tc -s`` class counters, a tcpdump capture read with scapy, ``nft -j``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from scapy.all import IP, TCP

from grouper.agent.cgroups import JOBS_ROOT, Cgroups, cgroup2_mount
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.kernel.agent_calls import apply, collect
from tests.kernel.test_agent import TABLE
from tests.kernel.test_discovery import band_bytes, start_capture
from tests.netns import GROUPER, nft_json

BAND = 2
CTL_DSCP = TABLE[0]
MOUNT = cgroup2_mount() or ""

SHORT_CONNECTIONS = """
import socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sports, sent = [], 0
for _ in range(n):
    s = socket.create_connection((addr, port))
    sent += s.send(b"x" * 3000)
    sports.append(s.getsockname()[1])
    s.close()
print(" ".join(map(str, sports)), sent, flush=True)
"""


def manager_layouts(tag: str) -> dict[str, str]:
    """The cgroup of one job as each cluster manager names it (cgroup v2 paths)."""
    uid = str(uuid.uuid4()).replace("-", "_")
    return {
        "kubernetes": f"/gk{tag}.slice/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid}.slice",
        "slurm": f"/gk{tag}.slice/system.slice/slurmstepd.scope/job_4242/step_0",
        "systemd": f"/gk{tag}.slice/system.slice/train-{tag}.service",
    }


@pytest.fixture
def cgroups():
    """Make cgroups under the cgroup2 mount; at the end, every process still in one is
    moved to the root and every cgroup made is removed, whatever the test did."""
    if not MOUNT:
        pytest.fail("no cgroup2 mount on this host")
    made: list[Path] = []

    def make(path: str) -> Path:
        d = Path(MOUNT + path)
        d.mkdir(parents=True, exist_ok=True)
        made.append(d)
        return d

    yield make
    tree = Cgroups(MOUNT)
    for top in {"/" + str(d.relative_to(MOUNT)).split("/")[0] for d in made}:
        tree.remove_tree(top)  # the test's own /gk... tree


def register(agent, cgroup: str, job: str = "j1", **kw) -> pb.Ack:
    with grpc.insecure_channel(f"unix:{agent.registry}") as ch:
        return pbg.RegistryStub(ch).RegisterJob(
            pb.JobRegistration(
                cojob_id="c1", job_id=job, arch="flows", stage_iterations=[100], cgroup=cgroup,
                **kw,
            ),
            timeout=5,
        )  # fmt: skip


def in_cgroup(directory: Path):
    """preexec_fn: the child enters the cgroup before it execs (so its first socket is
    the job's)."""
    return lambda: (directory / "cgroup.procs").write_text(str(os.getpid()))


def short_connections(pair, port: int, n: int, directory: Path | None) -> tuple[list[int], int]:
    proc = pair.popen(
        pair.a, sys.executable, "-c", SHORT_CONNECTIONS, pair.addr_b, str(port), str(n),
        stdout=subprocess.PIPE, text=True,
        preexec_fn=in_cgroup(directory) if directory else None,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=60)
    words = out.split()
    return [int(w) for w in words[:-1]], int(words[-1])


def sink(pair) -> int:
    """A TCP sink on host b on a port the kernel picks; the port."""
    proc = pair.popen(
        pair.b, sys.executable, "tests/tcp_tool.py", "sink", "0",
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    words = proc.stdout.readline().split()
    assert words[0] == "ready"
    return int(words[1])


def plan_job(agent, path: str) -> None:
    """Job c1/j1, known by the cgroup ``path``, planned in BAND toward host b."""
    assert register(agent, path).ok
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied


def sent_in_band(pair, port: int, n: int, directory: Path, what: str) -> None:
    """``n`` connections from a process in ``directory``: all their bytes in BAND."""
    before = band_bytes(pair.a, pair.nic_a, BAND)
    _, sent = short_connections(pair, port, n, directory)
    assert band_bytes(pair.a, pair.nic_a, BAND) - before >= sent, what


@pytest.fixture
def cg_agent(agent_env):
    """An agent entered with nsenter; given a cgroup path, with job c1/j1 planned in it."""

    def start(path: str | None = None):
        agent = agent_env()
        agent.nsenter = True
        agent.start()
        if path is not None:
            plan_job(agent, path)
        return agent

    return start


def test_short_connections_of_a_cgroup_job_are_classified_from_the_first_packet(
    pair, cg_agent, cgroups, tmp_path
):
    """A job in a Slurm-style step cgroup opens 100 connections of one write each (a few
    ms each, far shorter than a discovery round): every byte is counted in its band by
    the qdisc, every data packet carries its DSCP and every handshake segment the
    control DSCP, none DSCP 0; a process outside the cgroup is untouched."""
    path = manager_layouts(uuid.uuid4().hex[:6])["slurm"]
    step = cgroups(path)
    cg_agent(path)
    port = sink(pair)
    read = start_capture(pair, tmp_path / "rx.pcap", "tcp")
    before = band_bytes(pair.a, pair.nic_a, BAND)
    mine, sent = short_connections(pair, port, 100, step)
    other, _ = short_connections(pair, port, 5, None)
    packets = [p for p in read() if IP in p and TCP in p and p[IP].dst == pair.addr_b]
    assert band_bytes(pair.a, pair.nic_a, BAND) - before >= sent, "every byte in the band"
    by_port: dict[int, set[tuple[bool, int]]] = {}
    for p in packets:
        by_port.setdefault(p[TCP].sport, set()).add((len(p[TCP].payload) > 0, p[IP].tos >> 2))
    assert set(mine) <= set(by_port), "every connection was captured"
    for sport in mine:
        data = {d for has, d in by_port[sport] if has}
        tiny = {d for has, d in by_port[sport] if not has}
        assert data == {TABLE[BAND]}, f"port {sport}: data DSCP {data}"
        assert tiny <= {CTL_DSCP, TABLE[BAND]}, f"port {sport}: SYN/ACK/FIN DSCP {tiny}"
    for sport in other:
        assert {d for _, d in by_port[sport]} == {0}, "another process keeps its DSCP"


@pytest.mark.parametrize("manager", ["kubernetes", "slurm", "systemd"])
def test_each_managers_cgroup_layout_is_matched_at_its_level(pair, cg_agent, cgroups, manager):
    """The cgroup as the manager lays it out: nftables gets it at its level, with the
    job's processes in a cgroup below it (a container, a task) still matched."""
    path = manager_layouts(uuid.uuid4().hex[:6])[manager]
    cgroups(path)
    leaf = cgroups(path + "/task_0")
    cg_agent(path)
    level = path.count("/")
    maps = {o["map"]["name"]: o["map"] for o in nft_json(pair.a) if "map" in o}
    (elem,) = maps[f"band_cg4_{level}"]["elem"]
    assert elem[0]["concat"][1] == pair.addr_b
    sent_in_band(pair, sink(pair), 3, leaf, "a cgroup below the job's is the job's")


def test_a_cgroup_removed_and_made_again_is_followed_and_one_left_gone_ends_its_job(
    pair, cg_agent, cgroups
):
    path = manager_layouts(uuid.uuid4().hex[:6])["systemd"]
    unit = cgroups(path)
    agent = cg_agent(path)
    port = sink(pair)
    unit.rmdir()
    unit.mkdir()  # the unit restarted: same name, a new cgroup id
    time.sleep(2.0)  # the agent's grace (1 s) and its reload
    sent_in_band(pair, port, 3, unit, "the new cgroup is matched")
    assert not [j for j in collect(agent).jobs if j.finished]
    unit.rmdir()
    deadline = time.monotonic() + 5
    while not [j for j in collect(agent).jobs if j.job.job_id == "j1" and j.finished]:
        assert time.monotonic() < deadline, "a job whose cgroup is gone did not end"
        time.sleep(0.1)
    assert not any(o["map"].get("elem") for o in nft_json(pair.a) if "map" in o)


def test_grouper_run_gives_the_job_a_cgroup_and_the_agent_leaves_none_behind(pair, cg_agent):
    """``grouper run`` (default ``--cgroup auto``): the agent makes the job's cgroup and
    the command runs in it; stopping the agent mid-job removes its table and the cgroup
    (the command moved back where it came from) and leaves the command running."""
    agent = cg_agent()
    cojob = f"c{uuid.uuid4().hex[:6]}"
    run = pair.popen(
        pair.a, *GROUPER, "run", "--cojob", cojob, "--job", "j1", "--stages", "10",
        "--socket", str(agent.registry), "--", sys.executable, "-c",
        "import time; print([ln for ln in open('/proc/self/cgroup') if ln[:3] == '0::'][0],"
        " flush=True); time.sleep(30)",
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = run.stdout.readline()
        assert f"0::{JOBS_ROOT}/{cojob}/j1" in line, line
        assert [j.job.job_id for j in collect(agent).jobs] == ["j1"]
        assert agent.stop() == 0
        assert not Path(MOUNT + JOBS_ROOT).exists(), "the agent removed the cgroup it made"
        tables = [o for o in nft_json(pair.a) if "table" in o]
        assert not [t for t in tables if t["table"]["name"] == "grouper"]
        assert run.poll() is None, "the job runs on, unscheduled"
    finally:
        run.send_signal(signal.SIGTERM)  # the launcher ends its command and waits for it
        run.wait(timeout=10)


@pytest.mark.parametrize(
    "cgroup, message",
    [
        ("/gk-no-such-cgroup", "cgroup: no cgroup '/gk-no-such-cgroup'"),
        ("/a/../b", "cgroup: bad component '..'"),
        ("relative/path", "cgroup: must start with '/'"),
        ("/" + "x" * 5000, "cgroup: longer than the kernel allows"),
        ("/a b", "cgroup: bad component 'a b'"),
    ],
)
def test_bad_cgroups_are_refused_naming_the_field(pair, cg_agent, cgroup, message):
    agent = cg_agent()
    ack = register(agent, cgroup)
    assert not ack.ok and ack.error.startswith(message), ack.error
    assert not collect(agent).jobs, "nothing else changed"


def test_a_cgroup_of_another_job_is_refused(pair, cg_agent, cgroups):
    path = manager_layouts(uuid.uuid4().hex[:6])["kubernetes"]
    cgroups(path + "/inner")
    agent = cg_agent()
    assert register(agent, path).ok
    for other in (path, path + "/inner"):
        ack = register(agent, other, job="j2")
        assert not ack.ok and ack.error.startswith("cgroup: ") and "c1/j1" in ack.error
    assert [j.job.job_id for j in collect(agent).jobs] == ["j1"]


def test_an_ipv6_connection_of_a_cgroup_job_carries_its_traffic_class(pair, cgroups, tmp_path):
    """Hosts with an ``address6``: the ``cg6_`` map steers the job's IPv6 traffic, from
    its first data packet, with the planned traffic class."""
    from tests.netns import AgentProc, ipv6_pair_config, ipv6_sink

    a6, b6 = "fd00:78::1", "fd00:78::2"
    cfg = ipv6_pair_config(pair, tmp_path / "cluster.yaml", a6, b6)
    path = manager_layouts(uuid.uuid4().hex[:6])["systemd"]
    unit = cgroups(path)
    agent = AgentProc(pair, pair.a, "a", cfg, tmp_path)
    agent.nsenter = True
    agent.start()
    try:
        plan_job(agent, path)
        port = ipv6_sink(pair)
        read = start_capture(pair, tmp_path / "rx6.pcap", "ip6 and tcp")
        job = pair.popen(
            pair.a, sys.executable, "-c",
            "import socket, sys\ns = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
            "print(s.getsockname()[1], flush=True)\nfor _ in range(20): s.send(b'x' * 1024)\n",
            b6, str(port), stdout=subprocess.PIPE, text=True, preexec_fn=in_cgroup(unit),
        )  # fmt: skip
        sport = int(job.stdout.readline())
        job.wait(timeout=10)
        from scapy.all import IPv6

        mine = [p for p in read() if IPv6 in p and TCP in p and p[TCP].sport == sport]
        data_tc = {p[IPv6].tc >> 2 for p in mine if len(p[TCP].payload) > 0}
        assert data_tc == {TABLE[BAND]}, data_tc
    finally:
        agent.stop()


def test_a_cgroup_jobs_bytes_are_reported_in_its_planned_band(pair, cg_agent, cgroups):
    """The agent's report to the coordinator (``bytes_in_planned_band``) credits a cgroup
    job's bytes to the cgroup's rule toward the destination, which is what the kernel
    matched them with (there is no per-connection rule for such a job)."""
    path = manager_layouts(uuid.uuid4().hex[:6])["systemd"]
    unit = cgroups(path)
    agent = cg_agent(path)
    port = sink(pair)
    job = pair.popen(
        pair.a, sys.executable, "tests/job_tool.py", pair.addr_b,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=in_cgroup(unit),
    )  # fmt: skip
    job.stdin.write(f"{port} 3\n")
    job.stdin.close()
    job.wait(timeout=30)
    deadline = time.monotonic() + 5
    while True:  # the agent reads its connections' bytes once a second
        (state,) = [j for j in collect(agent).jobs if j.job.job_id == "j1"]
        if state.bytes_sent > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state.bytes_sent > 100_000, state
    assert state.bytes_in_planned_band == state.bytes_sent, state
