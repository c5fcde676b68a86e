"""``grouper calibrate``: measure the contention model on the emulated fabric, or
(``--config``) between a cluster's real hosts through their agents (``coordinator.probes``).

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
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import wire
from common.errors import ConfigError
from common.output import table, write_json
from pda.calibration import Fit, Sample, fit_contention
from pda.model import Cojob, Job
from pda.priorities import QueueConfig
from topologies.commands import load_experiment, spec_of
from topologies.leafspine import Fabric, LeafSpine
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


def _pair(names: list[str], text: str | None, default: tuple[str, str]) -> tuple[str, str]:
    if text is None:
        return default
    pair = tuple(x.strip() for x in text.split(","))
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(names):
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ConfigError("--hosts", f"two different hosts of {shown}; got {text!r}")
    return pair  # type: ignore[return-value]


def _on_fabric(args: object, sizes: list[float]) -> tuple[dict, list[Sample]]:
    if os.geteuid() != 0:
        raise ConfigError("calibrate", "needs root (Mininet, namespaces, qdiscs)")
    if not shutil.which("mnexec"):
        raise ConfigError("calibrate", "Mininet is not installed (apt-get install mininet)")
    experiment = args.experiment or "builtin:small"
    spec = spec_of(load_experiment(experiment), QueueConfig())
    names = spec.host_names
    # default: across the fabric, first host of the first and of the last leaf
    pair = _pair(names, args.hosts, (names[0], names[-spec.hosts_per_leaf]))
    star = args.pattern == "star"
    samples = measure(spec, pair, sizes, args.max_k, args.reps, star)
    return {"experiment": experiment, "hosts": list(pair), "link_mbps": spec.mbps}, samples


def _on_hosts(args: object, sizes: list[float]) -> tuple[dict, list[Sample]]:
    from coordinator import probes
    from grouper.cluster_config import load_cluster_config

    if args.experiment is not None:
        raise ConfigError("--experiment", "not with --config: the config's hosts are measured")
    cfg = load_cluster_config(args.config)
    names = [h.name for h in cfg.hosts]
    if len(names) < 2:
        raise ConfigError("hosts", "calibration needs two hosts in the config")
    pair = _pair(names, args.hosts, (names[0], names[-1]))
    star = args.pattern == "star"
    ks = range(1, args.max_k + 1)
    plan = [(m, task_pairs(names, pair, k, star), rounds(k, args.reps)) for m in sizes for k in ks]
    samples = probes.measure(cfg, plan)
    listener = plan[0][1][0][1]
    about = {"config": args.config, "cluster": cfg.cluster, "hosts": list(pair)}
    return about | {"link_mbps": cfg.host(listener).link_mbps}, samples


def calibrate(args: object) -> int:
    if args.write:
        from grouper.cluster_config import load_cluster_config

        load_cluster_config(args.write)  # refuse a bad file before measuring
    sizes = [float(x) * 1e6 for x in args.sizes.split(",") if x.strip()]
    if len(set(sizes)) < 2 or min(sizes) <= 0:
        raise ConfigError("--sizes", f"two or more positive sizes in MB, got {args.sizes!r}")
    about, samples = (_on_hosts if args.config else _on_fabric)(args, sizes)
    fit = fit_contention(samples)
    out = Path(args.out or tempfile.mkdtemp(prefix="grouper-calibrate-"))
    from topologies.calibrate_report import plot_fit, write_admission

    pair = about["hosts"]
    title = f"{about.get('experiment') or about['cluster']} {pair[0]}-{pair[1]}"
    files = [str(plot_fit(fit, out / "contention.png", title))]
    if args.write:
        write_admission(Path(args.write), fit.model)
    m = fit.model
    mbps = about["link_mbps"]
    result = about | {
        "pattern": args.pattern,
        "a": m.a,
        "b": m.b,
        "eta": m.eta,
        # 1 / b over the host link's rate: what the simulator's links move payload at
        # when it is given these constants (simulate / emulate --config)
        "goodput": min(1.0, 8 / (m.b * mbps * 1e6)),
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
        print(f"goodput {result['goodput']:.3f} of the {mbps:g} Mbit/s host links")
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
