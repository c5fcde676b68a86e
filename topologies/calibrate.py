"""``grouper calibrate``: measure the contention model on the emulated fabric.

As Wang et al. did on their 10 GbE cluster (Section III-A, Fig. 2): ``k`` ring
all-reduces of ``M`` bytes between the same two hosts, all at once, for k = 1..8 and a
few sizes. Each all-reduce is a real TCP ring (``trafficgen``): one untimed round warms
the connections, then ``reps`` rounds are timed, each started by all k at once. The fit
(:mod:`pda.calibration`) gives ``a`` and ``b`` from k = 1 and ``eta`` from k > 1.
``--write CLUSTER.yaml`` stores the constants in the config's ``admission`` section,
changing nothing else in the file. ``--pattern star`` runs task i between the i-th
other host and the first host of the pair instead, so the k tasks meet only on that
host's links, from different senders (as PS pushes meet at a server: incast).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common.errors import ConfigError
from common.output import table, write_json
from pda.calibration import Fit, Sample, fit_contention
from pda.model import Cojob, Job
from pda.priorities import QueueConfig
from topologies.commands import load_experiment, spec_of
from topologies.leafspine import Fabric, LeafSpine
from trafficgen import wire
from trafficgen.netns import NetnsThread
from trafficgen.replay import Hosts, JobRunner


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


def task_pairs(
    spec: LeafSpine, pair: tuple[str, str], k: int, star: bool
) -> list[tuple[str, str]]:
    """The hosts of each of ``k`` tasks: all on ``pair``, or (star) the i-th other host
    with the pair's first host, cycling when there are fewer hosts than tasks."""
    if not star:
        return [pair] * k
    others = [h for h in spec.host_names if h != pair[0]]
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
    used = sorted({h for p in task_pairs(spec, pair, max_k, star) for h in p})
    try:
        fabric.start()
        netns = {h: NetnsThread(fabric.netns_path(h)) for h in used}
        hosts = Hosts({h: spec.addresses[h] for h in used}, netns, dict.fromkeys(used))
        for size in sizes:
            for k in range(1, max_k + 1):
                pairs = task_pairs(spec, pair, k, star)
                seconds = asyncio.run(_point(hosts, pairs, size, reps))
                samples.append(Sample(k, size, seconds))
    finally:
        for t in netns.values():
            t.close()
        fabric.stop()
    return samples


def _pair(spec: LeafSpine, text: str | None) -> tuple[str, str]:
    names = spec.host_names
    if text is None:  # across the fabric: first host of the first and the last leaf
        return names[0], names[-spec.hosts_per_leaf]
    pair = tuple(x.strip() for x in text.split(","))
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(names):
        raise ConfigError("--hosts", f"two different hosts of {', '.join(names)}; got {text!r}")
    return pair  # type: ignore[return-value]


def calibrate(args: object) -> int:
    if os.geteuid() != 0:
        raise ConfigError("calibrate", "needs root (Mininet, namespaces, qdiscs)")
    if not shutil.which("mnexec"):
        raise ConfigError("calibrate", "Mininet is not installed (apt-get install mininet)")
    if args.write:
        from grouper.cluster_config import load_cluster_config

        load_cluster_config(args.write)  # refuse a bad file before measuring
    spec = spec_of(load_experiment(args.experiment), QueueConfig())
    pair = _pair(spec, args.hosts)
    sizes = [float(x) * 1e6 for x in args.sizes.split(",") if x.strip()]
    if len(set(sizes)) < 2 or min(sizes) <= 0:
        raise ConfigError("--sizes", f"two or more positive sizes in MB, got {args.sizes!r}")
    star = args.pattern == "star"
    fit = fit_contention(measure(spec, pair, sizes, args.max_k, args.reps, star))
    out = Path(args.out or tempfile.mkdtemp(prefix="grouper-calibrate-"))
    from topologies.calibrate_report import plot_fit, write_admission

    files = [str(plot_fit(fit, out / "contention.png", f"{args.experiment} {pair[0]}-{pair[1]}"))]
    if args.write:
        write_admission(Path(args.write), fit.model)
    m = fit.model
    result = {
        "experiment": args.experiment,
        "hosts": list(pair),
        "pattern": args.pattern,
        "link_mbps": spec.mbps,
        "a": m.a,
        "b": m.b,
        "eta": m.eta,
        # 1 / b over the host link's rate: what the simulator's links move payload at
        # when it is given these constants (simulate / emulate --config)
        "goodput": min(1.0, 8 / (m.b * spec.mbps * 1e6)),
        "raw": dict(zip(("a", "b", "eta"), fit.raw, strict=True)),
        "share_threshold": m.share_threshold,
        "rms_relative_residual": fit.rms_relative,
        "max_relative_residual": fit.max_relative,
        "samples": list(fit.residuals),
        "files": files,
        "written": args.write,
    }
    write_json(result, args.json)
    if args.json != "-":
        _print(fit, pair, files, args.write)
        print(f"goodput {result['goodput']:.3f} of the {spec.mbps:g} Mbit/s host links")
    return 0


def _print(fit: Fit, pair: tuple[str, str], files: list[str], written: str | None) -> None:
    rows = [
        [r["k"], f"{r['bytes'] / 1e6:g}", f"{r['measured'] * 1e3:.1f}",
         f"{r['predicted'] * 1e3:.1f}", f"{r['relative'] * 100:+.1f}%"]
        for r in fit.residuals
    ]  # fmt: skip
    print(table(rows, ["k", "M (MB)", "measured ms", "model ms", "residual"]))
    m = fit.model
    print(
        f"{pair[0]}-{pair[1]}: a = {m.a:.4g} s, b = {m.b:.4g} s/B, eta = {m.eta:.4g} s/B "
        f"(share threshold {m.share_threshold:.3f}); residuals rms "
        f"{fit.rms_relative * 100:.1f}%, max {fit.max_relative * 100:.1f}%"
    )
    print(f"plot: {files[0]}" + (f"; written to {written}" if written else ""))
