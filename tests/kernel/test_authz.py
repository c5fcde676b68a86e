"""Only the coordinator commands agents: a real agent with mutual TLS in a namespace.

Host ``b`` holds a certificate validly signed by the cluster CA (it is an agent too) and
tries to push a plan to host ``a``'s agent over the network: PERMISSION_DENIED, a log
line naming the caller, and nothing in ``a``'s kernel. The same call with the
coordinator's certificate, from the same place, is applied: the refusal is the identity.
Requests for calibration traffic (``ProbeListen``) follow the same rule.
"""

from __future__ import annotations

import sys

import yaml

from tests.kernel.test_agent import TABLE, register
from tests.netns import AgentProc, cluster_yaml, nft_map
from tests.pki import make_pki

FLOW = "c1/j1/b:5201"


def push(pair, pki, identity: str, version: int | str) -> str:
    out = pair.run(
        pair.b,
        sys.executable,
        "tests/tls_call.py",
        f"{pair.addr_a}:7070",
        str(pki),
        identity,
        "a",
        str(version),
        FLOW,
        "1",
        str(TABLE[1]),
    )
    return out.stdout.strip()


def test_an_agent_certificate_cannot_push_plans_the_coordinators_can(pair, tmp_path):
    pki = make_pki(tmp_path, ("a", "b", "coordinator"))
    cfg = cluster_yaml(
        tmp_path / "cluster.yaml",
        [("a", pair.addr_a, pair.nic_a, 30.0), ("b", pair.addr_b, pair.nic_b, 30.0)],
    )
    data = yaml.safe_load(cfg.read_text())
    data["tls"] = {"ca": str(pki / "ca.pem"), "cert": str(pki / "a.pem"), "key": str(pki / "a.key")}
    cfg.write_text(yaml.safe_dump(data))
    agent = AgentProc(pair, pair.a, "a", cfg, tmp_path, listen=f"{pair.addr_a}:7070").start()
    try:
        register(agent, "c1", [5201])
        answer = push(pair, pki, "b", 1)
        assert answer.startswith("PERMISSION_DENIED: "), answer
        assert "b is not the coordinator 'coordinator'" in answer
        assert nft_map(pair.a, "band_dport") == {}, "a refused plan reached the kernel"
        assert "refused ApplyPlan from b" in agent.log.read_text()

        assert push(pair, pki, "coordinator", 1) == "applied"
        assert nft_map(pair.a, "band_dport") != {}, "the coordinator's plan is in the kernel"

        # calibration traffic on request (grouper calibrate --config): the same rule
        answer = push(pair, pki, "b", "probe")
        assert answer.startswith("PERMISSION_DENIED: "), answer
        assert "refused ProbeListen from b" in agent.log.read_text()
        assert push(pair, pki, "coordinator", "probe") == "listening on 1 port(s)"
    finally:
        assert agent.stop() == 0
