"""Jobs of ordinary users, with real users: the agent knows each caller from the socket
and lets it name only its own processes, cgroup and jobs.

Two users are made with ``useradd`` (removed afterwards, pass or fail) and every call of
theirs comes from a process running as them (``setpriv``), with the client-only wheel
in a venv of Debian's Python (a user cannot enter this checkout's venv, which lies under
root's home). Checked with independent tools: a packet capture for the DSCP of the
user's connection, the agent's Collect for what was registered.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.kernel.agent_calls import collect
from tests.kernel.test_cgroups import cgroups, in_cgroup  # noqa: F401 (fixture)
from tests.kernel.test_discovery import (
    capture,  # noqa: F401 (fixture)
    job_under_grouper_run,
    receiver,  # noqa: F401 (fixture)
)
from tests.netns import AgentProc, cluster_yaml
from tests.users import SYSTEM_PYTHON, User


@pytest.fixture
def agent(pair, shared, tmp_path):
    """An agent on host a whose sockets lie where every user can reach them."""
    work = Path(tempfile.mkdtemp(prefix="agent-", dir=shared))
    work.chmod(0o755)
    cfg = cluster_yaml(
        tmp_path / "cluster.yaml",
        [("a", pair.addr_a, pair.nic_a, 30.0), ("b", pair.addr_b, pair.nic_b, 30.0)],
    )
    proc = AgentProc(pair, pair.a, "a", cfg, work)
    proc.nsenter = True  # the host's cgroup2 (ip netns exec remounts /sys)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class Caller:
    """tests/registry_call.py running as ``user`` (optionally in ``cgroup``)."""

    def __init__(self, pair, shared: Path, user: User, socket: Path, cgroup: Path | None = None):
        self.proc = pair.nsenter(
            pair.a, *user.argv, str(shared / "venv/bin/python"), str(shared / "registry_call.py"),
            str(socket), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=in_cgroup(cgroup) if cgroup else None,
        )  # fmt: skip
        word, pid = self.proc.stdout.readline().split()
        assert word == "ready"
        self.pid = int(pid)

    def __call__(self, method: str, **msg) -> dict:
        self.proc.stdin.write(json.dumps({"method": method, "msg": msg}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def register(self, cojob: str, job: str, **kw) -> dict:
        return self("RegisterJob", cojob_id=cojob, job_id=job, arch="flows",
                    stage_iterations=[100], **kw)  # fmt: skip


def sleeper(pair, user: User, cgroup: Path | None = None) -> int:
    proc = pair.nsenter(pair.a, *user.argv, SYSTEM_PYTHON, "-c", "import time; time.sleep(120)",
                        preexec_fn=in_cgroup(cgroup) if cgroup else None)  # fmt: skip
    return proc.pid


def refused(answer: dict, start: str) -> None:
    assert not answer["ok"] and answer["error"].startswith(start), answer


def test_an_ordinary_users_job_under_grouper_run_is_registered_and_classified(
    pair, users, shared, agent, receiver, capture,  # noqa: F811
):  # fmt: skip
    alice = users[0]
    venv = shared / "venv" / "bin"
    job_under_grouper_run(
        pair, agent, receiver, capture, [*alice.argv, str(venv / "grouper")],
        str(venv / "python"), cwd="/", tool=shared / "job_tool.py",
    )  # fmt: skip


def test_a_user_cannot_claim_another_users_process_cgroup_or_job(
    pair, users, shared, agent, cgroups,  # noqa: F811
):  # fmt: skip
    alice, bob = users
    tag = uuid.uuid4().hex[:8]
    bobs_dir, alices_dir = cgroups(f"/gk{tag}.slice/bob"), cgroups(f"/gk{tag}.slice/alice")
    as_alice = Caller(pair, shared, alice, agent.registry, alices_dir)
    as_bob = Caller(pair, shared, bob, agent.registry)
    bobs = sleeper(pair, bob, bobs_dir)
    bobs_cgroup, alices_cgroup = f"/gk{tag}.slice/bob", f"/gk{tag}.slice/alice"

    refused(as_alice.register("evil", "x", pids=[bobs]),
            f"pids[0]: process {bobs} belongs to another user")  # fmt: skip
    refused(as_alice.register("evil", "y", cgroup=bobs_cgroup),
            "cgroup: must contain the calling process")  # fmt: skip
    refused(as_alice.register("evil", "z", pids=[as_alice.pid], weight=1e6),
            "weight: 1e+06 is above 1, the most an ordinary user's job may have")  # fmt: skip
    refused(as_alice.register("evil", "w", pids=[as_alice.pid], own_cgroup=True),
            "own_cgroup: only root's jobs get a cgroup of the agent's")  # fmt: skip
    # bob is not locked out of his own process by alice's refused claim
    assert as_bob.register("c1", "jb", pids=[bobs])["ok"]
    theirs = f"job_id: job c1/jb is another user's (uid {bob.uid})"
    refused(as_alice("ReportProgress", cojob_id="c1", job_id="jb", iterations_done=50), theirs)
    refused(as_alice("JobFinished", cojob_id="c1", job_id="jb"), theirs)
    refused(as_alice.register("c1", "jb", pids=[as_alice.pid]), theirs)
    # her own cgroup, which holds her calling process, is hers to name
    assert as_alice.register("c2", "ja", cgroup=alices_cgroup)["ok"]
    jobs = {(j.job.cojob_id, j.job.job_id): j for j in collect(agent).jobs}
    assert set(jobs) == {("c1", "jb"), ("c2", "ja")}, "a refused call registered nothing"
    assert jobs[("c1", "jb")].iterations_done == 0 and not jobs[("c1", "jb")].finished
    # root still may name any user's process
    root = Caller(pair, shared, User("root", 0, 0), agent.registry)
    assert root.register("c3", "jr", pids=[sleeper(pair, bob)])["ok"]
    log = agent.log.read_text()
    assert f"uid {alice.uid} pid {as_alice.pid}" in log, log[-2000:]


def test_a_registry_socket_restricted_to_a_group_says_permission_denied(pair, users, shared):
    """With agent.registry.group set, a user outside the group gets a message naming the
    socket and the group, not "unreachable"; the job still runs."""
    alice = users[0]
    sock = shared / f"closed-{uuid.uuid4().hex[:6]}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen()
    sock.chmod(0o660)  # root:root, as an agent with agent.registry.group: root makes it
    try:
        run = subprocess.run(
            [*alice.argv, str(shared / "venv/bin/grouper"), "run", "--cojob", "c", "--job", "j",
             "--stages", "10", "--socket", str(sock), "--", "true"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        listener.close()
        sock.unlink()
    assert run.returncode == 0, run.stderr
    assert f"permission denied on {sock}: join the group 'root'" in run.stderr, run.stderr
    assert "unreachable" not in run.stderr
