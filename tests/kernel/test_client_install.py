"""The ``grouper-client`` wheel alone in a clean venv (grpcio and protobuf from
requirements/client.txt, nothing else) runs a job against a real agent: ``grouper
run`` from that venv registers it, the job's connection is classified, the client
reports progress, and the job ends with the command."""

from __future__ import annotations

import pytest

from tests.install import ROOT, build_wheel, make_venv
from tests.kernel.test_discovery import (
    capture,  # noqa: F401 (fixture)
    job_under_grouper_run,
    receiver,  # noqa: F401 (fixture)
)


@pytest.fixture(scope="module")
def client_bin(tmp_path_factory):
    wheel = build_wheel(ROOT / "client", tmp_path_factory.mktemp("dist"))
    return make_venv(tmp_path_factory.mktemp("client") / "venv", "client.txt", wheel)


def test_client_only_install_runs_a_job_under_a_real_agent(
    pair,
    agent_env,
    receiver,  # noqa: F811 (the fixture imported above)
    capture,  # noqa: F811
    client_bin,
):
    agent = agent_env().start()
    job_under_grouper_run(
        pair, agent, receiver, capture, [str(client_bin / "grouper")], str(client_bin / "python"),
        cwd="/",
    )  # fmt: skip
