"""A 3-host star with agents in namespaces: the cluster config, the two cojobs the
coordinator tests register, and the plan pda/ computes for them (what the kernels
should hold)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import yaml

from grouper.agent.kernel.layout import BandLayout
from grouper.common.cluster_config import load_cluster_config
from grouper.common.cluster_doc import write_cluster
from grouper.common.queues import QueueConfig
from grouper.coordinator.loop import Coordinator
from grouper.coordinator.metrics import CoordinatorMetrics
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.policies import host_plans, schedule
from grouper.pda.snapshot import build_snapshot
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.netns import GROUPER, ROOT, TIME_SCALE, AgentProc, NetStar, nft_map, root_qdisc
from tests.ports import free_port

PERIOD = 0.5
# the failure timers run in real time inside the daemons: on a machine TIME_SCALE times
# slower (the VM layer's guest) agents answer that much later, so they scale with it,
# or a slow guest's agents drop their plans (plan_ttl) and refuse the next delta
TTL, TIMEOUT = 3.0 * TIME_SCALE, 1.5 * TIME_SCALE
# cojob A: PS job, worker h1 <-> server h2 (1 MB each way per iteration), 4 + 8 iterations
# cojob B: ring over h1, h2, h3 (2 MB per hop per iteration), 2 + 4 iterations
JOBS = {
    "A": {
        "stages": [4, 8],
        "arrival": 1000.0,
        "flows": [("h1", "h2", 5101, 1e6), ("h2", "h1", 5102, 1e6)],
    },
    "B": {
        "stages": [2, 4],
        "arrival": 1001.0,
        "flows": [("h1", "h2", 5201, 2e6), ("h2", "h3", 5202, 2e6), ("h3", "h1", 5203, 2e6)],
    },
}


HOSTS = ["h1", "h2", "h3"]


def config(star: NetStar, tmp_path) -> tuple:
    names = HOSTS
    path = write_cluster(
        tmp_path / "cluster.yaml",
        [(n, a, star.nic, 100) for n, a in zip(names, star.addrs, strict=True)],
        cluster="kt",
        scheduling={"period": PERIOD, "min_gap": 0.05},
        failure={"plan_ttl": TTL, "agent_timeout": TIMEOUT},
        agent={"metrics_port": 0},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},
        metrics={"coordinator": f"127.0.0.1:{free_port()}"},
    )
    return path, dict(zip(names, star.addrs, strict=True))


def report_progress(agents: dict[str, AgentProc], cojob: str, done: int) -> None:
    """Every participant of ``cojob``'s job reports ``done`` iterations."""
    for src in {f[0] for f in JOBS[cojob]["flows"]}:
        with grpc.insecure_channel(f"unix:{agents[src].registry}") as ch:
            ack = pbg.RegistryStub(ch).ReportProgress(
                pb.ProgressReport(cojob_id=cojob, job_id="j", iterations_done=done)
            )
        assert ack.ok, ack.error


def agents_on(star: NetStar, path, tmp_path) -> dict[str, AgentProc]:  # noqa: ANN001
    return {
        n: AgentProc(star, ns, n, path, tmp_path)
        for n, ns in zip(["h1", "h2", "h3"], star.hosts, strict=True)
    }


def register_all(agents: dict[str, AgentProc]) -> None:
    for cojob, spec in JOBS.items():
        for src, dst, port, size in spec["flows"]:
            with grpc.insecure_channel(f"unix:{agents[src].registry}") as ch:
                ack = pbg.RegistryStub(ch).RegisterJob(
                    pb.JobRegistration(
                        cojob_id=cojob,
                        job_id="j",
                        arch="flows",
                        stage_iterations=spec["stages"],
                        arrival=spec["arrival"],
                        flows=[
                            pb.FlowSpec(
                                src_host=src, dst_host=dst, dst_port=port, bytes_per_iteration=size
                            )
                        ],
                    )
                )
            assert ack.ok, ack.error


