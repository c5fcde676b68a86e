"""``grouper bench discovery``: from ``connect()`` to the planned band and DSCP.

Two namespaces joined by a veth: host ``a`` runs a real agent (as a process), host
``b`` a sink that discards data and captures packets on its NIC. ``JOBS`` job processes
in ``a`` hold ``CONNECTIONS`` idle connections each to ``b``, registered with the agent
by pid only (no ports); the bench then plays the coordinator and pushes one plan with a
host flow per job (band 1 and band 1's DSCP). Measured:

* **CPU**: the time the agent ran (the kernel's process CPU clock, nanoseconds) over a
  window with every job registered and nothing changing, as a percentage of one core.
* **Latency**: a probe job reconnects on a fresh port ``--samples`` times; each sample is
  the time from just before ``connect()`` to the first data packet that reaches ``b``
  with the planned DSCP. The band and the DSCP of a connection are set by one nftables
  transaction, so the first marked packet also left in the planned band (the bench
  checks that band 1's counter grew by the probe's bytes).

The same is measured for jobs known by their **cgroup** (each job process in a cgroup
of its own, registered by cgroup path; the kernel classifies from the first packet), in
a second testbed, and reported under ``"cgroup"``. For both: ``late_packets_p99``, the
99th percentile over probe connections of packets (the SYN included) that reached ``b``
with DSCP 0, before the connection was classified; ``cpu_percent_churn``, the agent's
CPU while another job opens and closes ``CHURN`` connections a second; and
``plan_change_ms``, the time the agent takes to apply a plan that moves every job to
another band.

Everything created is removed in ``finally``, and processes are ended by pid.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from grouper.agent.cgroups import Cgroups
from grouper.agent.kernel.netns import NetnsPair
from grouper.common.cluster_doc import write_cluster
from grouper.common.errors import ConfigError
from grouper.common.flows import host_flow_id
from grouper.common.interpreter import python_argv
from grouper.common.output import write_json
from grouper.common.queues import QueueConfig

PORT = 5001
DSCP_TABLE = list(QueueConfig().dscp_table)
BAND = 1
WINDOW = 10.0  # seconds of CPU measurement
CPU_PARTS = 5  # the window's consecutive spans, each one CPU sample (the suite's)
CHURN = 100.0  # new connections a second while the churn CPU is measured


def bench_discovery(
    jobs: int, connections: int, samples: int, interval: float, json_path: str | None
) -> int:
    """Ranges are checked where the CLI reads them (``grouper.cli.argtypes``)."""
    if os.geteuid() != 0:
        raise ConfigError("bench discovery", "needs root (it creates network namespaces)")
    try:
        with Testbed(interval, "pids") as tb:
            result = tb.measure(jobs, connections, samples)
        result["cgroup"] = None
        if Cgroups.probe() is not None:
            with Testbed(interval, "cgroup") as tb:
                result["cgroup"] = tb.measure(jobs, connections, samples)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"grouper: bench discovery failed: {exc}", file=sys.stderr)
        return 1
    write_json(result, json_path)
    if json_path != "-":
        for name, r in (("pids", result), ("cgroup", result["cgroup"])):
            if r is not None:
                print(_summary(name, r, jobs, connections, interval))
    return 0


def _summary(name: str, r: dict, jobs: int, connections: int, interval: float) -> str:
    return (
        f"discovery by {name}, {jobs} jobs x {connections} connections, refresh "
        f"{interval * 1e3:.0f} ms: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max "
        f"{r['max_ms']} ms ({r['missed']} missed), late packets p99 {r['late_packets_p99']}; "
        f"agent CPU {r['cpu_percent']:.1f}% idle, {r['cpu_percent_churn']:.1f}% at "
        f"{CHURN:.0f} new connections/s; plan change {r['plan_change_ms']} ms"
    )


class Testbed:
    def __init__(self, interval: float, mechanism: str = "pids") -> None:
        tag = os.getpid() % 100000
        self.a, self.b = f"gdisc{tag}a", f"gdisc{tag}b"
        self.net = NetnsPair(self.a, self.b, "10.98.0.1", "10.98.0.2")
        self.interval = interval
        self.mechanism = mechanism
        cgroups = Cgroups.probe() if mechanism == "cgroup" else None
        self.cgroups = cgroups
        self.cg_root = f"/gbench{tag}"  # this bench's cgroups, below the cgroup2 root
        self.procs: list[subprocess.Popen] = []
        self.tmp = tempfile.TemporaryDirectory(prefix="grouper-bench-")
        self.dir = Path(self.tmp.name)

    def __enter__(self) -> Testbed:
        try:
            self.net.open()
            if self.cgroups is not None:
                os.makedirs(self.cgroups.directory(self.cg_root))
            self._agent()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.net.close()
        if self.cgroups is not None:
            self.cgroups.remove_tree(self.cg_root)
        self.tmp.cleanup()

    def _spawn(self, ns: str, *args: str, **kw: Any) -> subprocess.Popen:
        # nsenter, not ip netns exec (which remounts /sys): cgroup2 stays visible
        p = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{ns}", *args], **kw)
        self.procs.append(p)
        return p

    def _agent(self) -> None:
        path = write_cluster(
            self.dir / "cluster.yaml",
            [("a", "10.98.0.1", "gva", 1000), ("b", "10.98.0.2", "gvb", 1000)],
            cluster="bench",
            sockets=None,  # the agent is told its endpoints on its command line
            queues={"count": 8, "reserved": [0], "scavenger": 7, "dscp": DSCP_TABLE},
            failure={"plan_ttl": 3600},
            agent={"discovery_interval": self.interval},
        )
        self.public = self.dir / "agent-api.sock"
        self.socket = self.dir / "agent.sock"
        # nsenter, not ip netns exec (which remounts /sys): the agent sees cgroup2
        self.agent = subprocess.Popen([
            "nsenter", f"--net=/var/run/netns/{self.a}",
            *python_argv("-m", "grouper.cli", "agent", "--config", str(path)),
            "--host", "a", "--listen", f"unix:{self.public}", "--socket", str(self.socket),
            "--state-file", str(self.dir / "state.json"), "--jobs-dir", str(self.dir / "jobs"),
            "--metrics-port", "0", "--log-level", "WARNING",
        ])  # fmt: skip
        self.procs.append(self.agent)
        deadline = time.monotonic() + 30
        while not (self.socket.exists() and self.public.exists()):
            if self.agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the agent did not start")
            time.sleep(0.1)

    def _helper(self, ns: str, *args: str, cgroup: str = "") -> subprocess.Popen:
        """A benchproc in ``ns``; with ``cgroup``, started in that cgroup of ours."""
        enter = None
        if cgroup and self.cgroups is not None:
            procs = Path(self.cgroups.directory(cgroup), "cgroup.procs")
            enter = lambda: procs.write_text(str(os.getpid()))  # noqa: E731
        return self._spawn(
            ns, *python_argv("-m", "grouper.agent.discovery.benchproc", *args),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=enter,
        )  # fmt: skip

    def _cgroup(self, name: str) -> str:
        """A cgroup of this bench's (made now) for the cgroup mechanism, else ""."""
        if self.cgroups is None:
            return ""
        path = f"{self.cg_root}/{name}"
        os.makedirs(self.cgroups.directory(path), exist_ok=True)
        return path

    def measure(self, n_jobs: int, conns: int, samples: int) -> dict:
        import grpc

        from grouper.v1 import agent_pb2_grpc as pbg

        sink = self._helper(self.b, "sink", str(PORT), "gvb", str(DSCP_TABLE[BAND]))
        time.sleep(0.5)
        cgs = [self._cgroup(f"c{i}") for i in range(n_jobs)]
        prefix = self.cgroups.directory(f"{self.cg_root}/c") if self.cgroups else ""
        holder = self._helper(
            self.a,
            "jobs",
            "10.98.0.2",
            str(PORT),
            str(n_jobs),
            str(conns),
            *[prefix][: bool(prefix)],
        )
        pids = json.loads(holder.stdout.readline())["pids"]  # type: ignore[union-attr]
        probe = self._helper(self.a, "probe", "10.98.0.2", str(PORT), cgroup=self._cgroup("p"))
        jobs = [
            (f"c{i}", f"j{i}", pid, cg) for i, (pid, cg) in enumerate(zip(pids, cgs, strict=True))
        ]
        jobs.append(("probe", "p", probe.pid, self._cgroup("p")))
        reg = pbg.RegistryStub(grpc.insecure_channel(f"unix:{self.socket}"))
        api = pbg.AgentStub(grpc.insecure_channel(f"unix:{self.public}"))
        _register(reg, jobs)
        _plan(api, 1, jobs, BAND)
        classified = self._wait_classified(n_jobs * conns if not prefix else len(jobs))
        cpu, cpu_parts = self._cpu(WINDOW)
        churn = self._helper(
            self.a, "churn", "10.98.0.2", str(PORT), str(CHURN), cgroup=self._cgroup("churn")
        )
        jobs.append(("churn", "c", churn.pid, self._cgroup("churn")))
        _register(reg, jobs[-1:])
        _plan(api, 2, jobs, BAND)
        cpu_churn, _ = self._cpu(WINDOW)
        churn.stdin.close()  # type: ignore[union-attr]
        lat, late = self._latencies(probe, sink, samples)
        t0 = time.monotonic()
        _plan(api, 3, jobs, BAND + 1)
        plan_ms = round((time.monotonic() - t0) * 1e3, 2)
        result = self._result(n_jobs, conns, classified, lat, late, cpu, cpu_churn, plan_ms)
        result["cpu_percent_parts"] = cpu_parts
        return result

    def _result(
        self, n_jobs: int, conns: int, classified: int, lat: list[float], late: list[int],
        cpu: float, cpu_churn: float, plan_ms: float,
    ) -> dict:  # fmt: skip
        missed = sum(1 for x in lat if math.isnan(x))
        # a missed sample was slower than anything measured: it sorts last
        lat = sorted(lat, key=lambda x: math.inf if math.isnan(x) else x)
        got = [x for x in lat if not math.isnan(x)] or [math.nan]
        late = sorted(late)
        return {
            "jobs": n_jobs,
            "connections_per_job": conns,
            "connections": n_jobs * conns,
            "connections_classified": classified,
            "interval_s": self.interval,
            "samples": len(lat),
            "missed": missed,
            "latencies_ms": [_ms(x) for x in lat],
            "p50_ms": _ms(lat[len(lat) // 2]),
            "p99_ms": _ms(lat[_p99(len(lat))]),
            "max_ms": _ms(lat[-1]),
            "min_ms": _ms(got[0]),
            "late_packets_p99": late[_p99(len(late))] if late else None,
            "cpu_percent": cpu,
            "cpu_percent_churn": cpu_churn,
            "churn_per_s": CHURN,
            "cpu_window_s": WINDOW,
            "plan_change_ms": plan_ms,
            "method": (
                "sock_diag poll every interval_s; new sockets matched to jobs by inode"
                if self.cgroups is None
                else "nftables socket cgroupv2 maps in the output hook (kernel, per packet)"
            ),
        }

    def _wait_classified(self, want: int) -> int:
        """Until the agent's kernel holds a rule for every job connection (pids) or
        every job (cgroup), or 30 s; how many it held."""
        deadline = time.monotonic() + 30
        n = 0
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["nsenter", f"--net=/var/run/netns/{self.a}", "nft", "-j", "list", "table",
                 "inet", "grouper"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            maps = [o["map"] for o in json.loads(out)["nftables"] if "map" in o]
            wanted = ("band_conn",) if self.cgroups is None else ("band_cg4_2",)
            n = sum(len(m.get("elem", [])) for m in maps if m["name"] in wanted)
            if n >= want:
                break
            time.sleep(0.2)
        return n

    def _cpu(self, window: float) -> tuple[float, list[float]]:
        """The agent's CPU over ``window`` seconds as a percentage of one core, and the
        same over each of its ``CPU_PARTS`` consecutive spans."""
        marks = [(time.monotonic(), _cpu_seconds(self.agent.pid))]
        for _ in range(CPU_PARTS):
            time.sleep(window / CPU_PARTS)
            marks.append((time.monotonic(), _cpu_seconds(self.agent.pid)))

        def percent(a: tuple[float, float], b: tuple[float, float]) -> float:
            return 100.0 * (b[1] - a[1]) / (b[0] - a[0])

        return percent(marks[0], marks[-1]), [percent(a, b) for a, b in itertools.pairwise(marks)]

    def _latencies(
        self, probe: subprocess.Popen, sink: subprocess.Popen, n: int
    ) -> tuple[list[float], list[int]]:
        """Seconds from connect() to the first marked packet (a connection not marked
        while the probe sent, ``SEND_FOR``, counts as NaN: reported as missed), and the
        packets of each connection that arrived unmarked before it."""
        assert probe.stdin and probe.stdout and sink.stdout
        seen: dict[int, float] = {}
        lates: dict[int, int] = {}
        arrived = threading.Condition()

        def read_sink() -> None:
            for line in sink.stdout:  # type: ignore[union-attr]
                m = json.loads(line)
                with arrived:
                    seen[m["sport"]] = m["t"]
                    lates[m["sport"]] = m["late"]
                    arrived.notify_all()

        threading.Thread(target=read_sink, daemon=True).start()
        out, late = [], []
        rng = random.Random(1)
        for _ in range(n):
            time.sleep(rng.uniform(0, self.interval))  # de-phase from the agent's polling
            probe.stdin.write("go\n")
            probe.stdin.flush()
            info = json.loads(probe.stdout.readline())
            sport = info["sport"]
            with arrived:
                arrived.wait_for(lambda sport=sport: sport in seen, timeout=1.0)
                t = seen.get(sport)
            out.append(math.nan if t is None else t - info["t0"])
            if t is not None:
                late.append(lates[sport])
        return out, late


def _register(reg: Any, jobs: list[tuple[str, str, int, str]]) -> None:
    """Each job by its pid, or by its cgroup where it has one."""
    from grouper.v1 import agent_pb2 as pb

    for cojob, job, pid, cgroup in jobs:
        msg = pb.JobRegistration(cojob_id=cojob, job_id=job, arch="flows", stage_iterations=[1000])
        if cgroup:
            msg.cgroup = cgroup
        else:
            msg.pids.append(pid)
        ack = reg.RegisterJob(msg, timeout=10)
        if not ack.ok:
            raise RuntimeError(f"registration refused: {ack.error}")


def _plan(api: Any, version: int, jobs: list[tuple[str, str, int, str]], band: int) -> None:
    """Play the coordinator: every job's host flow to b in ``band``."""
    from grouper.v1 import agent_pb2 as pb

    plan = pb.Plan(version=version, host="a")
    for cojob, job, _, _ in jobs:
        plan.flows.add(flow_id=host_flow_id(cojob, job, "b"), band=band, dscp=DSCP_TABLE[band])
    res = api.ApplyPlan(plan, timeout=30)
    if not res.applied:
        raise RuntimeError(f"plan refused: {res.error}")


def _p99(n: int) -> int:
    return min(n - 1, max(0, math.ceil(0.99 * n) - 1))


def _ms(x: float) -> float | None:
    """Milliseconds, or None for a sample never classified while the probe sent."""
    return None if math.isnan(x) else round(x * 1e3, 2)


def _cpu_seconds(pid: int) -> float:
    """CPU seconds the process ran, its threads that ended included: the kernel's
    process CPU clock for ``pid`` (nanoseconds; clock id ``(~pid << 3) | 2``,
    CPUCLOCK_SCHED of the whole thread group)."""
    return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9
