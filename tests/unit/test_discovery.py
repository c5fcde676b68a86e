"""Discovery logic without root: the tracker with a scripted socket table, load
estimates, reported flows, plans over connections, pid checks with real processes, and
the netlink parser against pyroute2's own on loopback sockets."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from grouper.agent.discovery import procs as P
from grouper.agent.discovery.load import LoadEstimate, round2
from grouper.agent.discovery.sockdiag import (
    DumpRefused,
    SockDiag,
    TcpSocket,
    tcp_opens,
    tcp_segments,
)
from grouper.agent.discovery.tracker import QUIET_READS, Tracker
from grouper.agent.plan import Rule, compose, plan_entries
from grouper.agent.registry import FINISHED_GRACE, Registry
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.common.registration import Flow, parse_registration, reported_flows

HOSTS = {"10.0.0.1": "a", "10.0.0.2": "b", "10.0.0.3": "c", "fd00::2": "b"}
J1, J2 = ("c1", "j1"), ("c2", "j2")


def sock(cookie: int, inode: int, daddr: str = "10.0.0.2", sport: int = 40000, acked: int = -1):
    fam = socket.AF_INET6 if ":" in daddr else socket.AF_INET
    saddr = "fd00::1" if fam == socket.AF_INET6 else "10.0.0.1"
    return TcpSocket(cookie.to_bytes(8, "little"), inode, fam, saddr, sport, daddr, 5000, acked)


class FakeDiag:
    def __init__(self) -> None:
        self.table: list[TcpSocket] = []

    def scan(self, known, new, *, info=False):
        alive = {}
        for s in self.table:
            alive[s.cookie] = s.bytes_acked if info else -1
            if known is None or s.cookie not in known:
                new.append(s if info else s._replace(bytes_acked=-1))
        return alive


def tracker(inodes: dict[int, set[int]]) -> tuple[Tracker, FakeDiag]:
    diag = FakeDiag()
    t = Tracker(
        "a",
        HOSTS,
        diag,
        descendants=lambda roots: {j: set(ps) for j, ps in roots.items()},
        socket_inodes=lambda pid: inodes.get(pid, set()),
    )
    return t, diag


def test_new_sockets_are_matched_to_jobs_by_inode_and_strangers_remembered():
    inodes = {101: {1, 2}, 202: {3}}
    t, diag = tracker(inodes)
    jobs = {J1: {P.Proc(101, 5)}, J2: {P.Proc(202, 6)}}
    diag.table = [sock(1, 1), sock(2, 2, "10.0.0.3"), sock(3, 3, "fd00::2"), sock(9, 9)]
    assert t.refresh(jobs) == {J1, J2}
    conns = t.connections()
    assert conns[(J1, "b")] == [("conn", "10.0.0.1", "10.0.0.2", 40000, 5000)]
    assert conns[(J1, "c")] == [("conn", "10.0.0.1", "10.0.0.3", 40000, 5000)]
    assert conns[(J2, "b")] == [("conn6", "fd00::1", "fd00::2", 40000, 5000)]
    assert sock(9, 9).cookie in t.foreign
    scans = t.scans
    assert t.refresh(jobs) == set() and t.scans == scans, "a steady table costs no /proc scan"
    diag.table = diag.table[1:]  # the first connection closes
    assert t.refresh(jobs) == {J1}
    assert (J1, "b") not in t.connections()


def test_a_connection_accepted_late_is_classified_once_accepted():
    """Before accept() the socket has inode 0: not foreign, looked at again until a
    process holds it (a listener that accepts late must not lose its connection)."""
    t, diag = tracker({101: {7}})
    jobs = {J1: {P.Proc(101, 5)}}
    diag.table = [sock(1, 0)]  # established, in the listener's accept queue
    assert t.refresh(jobs) == set()
    assert sock(1, 0).cookie not in t.foreign
    assert t.refresh(jobs) == set()
    diag.table = [sock(1, 7)]  # accept(): the same socket now has the job's inode
    assert t.refresh(jobs) == {J1}
    assert t.connections()[(J1, "b")] == [("conn", "10.0.0.1", "10.0.0.2", 40000, 5000)]


def test_no_dump_while_no_connection_opened_and_nothing_else_can_change():
    """The namespace's open count unchanged, nothing registered, none waiting for
    accept() and no bytes to read: the kernel's socket table is not walked. Each of
    those makes the next refresh dump."""
    t, diag = tracker({101: {1, 2}})
    opens = [10]
    t.opens = lambda: opens[0]
    jobs = {J1: {P.Proc(101, 5)}}
    diag.table = [sock(1, 1)]
    assert t.refresh(jobs) == {J1} and t.dumps == 1
    diag.table = [sock(1, 1), sock(2, 2)]  # not counted as opened: not looked for
    assert t.refresh(jobs) == set() and t.dumps == 1
    opens[0] += 1
    assert t.refresh(jobs) == {J1} and t.dumps == 2
    assert t.refresh(jobs, info=True) == set() and t.dumps == 3  # bytes: always a dump
    t.forget_foreign()
    t.refresh(jobs)
    assert t.dumps == 4
    diag.table.append(sock(3, 0))  # established, not accepted yet
    opens[0] += 1
    t.refresh(jobs)
    t.refresh(jobs)
    assert t.dumps == 6, "a connection waiting for accept() is looked at every refresh"
    diag.table[-1] = sock(3, 2)
    t.refresh(jobs)
    t.refresh(jobs)
    assert t.dumps == 7
    t.opens = lambda: None  # the count unknown: a dump every refresh
    t.refresh(jobs)
    t.refresh(jobs)
    assert t.dumps == 9
    t.opens = lambda: opens[0]
    t.refresh(jobs)
    t.forget_foreign()
    scan = diag.scan
    diag.scan = lambda *a, **k: (_ for _ in ()).throw(OSError("dump failed"))
    with pytest.raises(OSError):
        t.refresh(jobs)
    diag.scan = scan
    t.refresh(jobs)
    assert t.dumps == 12, "a failed refresh leaves its reason to dump"


def test_bytes_are_read_again_only_after_a_segment_came_or_went():
    """A refresh that reads bytes dumps unless no TCP segment was received or sent in
    the namespace since the last one read them (the count read before that dump)."""
    t, diag = tracker({101: {1}})
    opens, segs = [10], [500]
    t.opens, t.segments = (lambda: opens[0]), (lambda: segs[0])
    jobs = {J1: {P.Proc(101, 5)}}
    diag.table = [sock(1, 1)]
    assert t.refresh(jobs, info=True) == {J1} and t.dumps == 1
    for _ in range(QUIET_READS):
        t.refresh(jobs, info=True)
    assert t.dumps == 1, "nothing in or out: the bytes acked are those read"
    t.refresh(jobs, info=True)
    assert t.dumps == 2, "every tenth refresh with bytes dumps whatever the counts say"
    segs[0] += 1
    t.refresh(jobs, info=True)
    assert t.dumps == 3
    opens[0] += 1
    t.refresh(jobs)  # a dump without bytes: the next one with bytes compares with 501
    t.refresh(jobs, info=True)
    assert t.dumps == 4
    segs[0] += 1
    t.refresh(jobs)
    assert t.dumps == 4, "a segment alone: nothing new to find without bytes"
    t.refresh(jobs, info=True)
    assert t.dumps == 5
    t.segments = lambda: None  # the count unknown: bytes read at every such refresh
    t.refresh(jobs, info=True)
    t.refresh(jobs, info=True)
    assert t.dumps == 7


@contextlib.contextmanager
def loopback_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP connection over loopback: (the connecting end, the accepted end)."""
    srv = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    try:
        yield c, a
    finally:
        for x in (a, c, srv):
            x.close()


