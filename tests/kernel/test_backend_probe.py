"""The agent's backend probe (``backend: auto``) cannot silently downgrade.

The probe once added a link with a fixed name, ``grouper-probe``: one left over by a
crashed agent (or a second agent probing at the same moment) made the add fail, and
the agent picked HTB on a kernel that has ``prio``, without a word. Here such a link
is left in the agent's namespace; the agent must still pick the best backend this
kernel offers, say why in its log, export it as a metric and leave no probe link.
"""

from __future__ import annotations

import sys

from tests.netns import kernel_backends, root_qdisc

METRICS_PORT = 19102


def links(pair) -> set[str]:
    out = pair.run(pair.a, "ip", "-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def test_a_leftover_probe_link_does_not_downgrade_the_backend(pair, agent_env):
    best = "prio" if "prio" in kernel_backends() else "htb"
    pair.run(pair.a, "ip", "link", "add", "grouper-probe", "type", "veth", "peer", "grouper-probe1")
    before = links(pair)
    agent = agent_env(backend="auto")
    agent.metrics_port = METRICS_PORT
    agent.start()
    assert root_qdisc(pair.a, pair.nic_a)["kind"] == best
    assert f"backend {best}: " in agent.log.read_text()
    out = pair.run(
        pair.a,
        sys.executable,
        "-c",
        "import urllib.request;print(urllib.request.urlopen("
        f"'http://127.0.0.1:{METRICS_PORT}/metrics').read().decode())",
    ).stdout
    assert f'grouper_agent_backend{{backend="{best}",host="a"}} 1.0' in out
    assert links(pair) == before, "the probe left a link behind (or removed ours)"
