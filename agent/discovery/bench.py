"""``grouper bench discovery``: from ``connect()`` to the planned band and DSCP.

Two namespaces joined by a veth: host ``a`` runs a real agent (as a process), host
``b`` a sink that discards data and captures packets on its NIC. ``JOBS`` job processes
in ``a`` hold ``CONNECTIONS`` idle connections each to ``b``, registered with the agent
by pid only (no ports); the bench then plays the coordinator and pushes one plan with a
host flow per job (band 1 and band 1's DSCP). Measured:

* **CPU**: the agent's user + system time over a window with every job registered and
  nothing changing, as a percentage of one core.
* **Latency**: a probe job reconnects on a fresh port ``--samples`` times; each sample is
  the time from just before ``connect()`` to the first data packet that reaches ``b``
  with the planned DSCP. The band and the DSCP of a connection are set by one nftables
  transaction, so the first marked packet also left in the planned band (the bench
  checks that band 1's counter grew by the probe's bytes).

Everything created is removed in ``finally``, and processes are ended by pid.
"""

from __future__ import annotations

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

import yaml

from common.errors import ConfigError
from common.flows import host_flow_id
from common.output import write_json
from pda.priorities import QueueConfig

PORT = 5001
DSCP_TABLE = list(QueueConfig().dscp_table)
BAND = 1
WINDOW = 10.0  # seconds of CPU measurement


def bench_discovery(
    jobs: int, connections: int, samples: int, interval: float, json_path: str | None
) -> int:
    """Ranges are checked where the CLI reads them (``grouper.argtypes``)."""
    if os.geteuid() != 0:
        raise ConfigError("bench discovery", "needs root (it creates network namespaces)")
    try:
        with Testbed(interval) as tb:
            result = tb.measure(jobs, connections, samples)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"grouper: bench discovery failed: {exc}", file=sys.stderr)
        return 1
    write_json(result, json_path)
    if json_path != "-":
        print(
            f"discovery, {jobs} jobs x {connections} connections, refresh {interval * 1e3:.0f} ms: "
            f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
            f"max {result['max_ms']} ms ({result['missed']} missed); "
            f"agent CPU {result['cpu_percent']:.1f}% of a core"
        )
    return 0