def test_the_segment_count_grows_with_data_sent_in_the_namespace():
    before = tcp_segments()
    assert before is not None
    with loopback_pair() as (c, a):
        c.sendall(b"x")
        assert a.recv(1) == b"x"
        # on loopback each segment is counted out and in: the handshake's three and
        # the data, at least (InSegs alone would give 4)
        assert tcp_segments() >= before + 8
    assert tcp_segments("/nonexistent") is None


def test_the_open_count_grows_with_each_connection_of_the_namespace():
    before = tcp_opens()
    assert before is not None
    with loopback_pair():
        assert tcp_opens() >= before + 2  # one active open, one passive (others may too)
    assert tcp_opens("/nonexistent") is None


def test_sockets_to_this_host_or_outside_the_cluster_are_never_ours():
    t, diag = tracker({101: {1, 2}})
    diag.table = [sock(1, 1, "10.0.0.1"), sock(2, 2, "192.0.2.9")]
    assert t.refresh({J1: {P.Proc(101, 5)}}) == set()
    assert t.scans == 0 and len(t.foreign) == 2


def test_a_socket_seen_before_its_job_registered_is_found_after():
    inodes: dict[int, set[int]] = {}
    t, diag = tracker(inodes)
    diag.table = [sock(1, 1)]
    assert t.refresh({J2: {P.Proc(202, 6)}}) == set()  # nobody owns it yet
    inodes[101] = {1}
    t.forget_foreign()
    assert t.refresh({J1: {P.Proc(101, 5)}, J2: {P.Proc(202, 6)}}) == {J1}


