"""grouper.client and grouper run against the agent's own RegistryServicer, AgentCore
and Registry on a Unix socket (no kernel), and with no agent at all. (These tests once
served a copy of the servicer written for them, which could agree with the client while
the agent's code did not.)"""

from __future__ import annotations

import subprocess
import sys
import warnings

import grpc
import pytest

import grouper.client as client
from grouper.agent.peers import PeerRelay
from grouper.agent.registry import Registry
from grouper.agent.service import RegistryServicer
from grouper.client import Job
from grouper.v1 import agent_pb2_grpc as pbg


class _NoKernel:
    """The kernel the agent's core would program: nothing to program here."""

    async def apply(self, rules: dict) -> int:
        return len(rules)

    async def counters(self) -> dict:
        return {}


@pytest.fixture
def agent(tmp_path):
    """The agent's own RegistryServicer over its AgentCore and Registry, served by
    grpc.aio on a Unix socket from a thread of its own (as the agent's local server);
    ``calls`` records each registry call the core applies, refused or not."""
    import asyncio
    import threading

    from grouper.agent.core import AgentCore
    from grouper.common.queues import QueueConfig

    # the agent is this test process, and so is the job: no pid is "the agent's own"
    reg = Registry(known_hosts={"a", "b"}, host="a", own_pid=-1)
    core = AgentCore("a", reg, _NoKernel(), QueueConfig(), {"a": "10.0.0.1"}, plan_ttl=60)
    calls: list[str] = []
    applied = core.registry_call
    core.registry_call = lambda kind, data, source, caller: (  # type: ignore[method-assign]
        calls.append(kind) or applied(kind, data, source, caller)
    )
    path = tmp_path / "agent.sock"
    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        server = grpc.aio.server()
        relay = PeerRelay(path)  # the agent's: each call under its caller's identity
        pbg.add_RegistryServicer_to_server(RegistryServicer(core, relay.caller), server)
        server.add_insecure_port(relay.prepare())
        await server.start()
        await relay.start(0o600, None)
        ready.set()
        await stop.wait()
        await relay.close()
        await server.stop(grace=None)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the agent's registry server did not start"
    yield path, reg, calls
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch):
    monkeypatch.setattr(client, "_warned_absent", False)


def test_without_an_agent_the_job_is_a_no_op_and_warns_once(tmp_path):
    missing = str(tmp_path / "nowhere.sock")
    with pytest.warns(RuntimeWarning, match="no agent socket"):
        with Job("c", "j", [3, 3], socket=missing) as job:
            for _ in range(10):
                job.step()
            job.stage_done()
    assert not job.active and job.iterations_done == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second job must not warn again
        with Job("c", "j2", [3], socket=missing) as job2:
            job2.step()


def test_a_job_registers_reports_progress_and_finishes(agent):
    path, reg, calls = agent
    with Job("c", "j", [5, 5], socket=str(path), report_every=0.01) as job:
        assert job.active and job.error == ""
        for _ in range(5):
            job.step()
        job.stage_done()
        job.step(2)
    entry = reg.jobs["c", "j"]
    assert entry.iterations_done == 7 and entry.stages_finished == 1
    assert entry.finished, "leaving the block finishes this participant"
    assert calls[0] == "register" and calls[-1] == "job_finished"


def test_the_weight_a_job_gives_reaches_the_agents_registry(agent):
    path, reg, _ = agent
    with Job("c", "j", [5], socket=str(path), weight=3.5):
        pass
    assert reg.jobs["c", "j"].weight == 3.5


def test_an_exception_in_training_still_finishes_the_job(agent):
    path, reg, _ = agent
    with pytest.raises(ZeroDivisionError):
        with Job("c", "j", [5], socket=str(path)) as job:
            job.step()
            raise ZeroDivisionError
    assert reg.jobs["c", "j"].finished


def test_a_refusal_is_surfaced_and_training_continues(agent, caplog):
    path, reg, _ = agent
    with Job("c", "j", [5], socket=str(path), flows=[("zz", 1e6)]) as job:
        for _ in range(5):
            job.step()  # no exception, no blocking
    assert job.error.startswith("flows[0].dst_host: unknown host")
    assert not job.active and ("c", "j") not in reg.jobs
    assert "refused RegisterJob" in caplog.text


def test_from_env_takes_the_ids_grouper_run_sets(monkeypatch, agent):
    path, reg, calls = agent
    monkeypatch.setenv("GROUPER_COJOB", "c")
    monkeypatch.setenv("GROUPER_JOB", "j")
    monkeypatch.setenv("GROUPER_STAGES", "4,8")
    monkeypatch.setenv("GROUPER_AGENT_SOCKET", str(path))
    monkeypatch.setenv("GROUPER_MANAGED", "1")
    job = Job.from_env()
    assert (job.cojob, job.job, job.stages, job.socket) == ("c", "j", [4, 8], str(path))
    assert job.managed, "the launcher registered it and will finish it"
    reg.register(
        {"cojob_id": "c", "job_id": "j", "arch": "flows", "stage_iterations": [4, 8], "pids": [1]}
    )
    with job:
        job.step(4)
    assert calls == ["progress"], "no second registration, no finish"
    assert reg.jobs["c", "j"].iterations_done == 4 and not reg.jobs["c", "j"].finished
    monkeypatch.delenv("GROUPER_JOB")
    with pytest.raises(RuntimeError, match="^GROUPER_JOB: not set"):
        Job.from_env()
    monkeypatch.setenv("GROUPER_JOB", "j")
    monkeypatch.setenv("GROUPER_STAGES", "4,eight")
    with pytest.raises(RuntimeError, match="^GROUPER_STAGES: expected iterations per stage"):
        Job.from_env()


