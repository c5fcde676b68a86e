"""Which rates real TCP settles at where the simulator's fixed point is not unique,
beside the simulator's answer and the rule that settles such cycles.

Hosts h1 and h3 send to h2 and h4 through one switch. Each flow sits in a band of its
sender's NIC (strict priority, the HTB class tree of the agents' ``htb`` backend) and,
not DSCP-marked, in the default queue of the switch port toward its receiver, where
flows of different bands pool. Cases (every link at ``mbps``):

* ``ab``: ``a`` above ``b`` on h1's NIC, both to h2: the model has a fixed point for
  every ``a = x``, ``b = 1 - x`` with ``x`` in [1/2, 1]; ``ba`` starts ``b`` first;
* ``abc``: ``c`` from h3 joins h2's port queue: the fixed point is unique (1/3 each);
* ``cross``: a cycle across two hosts: h1 sends ``a`` (band 0) to h2 and ``b`` (band 1)
  to h4, h3 sends ``c`` (band 0) to h4 and ``d`` (band 1) to h2;
* ``three``: three bands of h1 over two ports: ``a`` (0) and ``b`` (1) to h2, ``e`` (2)
  to h4, which ``c`` from h3 (band 0) shares;
* ``tied``: ``a`` and ``b`` tied in h1's band 0, ``e`` in band 1, all to h2.

Beside TCP's rates: ``model``, the rates the simulator's engines settle at
(``simulator/allocator.py``, whose rounds solve a priority cycle by offers swept
upstream first; every flow started from nothing as a new flow is; in ``ba``, from
``b``'s rates alone, as the engines' warm start gives), and ``rule``, the fixed point
where an upstream link decides a tie with a link downstream of it, by its definition
(``simulator/fabric_rule.py``'s enumeration). Each error is the largest difference between a flow's
rate and TCP's, as a share of the link rate. On veths nothing is lost: TCP is held
back by the queues' backpressure on its socket (small queues), not by drops, as in the
rest of the emulation. A flow's NIC band is chosen by its destination port, standing in
for the agent's per-flow filter. As root::

    grouper bench pooled-queue [--mbps 20] [--seconds 10] [--cases ab,cross] [--json PATH]

Everything built is deleted on the way out, also after a failure.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from typing import NamedTuple

import numpy as np

from grouper.agent.kernel import netns
from grouper.common.errors import ConfigError
from grouper.common.output import write_json
from grouper.common.queues import QueueConfig
from grouper.common.strict_priority import leaf_minor
from grouper.topologies.leafspine import strict_priority_commands, switch_queue_commands
from grouper.trafficgen.netns import NetnsThread


class Flow(NamedTuple):
    sender: str
    receiver: str
    band: int  # on the sender's NIC


def _flows(text: str) -> dict[str, Flow]:
    """``"a:h1>h2/0 ..."``: each flow's name, sender, receiver and NIC band."""
    out = {}
    for item in text.split():
        name, rest = item.split(":")
        ends, band = rest.split("/")
        sender, receiver = ends.split(">")
        out[name] = Flow(sender, receiver, int(band))
    return out


CASES: dict[str, dict[str, Flow]] = {
    "ab": _flows("a:h1>h2/0 b:h1>h2/1"),
    "ba": _flows("a:h1>h2/0 b:h1>h2/1"),
    "abc": _flows("a:h1>h2/0 b:h1>h2/1 c:h3>h2/0"),
    "cross": _flows("a:h1>h2/0 b:h1>h4/1 c:h3>h4/0 d:h3>h2/1"),
    "three": _flows("a:h1>h2/0 b:h1>h2/1 e:h1>h4/2 c:h3>h4/0"),
    "tied": _flows("a:h1>h2/0 b:h1>h2/0 e:h1>h2/1"),
}
FIRST = {"ba": "b"}  # a flow that runs alone for LEAD seconds before the others start
SENDERS, RECEIVERS = ("h1", "h3"), ("h2", "h4")
BANDS = 3  # on each sender's NIC
LEAD = 3.0
WARM = 2.0  # seconds of TCP's start left out of the window
CHUNK = 64 * 1024
BASE_PORT = 5001  # flow i of a case is received on BASE_PORT + i


