"""The ``grouper-client`` wheel alone in a clean venv (grpcio and protobuf from
requirements/client.lock, nothing else) runs a job against a real agent: ``grouper
run`` from that venv registers it, the job's connection is classified, the client
reports progress, and the job ends with the command."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.install import ROOT, build_wheel, make_venv
from tests.kernel.test_agent import TABLE, apply, collect
from tests.kernel.test_discovery import (
    BAND,
    RECLASSIFY_BOUND,
    capture,  # noqa: F401 (fixture)
    check_marked,
    receiver,  # noqa: F401 (fixture)
    send,
    wait_classified,
)


@pytest.fixture(scope="module")
def client_bin(tmp_path_factory):
    wheel = build_wheel(ROOT / "client", tmp_path_factory.mktemp("dist"))
    return make_venv(tmp_path_factory.mktemp("client") / "venv", "client.lock", wheel)


def test_client_only_install_runs_a_job_under_a_real_agent(
    pair,
    agent_env,
    receiver,  # noqa: F811 (the fixture imported above)
    capture,  # noqa: F811
    client_bin,
):
    agent = agent_env().start()
    run = pair.popen(
        pair.a, str(client_bin / "grouper"), "run", "--cojob", "c1", "--job", "j1",
        "--stages", "100000", "--socket", str(agent.registry), "--",
        str(client_bin / "python"), str(ROOT / "tests" / "job_tool.py"), pair.addr_b,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while not [j for j in collect(agent).jobs if j.job.job_id == "j1"]:
        assert time.monotonic() < deadline, "the client's grouper run did not register the job"
        time.sleep(0.1)
    assert apply(agent, 1, [("c1/j1/b:*", BAND, TABLE[BAND])]).applied
    conn = send(run, receiver[0], 1.5)
    assert wait_classified(pair.a, conn["sport"], RECLASSIFY_BOUND) is not None
    json.loads(run.stdout.readline())
    run.stdin.close()
    assert run.wait(timeout=15) == 0
    check_marked(capture(), {conn["sport"]}, TABLE[BAND])
    (state,) = [j for j in collect(agent).jobs if j.job.job_id == "j1"]
    assert state.finished, "the client's launcher reports the job finished"
    assert state.iterations_done > 0, "the client library reported progress"
