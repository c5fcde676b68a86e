"""The calibration's measurement on the emulated fabric (the command is
``grouper.cli.calibrate``; between real hosts it is ``coordinator.probes``).

As Wang et al. did on their 10 GbE cluster (Section III-A, Fig. 2): ``k`` ring
all-reduces of ``M`` bytes between the same two hosts, all at once, for k = 1..8 and a
few sizes. Each all-reduce is a real TCP ring (``trafficgen``): one untimed round warms
the connections, then ``reps`` rounds are timed (three times as many for k = 1, whose
points alone set a and b), each started by all k at once. The fit
(:mod:`pda.calibration`) gives ``a`` and ``b`` from k = 1 and ``eta`` from k > 1.
``--write CLUSTER.yaml`` stores the constants in the config's ``admission`` section,
changing nothing else in the file. ``--pattern star`` runs task i between the i-th
other host and the first host of the pair instead, so the k tasks meet only on that
host's links, from different senders (as PS pushes meet at a server: incast).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

from grouper.common import wire
from grouper.pda.calibration import Sample
from grouper.pda.model import Cojob, Job
from grouper.topologies.leafspine import Fabric, LeafSpine
from grouper.trafficgen.netns import NetnsThread
from grouper.trafficgen.replay import Hosts, JobRunner


async def _point(hosts: Hosts, pairs: list[tuple[str, str]], size: float, reps: int) -> float:
    """Time of one of ``len(pairs)`` ring all-reduces (one per pair of hosts) of ``size``
    bytes started together:
    connections opened and warmed by one untimed round, then ``reps`` timed rounds, each
    started by all tasks at once (a barrier between rounds). The median over rounds of
    each round's average, so one round with a TCP timeout does not set the point."""
    ledger = wire.Ledger()
    ports = itertools.count(21000)
    runners = []
    k = len(pairs)
    for i, pair in enumerate(pairs):
        cj = Cojob(f"cal{i}", (reps + 1,), (Job.ring(f"t{i}", size, list(pair)),))
        runners.append(JobRunner(hosts, cj, cj.jobs[0], ports, ledger))
        runners[-1].declare()
    try:
        for r in runners:
            await r.setup()
        await asyncio.gather(*(r.iteration(0) for r in runners))  # warm-up
        rounds: list[float] = []

        async def timed(r: JobRunner, it: int, t0: float) -> float:
            await r.iteration(it)
            return time.monotonic() - t0

        for it in range(1, reps + 1):
            t0 = time.monotonic()
            rounds.append(
                statistics.fmean(await asyncio.gather(*(timed(r, it, t0) for r in runners)))
            )
    finally:
        for r in runners:
            await r.finish()
    short = ledger.shortfall()
    if short:
        raise RuntimeError(f"k={k}, M={size:g}: bytes missing on {len(short)} connections")
    return statistics.median(rounds)


ALONE = 3  # k = 1 points run this many times the rounds: they alone set a and b


def rounds(k: int, reps: int) -> int:
    """Timed rounds of a point. The k = 1 points fix a and b, and one TCP timeout there
    moves both (a round of 0.25 MB at 20 Mbit/s took 151 ms instead of 105): they get
    ``ALONE`` times the rounds, so their median holds against a third of rounds lost.
    They carry 1/36 of the bytes of k = 1..8, so this costs about 6% more time."""
    return reps * ALONE if k == 1 else reps


def task_pairs(
    names: list[str], pair: tuple[str, str], k: int, star: bool
) -> list[tuple[str, str]]:
    """The hosts of each of ``k`` tasks: all on ``pair``, or (star) the i-th other host
    with the pair's first host, cycling when there are fewer hosts than tasks. The
    second host of every task is the same: it listens (``coordinator.probes``)."""
    if not star:
        return [pair] * k
    others = [h for h in names if h != pair[0]]
    return [(others[i % len(others)], pair[0]) for i in range(k)]


def measure(
    spec: LeafSpine,
    pair: tuple[str, str],
    sizes: list[float],
    max_k: int,
    reps: int,
    star: bool = False,
) -> list[Sample]:
    """Every (k, size) point on one fabric; it is torn down even on failure."""
    fabric = Fabric(spec)
    netns: dict[str, NetnsThread] = {}
    samples = []
    used = sorted({h for p in task_pairs(spec.host_names, pair, max_k, star) for h in p})
    try:
        fabric.start()
        netns = {h: NetnsThread(fabric.netns_path(h)) for h in used}
        hosts = Hosts({h: spec.addresses[h] for h in used}, netns, dict.fromkeys(used))
        for size in sizes:
            for k in range(1, max_k + 1):
                pairs = task_pairs(spec.host_names, pair, k, star)
                seconds = asyncio.run(_point(hosts, pairs, size, rounds(k, reps)))
                samples.append(Sample(k, size, seconds))
    finally:
        for t in netns.values():
            t.close()
        fabric.stop()
    return samples