def nic_commands(dev: str, mbps: float, flows: list[Flow]) -> list[str]:
    """Strict priority on a NIC: the agents' HTB tree, each of ``flows`` (the case's,
    by position) in its band, chosen by its destination port."""
    cmds = strict_priority_commands(dev, mbps, BANDS, QueueConfig().min_share, BANDS - 1)
    for i, flow in enumerate(flows):
        cmds.append(
            f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dport "
            f"{BASE_PORT + i} 0xffff flowid 1:{leaf_minor(flow.band):x}"
        )
    return cmds


class Bench:
    """h1..h4 on the bridge ``sw``, set up for one case's flows; every name is unique to
    this run."""

    def __init__(self, mbps: float, flows: list[Flow]) -> None:
        tag = f"pq{os.getpid() % 100000}"
        hosts = sorted(SENDERS + RECEIVERS)
        self.ns = {h: f"{tag}{h}" for h in (*hosts, "sw")}
        self.addr = {h: f"10.78.0.{h[1:]}" for h in hosts}
        try:
            for name in self.ns.values():
                netns.add_netns(name)
            for h in hosts:
                netns.veth(self.ns[h], "nic", self.ns["sw"], f"p{h}")
                netns.address(self.ns[h], "nic", f"{self.addr[h]}/24")
            netns.bridge(self.ns["sw"], "br0", *(f"p{h}" for h in hosts))
            for h in SENDERS:  # a filter for another sender's flow never matches here
                self._tc(h, nic_commands("nic", mbps, flows))
            for h in RECEIVERS:
                self._tc("sw", switch_queue_commands(f"p{h}", mbps, QueueConfig()))
        except BaseException:
            self.close()
            raise

    def _tc(self, host: str, cmds: list[str]) -> None:
        for cmd in cmds:
            done = subprocess.run(["ip", "netns", "exec", self.ns[host], *cmd.split()],
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode:
                raise RuntimeError(f"{cmd}: {done.stderr.strip()}")

    def close(self) -> None:
        netns.del_netns(*self.ns.values())


async def _measure(bench: Bench, case: str, seconds: float) -> dict[str, float]:
    """Each flow's Mbit/s received over the case's window (after ``WARM`` seconds of
    every flow's start)."""
    flows = CASES[case]
    port = {name: BASE_PORT + i for i, name in enumerate(flows)}
    threads = {h: NetnsThread(f"/var/run/netns/{n}") for h, n in bench.ns.items() if h != "sw"}
    loop = asyncio.get_running_loop()
    got = dict.fromkeys(flows, 0)
    stop = asyncio.Event()
    tasks: list[asyncio.Task] = []
    socks: list[socket.socket] = []  # every socket made, closed on the way out

    async def receive(listener: socket.socket, name: str) -> None:
        conn, _ = await loop.sock_accept(listener)
        socks.append(conn)
        buf = bytearray(CHUNK)
        while not stop.is_set() and (n := await loop.sock_recv_into(conn, buf)):
            got[name] += n

    async def send(name: str) -> None:
        flow = flows[name]
        sock = await threads[flow.sender].connect(bench.addr[flow.receiver], port[name])
        socks.append(sock)
        data = bytes(CHUNK)
        while not stop.is_set():
            await loop.sock_sendall(sock, data)

    try:
        for name, flow in flows.items():
            listener = await threads[flow.receiver].listen(bench.addr[flow.receiver], port[name])
            socks.append(listener)
            tasks.append(asyncio.create_task(receive(listener, name)))
        first = FIRST.get(case)
        if first:
            tasks.append(asyncio.create_task(send(first)))
            await asyncio.sleep(LEAD)
        tasks += [asyncio.create_task(send(name)) for name in flows if name != first]
        await asyncio.sleep(WARM)
        start, t0 = dict(got), time.monotonic()
        await asyncio.sleep(seconds)
        end, t1 = dict(got), time.monotonic()
        return {f: round((end[f] - start[f]) * 8 / (t1 - t0) / 1e6, 3) for f in flows}
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in socks:
            sock.close()
        for t in threads.values():
            t.close()


LINKS = {h: i for i, h in enumerate(SENDERS + RECEIVERS)}  # a sender's NIC, a receiver's port
DEPTH = np.array([1.0] * len(SENDERS) + [2.0] * len(RECEIVERS))


def crossings(flows: list[Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each flow's two link crossings: (flow, link, queue), its NIC band, then the
    receiver's port's default queue (0: the flows are not marked)."""
    pf = np.repeat(np.arange(len(flows)), 2)
    pl = np.array([x for f in flows for x in (LINKS[f.sender], LINKS[f.receiver])])
    pq = np.array([x for f in flows for x in (f.band, 0)])
    return pf, pl, pq


def model_rates(case: str, mbps: float) -> dict[str, float]:
    """The rates the simulator's engines settle at on the case's links, every flow
    started from nothing as a new flow is (the ``FIRST`` flow from its rates alone, as
    the engines' warm start gives)."""
    from grouper.simulator.allocator import allocate_settled

    names, flows = list(CASES[case]), list(CASES[case].values())
    capacity = np.ones(len(LINKS))
    start = np.zeros(len(flows))
    if case in FIRST:
        i = names.index(FIRST[case])
        pf, pl, pq = crossings([flows[i]])
        start[i] = allocate_settled((pf, pl), capacity, pq, per_crossing=True).rates[0]
    pf, pl, pq = crossings(flows)
    rates = allocate_settled((pf, pl), capacity, pq, per_crossing=True, start=start).rates
    return {f: round(float(r) * mbps, 3) for f, r in zip(names, rates, strict=True)}


def rule_rates(case: str, mbps: float) -> dict[str, float]:
    """The fixed point where an upstream link decides (``simulator/fabric_rule.py``)."""
    from grouper.simulator.fabric_rule import fabric_rates

    pf, pl, pq = crossings(list(CASES[case].values()))
    rates = fabric_rates(pf, pl, pq, np.ones(len(LINKS)), DEPTH)
    return {f: round(float(r) * mbps, 3) for f, r in zip(CASES[case], rates, strict=True)}


def error(rates: dict[str, float], measured: dict[str, float], mbps: float) -> float:
    """The largest difference from TCP's rate over the flows, as a share of the link."""
    return round(max(abs(rates[f] - measured[f]) for f in measured) / mbps, 4)


def run(cases: list[str], mbps: float, seconds: float) -> dict:
    out: dict = {"mbps": mbps, "seconds": seconds, "cases": {}}
    for case in cases:
        bench = Bench(mbps, list(CASES[case].values()))
        try:
            measured = asyncio.run(_measure(bench, case, seconds))
        finally:
            bench.close()
        model, rule = model_rates(case, mbps), rule_rates(case, mbps)
        out["cases"][case] = {
            "measured": measured,
            "model": model,
            "rule": rule,
            "model_error": error(model, measured, mbps),
            "rule_error": error(rule, measured, mbps),
        }
    return out


def bench_pooled_queue(
    cases: list[str] | None, mbps: float, seconds: float, json_path: str | None
) -> int:
    """``grouper bench pooled-queue``: the ``cases`` (None: all) measured, with the
    model's rates beside; ranges are checked where the CLI reads them."""
    if os.geteuid() != 0:
        raise ConfigError("bench pooled-queue", "needs root (it creates network namespaces)")
    result = run(cases or list(CASES), mbps, seconds)
    for case, r in result["cases"].items():
        print(
            f"{case}: TCP {r['measured']} Mbit/s; model {r['model']} "
            f"(error {r['model_error']:.1%}); rule {r['rule']} (error {r['rule_error']:.1%})"
        )
    write_json(result, json_path)
    return 0
