"""A kernel that lacks what the agent uses: run only inside the stock-kernel VM.

Not collected with the kernel layer (the name has no ``test_`` prefix):
tests/vm/test_stock_kernel.py runs this file in a VM of its own. There, module autoload
goes through the launcher's modprobe wrapper; this file puts a wrapper of its own in
front that refuses the modules named in a deny file, so the guest kernel really lacks
them (nothing is faked in the agent). Order matters and is kept by pytest's file order:
nf_tables must not be loaded yet when the first test runs.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns import GROUPER, ROOT

# Nothing here may import the kernel tests' modules: those probe the kernel's qdiscs at
# import, before the deny list is in place.

MODPROBE = Path("/proc/sys/kernel/modprobe")
LAUNCHER_MODPROBE = "/run/modprobe"  # scripts/vm/run.py's
WRAPPER = Path("/run/grouper-deny-modprobe")
DENY = Path("/run/grouper-deny-modules")
WRAPPER_TEXT = """#!/bin/sh
for a in "$@"; do
    while read -r m; do
        case "$a" in $m) exit 1 ;; esac
    done < /run/grouper-deny-modules
done
exec /run/modprobe "$@"
"""
METRICS_PORT = 19103


@pytest.fixture(scope="module", autouse=True)
def deny_wrapper():
    if MODPROBE.read_text().strip() != LAUNCHER_MODPROBE:
        pytest.fail("runs only in the stock-kernel VM (tests/vm), which owns module autoload")
    DENY.write_text("")
    WRAPPER.write_text(WRAPPER_TEXT)
    WRAPPER.chmod(0o755)
    MODPROBE.write_text(str(WRAPPER))
    yield
    MODPROBE.write_text(LAUNCHER_MODPROBE)


def register(agent, cgroup: str):
    """Job c1/j1 known by ``cgroup``; the agent's answer."""
    import grpc

    from grouper.v1 import agent_pb2 as pb
    from grouper.v1 import agent_pb2_grpc as pbg

    with grpc.insecure_channel(f"unix:{agent.registry}") as ch:
        return pbg.RegistryStub(ch).RegisterJob(
            pb.JobRegistration(
                cojob_id="c1", job_id="j1", arch="flows", stage_iterations=[100], cgroup=cgroup
            ),
            timeout=20,
        )


def qdiscs(pair) -> str:
    return pair.run(pair.a, "tc", "-j", "qdisc", "show", "dev", pair.nic_a).stdout


def deny(*patterns: str) -> None:
    """Module names and aliases (shell patterns) the kernel may not load from now on."""
    DENY.write_text("".join(p + "\n" for p in patterns))


def start_agent(pair, agent_env) -> subprocess.CompletedProcess:
    """The agent as an operator starts it, to its end (it is expected to refuse)."""
    agent = agent_env(backend="auto")
    proc = subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{pair.a}", *GROUPER, "agent",
         "--config", str(agent.config), "--host", "a", "--listen", f"unix:{agent.api}",
         "--socket", str(agent.registry), "--jobs-dir", str(agent.jobs_dir),
         "--state-file", str(agent.state), "--metrics-port", "0"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    return proc


def test_a_kernel_without_nf_tables_gets_one_line_and_exit_2(pair, agent_env):
    assert not Path("/sys/module/nf_tables").exists(), "nf_tables was loaded before this test"
    deny("nf_tables", "nfnetlink-subsys-10", "nft-*", "nft_*", "sch_prio")
    before = qdiscs(pair)
    proc = start_agent(pair, agent_env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = lines[-1]
    assert f"Linux {platform.release()}" in last and "nftables" in last, last
    assert not Path("/sys/module/nf_tables").exists(), "the deny list did not hold"
    assert qdiscs(pair) == before, "a refused start left its qdisc behind"


def test_a_kernel_without_socket_matching_or_prio_runs_on_pids_and_htb(pair, agent_env):
    """No nft_socket and no sch_prio: the agent starts, says why it knows jobs by pids
    and shapes with HTB, exports both as metrics, and a job that names its cgroup is
    refused with that reason."""
    deny("nft_socket", "nft-expr-*socket", "sch_prio")
    agent = agent_env(backend="auto")
    agent.nsenter = True
    agent.metrics_port = METRICS_PORT
    agent.start()
    log = agent.log.read_text()
    assert not Path("/sys/module/sch_prio").exists() and not Path("/sys/module/nft_socket").exists()
    why = re.search(r"jobs known by pids only: (.*)", log)
    assert why and f"Linux {platform.release()}: nftables socket cgroupv2" in why.group(1), log
    assert "backend htb: " in log and "prio" in log.split("backend htb: ", 1)[1].splitlines()[0]
    metrics = pair.run(
        pair.a, sys.executable, "-c",
        f"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}"
        "/metrics').read().decode())",
    ).stdout  # fmt: skip
    assert 'grouper_agent_backend{backend="htb",host="a"} 1.0' in metrics
    assert 'grouper_agent_discovery{host="a",mechanism="cgroup"} 0.0' in metrics
    os.makedirs("/sys/fs/cgroup/gk-vm", exist_ok=True)
    try:
        ack = register(agent, "/gk-vm")
    finally:
        os.rmdir("/sys/fs/cgroup/gk-vm")
    assert not ack.ok and "pids only" in ack.error and "cgroupv2" in ack.error, ack