def test_dual_stack_sockets_speaking_ipv4_get_ipv4_keys():
    t, diag = tracker({101: {1}})
    s = sock(1, 1)._replace(
        family=socket.AF_INET6, saddr="::ffff:10.0.0.1", daddr="::ffff:10.0.0.2"
    )
    diag.table = [s]
    t.refresh({J1: {P.Proc(101, 5)}})
    assert t.connections() == {(J1, "b"): [("conn", "10.0.0.1", "10.0.0.2", 40000, 5000)]}


def test_bytes_acked_are_counted_per_job_and_host_from_zero_for_new_connections():
    t, diag = tracker({101: {1, 2}})
    jobs = {J1: {P.Proc(101, 5)}}
    diag.table = [sock(1, 1, acked=1000), sock(2, 2, "10.0.0.3", acked=50)]
    t.refresh(jobs, info=True)
    kb, kc = (
        ("conn", "10.0.0.1", "10.0.0.2", 40000, 5000),
        ("conn", "10.0.0.1", "10.0.0.3", 40000, 5000),
    )
    assert t.take_sent() == {(J1, "b", kb): 1000, (J1, "c", kc): 50}
    diag.table = [sock(1, 1, acked=4000), sock(2, 2, "10.0.0.3", acked=50)]
    t.refresh(jobs)  # no tcp_info: nothing counted
    t.refresh(jobs, info=True)
    assert t.take_sent() == {(J1, "b", kb): 3000}


def test_load_estimate_moving_average_carry_over_and_decay():
    est = LoadEstimate()
    est.add("b", 1000)
    assert not est.update(0), "no progress: the bytes wait for the next sample"
    est.add("b", 1000)
    assert est.update(2) and est.per_iteration == {"b": 1000.0}
    est.add("b", 3000)
    est.update(3)  # sample 3000 -> 0.5 * 3000 + 0.5 * 1000
    assert est.per_iteration["b"] == 2000.0
    est.update(4)  # the job moved on but sent nothing to b: decays
    assert est.per_iteration["b"] == 1000.0
    assert est.reported() == {"b": 1000.0}
    assert round2(123456) == 120000 and round2(0) == 0.0


def entry(**kw):
    base = {
        "cojob_id": "c1",
        "job_id": "j1",
        "arch": "ring",
        "stage_iterations": [10],
        "model_bytes": 900.0,
    }
    return parse_registration(base | kw, set(HOSTS.values()), local_host="a", host_of=HOSTS)


def test_reported_flows_measured_then_declared_then_model_prior():
    job = entry(flows=[{"dst_host": "10.0.0.3", "bytes_per_iteration": 50}])
    assert job.flows == [Flow("a", "c", 0, 0, 50.0)], "an address names its host"
    flows = {f.dst_host: f.bytes_per_iteration for f in reported_flows(job, {"b", "c"}, "a")}
    assert flows == {"b": 450.0, "c": 50.0}, "declared for c; b: the model spread over 2 hosts"
    job.measured = {"c": 70.0}
    flows = {f.dst_host: f.bytes_per_iteration for f in reported_flows(job, {"c"}, "a")}
    assert flows == {"c": 70.0}, "a measurement wins over the declaration"
    bare = entry(arch="flows", model_bytes=0)
    assert reported_flows(bare, {"b"}, "a") == [], "nothing known: not reported"


def plan(*flows):
    return {
        "version": 2,
        "host": "a",
        "flows": [dict(zip(("flow_id", "band", "dscp"), f, strict=True)) for f in flows],
    }


