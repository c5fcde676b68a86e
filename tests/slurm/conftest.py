"""The Slurm layer: jobs started by a real Slurm as an ordinary user submits them. Root
only (namespaces, users, Slurm's daemons).

The site: a head node (slurmctld, where users submit) and two compute nodes ``n1`` and
``n2``, each in its own network namespace on one switch namespace, whose ports toward
the compute nodes run at ``LINK_MBPS`` with the emulation's DSCP queues; on each compute
node a slurmd and an agent (entered as the agent unit's host namespace would be: the
network only), and a coordinator over the two agents.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from grouper.common.cluster_doc import write_cluster
from grouper.common.queues import QueueConfig
from grouper.topologies.leafspine import switch_queue_commands
from tests.kernel.star_cluster import metrics_address, start_coordinator, stop_all
from tests.layers import skip_layer
from tests.netns import TIME_SCALE, AgentProc, NetStar
from tests.ports import free_port
from tests.slurm.cluster import Node, SlurmCluster, missing_binaries
from tests.users import shared, users  # noqa: F401 (fixtures of real users)

LINK_MBPS = 40.0
NODES = ("n1", "n2")
SWITCH_PORT = {"n1": "p2", "n2": "p3"}  # the switch's port toward each node (NetStar's)


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "slurm tests need root (namespaces, users, Slurm's daemons)"
    elif missing := missing_binaries():
        reason = f"slurm tests need {', '.join(missing)} (make setup installs Slurm and munge)"
    skip_layer(items, "slurm", reason)


@dataclass
class Site:
    star: NetStar
    slurm: SlurmCluster
    agents: dict[str, AgentProc]
    config: Path
    work: Path  # readable by every user: agents' sockets, job scripts, outputs
    addrs: dict[str, str]  # node -> address

    def outputs(self) -> str:
        """The queue and the end of every job's output file, for a failure's message."""
        outs = [f"{p.name}: {p.read_text(errors='replace')[-800:]}" for p in
                sorted(self.work.glob("*/*.out"))]  # fmt: skip
        return f"; queue {self.slurm.states()}; " + " | ".join(outs)


def wait_for_metrics(config: Path, coord: subprocess.Popen, timeout: float = 30.0) -> None:
    """Until the coordinator serves its Prometheus endpoint (tests read it first thing)."""
    address = metrics_address(config)
    deadline = time.monotonic() + timeout * TIME_SCALE
    while True:
        try:
            urllib.request.urlopen(f"http://{address}/metrics", timeout=3).close()
            return
        except OSError:
            if coord.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no coordinator metrics at {address}") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def site(shared):  # noqa: F811
    star = NetStar(3)
    work = Path(tempfile.mkdtemp(prefix="slurm-", dir=shared))
    work.chmod(0o755)
    agents: dict[str, AgentProc] = {}
    slurm = coord = None
    try:
        for n in NODES:
            for cmd in switch_queue_commands(SWITCH_PORT[n], LINK_MBPS, QueueConfig()):
                star.run(star.switch, *cmd.split())
        addrs = dict(zip(NODES, star.addrs[1:], strict=True))
        config = write_cluster(
            work / "cluster.yaml",
            [(n, addrs[n], star.nic, LINK_MBPS) for n in NODES],
            cluster="slurm",
            scheduling={"period": 0.5, "min_gap": 0.05},
            agent={"metrics_port": 0},
            coordinator={"listen": f"127.0.0.1:{free_port()}"},
            metrics={"coordinator": f"127.0.0.1:{free_port()}"},
        )
        for n, ns in zip(NODES, star.hosts[1:], strict=True):
            agents[n] = AgentProc(star, ns, n, config, work)
            agents[n].nsenter = True
            agents[n].start()
        coord = start_coordinator(config, work / "coordinator.log")
        wait_for_metrics(config, coord)
        nodes = [Node(n, ns, addrs[n]) for n, ns in zip(NODES, star.hosts[1:], strict=True)]
        slurm = SlurmCluster(work / "slurm", star.hosts[0], star.addrs[0], nodes).start()
        yield Site(star, slurm, agents, config, work, addrs)
    finally:
        if slurm is not None:
            slurm.stop()
        if coord is not None:
            stop_all(coord, agents)
        else:
            for a in agents.values():
                if a.proc and a.proc.poll() is None:
                    a.stop()
        star.close()
