"""``grouper bench datapath``: what the agent's kernel state costs a saturated link.

Two namespaces joined by a veth pair; iperf3 sends ``--streams`` parallel TCP flows from
``a`` to ``b`` as fast as the machine allows, for ``--seconds``, under four states of
host ``a``'s NIC, each measured ``--runs`` times (the median is reported):

* ``none``: the NIC as the kernel made it (veth: no qdisc);
* ``nft``: only the agent's nftables table (empty plan);
* ``agent``: the agent's qdisc and table, empty plan (what an idle agent costs);
* ``agent_10k``: the same with ``--entries`` rules (10,000 by default: per-connection
  elements and port elements), the iperf3 flows among them in band 1;
* ``agent_10k_single`` (only with ``--txqueues`` > 1): ``agent_10k`` with one band
  qdisc as root over all TX queues (``agent.multiqueue: single``) instead of one per
  queue, which shows what the per-queue layout saves.

The state is installed by the agent's own :class:`agent.enforcer.Enforcer` in a child
process inside ``a``, and removed before the next state; the namespaces are deleted in
``finally``. The qdisc shapes at ``LINK_MBPS`` (far above what a veth carries here), so
the cost measured is the datapath's, not a rate limit.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from common.errors import ConfigError
from common.output import write_json

STATES = ("none", "nft", "agent", "agent_10k")
MQ_STATES = (*STATES, "agent_10k_single")
LINK_MBPS = 400_000
PORT = 5201


def bench_datapath(
    entries: int,
    streams: int,
    seconds: float,
    runs: int,
    json_path: str | None,
    txqueues: int = 1,
) -> int:
    """Ranges are checked where the CLI reads them (``grouper.argtypes``)."""
    if os.geteuid() != 0:
        raise ConfigError("bench datapath", "needs root (it creates network namespaces)")
    tag = os.getpid() % 100000
    a, b = f"gdp{tag}a", f"gdp{tag}b"
    procs: list[subprocess.Popen] = []
    try:
        _net(a, b, txqueues)
        server = subprocess.Popen(
            ["ip", "netns", "exec", b, "iperf3", "-s", "-p", str(PORT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(server)
        time.sleep(0.5)
        states = STATES if txqueues == 1 else MQ_STATES
        gbps: dict[str, list[float]] = {s: [] for s in states}
        for _ in range(runs):
            for state in states:
                with _State(a, state, entries):
                    gbps[state].append(_iperf(a, streams, seconds))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"grouper: bench datapath failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
    med = {s: statistics.median(v) for s, v in gbps.items()}
    result = {
        "entries": entries,
        "streams": streams,
        "seconds": seconds,
        "runs": runs,
        "txqueues": txqueues,
        "gbps": med,
        "gbps_all": gbps,
        "ratio_to_none": {s: med[s] / med["none"] for s in med},
        "loss_10k_vs_agent": 1 - med["agent_10k"] / med["agent"],
    }
    write_json(result, json_path)
    if json_path != "-":
        print(", ".join(f"{s} {med[s]:.2f} Gbit/s ({med[s] / med['none']:.1%})" for s in med))
    return 0


def _net(a: str, b: str, txqueues: int) -> None:
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", a)
    ip("netns", "add", b)
    mq = ("numtxqueues", str(txqueues), "numrxqueues", str(txqueues))
    ip(
        "link",
        "add",
        "dpa",
        "netns",
        a,
        *mq,
        "type",
        "veth",
        "peer",
        "name",
        "dpb",
        "netns",
        b,
        *mq,
    )
    for ns, nic, addr in ((a, "dpa", "10.97.0.1"), (b, "dpb", "10.97.0.2")):
        ip("-n", ns, "addr", "add", f"{addr}/24", "dev", nic)
        ip("-n", ns, "link", "set", nic, "up")
        ip("-n", ns, "link", "set", "lo", "up")


def _iperf(ns: str, streams: int, seconds: float) -> float:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "iperf3", "-c", "10.97.0.2", "-p", str(PORT), "-J",
         "-P", str(streams), "-t", str(seconds), "-O", "1"],
        capture_output=True, text=True, timeout=seconds + 30,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"iperf3: {out.stdout[-300:]} {out.stderr[-300:]}")
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


class _State:
    """Install one state in namespace ``ns`` for the duration of a ``with`` block."""

    def __init__(self, ns: str, state: str, entries: int) -> None:
        self.ns, self.state, self.entries = ns, state, entries
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> _State:
        if self.state == "none":
            return self
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "agent.datapath_bench",
             self.state, str(self.entries)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"installing state {self.state} failed")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the child removes what it installed, then exits
            self.proc.wait(30)


def _rules(entries: int) -> dict[tuple, Any]:
    """``entries`` rules: iperf3's port in band 1, the rest per-connection elements of
    made-up connections and port elements, spread over the data bands."""
    from agent.plan import Rule
    from pda.priorities import QueueConfig

    q = QueueConfig()
    data = q.data_bands
    rules: dict[tuple, Any] = {("dport", "10.97.0.2", PORT): Rule(1, q.dscp_table[1])}
    for i in range(entries - 1):
        band = data[i % len(data)]
        rule = Rule(band, q.dscp_table[band])
        addr = f"10.{96 - i // 60000}.{i // 250 % 240}.{i % 250 + 1}"
        if i % 2:
            rules[("conn", "10.97.0.1", addr, 20000 + i % 40000, 5000 + i % 7)] = rule
        else:
            rules[("dport", addr, 6000 + i % 50000)] = rule
    return rules


def _child(state: str, entries: int) -> None:
    from agent.enforcer import Enforcer
    from agent.kernel import nft_rules
    from pda.priorities import QueueConfig

    single = state == "agent_10k_single"
    enf = Enforcer("dpa", QueueConfig(), LINK_MBPS, control_ports=(7070,), multiqueue=not single)
    try:
        if state == "nft":
            enf._replace({})
        else:
            enf.start()
            if state.startswith("agent_10k"):
                enf.apply(_rules(entries))
        print("ready", flush=True)
        sys.stdin.read()
    finally:
        if state == "nft":
            enf.nft.run(nft_rules.delete_table())
        else:
            enf.stop()
        enf.close()


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
