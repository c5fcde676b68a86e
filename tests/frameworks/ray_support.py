"""What the Ray Tune tests share: the grouper side (a cluster config for a namespace
pair, the coordinator, its log), Ray nodes started with ``ray start --block`` inside a
namespace and stopped by their pid, and the processes a test leaves in a namespace."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from grouper.common.cluster_doc import write_cluster
from tests.netns import GROUPER, ROOT, NetPair
from tests.ports import free_port

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
RAY = str(Path(sys.executable).with_name("ray"))
RAY_ENV = {  # for Ray's nodes and drivers
    "PYTHONPATH": str(ROOT),
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",  # SIGTERM: stop at once, no drain
    # token authentication with a token of this test run's: without one, a new cluster
    # makes ~/.ray/auth_token and every later cluster of the machine expects it
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}


def pair_hosts(pair: NetPair) -> dict[str, tuple[str, str, str]]:
    """Host name -> (namespace, address, NIC) of the pair's two hosts."""
    return {"a": (pair.a, pair.addr_a, pair.nic_a), "b": (pair.b, pair.addr_b, pair.nic_b)}


def cluster_config(path: Path, pair: NetPair, cluster: str) -> Path:
    """Both hosts of ``pair`` at 200 Mbit/s, a coordinator planning every 0.5 s."""
    return write_cluster(
        path,
        [(h, a, nic, 200) for h, (_, a, nic) in pair_hosts(pair).items()],
        cluster=cluster,
        scheduling={"period": 0.5, "min_gap": 0.05},
        failure={"plan_ttl": 5.0, "agent_timeout": 2.0},
        agent={"metrics_port": 0, "discovery_interval": 0.05},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},
        metrics={"coordinator": "127.0.0.1:0"},
    )


def start_coordinator(cfg: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*GROUPER, "coordinator", "--config", str(cfg)],
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip


def wait_for_lines(log: Path, lines: list[str], timeout: float = 10.0) -> str:
    """The log's text once it holds every one of ``lines`` (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text()
        if all(ln in text for ln in lines) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def stages_done(iterations: int, stages: list[int]) -> int:
    """Stages a job that ran ``iterations`` finished."""
    done, bound = 0, 0
    for n in stages:
        bound += n
        done += iterations >= bound
    return done


def ended_line(cojob: str, job: str, iterations: int, stages: list[int]) -> str:
    """The coordinator's log line for a job that ended after ``iterations``."""
    k = stages_done(iterations, stages)
    how = "completed" if k == len(stages) else "killed"
    return f"job {cojob}/{job} {how} after stage {k} of {len(stages)}"


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_times(log: Path, needle: str) -> list[float]:
    """Epoch seconds of the lines of a grouper daemon's log that contain ``needle``."""
    out = []
    for line in log.read_text().splitlines():
        m = _LOG_TIME.match(line)
        if m and needle in line:
            out.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


def ns_pids(ns: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def ppid(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")))


def strays(ns: str, keep: set[int]) -> set[int]:
    """Processes in ``ns`` other than ``keep`` and their children (an agent's ``nft``)."""
    return {p for p in ns_pids(ns) - keep if ppid(p) not in keep}


def kill_strays(pair: NetPair, keep: set[int]) -> None:
    """SIGKILL what is left in the pair's namespaces but ``keep`` (processes there are
    this test's: the namespaces are its own)."""
    for ns in (pair.a, pair.b):
        for pid in strays(ns, keep):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class RayNode:
    """``ray start --block`` in a namespace: a head (``head=True``) or a node joining
    ``address``. ``--block`` keeps Ray's daemons its children; SIGTERM to it (the pid we
    started: ``ip netns exec`` and ``nsenter`` exec) stops them all, where ``ray stop``
    would end every Ray process of the machine by name."""

    def __init__(
        self,
        pair: NetPair,
        ns: str,
        ip: str,
        temp_dir: str,
        log: Path,
        *,
        resources: str,
        head: bool = False,
        address: str = "",
        port: int = 6379,
        env: dict[str, str] | None = None,
        nsenter: bool = False,
    ) -> None:
        args = ["--node-ip-address", ip, "--num-cpus", "1", "--resources", resources]
        args += ["--object-store-memory", str(80 * 2**20), "--temp-dir", temp_dir]
        if head:
            args += ["--head", "--port", str(port), "--include-dashboard=false"]
            args += ["--disable-usage-stats"]
        else:
            args += ["--address", address]
        self.log = log
        enter = pair.nsenter if nsenter else pair.popen
        env_args = [f"{k}={v}" for k, v in {**RAY_ENV, **(env or {})}.items()]
        self.proc = enter(
            ns, "env", *env_args, RAY, "start", "--block", *args,
            stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip

    def wait_up(self, timeout: float = 60.0) -> RayNode:
        deadline = time.monotonic() + timeout
        while "block forever" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
