"""The kernel layer on the kernel real hosts run: Debian 12's stock 6.1, in QEMU (TCG).

Our own kernel has no ``prio`` qdisc, so there the ``prio`` backend (what real hosts
pick) never runs. Here one VM per session boots the stock kernel with this machine's
root shared read-only (scripts/vm/run.py) and runs ``SUBSET`` of tests/kernel inside,
every backend the guest offers; it must pass with nothing skipped. A VM that hangs,
panics or dies is a failure with the console's last lines.
"""

from __future__ import annotations

import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.vm.launcher import ROOT, launcher

# Inside the guest run only the tests whose outcome depends on the kernel (the guest runs
# ~10x slower than the host, so every file costs minutes of CI): every test parametrized
# by backend, the pure-ACK test (which checks the sets the 6.1 kernel needs), the backend
# probe, jobs known by their cgroup (socket cgroupv2 maps in the output hook), the
# feature probes, discovery by sock_diag and cgroup, TCP counters from tcp_info, the
# builders of namespaces and strict-priority classes, plans from a real coordinator
# enforced by the agents' auto-picked backend (prio here) and acknowledged by their
# updates, and kernels emptied at plan_ttl and restored by whole plans. Measured per file
# in the VM (seconds): test_agent 240, test_cgroups 121, test_discovery 73,
# test_multiqueue 55, the rest under 25. Left out, because the kernel plays no part in
# what they assert and the host's layer runs them: the coordinator surviving failures and
# the incremental protocol's loss and restarts (111 s + ~45 s: gRPC and bookkeeping;
# the nft maps they read are the same on both kernels), the agent's API and its
# authorization (75 s), Prometheus scraping the dashboard (67 s), the systemd units
# (systemd-analyze on the same root), the benches (timings, meaningless under
# emulation) and the client install (wheels and a venv).
PAUSED_PAST_TTL = (
    "tests/kernel/test_incremental.py::"
    "test_a_coordinator_paused_past_plan_ttl_restores_the_kernels_with_whole_plans"
)
SUBSET = (
    "tests/kernel/test_agent.py",
    "tests/kernel/test_multiqueue.py",
    "tests/kernel/test_backend_probe.py",
    "tests/kernel/test_cgroups.py",
    "tests/kernel/test_features.py",
    "tests/kernel/test_tcpstats.py",
    "tests/kernel/test_discovery.py",
    "tests/kernel/test_netns_builder.py",
    "tests/kernel/test_strict_priority.py",
    "tests/kernel/test_plan_by_update.py",
    PAUSED_PAST_TTL,
)
TIME_BOUND = 1500.0  # seconds for boot and SUBSET (about 500 s on a quiet machine)
TIME_SCALE = 4  # the guest's agent start-up and stop bounds, times the host's


@dataclass
class GuestRun:
    status: int
    seconds: float
    out: Path
    output: str
    failure: str  # the launcher's account when the VM died or hung


def boot(argv: list[str], out: Path, timeout: float, env: dict[str, str] | None = None):
    """Run ``argv`` in a VM; QEMU is ended by the pid we started, whatever happens."""
    run = launcher()
    vm = run.Vm(argv, out, env=env, cwd=ROOT)
    t0 = time.monotonic()
    try:
        with open(out / "output.log", "w") as log:
            status = vm.start().wait(timeout, sink=log)
    finally:
        vm.close()
    text = (out / "output.log").read_text(errors="replace")
    return GuestRun(status, time.monotonic() - t0, out, text, vm.failure)


@pytest.fixture(scope="session")
def kernel_layer(tmp_path_factory) -> GuestRun:
    out = tmp_path_factory.mktemp("vm-kernel-layer")
    pytest_argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
        f"--junitxml={out / 'junit.xml'}", *SUBSET,
    ]  # fmt: skip
    # numba's cache from the host's `make setup` does not fit the guest's CPU (TCG's
    # `-cpu max`): compile once here, as `make setup` does, not inside a test's bounds
    warm = "from grouper.pda.order import warm_up; warm_up()"
    script = 'uname -r > "$GROUPER_VM_OUT/uname" && "$1" -c "$2" && shift 2 && exec "$@"'
    argv = ["sh", "-c", script, "sh", sys.executable, warm, *pytest_argv]
    env = {"GROUPER_TEST_TIME_SCALE": str(TIME_SCALE), "GROUPER_REQUIRE_ROOT_TESTS": "1"}
    return boot(argv, out, TIME_BOUND, env)


def junit_cases(path: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) per test case of a JUnit XML report."""
    cases = []
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        cases.append((name, outcome, message))
    return cases


def test_kernel_layer_passes_on_the_stock_kernel_with_every_backend(kernel_layer):
    run = kernel_layer
    assert run.status not in (124, 125), run.failure
    release = launcher().kernel_dir()[1]
    assert (run.out / "uname").read_text().strip() == release
    report = run.out / "junit.xml"
    assert report.exists(), f"no report; guest output:\n{run.output[-3000:]}"
    cases = junit_cases(report)
    bad = [c for c in cases if c[1] != "passed"]
    assert not bad, "\n".join(f"{n}: {o}: {m[:300]}" for n, o, m in bad) + run.output[-3000:]
    assert run.status == 0, run.output[-3000:]
    prio = [n for n, _, _ in cases if "prio]" in n]  # the tests parametrized by backend
    assert len(prio) >= 6, f"prio backend ran in only {prio}"
    print(f"\nVM kernel layer: {len(cases)} passed in {run.seconds:.0f} s (boot included)")


def test_a_kernel_lacking_what_the_agent_uses_gets_exit_2_or_a_stated_fallback(tmp_path):
    """tests/kernel/vm_missing_features.py in a VM of its own, whose module autoload
    refuses nf_tables, then nft_socket and sch_prio: the agent exits 2 with one line
    naming the kernel, or runs on pids and HTB saying why (one VM: its modules cannot
    be unloaded between the two)."""
    pytest_argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        f"--junitxml={tmp_path / 'junit.xml'}", "tests/kernel/vm_missing_features.py",
    ]  # fmt: skip
    env = {"GROUPER_TEST_TIME_SCALE": str(TIME_SCALE), "GROUPER_REQUIRE_ROOT_TESTS": "1"}
    run = boot(pytest_argv, tmp_path, 300, env)
    assert run.status not in (124, 125), run.failure
    cases = junit_cases(tmp_path / "junit.xml")
    assert len(cases) == 2 and all(o == "passed" for _, o, _ in cases), (
        f"{cases}\n{run.output[-3000:]}"
    )


def test_a_guest_that_panics_is_a_failure_with_the_console(tmp_path):
    run = boot(["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 60"], tmp_path, 120)
    assert run.status == launcher().EXIT_VM_DIED
    assert "Kernel panic - not syncing: sysrq triggered crash" in run.failure, run.failure


def test_a_guest_that_hangs_is_ended_at_the_time_bound(tmp_path):
    run = boot(["sleep", "600"], tmp_path, 25)
    assert run.status == launcher().EXIT_TIMEOUT
    assert run.seconds < 60
