"""Table V as the authors' simulator gives it, and what holds without its artefact.

Draws seeded 160-job sets the way Wang et al.'s ``microsoft_generate()`` does
(:func:`workloads.authors_jobs.microsoft_jobs`), writes each as a directory of their
``job_*.json`` files, reads it back through ``--workload DIR``'s loader, and runs
SRSF(1), SRSF(2) and Ada-SRSF with LWF-1 under each rule set (the paper's, the
authors' code's; ``--each-rule`` adds each code rule alone), with and without the
reference poll (:mod:`simulator.jobs.reference_poll`). ``--authors GIT_DIR`` also runs
their own Python 2 simulator (``scripts/authors_sim.py``) on the first
``--authors-seeds`` sets (default all), with ``get_rest_size()`` as published and made
read-only, and a second table compares ours and theirs on exactly those sets. Their runs
take minutes each, so their results are kept in ``OUT/authors-cache.json``, keyed by
the content of the set, and reused.

Usage::

    python scripts/wang_authors_table.py [--seeds 10] [--authors GIT_DIR]
        [--authors-seeds K] [--each-rule] [--out results/wang-authors] [--json PATH]

Prints a Markdown table (mean and standard deviation over seeds of each scheduler's
average JCT, and of the per-seed ratios Ada-SRSF / SRSF(1) and Ada-SRSF / SRSF(2),
with their range) and writes it, the per-seed rows and the job sets under ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grouper.simulator.jobs.placement import parse_placement  # noqa: E402
from grouper.simulator.jobs.rules import RULE_NAMES, parse_rules  # noqa: E402
from grouper.simulator.jobs.run import run_jobs  # noqa: E402
from grouper.simulator.jobs.schedulers import parse_scheduler  # noqa: E402
from grouper.workloads.authors_jobs import load_job_dir, microsoft_jobs, write_job_dir  # noqa: E402
from scripts.authors_sim import run_authors  # noqa: E402

SCHEDULERS = ("srsf:1", "srsf:2", "ada-srsf")
GOALS = {"code+poll": (0.710, 0.669), "code": (1.060, 1.001)}  # issue #36, their code


AUTHORS = ("authors' code", "authors' code, read-only")


def variants(each_rule: bool) -> list[str]:
    out = ["paper", "paper+poll", "code", "code+poll"]
    if each_rule:
        out += [f"{r}=code" for r in RULE_NAMES]
    return out


def digest(directory: str) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(directory).glob("job_*.json")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def point(task: tuple[str, str, str, str | None]) -> dict:
    variant, directory, scheduler, git_dir = task
    if variant.startswith("authors"):
        got = run_authors(str(git_dir), directory, scheduler, "read-only" in variant)
        return {"avg_jct": got["avg_jct"], "util": got["util"]}
    spec, _, poll = variant.partition("+")
    rules = parse_rules(spec, reference_poll=bool(poll))
    mix = load_job_dir(directory)
    res = run_jobs(mix, parse_placement("lwf:1"), parse_scheduler(scheduler), 1, rules)
    return {"avg_jct": res.summary["avg_jct"], "util": res.summary["avg_gpu_utilization"]}


def spread(xs: list[float], digits: int = 3) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):.{digits}f} ± {sd:.{digits}f}"


def table(
    rows: dict[tuple[str, int, str], dict], names: list[str], seeds: list[int], goals: bool = True
) -> str:
    lines = [
        "| rules | SRSF(1) avg JCT (s) | SRSF(2) | Ada-SRSF | Ada / SRSF(1) | range "
        "| Ada / SRSF(2) | range | goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in names:
        jct = {s: [rows[(v, k, s)]["avg_jct"] for k in seeds] for s in SCHEDULERS}
        r1 = [a / b for a, b in zip(jct["ada-srsf"], jct["srsf:1"], strict=True)]
        r2 = [a / b for a, b in zip(jct["ada-srsf"], jct["srsf:2"], strict=True)]
        goal = GOALS.get(v) if goals else None
        lines.append(
            f"| {v} | {spread(jct['srsf:1'], 2)} | {spread(jct['srsf:2'], 2)} "
            f"| {spread(jct['ada-srsf'], 2)} | {spread(r1)} | {min(r1):.3f}-{max(r1):.3f} "
            f"| {spread(r2)} | {min(r2):.3f}-{max(r2):.3f} "
            f"| {f'{goal[0]:.3f} / {goal[1]:.3f}' if goal else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--authors", metavar="GIT_DIR", help="also run their simulator (Python 2)")
    ap.add_argument("--authors-seeds", type=int, help="their simulator on the first K sets")
    ap.add_argument("--each-rule", action="store_true", help="also each code rule alone")
    ap.add_argument("--out", default="results/wang-authors")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if not 1 <= args.seeds <= 100:
        print("--seeds: must be from 1 to 100")
        return 2
    out = Path(args.out)
    seeds = list(range(1, args.seeds + 1))
    dirs = {k: str(write_job_dir(microsoft_jobs(k), out / "sets" / f"seed{k}")) for k in seeds}
    names = variants(args.each_rule)
    tasks = [(v, dirs[k], s, None) for v in names for k in seeds for s in SCHEDULERS]
    theirs = seeds[: args.authors_seeds] if args.authors else []
    cache_file = out / "authors-cache.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    # read-only changes only Ada-SRSF: SRSF(n) never reads a size
    ckey = {(v, k, s): f"{digest(dirs[k])}/{s}/{v}" for v in AUTHORS for k in theirs
            for s in SCHEDULERS if v == AUTHORS[0] or s == "ada-srsf"}  # fmt: skip
    tasks += [(v, dirs[k], s, args.authors) for (v, k, s), c in ckey.items() if c not in cache]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        got = list(pool.map(point, tasks))
    key = {dirs[k]: k for k in seeds}
    rows = {(v, key[d], s): r for (v, d, s, _), r in zip(tasks, got, strict=True)}
    for (v, k, s), c in ckey.items():
        cache[c] = rows.setdefault((v, k, s), cache.get(c))
    for k in theirs:
        for s in SCHEDULERS[:2]:
            rows[(AUTHORS[1], k, s)] = rows[(AUTHORS[0], k, s)]
    cache_file.write_text(json.dumps(cache, indent=1) + "\n")
    text = f"{len(seeds)} sets (seeds 1-{len(seeds)}), ours:\n\n" + table(rows, names, seeds)
    if theirs:
        same = ["code", "code+poll", *AUTHORS]
        text += f"\n\nthe first {len(theirs)} sets, ours against their simulator:\n\n"
        text += table(rows, same, theirs, goals=False)
    print(text)
    (out / "table.md").write_text(text + "\n")
    per_seed = [{"rules": v, "seed": k, "scheduler": s, **r} for (v, k, s), r in rows.items()]
    (out / "runs.json").write_text(json.dumps(per_seed, indent=1) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(per_seed, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
