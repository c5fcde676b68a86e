"""The kernel layer on the kernel real hosts run: Debian 12's stock 6.1, in QEMU (TCG).

Our own kernel has no ``prio`` qdisc, so there the ``prio`` backend (what real hosts
pick) never runs. Here one VM per session boots the stock kernel with this machine's
root shared read-only (scripts/vm/run.py) and runs ``SUBSET`` of tests/kernel inside
with the ``prio`` backend; it must pass with nothing skipped. A VM that hangs,
panics or dies is a failure with the console's last lines.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.vm.launcher import ROOT, launcher
from tests.vm.progress import read_progress

# Inside the guest run only the tests whose outcome the 6.1 kernel decides, each for its
# reason; the host's kernel layer runs all of them too, and everything else (the htb
# backend, which every kernel since 2.6 has alike; discovery by pids through sock_diag;
# refusals; the coordinator, the incremental protocol, the API, Prometheus, the units,
# the benches, the client install): the guest runs ~15x slower than the host, so each
# test here costs 10-40 s of CI.
AGENT, CGROUPS = "tests/kernel/test_agent.py::", "tests/kernel/test_cgroups.py::"
SUBSET = (
    # the prio qdisc under mq, one per TX queue, with the steering filter: the bottleneck
    # split and swapped by a plan, and the teardown and the restart's reconciliation
    f"{AGENT}test_bands_split_bottleneck_and_swap_within_a_second[4txq-prio]",
    f"{AGENT}test_sigterm_removes_everything_and_restart_reconciles_stale_state[4txq-prio]",
    "tests/kernel/test_multiqueue.py::test_every_tx_queue_gets_a_band_qdisc_that_serves_our_bands[4txq-prio]",
    # a root prio qdisc, every band's DSCP on the wire
    f"{AGENT}test_dscp_on_the_wire_for_every_band[prio]",
    # 6.1 refuses a map looked up as a set: the pure-ACK rules use sets
    f"{AGENT}test_only_our_connections_acks_and_handshakes_are_remarked",
    # the agent's probe picks prio where the kernel has it
    "tests/kernel/test_backend_probe.py",
    # socket cgroupv2 maps (nft_socket): from the first packet, at a deep level (Slurm's
    # layout), a cgroup's new id after it is made again, IPv6; INET_DIAG_CGROUP_ID
    # for the bytes per band
    f"{CGROUPS}test_short_connections_of_a_cgroup_job_are_classified_from_the_first_packet",
    f"{CGROUPS}test_each_managers_cgroup_layout_is_matched_at_its_level[slurm]",
    f"{CGROUPS}test_a_cgroup_removed_and_made_again_is_followed_and_one_left_gone_ends_its_job",
    f"{CGROUPS}test_an_ipv6_connection_of_a_cgroup_job_carries_its_traffic_class",
    f"{CGROUPS}test_a_cgroup_jobs_bytes_are_reported_in_its_planned_band",
    # the feature probes, and tcp_info's counters as this kernel lays them out
    "tests/kernel/test_features.py",
    "tests/kernel/test_tcpstats.py",
    # plans from a real coordinator enforced by the auto-picked backend (prio here)
    "tests/kernel/test_plan_by_update.py",
    # a step of a real Slurm under its cgroup/v2 plugin (it needs a pure cgroup2 host)
    "tests/kernel/test_slurm_cgroup_v2.py",
)
# The time bounds follow the guest's measured speed (``guest_speed``): TCG's speed varies
# about 3x between machines of our kind and between days. LAYER_WORK is what SUBSET costs
# in seconds of a guest as fast as the host (its guest time divided by the slowdown
# measured in the same run); the layer's bound is that times the slowdown, times MARGIN.
LAYER_WORK = 16.5
MARGIN = 2.5
BOOT_ALLOWANCE = 10.0  # boot and the numba warm-up, at the host's speed
# the workload's best time on a quiet host of our kind (python -m tests.vm.speed): a host
# slowed by other work is compared at this speed, not at its own
QUIET_HOST_SECONDS = 0.20


@dataclass(frozen=True)
class Speed:
    """The fixed workload of tests/vm/speed.py timed on the host and in the guest."""

    host: float
    guest: float

    @property
    def slowdown(self) -> float:
        """How many times slower the guest runs than a quiet host (at least 1)."""
        return max(1.0, self.guest / min(self.host, QUIET_HOST_SECONDS))

    def bound(self, work: float) -> float:
        """Seconds allowed for ``work`` seconds of host-speed work in the guest."""
        return (BOOT_ALLOWANCE + work * MARGIN) * self.slowdown

    def env(self) -> dict[str, str]:
        """The guest tests' environment: their bounds are the host's times the slowdown."""
        scale = f"{self.slowdown:.2f}"
        return {"GROUPER_TEST_TIME_SCALE": scale, "GROUPER_REQUIRE_ROOT_TESTS": "1"}


@dataclass
class GuestRun:
    status: int
    seconds: float
    out: Path
    output: str
    failure: str  # the launcher's account when the VM died or hung


_said: list[str] = []  # lines for the terminal summary (tests/vm/conftest.py)


def boot(argv: list[str], out: Path, timeout: float, env: dict[str, str] | None = None,
         cut: Callable[[], bool] | None = None) -> GuestRun:  # fmt: skip
    """Run ``argv`` in a VM; QEMU is ended by the pid we started, whatever happens."""
    run = launcher()
    vm = run.Vm(argv, out, env=env, cwd=ROOT)
    t0 = time.monotonic()
    try:
        with open(out / "output.log", "w") as log:
            status = vm.start().wait(timeout, sink=log, cut=cut)
    finally:
        vm.close()
    text = (out / "output.log").read_text(errors="replace")
    return GuestRun(status, time.monotonic() - t0, out, text, vm.failure)


def speed_seconds(text: str) -> float:
    """The figure tests/vm/speed.py printed last."""
    return float(text.split()[-1])


@pytest.fixture(scope="session")
def guest_speed(tmp_path_factory) -> Speed:
    argv = [sys.executable, "-m", "tests.vm.speed"]
    host = speed_seconds(subprocess.run(argv, cwd=ROOT, check=True, capture_output=True,
                                        text=True, timeout=120).stdout)  # fmt: skip
    run = boot(argv, tmp_path_factory.mktemp("vm-speed"), 600)
    assert run.status == 0, run.failure or run.output[-3000:]
    speed = Speed(host, speed_seconds(run.output))
    _said.append(
        f"vm: workload {speed.guest:.2f} s in the guest, {speed.host:.2f} s on the host "
        f"(quiet host {QUIET_HOST_SECONDS:.2f} s): {speed.slowdown:.1f}x slower; time scale "
        f"{speed.env()['GROUPER_TEST_TIME_SCALE']}, layer bound {speed.bound(LAYER_WORK):.0f} s"
    )
    return speed


def guest_pytest(out: Path, tests: list[str]) -> list[str]:
    """pytest in the guest, reporting each test as it ends (tests/vm/progress.py)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
            "tests.vm.progress", "-rs", *tests]  # fmt: skip