def test_host_flow_entries_cover_every_connection_of_the_job_to_that_host():
    q = QueueConfig()
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
    kw = dict(host="a", in_force=1, flows={}, addresses=addresses, queues=q)
    _, entries = plan_entries(plan(("c1/j1/b:*", 2, q.dscp_table[2])), **kw, discovered={J1})
    k1 = ("conn", "10.0.0.1", "10.0.0.2", 40000, 5000)
    k2 = ("conn", "10.0.0.1", "10.0.0.2", 40001, 5001)
    k3 = ("conn", "10.0.0.1", "10.0.0.3", 40002, 5000)
    conns = {(J1, "b"): [k1, k2], (J1, "c"): [k3]}
    assert compose(entries, {}, addresses, conns) == {
        k1: Rule(2, q.dscp_table[2]),
        k2: Rule(2, q.dscp_table[2]),
    }, "traffic to c waits for its own entry"
    with pytest.raises(ConfigError, match=r"^plan\.flows\[0\]\.flow_id: unknown flow"):
        plan_entries(plan(("c9/j9/b:*", 2, q.dscp_table[2])), **kw, discovered={J1})
    _, none = plan_entries(
        plan(("c1/j1/b:*", 2, q.dscp_table[2])), **kw, discovered=set(), finished={"c1/j1/b:*"}
    )
    assert none == {}, "a finished job's entries are skipped, not refused"
    _, none = plan_entries(
        plan(("c1/j1/b:*", 2, q.dscp_table[2])), **kw, discovered=set(), finished_jobs={J1}
    )
    assert none == {}, "the agent passes finished jobs by key"


@pytest.fixture
def sleeper():
    procs = []

    def start() -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait()


def reg_pids(reg: Registry, job: str, pids: list[int]):
    return reg.register(
        {"cojob_id": "c1", "job_id": job, "arch": "flows", "stage_iterations": [5], "pids": pids}
    )


def test_pids_are_checked_joined_and_the_job_ends_with_its_last_participant(sleeper, tmp_path):
    reg = Registry(tmp_path / "state.json", set(HOSTS.values()), host="a", host_of=HOSTS)
    p1, p2 = sleeper(), sleeper()
    with pytest.raises(ConfigError, match=r"^pids\[0\]: .* the agent's own process"):
        reg_pids(reg, "j1", [os.getpid()])
    with pytest.raises(ConfigError, match=r"^pids\[1\]: no running process"):
        reg_pids(reg, "j1", [p1.pid, 2**22 + 11])
    assert reg_pids(reg, "j1", [p1.pid])
    with pytest.raises(ConfigError, match=r"^pids\[0\]: process .* belongs to job c1/j1"):
        reg_pids(reg, "j2", [p1.pid])
    assert reg_pids(reg, "j1", [p2.pid]) == [], "a second rank joins the job"
    assert [p[0] for p in reg.jobs["c1", "j1"].pids] == [p1.pid, p2.pid]
    assert reg.job_finished({"cojob_id": "c1", "job_id": "j1", "pids": [p1.pid]}) == []
    (ev,) = reg.job_finished({"cojob_id": "c1", "job_id": "j1", "pids": [p2.pid]})
    assert ev.kind == "JOB_FINISHED"
    again = Registry(tmp_path / "state.json", set(HOSTS.values()), host="a")
    assert again.jobs["c1", "j1"].finished, "the state file keeps it"
    assert again.reap(set(), now=time.time() + FINISHED_GRACE + 1) == []
    assert again.jobs == {}, "finished jobs leave after the grace period"
    assert Registry(tmp_path / "state.json").jobs == {}, "and the state file stays bounded"


def test_a_reused_pid_is_a_stranger_and_exited_jobs_are_finished(sleeper):
    p = sleeper()
    me = P.identify(p.pid)
    assert me is not None and P.alive(me)
    assert not P.alive(P.Proc(p.pid, me.start + 1)), "same pid, other start time"
    reg = Registry(known_hosts=set(HOSTS.values()), host="a")
    reg_pids(reg, "j1", [p.pid])
    p.kill()
    p.wait()
    assert not P.alive(me)
    (ev,) = reg.reap({("c1", "j1")})
    assert ev.kind == "JOB_FINISHED" and reg.jobs["c1", "j1"].finished


