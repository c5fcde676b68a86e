"""Multi-queue NICs: the agent keeps the multiqueue root and steers every TX queue.

A 4-queue veth stands in for a fast NIC. Each TX queue must get its own band qdisc
with the steering filter, our priorities must land in the planned band of whichever
queue carries them, other applications' ``SO_PRIORITY`` must not, and stopping the
agent must leave the NIC's qdiscs exactly as they were. Checked with ``tc -j``.
"""

from __future__ import annotations

import signal
import sys
import time

import pytest

from grouper.agent.kernel.layout import HANDLE_MAJOR, BandLayout, child_major
from grouper.common.queues import QueueConfig
from tests.kernel.test_agent import BACKENDS, TABLE, apply, register
from tests.netns import pin_tx_queue, root_qdisc, tc_json

TXQ = 4
PAYLOAD = 200_000


def class_bytes(pair) -> dict[str, int]:
    """Bytes sent per class, from ``tc -s class show`` (this tc has no JSON for classes)."""
    out: dict[str, int] = {}
    handle = None
    for line in pair.run(pair.a, "tc", "-s", "class", "show", "dev", pair.nic_a).stdout.split("\n"):
        words = line.split()
        if words[:1] == ["class"]:
            handle = words[2]
        elif words[:1] == ["Sent"] and handle is not None:
            out[handle] = int(words[1])
    return out


def steering_filters(pair, major: int) -> list[dict]:
    found = tc_json(pair.a, "filter", "show", "dev", pair.nic_a, "parent", f"{major:x}:")
    return [f for f in found if f.get("kind") == "bpf" and "options" in f]


@BACKENDS
@pytest.mark.parametrize("pair", [TXQ], indirect=True, ids=[f"{TXQ}txq"])
def test_every_tx_queue_gets_a_band_qdisc_that_serves_our_bands(pair, agent_env, backend):
    before = tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a)
    agent = agent_env(backend=backend).start()
    layout = BandLayout(backend, 8)
    root = root_qdisc(pair.a, pair.nic_a)
    assert (root["kind"], root["handle"]) == ("mq", f"{HANDLE_MAJOR:x}:")
    children = {
        q["parent"]: (q["kind"], q["handle"])
        for q in tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a)
        if not q.get("root")
    }
    assert children == {
        f"{HANDLE_MAJOR:x}:{q + 1:x}": (backend, f"{child_major(q):x}:") for q in range(TXQ)
    }
    for q in range(TXQ):
        assert len(steering_filters(pair, child_major(q))) == 1, f"queue {q} has no filter"

    ports = [6101 + q for q in range(TXQ)]  # port of queue q is planned into band q + 1
    register(agent, "c1", ports)
    plan = [(f"c1/j1/b:{p}", q + 1, TABLE[q + 1]) for q, p in enumerate(ports)]
    assert apply(agent, 1, plan).applied, "plan refused"
    pair.sink(pair.b, *ports, 6200)
    for q, p in enumerate(ports):
        pin_tx_queue(pair.a, pair.nic_a, q, TXQ)
        pair.run(pair.a, sys.executable, "tests/tcp_tool.py", "send", pair.addr_b, str(p), "200000")
        time.sleep(0.3)  # the socket's buffer drains (30 Mbit/s) before the next pinning
    # someone else's application whose own SO_PRIORITY equals our band 2's minor, on
    # queue 3 (which carries no band-2 traffic of ours)
    pin_tx_queue(pair.a, pair.nic_a, 3, TXQ)
    foreign = str(layout.minor(2))
    pair.run(
        pair.a,
        sys.executable,
        "tests/tcp_tool.py",
        "send",
        pair.addr_b,
        "6200",
        "200000",
        "--priority",
        foreign,
    )
    time.sleep(0.3)
    got = class_bytes(pair)

    def at(q: int, band: int) -> int:
        return got.get(f"{child_major(q):x}:{layout.minor(band):x}", 0)

    for q in range(TXQ):
        assert at(q, q + 1) >= PAYLOAD, f"queue {q} did not serve band {q + 1}: {got}"
        others = [at(r, q + 1) for r in range(TXQ) if r != q]
        assert others == [0] * (TXQ - 1), f"band {q + 1} bytes on other queues: {got}"
    default = QueueConfig().default_band
    assert at(3, default) >= PAYLOAD, "a foreign SO_PRIORITY flow belongs in the default band"
    assert at(3, 2) == 0, "a foreign SO_PRIORITY must not reach our band 2"

    # a killed agent leaves its qdiscs; someone deletes one filter; a new agent repairs
    # exactly that and keeps the qdiscs (their counters survive: nothing was rebuilt)
    agent.stop(signal.SIGKILL)
    pair.run(pair.a, "tc", "filter", "del", "dev", pair.nic_a, "parent", f"{child_major(2):x}:")
    assert steering_filters(pair, child_major(2)) == []
    agent.start()
    assert len(steering_filters(pair, child_major(2))) == 1
    kept = class_bytes(pair)
    assert all(kept[h] >= n for h, n in got.items()), "a band qdisc was rebuilt"
    assert agent.stop() == 0
    assert tc_json(pair.a, "qdisc", "show", "dev", pair.nic_a) == before
