"""Which rates real TCP settles at where the simulator's fixed point is not unique.

Two flows from one host to another, ``a`` above ``b`` on the sender's NIC (strict
priority, the HTB class tree of the agents' ``htb`` backend) and in one queue of the
switch port toward the receiver: the per-link model (``simulator/allocator.py``) has a
fixed point for every ``a = x``, ``b = 1 - x`` with ``x`` in [1/2, 1], and returns the
one its start leads to (1/2 each from nothing). Case ``ab`` measures what the fabric
does; ``ba`` starts ``b`` first; ``abc`` adds ``c`` from a third host into the same
switch queue, where the fixed point is unique (1/3 each). Every link runs at
``mbps``: the NICs and the switch port are HTB-shaped (a veth has no line rate). On
veths nothing is lost: TCP is held back by the queues' backpressure on its socket
(small queues), not by drops, as in the rest of the emulation.

Hosts are network namespaces joined by a bridge (``agent.kernel.netns``); a flow's NIC
band is chosen by its destination port, standing in for the agent's per-flow filter,
and no flow is DSCP-marked, so all share the switch port's default queue. As root::

    grouper bench pooled-queue [--mbps 20] [--seconds 10] [--cases ab,ba,abc] [--json PATH]

Everything built is deleted on the way out, also after a failure.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time

import numpy as np

from grouper.agent.kernel import netns
from grouper.common.errors import ConfigError
from grouper.common.output import write_json
from grouper.common.queues import QueueConfig
from grouper.common.strict_priority import leaf_minor
from grouper.topologies.leafspine import strict_priority_commands, switch_queue_commands
from grouper.trafficgen.netns import NetnsThread

CASES = ("ab", "ba", "abc")
PORTS = {"a": 5001, "b": 5002, "c": 5003}
SENDER = {"a": "h1", "b": "h1", "c": "h3"}
NIC_BAND = {"a": 0, "b": 1, "c": 0}
LEAD = 3.0  # seconds b runs alone in ``ba``
WARM = 2.0  # seconds of TCP's start left out of the window
CHUNK = 64 * 1024


def nic_commands(dev: str, mbps: float) -> list[str]:
    """Strict priority on a NIC: the agents' HTB tree with two bands, a flow's band
    chosen by its destination port."""
    cmds = strict_priority_commands(dev, mbps, 2, QueueConfig().min_share, 1)
    for flow, port in PORTS.items():
        cmds.append(
            f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dport "
            f"{port} 0xffff flowid 1:{leaf_minor(NIC_BAND[flow]):x}"
        )
    return cmds


class Bench:
    """h1 and h3 send to h2 through the bridge ``sw``; every name is unique to this run."""

    def __init__(self, mbps: float) -> None:
        tag = f"pq{os.getpid() % 100000}"
        self.ns = {h: f"{tag}{h}" for h in ("h1", "h2", "h3", "sw")}
        self.addr = {"h1": "10.78.0.1", "h2": "10.78.0.2", "h3": "10.78.0.3"}
        try:
            for name in self.ns.values():
                netns.add_netns(name)
            for h in ("h1", "h2", "h3"):
                netns.veth(self.ns[h], "nic", self.ns["sw"], f"p{h}")
                netns.address(self.ns[h], "nic", f"{self.addr[h]}/24")
            netns.bridge(self.ns["sw"], "br0", "ph1", "ph2", "ph3")
            for h in ("h1", "h3"):
                self._tc(h, nic_commands("nic", mbps))
            self._tc("sw", switch_queue_commands("ph2", mbps, QueueConfig()))
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
    flows = list(case)
    threads = {h: NetnsThread(f"/var/run/netns/{n}") for h, n in bench.ns.items() if h != "sw"}
    loop = asyncio.get_running_loop()
    got = dict.fromkeys(flows, 0)
    stop = asyncio.Event()
    tasks: list[asyncio.Task] = []
    socks: list[socket.socket] = []  # every socket made, closed on the way out

    async def receive(listener: socket.socket, flow: str) -> None:
        conn, _ = await loop.sock_accept(listener)
        socks.append(conn)
        buf = bytearray(CHUNK)
        while not stop.is_set() and (n := await loop.sock_recv_into(conn, buf)):
            got[flow] += n

    async def send(flow: str) -> None:
        sock = await threads[SENDER[flow]].connect(bench.addr["h2"], PORTS[flow])
        socks.append(sock)
        data = bytes(CHUNK)
        while not stop.is_set():
            await loop.sock_sendall(sock, data)

    try:
        for flow in flows:
            listener = await threads["h2"].listen(bench.addr["h2"], PORTS[flow])
            socks.append(listener)
            tasks.append(asyncio.create_task(receive(listener, flow)))
        for i, flow in enumerate(flows):
            if case == "ba" and i == 1:
                await asyncio.sleep(LEAD)
            tasks.append(asyncio.create_task(send(flow)))
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


def model_rates(case: str, mbps: float) -> dict[str, float]:
    """The simulator's per-link model on the same links (h1's NIC, h3's NIC, the
    switch port), every flow started from nothing as a new flow is (``ba``: ``a``
    started with ``b`` at the whole port, as the engines' warm start gives)."""
    from grouper.simulator.allocator import allocate_settled

    flows = list(case)
    nic = {"h1": 0, "h3": 1}
    pf = np.repeat(np.arange(len(flows)), 2)
    pl = np.array([x for f in flows for x in (nic[SENDER[f]], 2)])
    pq = np.array([x for f in flows for x in (NIC_BAND[f], 0)])
    start = np.array([1.0 if (case == "ba" and f == "b") else 0.0 for f in flows])
    rates = allocate_settled((pf, pl), np.ones(3), pq, per_crossing=True, start=start).rates
    return {f: round(float(r) * mbps, 3) for f, r in zip(flows, rates, strict=True)}


def run(cases: list[str], mbps: float, seconds: float) -> dict:
    out: dict = {"mbps": mbps, "seconds": seconds, "cases": {}}
    for case in cases:
        bench = Bench(mbps)
        try:
            measured = asyncio.run(_measure(bench, case, seconds))
        finally:
            bench.close()
        out["cases"][case] = {"measured": measured, "model": model_rates(case, mbps)}
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
        print(f"{case}: measured {r['measured']} Mbit/s; model {r['model']} Mbit/s")
    write_json(result, json_path)
    return 0
