"""Test hosts in network namespaces, and the agent as a real process inside one.

Every namespace gets a unique name and is deleted in ``close`` (fixtures call it in a
finalizer, so a failing test cleans up too). Processes are ended by the pid we started.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import yaml

from grouper.agent.kernel import netns
from grouper.common.cluster_doc import write_cluster

_counter = itertools.count()
ROOT = Path(__file__).resolve().parent.parent
GROUPER = [sys.executable, "-m", "grouper.cli"]
# How much slower this machine runs than the one the tests' time bounds were set on:
# the VM layer (tests/vm) sets it for the emulated CPU (QEMU TCG, ~10x slower).
TIME_SCALE = float(os.environ.get("GROUPER_TEST_TIME_SCALE", "1"))


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


class Namespaces:
    """Processes started in a set of namespaces, each ended by its pid in ``close``."""

    procs: list[subprocess.Popen]

    def run(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def popen(self, ns: str, *args: str, **kw: object) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *args], **kw)
        self.procs.append(p)
        return p

    def nsenter(self, ns: str, *args: str, **kw: object) -> subprocess.Popen:
        """Like ``popen``, in the namespace's network only (the host's mounts: /sys,
        cgroup2); nsenter execs, so the pid is the command's."""
        p = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{ns}", *args], **kw)
        self.procs.append(p)
        return p

    def end_procs(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


class NetPair(Namespaces):
    """Two namespaces ``a`` and ``b`` joined by a veth pair 10.77.N.1 <-> 10.77.N.2.

    ``txqueues`` > 1 makes a multi-queue veth, as fast NICs are. ``switch_mbps`` puts a
    switch namespace ``s`` between them (a bridge): its port toward ``b`` is shaped to
    that rate with DSCP-keyed strict-priority queues, as the emulation's switch ports
    are, so the bottleneck is beyond host ``a`` (the ``prio`` qdisc does not shape).
    """

    def __init__(self, txqueues: int = 1, switch_mbps: float | None = None) -> None:
        n = next(_counter)
        tag = f"{os.getpid() % 100000}x{n}"
        self.a, self.b = f"gk{tag}a", f"gk{tag}b"
        self.s = f"gk{tag}s" if switch_mbps else None
        self.addr_a, self.addr_b = f"10.77.{n % 250}.1", f"10.77.{n % 250}.2"
        self.nic_a, self.nic_b = "gva", "gvb"
        self.txqueues = txqueues
        self.procs: list[subprocess.Popen] = []
        try:
            for ns in (self.a, self.b, self.s):
                if ns:
                    netns.add_netns(ns)
            if self.s is None:
                netns.veth(self.a, self.nic_a, self.b, self.nic_b, txqueues)
            else:
                self._switch(switch_mbps or 0.0)
            netns.address(self.a, self.nic_a, f"{self.addr_a}/24")
            netns.address(self.b, self.nic_b, f"{self.addr_b}/24")
        except BaseException:
            self.close()
            raise

    def _switch(self, mbps: float) -> None:
        from grouper.common.queues import QueueConfig
        from grouper.topologies.leafspine import switch_queue_commands

        assert self.s is not None
        netns.veth(self.a, self.nic_a, self.s, "pa", self.txqueues)
        netns.veth(self.b, self.nic_b, self.s, "pb", self.txqueues)
        netns.bridge(self.s, "br0", "pa", "pb")
        for cmd in switch_queue_commands("pb", mbps, QueueConfig()):
            self.run(self.s, *cmd.split())

    def sink(self, ns: str, *ports: int) -> subprocess.Popen:
        """``tests/tcp_tool.py sink`` on ``ports`` in ``ns``, listening when it returns."""
        p = self.popen(
            ns, sys.executable, "tests/tcp_tool.py", "sink", *map(str, ports),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        return p

    def close(self) -> None:
        self.end_procs()
        netns.del_netns(*(ns for ns in (self.a, self.b, self.s) if ns))


@functools.cache
def kernel_backends() -> tuple[str, ...]:
    """The agent backends this kernel offers: ``htb`` always, ``prio`` where it exists.

    Probed in a throwaway namespace (the agent's own probe uses the host namespace).
    """
    if os.geteuid() != 0:
        return ("htb",)
    ns = f"gkprobe{os.getpid() % 100000}"
    try:
        netns.add_netns(ns)
        netns.veth(ns, "probe", ns, "probe1")
        prio = sh("tc", "-n", ns, "qdisc", "add", "dev", "probe", "root", "prio", check=False)
        return ("htb", "prio") if prio.returncode == 0 else ("htb",)
    finally:
        netns.del_netns(ns)


def backend_params() -> list:
    """``pytest.param`` per agent backend; the ones this kernel lacks are skipped."""
    import pytest

    have = kernel_backends()
    return [
        pytest.param(
            b, id=b, marks=pytest.mark.skipif(b not in have, reason=f"kernel has no {b} qdisc")
        )
        for b in ("htb", "prio")
    ]


def pin_tx_queue(ns: str, dev: str, queue: int, txqueues: int) -> None:
    """Send everything from ``dev`` through TX queue ``queue`` (XPS: all CPUs -> it)."""
    every_cpu = f"{(1 << os.cpu_count()) - 1:x}"
    for q in range(txqueues):
        mask = every_cpu if q == queue else "0"
        sh(
            "ip",
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            f"echo {mask} > /sys/class/net/{dev}/queues/tx-{q}/xps_cpus",
        )


def tc_json(ns: str, *what: str) -> list[dict]:
    out = sh("ip", "netns", "exec", ns, "tc", "-j", *what).stdout
    return json.loads(out) if out.strip() else []


def root_qdisc(ns: str, dev: str) -> dict:
    return next(q for q in tc_json(ns, "qdisc", "show", "dev", dev) if q.get("root"))


def nft_json(ns: str) -> list[dict]:
    out = sh("ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset").stdout
    return json.loads(out)["nftables"] if out.strip() else []


def nft_tables(ns: str) -> list[str]:
    return [o["table"]["name"] for o in nft_json(ns) if "table" in o]


def nft_map(ns: str, name: str) -> dict[tuple[str, int], object]:
    """Elements of one of our maps, read with the independent ``nft -j`` tool."""
    out = {}
    for o in nft_json(ns):
        m = o.get("map")
        if m and m["name"] == name:
            for key, value in m.get("elem", []):
                addr, port = key["concat"]
                out[(addr, int(port))] = value
    return out


def cluster_yaml(
    path: Path,
    hosts: list[tuple[str, str, str, float]],
    *,
    plan_ttl: float = 30.0,
    queues: int = 8,
    agent_port: int = 7070,
    backend: str = "auto",
) -> Path:
    return write_cluster(
        path,
        hosts,
        queues={"count": queues},
        failure={"plan_ttl": plan_ttl, "agent_timeout": 2.0},
        agent={"port": agent_port, "metrics_port": 0, "backend": backend},
    )


class AgentProc:
    """``grouper agent`` running inside a namespace, reachable over Unix sockets.

    ``listen`` (HOST:PORT) puts the agent API on TCP instead, as with mutual TLS.
    """

    def __init__(
        self,
        pair: Namespaces,
        ns: str,
        host: str,
        config: Path,
        workdir: Path,
        listen: str | None = None,
    ) -> None:
        self.pair, self.ns, self.host = pair, ns, host
        self.api = workdir / f"{host}-agent.sock"
        self.registry = workdir / f"{host}-registry.sock"
        self.jobs_dir = workdir / f"{host}-jobs"
        self.state = workdir / f"{host}-state.json"
        self.log = workdir / f"{host}-agent.log"
        self.config = config
        self.listen = listen
        self.proc: subprocess.Popen | None = None

    metrics_port = 0
    # enter the namespace with nsenter (network only), not `ip netns exec`, which
    # remounts /sys: the agent then sees cgroup2 and nftables resolves cgroup paths
    nsenter = False

    def start(self, timeout: float = 15.0) -> AgentProc:
        logf = self.log.open("a")
        enter = self.pair.nsenter if self.nsenter else self.pair.popen
        self.proc = enter(
            self.ns,
            *GROUPER,
            "agent",
            "--config",
            str(self.config),
            "--host",
            self.host,
            "--listen",
            self.listen or f"unix:{self.api}",
            "--socket",
            str(self.registry),
            "--jobs-dir",
            str(self.jobs_dir),
            "--state-file",
            str(self.state),
            "--metrics-port",
            str(self.metrics_port),
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + timeout * TIME_SCALE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited: {self.log.read_text()[-2000:]}")
            if self._ready():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"agent did not come up: {self.log.read_text()[-2000:]}")

    def _ready(self) -> bool:
        """Health SERVING on the Unix API, or (TCP API) the registry answering."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from grouper.v1 import agent_pb2, agent_pb2_grpc

        if not self.registry.exists():
            return False
        try:
            if self.listen is not None:
                with grpc.insecure_channel(f"unix:{self.registry}") as ch:
                    agent_pb2_grpc.RegistryStub(ch).ReportProgress(
                        agent_pb2.ProgressReport(cojob_id="-", job_id="-"), timeout=1
                    )
                return True
            with grpc.insecure_channel(f"unix:{self.api}") as ch:
                r = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1
                )
                return r.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the process we started (``ip netns exec`` execs, so it is the agent)."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout * TIME_SCALE)


class NetStar(Namespaces):
    """``n`` host namespaces on one Linux bridge in a switch namespace (10.78.N.i/24)."""

    def __init__(self, n: int) -> None:
        k = next(_counter)
        tag = f"{os.getpid() % 100000}x{k}"
        self.switch = f"gk{tag}s"
        self.hosts = [f"gk{tag}h{i + 1}" for i in range(n)]
        self.addrs = [f"10.78.{k % 250}.{i + 1}" for i in range(n)]
        self.nic = "eth0"
        self.procs: list[subprocess.Popen] = []
        self._made: list[str] = []
        try:
            for ns in (self.switch, *self.hosts):
                self._made.append(ns)
                netns.add_netns(ns)
            ports = [f"p{i + 1}" for i in range(n)]
            for ns, addr, port in zip(self.hosts, self.addrs, ports, strict=True):
                netns.veth(ns, self.nic, self.switch, port)
                netns.address(ns, self.nic, f"{addr}/24")
            netns.bridge(self.switch, "br0", *ports)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.end_procs()
        netns.del_netns(*self._made)


def ipv6_pair_config(pair: NetPair, path: Path, a6: str, b6: str) -> Path:
    """IPv6 addresses on the pair's NICs and a cluster config at ``path`` giving hosts
    a and b those ``address6``."""
    for ns, nic, addr in ((pair.a, pair.nic_a, a6), (pair.b, pair.nic_b, b6)):
        sh("ip", "-n", ns, "addr", "add", f"{addr}/64", "dev", nic, "nodad")
    cluster_yaml(path, [("a", pair.addr_a, pair.nic_a, 30.0), ("b", pair.addr_b, pair.nic_b, 30.0)])
    data = yaml.safe_load(path.read_text())
    data["hosts"][0]["address6"], data["hosts"][1]["address6"] = a6, b6
    path.write_text(yaml.safe_dump(data))
    return path


SINK6 = (
    "import socket\ns = socket.socket(socket.AF_INET6)\ns.bind(('::', 0))\ns.listen(4)\n"
    "print(s.getsockname()[1], flush=True)\nc, _ = s.accept()\n"
    "while c.recv(65536): pass\n"
)


def ipv6_sink(pair: NetPair) -> int:
    """An IPv6 TCP sink on host b (one connection); its port."""
    proc = pair.popen(pair.b, sys.executable, "-c", SINK6, stdout=subprocess.PIPE, text=True)
    return int(proc.stdout.readline())