@pytest.fixture(scope="session")
def kernel_layer(tmp_path_factory, guest_speed) -> GuestRun:
    out = tmp_path_factory.mktemp("vm-kernel-layer")
    # numba's cache from the host's `make setup` does not fit the guest's CPU (TCG's
    # `-cpu max`): compile once here, as `make setup` does, not inside a test's bounds
    warm = "from grouper.pda.order import warm_up; warm_up()"
    script = 'uname -r > "$GROUPER_VM_OUT/uname" && "$1" -c "$2" && shift 2 && exec "$@"'
    argv = ["sh", "-c", script, "sh", sys.executable, warm, *guest_pytest(out, list(SUBSET))]
    run = boot(argv, out, guest_speed.bound(LAYER_WORK), guest_speed.env())
    slowdown = guest_speed.slowdown
    work = run.seconds / slowdown
    _said.append(f"vm: kernel layer {run.seconds:.0f} s at {slowdown:.1f}x: {work:.0f} s of "
                 f"host-speed work (LAYER_WORK {LAYER_WORK:.0f})")  # fmt: skip
    return run


def layer_problems(run: GuestRun) -> list[str]:
    """Every guest test that did not pass, with its message, and why the VM ended early;
    empty when all passed. Read from the lines the guest wrote as each test ended, so a
    run that timed out still names its failures and what never finished."""
    progress = read_progress(run.out)
    ended = [run.failure.splitlines()[0]] if run.failure else []
    if progress is None:
        return [*ended, f"the guest reported no test; its output:\n{run.output[-3000:]}"]
    problems = progress.problems()
    if not progress.collected:
        problems.append(f"the guest collected no test; its output:\n{run.output[-3000:]}")
    if run.status != 0 and not problems and not ended:
        problems.append(f"guest exit status {run.status}:\n{run.output[-3000:]}")
    return ended + problems


