"""A step that Slurm's ``cgroup/v2`` plugin started, under ``grouper run --cgroup self``.

A real Slurm (munged, slurmctld, one slurmd in host ``a``'s namespace) with
``ProctrackType=proctrack/cgroup``, ``TaskPlugin=task/cgroup`` and
``CgroupPlugin=cgroup/v2`` (tests/slurm/cluster.py) runs one step; its task registers
with ``a``'s agent by ``--cgroup self``, waits for the plan, then opens short
connections to host ``b``. Checked: the cgroup Slurm gave the task lies under
``/system.slice/<node>_slurmstepd.scope/job_<id>/step_0`` (Debian's slurmd is built for
several daemons per host, hence the node's name) and the job registered is that step;
every connection's SYN leaves with the control band's DSCP and its data with the
planned band's, every byte counted in the band's class, a process outside the step
untouched; the job ends when Slurm removes the step's cgroup.

The plugin refuses a host whose cgroups are hybrid (v1 controllers beside an almost
empty cgroup2), as our development host's are: there the test skips, and tests/vm runs
it on the stock kernel, whose cgroup2 is pure, with nothing skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from scapy.all import IP, TCP

from grouper.agent.cgroups import cgroup2_mount
from tests.kernel.agent_calls import apply, collect
from tests.kernel.test_agent import TABLE
from tests.kernel.test_cgroups import BAND, CTL_DSCP, SHORT_CONNECTIONS, short_connections, sink
from tests.kernel.test_discovery import band_bytes, start_capture
from tests.netns import TIME_SCALE, nft_json
from tests.slurm.cluster import Node, SlurmCluster, missing_binaries

ROOT = Path(__file__).resolve().parents[2]
GROUPER = str(ROOT / ".venv" / "bin" / "grouper")

# the step's task: says its job id and cgroup, waits for the go file (the plan is
# applied by then), then makes N one-write connections to ADDR:PORT (SHORT_CONNECTIONS)
TASK = (
    """
import os, sys, time
print(os.environ["SLURM_JOB_ID"], open("/proc/self/cgroup").read().strip(), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
sys.argv = sys.argv[1:]
"""
    + SHORT_CONNECTIONS
)


def pure_cgroup2() -> bool:
    lines = Path("/proc/self/cgroup").read_text().split()
    return len(lines) == 1 and lines[0].startswith("0::")


@pytest.fixture
def slurm(pair, tmp_path):
    if missing := missing_binaries():
        pytest.fail(f"needs {', '.join(missing)} (make setup installs Slurm and munge)")
    if not pure_cgroup2():
        pytest.skip("Slurm's cgroup/v2 plugin needs a pure cgroup2 host (tests/vm runs this)")
    top = Path(tempfile.mkdtemp(prefix="grouper-slurm-"))  # munged wants every dir above
    top.chmod(0o755)  # its socket searchable (tmp_path is not)
    node = Node("n1", pair.a, pair.addr_a)
    cluster = SlurmCluster(top, pair.a, pair.addr_a, [node], cgroup_v2=True)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


def wait_for(cond, what: str, timeout: float = 30.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout * TIME_SCALE
    while not (value := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def job_state(agent):  # noqa: ANN001, ANN201
    return next((j for j in collect(agent).jobs if j.job.job_id == "j1"), None)


def test_a_slurm_cgroup_v2_step_is_the_job_and_its_syn_leaves_in_the_planned_band(
    pair, agent_env, slurm, tmp_path
):
    agent = agent_env()
    agent.nsenter = True  # as the agent unit enters a host: the network only
    agent.start()
    port = sink(pair)
    go = tmp_path / "go"
    step = subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{pair.a}", "srun", "-N1", "-n1", f"--chdir={ROOT}",
         GROUPER, "run", "--cgroup", "self", "--socket", agent.registry,
         "--cojob", "c1", "--job", "j1", "--stages", "100", "--",
         sys.executable, "-c", TASK, str(go), pair.addr_b, str(port), "20"],
        env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        job_id, task_cgroup = step.stdout.readline().split()
        state = wait_for(lambda: job_state(agent), "the step's job registered")
        step_cgroup = f"/system.slice/n1_slurmstepd.scope/job_{job_id}/step_0"
        assert task_cgroup.removeprefix("0::").startswith(step_cgroup + "/"), task_cgroup
        assert not state.finished
        assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
        # the cgroup stays on the host (reports leave it out): nftables says which one
        # the job is known by, at the step's level, by its id (the directory's inode)
        maps = {o["map"]["name"]: o["map"] for o in nft_json(pair.a) if "map" in o}
        (elem,) = maps[f"band_cg4_{step_cgroup.count('/')}"]["elem"]
        step_id = os.stat(f"{cgroup2_mount()}{step_cgroup}").st_ino
        assert int(elem[0]["concat"][0]) == step_id, "--cgroup self names the step"
        assert elem[0]["concat"][1] == pair.addr_b
        read = start_capture(pair, tmp_path / "rx.pcap", "tcp")
        before = band_bytes(pair.a, pair.nic_a, BAND)
        go.touch()
        out, err = step.communicate(timeout=60 * TIME_SCALE)
    finally:
        if step.poll() is None:
            step.kill()
            step.wait()
    assert step.returncode == 0, f"srun: {err[-2000:]} {slurm.logs()[-2000:]}"
    words = out.split()
    mine, sent = [int(w) for w in words[:-1]], int(words[-1])
    other, _ = short_connections(pair, port, 3, None)
    assert band_bytes(pair.a, pair.nic_a, BAND) - before >= sent, "every byte in the band"
    packets = [p for p in read() if IP in p and TCP in p and p[IP].dst == pair.addr_b]
    syn: dict[int, int] = {}
    data: dict[int, set[int]] = {}
    for p in packets:
        if p[TCP].flags.S:
            syn[p[TCP].sport] = p[IP].tos >> 2
        elif len(p[TCP].payload):
            data.setdefault(p[TCP].sport, set()).add(p[IP].tos >> 2)
    for sport in mine:
        assert syn.get(sport) == CTL_DSCP, f"port {sport}: SYN DSCP {syn.get(sport)}"
        assert data.get(sport) == {TABLE[BAND]}, f"port {sport}: data DSCP {data.get(sport)}"
    for sport in other:
        assert syn.get(sport) == 0 and data.get(sport) == {0}, "a process outside keeps 0"
    wait_for(lambda: (s := job_state(agent)) is None or s.finished, "the job ended with its step")