def test_the_client_imports_with_neither_numpy_nor_pyroute2():
    code = (
        "import sys\n"
        "for m in ('numpy', 'pyroute2', 'yaml', 'scipy'): sys.modules[m] = None\n"
        "import grouper.client\n"
        "job = grouper.client.Job('c', 'j', [1], socket='/nonexistent')\n"
        "job.start(); job.step(); job.close()\n"
    )
    subprocess.run([sys.executable, "-W", "ignore", "-c", code], check=True)


def grouper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grouper.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_grouper_run_without_an_agent_runs_the_command_and_passes_its_status(tmp_path):
    sock = str(tmp_path / "none.sock")
    code = "import os, sys; print(os.environ['GROUPER_JOB'], os.environ['GROUPER_MANAGED'])"
    code += "; sys.exit(3)"
    r = grouper("run", "--cojob", "c", "--job", "j", "--stages", "5", "--socket", sock,
                "--", sys.executable, "-c", code)  # fmt: skip
    assert r.returncode == 3 and r.stdout.split() == ["j", "0"]
    assert "no agent socket" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stages", "5,x"], "--stages[1]: expected an integer"),
        (["--stages", "0"], "--stages[0]: must be at least 1"),
        (["--stages", "5", "--to", "b"], "--to[0]: expected HOST=BYTES_PER_ITERATION"),
        (["--stages", "5", "--model-bytes", "nan"], "--model-bytes: must be a finite number"),
        (["--stages", "5", "--weight", "0"], "--weight: must be in (0, 1e+06], got 0.0"),
        (["--stages", "5", "--weight", "nan"], "--weight: must be in (0, 1e+06], got nan"),
    ],
)
def test_grouper_run_bad_input_exits_2_naming_the_field(args, message, tmp_path):
    r = grouper("run", "--cojob", "c", "--job", "j", "--socket", str(tmp_path / "s"), *args,
                "--", "true")  # fmt: skip
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"grouper: error: {message}"
        or (r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1)
    ), r.stderr


def test_grouper_run_refused_by_the_agent_exits_2(agent):
    path, _, _ = agent
    r = grouper("run", "--cojob", "c", "--job", "j", "--stages", "5", "--to", "zz=100",
                "--socket", str(path), "--", "true")  # fmt: skip
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("grouper: error: agent refused the job: flows[0].dst_host: unknown host")
    )


def test_launcher_weight_limit_is_the_agents():
    """The client keeps its own copy (it imports nothing of ours); they must agree."""
    from grouper import launcher
    from grouper.common.flows import MAX_WEIGHT

    assert launcher.MAX_WEIGHT == MAX_WEIGHT


PLAIN_LOOP = """
import os, sys
from grouper.client import Job
if sys.argv[1] == "env":
    job = Job.from_env(report_every=0.01)
else:
    job = Job("c", "j", [4, 8], socket=os.environ["GROUPER_AGENT_SOCKET"], report_every=0.01)
for _ in range(6):
    job.step()
"""


@pytest.mark.parametrize("how", ["env", "plain"])
def test_the_plain_loop_reports_from_the_first_step_and_flushes_at_exit(how, agent, monkeypatch):
    """No ``with``, no ``start()``, no ``close()``: the first step starts the job and the
    last progress (and, unless a launcher manages the job, its end) reaches the agent at
    exit."""
    path, reg, calls = agent
    env = {"GROUPER_AGENT_SOCKET": str(path), "PATH": "/usr/bin:/bin"}
    if how == "env":
        env |= {"GROUPER_COJOB": "c", "GROUPER_JOB": "j", "GROUPER_STAGES": "4,8"}
        env["GROUPER_MANAGED"] = "1"
        reg.register(
            {"cojob_id": "c", "job_id": "j", "arch": "flows", "stage_iterations": [4, 8],
             "pids": [1]}
        )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_LOOP, how], env=env, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entry = reg.jobs["c", "j"]
    assert entry.iterations_done == 6, "the progress of the last steps is flushed at exit"
    assert entry.finished == (how == "plain"), "a job the launcher manages is not finished"


def test_cgroup_self_is_the_managers_job_level():
    """``grouper run --cgroup self``: the Slurm step or the Kubernetes pod a rank runs
    in, not its task or container cgroup (the ranks of a job on a host share it)."""
    from grouper.launcher import job_level

    step = "/system.slice/slurmstepd.scope/job_42/step_0"
    assert job_level(step + "/user/task_1") == step
    pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a_1b.slice"
    assert job_level(pod + "/cri-containerd-ab12.scope") == pod
    assert job_level("/system.slice/train.service") == "/system.slice/train.service"