def test_descendants_are_found_and_other_jobs_subtrees_excluded():
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess,sys,time; c=subprocess.Popen([sys.executable,"
         "'-c','import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        child = int(parent.stdout.readline())
        root, kid = P.identify(parent.pid), P.identify(child)
        found = P.descendants({J1: {root}})
        assert found[J1] == {root, kid}
        found = P.descendants({J1: {root}, J2: {kid}})
        assert found == {J1: {root}, J2: {kid}}, "a registered child is its own job"
    finally:
        parent.kill()
        parent.wait()
        os.kill(child, 9)


def test_netlink_parser_agrees_with_pyroute2_on_loopback_sockets():
    from pyroute2 import DiagSocket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    pairs = []
    for n in range(5):
        c = socket.create_connection(srv.getsockname())
        pairs += [c, srv.accept()[0]]
        c.sendall(b"x" * (1000 * (n + 1)))
    time.sleep(0.2)
    diag = SockDiag()
    try:
        ours = {s.inode: s for s in diag.dump(info=True)}
    finally:
        diag.close()
    with DiagSocket() as ds:
        ds.bind()
        ref = ds.get_sock_stats(family=socket.AF_INET, states=1 << 1, extensions=2)
    checked = 0
    for m in ref:
        s = ours[m["idiag_inode"]]
        info = dict(m["attrs"])["INET_DIAG_INFO"]
        assert (s.saddr, s.sport, s.daddr, s.dport) == (
            m["idiag_src"], m["idiag_sport"], m["idiag_dst"], m["idiag_dport"],
        )  # fmt: skip
        assert s.bytes_acked == info["tcpi_bytes_acked"]
        checked += 1
    assert checked >= 10
    assert {s.bytes_acked for s in ours.values()} >= {1001, 5001}  # + 1 for the SYN
    for p in pairs:
        p.close()
    srv.close()


def test_one_walk_lists_both_families_as_the_requests_by_family_do(monkeypatch):
    """The older request lists IPv4 and IPv6 sockets in one walk of the kernel's table;
    the same sockets, fields and bytes as one request per family. A kernel that refuses
    it (here: a request type it does not know) is asked per family from then on."""
    srv4, srv6 = (
        socket.create_server(("127.0.0.1", 0)),
        socket.create_server(("::1", 0), family=socket.AF_INET6),
    )
    conns = [socket.create_connection(srv4.getsockname()) for _ in range(3)]
    conns.append(socket.create_connection(srv6.getsockname()[:2]))
    conns += [srv4.accept()[0] for _ in range(3)] + [srv6.accept()[0]]
    conns[0].sendall(b"x" * 3000)
    time.sleep(0.2)
    diag = SockDiag()
    try:
        both = sorted(diag.dump(info=True))
        assert diag.one_walk
        assert {s.family for s in both} >= {socket.AF_INET, socket.AF_INET6}
        assert 3001 in {s.bytes_acked for s in both}
        diag.one_walk = False
        assert sorted(diag.dump(info=True)) == both
        diag.one_walk = True
        monkeypatch.setattr("grouper.agent.discovery.sockdiag.TCPDIAG_GETSOCK", 0x7FF)
        assert sorted(diag.dump(info=True)) == both
        assert not diag.one_walk
    finally:
        diag.close()
        for c in [*conns, srv4, srv6]:
            c.close()


class FailingRecv:
    """A netlink socket whose first recv() fails: the dump it answers stays in the
    kernel, unread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.failed = sock, False

    def send(self, data: bytes) -> int:
        return self.sock.send(data)

    def recv(self, size: int) -> bytes:
        if not self.failed:
            self.failed = True
            raise OSError(errno.EIO, "injected")
        return self.sock.recv(size)

    def close(self) -> None:
        self.sock.close()


def test_a_dump_that_failed_midway_leaves_a_socket_the_next_dump_can_use():
    """Enough sockets that a dump takes several reads; the first read fails. The kernel
    would go on with that dump on the same netlink socket and refuse the next request
    as busy: the next dump lists the table all the same, in one walk."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=512)
    conns: list[socket.socket] = []
    diag = SockDiag()
    try:
        for _ in range(200):
            conns.append(socket.create_connection(srv.getsockname()))
            conns.append(srv.accept()[0])
        diag.sock = FailingRecv(diag.sock)
        with pytest.raises(OSError, match="injected"):
            diag.dump(info=True)
        ports = {s.sport for s in diag.dump(info=True)}
        assert {c.getsockname()[1] for c in conns} <= ports
        assert diag.one_walk, "a busy kernel is not one without the one-walk request"
    finally:
        diag.close()
        for c in [*conns, srv]:
            c.close()


class CannedSocket:
    """A netlink socket whose reply is given: for replies the kernel sends rarely."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply

    def send(self, data: bytes) -> int:
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.reply

    def close(self) -> None:
        pass


def test_a_dump_the_kernel_ended_with_an_error_is_not_taken_as_the_table():
    diag = SockDiag()
    diag.close()
    done = struct.pack("=IHHIIi", 20, 3, 2, diag.seq + 1, 0, -errno.EINTR)  # NLMSG_DONE
    diag.sock = CannedSocket(done)
    with pytest.raises(OSError) as caught:
        diag.dump()
    assert caught.value.errno == errno.EINTR and not isinstance(caught.value, DumpRefused)
    diag.sock.close()  # the fresh socket left after the failure
    diag.sock = CannedSocket(struct.pack("=IHHIIi", 20, 3, 2, diag.seq + 1, 0, 0))
    assert diag.dump() == []


class RecordingKernel:
    backend = "htb"

    def __init__(self) -> None:
        self.rules: dict = {}

    async def apply(self, rules):
        self.rules = dict(rules)
        return len(rules)

    async def counters(self):
        return {}


HOST_FLOW_PLAN = {"version": 1, "host": "a", "flows": [
    {"flow_id": "c1/j1/b:*", "band": 2, "dscp": QueueConfig().dscp_table[2]}]}  # fmt: skip


def scripted_core(inodes: dict[int, set[int]]) -> tuple:
    """An AgentCore on host a with a scripted socket table (``tracker``) and a kernel
    that records its rules: (core, registry, kernel, tracker, table)."""
    from grouper.agent.core import AgentCore

    t, diag = tracker(inodes)
    reg = Registry(known_hosts=set(HOSTS.values()), host="a", host_of=HOSTS)
    kernel = RecordingKernel()
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
    core = AgentCore("a", reg, kernel, QueueConfig(), addresses, plan_ttl=60, tracker=t)
    return core, reg, kernel, t, diag


def test_a_participant_joining_a_job_has_its_earlier_connections_found(sleeper):
    """A second process of a job on this host registers after it connected: its socket,
    written off as nobody's at an earlier round, is looked at again and classified."""
    import asyncio

    first, second = sleeper(), sleeper()
    core, reg, kernel, t, diag = scripted_core({first.pid: {1}, second.pid: {2}})

    async def scenario():
        reg_pids(reg, "j1", [first.pid])
        ok, err, _ = await core.apply_plan(HOST_FLOW_PLAN)
        assert ok, err
        diag.table = [sock(1, 1), sock(2, 2, sport=40001)]
        await core.discover()
        assert len(kernel.rules) == 1 and sock(2, 2).cookie in t.foreign
        reg_pids(reg, "j1", [second.pid])  # joins the job
        await core.discover()
        assert len(kernel.rules) == 2

    asyncio.run(scenario())


def test_core_classifies_a_jobs_connections_and_drops_them_when_it_ends(sleeper):
    """AgentCore end to end with a scripted socket table: a plan entry covers every
    connection of the job to that host at once, new connections join without a new
    plan, and a finished job's rules leave the kernel even while its sockets linger."""
    import asyncio

    proc = sleeper()
    me = P.identify(proc.pid)
    core, reg, kernel, t, diag = scripted_core({me.pid: {1, 2}})

    async def scenario():
        reg_pids(reg, "j1", [proc.pid])
        ok, err, _ = await core.apply_plan(HOST_FLOW_PLAN)
        assert ok, err
        diag.table = [sock(1, 1)]
        await core.discover()
        assert set(kernel.rules) == {("conn", "10.0.0.1", "10.0.0.2", 40000, 5000)}
        diag.table.append(sock(2, 2, sport=40001))  # a reconnect: no new plan needed
        await core.discover()
        assert len(kernel.rules) == 2
        assert {r.band for r in kernel.rules.values()} == {2}
        reg.job_finished({"cojob_id": "c1", "job_id": "j1"})
        await core.discover()  # its sockets are still in the table (closing)
        assert kernel.rules == {}, "a finished job keeps no rule"

    asyncio.run(scenario())
