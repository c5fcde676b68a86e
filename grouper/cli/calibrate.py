"""``grouper calibrate``: the command. It measures on the emulated fabric
(``experiments.calibrate``) or, with ``--config``, between a cluster's real hosts through
their agents (``coordinator.probes``), fits Wang et al.'s model (``pda.calibration``),
prints the fit with its residuals and a plot, and with ``--write`` stores the constants.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from grouper.common import validate as v
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.common.queues import QueueConfig
from grouper.experiments.calibrate import measure, rounds, task_pairs
from grouper.experiments.spec import load_experiment, spec_of
from grouper.pda.calibration import LEVEL, Fit, Sample, fit_contention


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
    spec = replace(spec_of(load_experiment(experiment), QueueConfig()), cc=args.cc)
    names = spec.host_names
    # default: across the fabric, first host of the first and of the last leaf
    pair = _pair(names, args.hosts, (names[0], names[-spec.hosts_per_leaf]))
    star = args.pattern == "star"
    samples = measure(spec, pair, sizes, args.max_k, args.reps, star)
    about = {"experiment": experiment, "hosts": list(pair), "link_mbps": spec.mbps}
    return about | {"congestion_control": spec.cc}, samples


def _on_hosts(args: object, sizes: list[float]) -> tuple[dict, list[Sample]]:
    from grouper.common.cluster_config import load_cluster_config
    from grouper.coordinator import probes

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


MAX_SIZE_MB = 1000  # one all-reduce of this size per task and round


def calibrate(args: object) -> int:
    if args.write:  # a file that cannot take the result is refused before measuring
        from grouper.experiments.calibrate_report import write_admission

        write_admission(Path(args.write), ContentionModel(a=1e-3, b=1e-9, eta=1e-9), dry_run=True)
    sizes = [
        v.number(x, "--sizes", positive=True) * 1e6 for x in args.sizes.split(",") if x.strip()
    ]
    if sizes and max(sizes) > MAX_SIZE_MB * 1e6:
        raise ConfigError("--sizes", f"at most {MAX_SIZE_MB} MB each, got {args.sizes!r}")
    if len(set(sizes)) < 2:
        raise ConfigError("--sizes", f"two or more different sizes in MB, got {args.sizes!r}")
    about, samples = (_on_hosts if args.config else _on_fabric)(args, sizes)
    fit = fit_contention(samples)
    out = Path(args.out or tempfile.mkdtemp(prefix="grouper-calibrate-"))
    from grouper.experiments.calibrate_report import plot_fit, write_admission

    pair = about["hosts"]
    title = f"{about.get('experiment') or about['cluster']} {pair[0]}-{pair[1]}"
    files = [str(plot_fit(fit, out / "contention.png", title))]
    problems = fit.problems()
    written = args.write if args.write and not problems else None
    if written:
        try:
            write_admission(Path(written), fit.model)
        except ConfigError:  # the measurement is not lost: it is printed first
            m = fit.model
            print(f"grouper: measured a={m.a:.4g} b={m.b:.4g} eta={m.eta:.4g}", file=sys.stderr)
            raise
    result = _result(fit, about, args.pattern, files, problems, written)
    write_json(result, args.json)  # the measurement is kept even when it is not stored
    if args.json != "-":
        _print(fit, pair, files, problems, written)
        print(f"goodput {result['goodput']:.3f} of the {about['link_mbps']:g} Mbit/s host links")
    if args.write and problems:
        more = f" (+{len(problems) - 1} more in the output)" if len(problems) > 1 else ""
        raise ConfigError("--write", f"not written: {problems[0]}{more}")
    return 0


def _result(
    fit: Fit, about: dict, pattern: str, files: list[str], problems: list[str], written: str | None
) -> dict:
    m = fit.model
    return about | {
        "pattern": pattern,
        "a": m.a,
        "b": m.b,
        "eta": m.eta,
        # 1 / b over the host link's rate: what the simulator's links move payload at
        # when it is given these constants (simulate / emulate --config)
        "goodput": min(1.0, 8 / (m.b * about["link_mbps"] * 1e6)),
        "raw": dict(zip(("a", "b", "eta"), fit.raw, strict=True)),
        # LEVEL intervals of the raw values; null where no degree of freedom was left
        "confidence": {"level": LEVEL}
        | {n: iv and list(iv) for n, iv in zip(("a", "b", "eta"), fit.intervals, strict=True)},
        "share_threshold": m.share_threshold,
        "rms_relative_residual": fit.rms_relative,
        "max_relative_residual": fit.max_relative,
        "samples": list(fit.residuals),
        "problems": problems,  # why the constants are not fit to store; [] if none
        "files": files,
        "written": written,
    }


def _print(
    fit: Fit, pair: tuple[str, str], files: list[str], problems: list[str], written: str | None
) -> None:
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
    for name, raw, iv in zip(("a", "b", "eta"), fit.raw, fit.intervals, strict=True):
        shown = f"{iv[0]:.3g} to {iv[1]:.3g}" if iv else "none (no residual left)"
        print(f"  {name}: fit {raw:.4g}, {LEVEL:.0%} interval {shown}")
    print(f"plot: {files[0]}" + (f"; written to {written}" if written else ""))
    for p in problems:
        print(f"not fit to store: {p}")