def expected_maps(
    addrs: dict[str, str], layout: BandLayout, done: dict[str, int] | None = None
) -> dict[str, tuple[dict, dict]]:
    """The plan computed straight from pda/, as the kernel should hold it, with
    ``done[cojob]`` iterations done by its job."""
    done = done or {}
    cojobs = [
        Cojob(
            c,
            tuple(s["stages"]),
            (
                Job.explicit(
                    "j", [FlowSpec(a, b, size) for a, b, _, size in s["flows"]], done=done.get(c, 0)
                ),
            ),
            s["arrival"],
        )
        for c, s in JOBS.items()
    ]
    snap = build_snapshot(cojobs, ["h1", "h2", "h3"], known_survivors=False)
    plans = host_plans(snap, schedule(snap, "grouper"), QueueConfig())
    port = {(c, a, b): p for c, s in JOBS.items() for a, b, p, _ in s["flows"]}
    out = {}
    for host, plan in plans.items():
        band, dscp = {}, {}
        for f in plan["flows"]:
            key = (addrs[f["dst"]], port[(f["cojob"], f["src"], f["dst"])])
            band[key] = layout.classid_text(f["band"])
            dscp[key] = {"goto": {"target": f"dscp_{f['dscp']}"}}
        out[host] = (band, dscp)
    return out


def version(agent: AgentProc) -> int:
    with grpc.insecure_channel(f"unix:{agent.api}") as ch:
        return pbg.AgentStub(ch).Collect(pb.CollectRequest(), timeout=3).plan_version


def wait_for(cond, timeout: float, what: str) -> float:
    """Seconds until ``cond()``; ``timeout`` is the host's bound, times ``TIME_SCALE``
    (the stock-kernel VM's guest is slower)."""
    timeout *= TIME_SCALE
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def metrics_address(path: Path) -> str:
    """The coordinator's metrics HOST:PORT in the config at ``path`` (``config``)."""
    return yaml.safe_load(path.read_text())["metrics"]["coordinator"]


def metric(address: str, name: str) -> float | None:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=3).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def start_coordinator(path: Path, log: Path) -> subprocess.Popen:
    """The coordinator daemon on the star's config, its output appended to ``log``."""
    out = log.open("a")
    return subprocess.Popen(
        [*GROUPER, "coordinator", "--config", str(path)],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_all(coord: subprocess.Popen, agents: dict[str, AgentProc]) -> None:
    """End what a test started, by pid: the coordinator, then every agent still up."""
    if coord.poll() is None:
        coord.terminate()
        coord.wait(timeout=10)
    for a in agents.values():
        if a.proc and a.proc.poll() is None:
            a.stop()


def kernels_converged(star: NetStar, addrs: dict[str, str]):  # noqa: ANN201
    """A check: does every host's kernel hold the maps of the plans for ``done``? The
    band layout is read from h1's root qdisc at each check: the agents install it, so a
    check built before they start must not fix the layout of the qdisc they replace."""
    ns = dict(zip(HOSTS, star.hosts, strict=True))

    def converged(done: dict[str, int]) -> bool:
        layout = BandLayout(root_qdisc(ns["h1"], star.nic)["kind"], 8)
        want = expected_maps(addrs, layout, done)
        return all(
            (nft_map(ns[h], "band_dport"), nft_map(ns[h], "dscp_dport")) == want[h] for h in HOSTS
        )

    return converged


class InProcessCoordinator:
    """The coordinator in a thread of this process, so a test can tamper with it
    (``tamper``, called once it is built and before it runs)."""

    def __init__(self, path: Path) -> None:
        self.coord: Coordinator | None = None
        self.stop: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(path),), daemon=True)

    def tamper(self, coord: Coordinator) -> None:
        """Subclasses change the coordinator's channels here."""

    async def _main(self, path: Path) -> None:
        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        self.coord = coord = Coordinator(load_cluster_config(path), CoordinatorMetrics())
        self.tamper(coord)
        try:
            await coord.run(self.stop)
        finally:
            await coord.close()

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        if self.loop is not None and self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=10)