class Testbed:
    def __init__(self, interval: float) -> None:
        tag = os.getpid() % 100000
        self.a, self.b = f"gdisc{tag}a", f"gdisc{tag}b"
        self.interval = interval
        self.procs: list[subprocess.Popen] = []
        self.tmp = tempfile.TemporaryDirectory(prefix="grouper-bench-")
        self.dir = Path(self.tmp.name)

    def __enter__(self) -> Testbed:
        try:
            self._net()
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
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        self.tmp.cleanup()

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def _net(self) -> None:
        self._ip("netns", "add", self.a)
        self._ip("netns", "add", self.b)
        self._ip("link", "add", "gva", "netns", self.a, "type", "veth", "peer", "name", "gvb",
                 "netns", self.b)  # fmt: skip
        for ns, nic, addr in ((self.a, "gva", "10.98.0.1"), (self.b, "gvb", "10.98.0.2")):
            self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", nic)
            self._ip("-n", ns, "link", "set", nic, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")

    def _spawn(self, ns: str, *args: str, **kw: Any) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *args], **kw)
        self.procs.append(p)
        return p

    def _agent(self) -> None:
        cfg = {
            "cluster": "bench",
            "hosts": [
                {"name": "a", "address": "10.98.0.1", "nic": "gva", "link_mbps": 1000},
                {"name": "b", "address": "10.98.0.2", "nic": "gvb", "link_mbps": 1000},
            ],
            "queues": {"count": 8, "reserved": [0], "scavenger": 7, "dscp": DSCP_TABLE},
            "failure": {"plan_ttl": 3600},
            "agent": {"discovery_interval": self.interval},
        }
        path = self.dir / "cluster.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.public = self.dir / "agent-api.sock"
        self.socket = self.dir / "agent.sock"
        self.agent = self._spawn(
            self.a, sys.executable, "-m", "grouper.cli", "agent", "--config", str(path),
            "--host", "a", "--listen", f"unix:{self.public}", "--socket", str(self.socket),
            "--state-file", str(self.dir / "state.json"), "--jobs-dir", str(self.dir / "jobs"),
            "--metrics-port", "0", "--log-level", "WARNING",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not (self.socket.exists() and self.public.exists()):
            if self.agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the agent did not start")
            time.sleep(0.1)

    def _helper(self, ns: str, *args: str) -> subprocess.Popen:
        return self._spawn(
            ns, sys.executable, "-m", "agent.discovery.benchproc", *args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def measure(self, n_jobs: int, conns: int, samples: int) -> dict:
        import grpc

        from grouper.v1 import agent_pb2 as pb
        from grouper.v1 import agent_pb2_grpc as pbg

        sink = self._helper(self.b, "sink", str(PORT), "gvb", str(DSCP_TABLE[BAND]))
        time.sleep(0.5)
        holder = self._helper(self.a, "jobs", "10.98.0.2", str(PORT), str(n_jobs), str(conns))
        pids = json.loads(holder.stdout.readline())["pids"]  # type: ignore[union-attr]
        probe = self._helper(self.a, "probe", "10.98.0.2", str(PORT))
        reg = pbg.RegistryStub(grpc.insecure_channel(f"unix:{self.socket}"))
        api = pbg.AgentStub(grpc.insecure_channel(f"unix:{self.public}"))
        ids = [(f"c{i}", f"j{i}", pid) for i, pid in enumerate(pids)] + [("probe", "p", probe.pid)]
        for cojob, job, pid in ids:
            ack = reg.RegisterJob(
                pb.JobRegistration(
                    cojob_id=cojob, job_id=job, arch="flows", stage_iterations=[1000], pids=[pid]
                ),
                timeout=10,
            )
            if not ack.ok:
                raise RuntimeError(f"registration refused: {ack.error}")
        plan = pb.Plan(version=1, host="a")
        for cojob, job, _ in ids:
            plan.flows.add(flow_id=host_flow_id(cojob, job, "b"), band=BAND, dscp=DSCP_TABLE[BAND])
        res = api.ApplyPlan(plan, timeout=30)
        if not res.applied:
            raise RuntimeError(f"plan refused: {res.error}")
        classified = self._wait_classified(api, n_jobs * conns)
        cpu = self._cpu(WINDOW)
        lat = self._latencies(probe, sink, samples)
        bytes_band = {b.band: b.bytes for b in api.Collect(pb.CollectRequest(), timeout=10).bands}
        missed = sum(1 for x in lat if math.isnan(x))
        # a missed sample was slower than anything measured: it sorts last
        lat = sorted(lat, key=lambda x: math.inf if math.isnan(x) else x)
        got = [x for x in lat if not math.isnan(x)] or [math.nan]
        return {
            "jobs": n_jobs,
            "connections_per_job": conns,
            "connections_classified": classified,
            "interval_s": self.interval,
            "samples": len(lat),
            "missed": missed,
            "p50_ms": _ms(lat[len(lat) // 2]),
            "p99_ms": _ms(lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)]),
            "max_ms": _ms(lat[-1]),
            "min_ms": _ms(got[0]),
            "cpu_percent": cpu,
            "cpu_window_s": WINDOW,
            "band_bytes": bytes_band.get(BAND, 0),
            "method": "sock_diag poll every interval_s; new sockets matched to jobs by inode",
        }

    def _wait_classified(self, api: Any, want: int) -> int:
        """Until the agent's kernel holds a rule for every job connection (or 30 s)."""
        deadline = time.monotonic() + 30
        n = 0
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["ip", "netns", "exec", self.a, "nft", "-j", "list", "map", "inet", "grouper",
                 "band_conn"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            maps = [o["map"] for o in json.loads(out)["nftables"] if "map" in o]
            n = len(maps[0].get("elem", [])) if maps else 0
            if n >= want:
                break
            time.sleep(0.2)
        return n

    def _cpu(self, window: float) -> float:
        def ticks() -> int:
            fields = Path(f"/proc/{self.agent.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime

        t0, c0 = time.monotonic(), ticks()
        time.sleep(window)
        t1, c1 = time.monotonic(), ticks()
        return 100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)

    def _latencies(self, probe: subprocess.Popen, sink: subprocess.Popen, n: int) -> list[float]:
        """Seconds from connect() to the first marked packet; a connection not marked
        while the probe sent (``SEND_FOR``) counts as NaN (reported as missed)."""
        assert probe.stdin and probe.stdout and sink.stdout
        seen: dict[int, float] = {}
        arrived = threading.Condition()

        def read_sink() -> None:
            for line in sink.stdout:  # type: ignore[union-attr]
                m = json.loads(line)
                with arrived:
                    seen[m["sport"]] = m["t"]
                    arrived.notify_all()

        threading.Thread(target=read_sink, daemon=True).start()
        out = []
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
        return out


def _ms(x: float) -> float | None:
    """Milliseconds, or None for a sample never classified while the probe sent."""
    return None if math.isnan(x) else round(x * 1e3, 2)