def test_kernel_layer_passes_on_the_stock_kernel_with_every_backend(kernel_layer):
    run = kernel_layer
    problems = layer_problems(run)
    assert not problems, "\n".join(problems)
    release = launcher().kernel_dir()[1]
    assert (run.out / "uname").read_text().strip() == release
    progress = read_progress(run.out)
    assert progress is not None
    prio = [n for n in progress.ended if n.endswith("prio]")]  # parametrized by backend
    assert len(prio) == sum(t.endswith("prio]") for t in SUBSET), f"prio ran in only {prio}"
    _said.append(f"vm: kernel layer: {len(progress.ended)} passed in {run.seconds:.0f} s")


PLANTED = """
import time


def test_planted_failure():
    assert 1 == 2, "planted in the guest"


def test_hangs_past_the_bound():
    time.sleep(600)


def test_never_reached():
    pass
"""


def test_a_failure_in_the_guest_is_named_when_the_layer_times_out(tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED)

    def failed_then_hung() -> bool:  # the layer's bound passes once the second test hangs
        progress = read_progress(tmp_path)
        return progress is not None and bool(progress.ended) and time.monotonic() > seen()

    first = []

    def seen() -> float:
        first.append(first[-1] if first else time.monotonic() + 3)
        return first[-1]

    argv = guest_pytest(tmp_path, [str(tmp_path / "test_planted.py")])
    run = boot(argv, tmp_path, 900, cut=failed_then_hung)
    assert run.status == launcher().EXIT_TIMEOUT, run.output[-2000:]
    report = "\n".join(layer_problems(run))
    assert "vm: ended by its caller" in report, report
    planted = "test_planted.py::"  # ids are relative to the planted file's folder
    assert f"{planted}test_planted_failure: failed: AssertionError: planted" in report, report
    assert f"{planted}test_hangs_past_the_bound: did not finish" in report, report
    assert f"{planted}test_never_reached: did not finish" in report, report


def test_a_kernel_lacking_what_the_agent_uses_gets_exit_2_or_a_stated_fallback(
    tmp_path, guest_speed
):
    """tests/kernel/vm_missing_features.py in a VM of its own, whose module autoload
    refuses nf_tables, then nft_socket and sch_prio: the agent exits 2 with one line
    naming the kernel, or runs on pids and HTB saying why (one VM: its modules cannot
    be unloaded between the two)."""
    argv = guest_pytest(tmp_path, ["tests/kernel/vm_missing_features.py"])
    run = boot(argv, tmp_path, guest_speed.bound(10.0), guest_speed.env())
    problems = layer_problems(run)
    assert not problems, "\n".join(problems)
    progress = read_progress(tmp_path)
    assert progress is not None and len(progress.ended) == 2, progress


def test_a_guest_that_panics_is_a_failure_with_the_console(tmp_path):
    run = boot(["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 60"], tmp_path, 120)
    assert run.status == launcher().EXIT_VM_DIED
    assert "Kernel panic - not syncing: sysrq triggered crash" in run.failure, run.failure


def test_a_guest_that_hangs_is_ended_at_the_time_bound(tmp_path):
    run = boot(["sleep", "600"], tmp_path, 25)
    assert run.status == launcher().EXIT_TIMEOUT
    assert run.seconds < 60
