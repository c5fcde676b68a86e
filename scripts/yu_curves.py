"""Yu et al.'s Figs. 4-7 on builtin:yu-rar: makespan per policy over seeds, the kappa
curve, makespan against the number of servers (10 to 20) and the lambda curve
(kappa = 1). Prints Markdown tables and writes docs/figures/yu-kappa.png,
yu-servers.png and yu-lambda.png (measured values only)."""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from grouper.simulator import plots
from grouper.simulator.jobs.rar_engine import run_rar
from grouper.simulator.jobs.sjfbco import parse_rar_policy
from grouper.workloads.rarmix import yu_rar

FIG = Path(__file__).resolve().parent.parent / "docs" / "figures"
POLICIES = ("sjf-bco", "ff", "ls", "rand")
KAPPAS = (1, 2, 4, 8, 16, 32)
LAMBDAS = (1, 2, 4, 8)
SERVERS = (10, 12, 14, 16, 18)  # and 20, the builtin's


def point(task: tuple) -> dict:
    seed, policy, servers = (*task, 20)[:3]
    return run_rar(yu_rar(seed=seed, servers=servers), parse_rar_policy(policy), seed)[0].summary


def curve(xs: tuple, ys: dict[int, list[float]], label: str, path: Path) -> None:
    fig, ax = plots.figure((5, 3.5))
    for seed, y in ys.items():
        ax.plot(xs, y, marker="o", label=f"seed {seed}")
    ax.set_xscale("log", base=2)
    plots.finish(fig, ax, path, label, "makespan (s)")


def main() -> int:
    seeds = tuple(range(1, int(sys.argv[1]) + 1)) if len(sys.argv) > 1 else (1, 2, 3)
    tasks = [(s, p) for s in seeds for p in POLICIES]
    tasks += [(s, f"sjf-bco:k={k}") for s in seeds for k in KAPPAS]
    tasks += [(s, f"sjf-bco:k=1:l={lam}") for s in seeds for lam in LAMBDAS]
    tasks += [(s, p, n) for s in seeds for p in POLICIES for n in SERVERS]
    with ProcessPoolExecutor() as pool:
        res = dict(zip(tasks, pool.map(point, tasks), strict=True))
    for s in seeds:  # 20 servers is the builtin's own point
        res.update({(s, p, 20): res[(s, p)] for p in POLICIES})
    print("| seed | " + " | ".join(f"{p} makespan / avg JCT" for p in POLICIES) + " |")
    print("|---" * (len(POLICIES) + 1) + "|")
    for s in seeds:
        cells = [f"{res[(s, p)]['makespan']:.0f} / {res[(s, p)]['avg_jct']:.0f}" for p in POLICIES]
        print(f"| {s} | " + " | ".join(cells) + " |")
    for name, xs, fmt, label in (
        ("kappa", KAPPAS, "sjf-bco:k={}", "kappa"),
        ("lambda", LAMBDAS, "sjf-bco:k=1:l={}", "lambda (kappa = 1)"),
    ):
        ys = {s: [res[(s, fmt.format(x))]["makespan"] for x in xs] for s in seeds}
        multi = {s: [res[(s, fmt.format(x))]["multi_server_jobs"] for x in xs] for s in seeds}
        print(f"\n| {name} | " + " | ".join(str(x) for x in xs) + " |")
        print("|---" * (len(xs) + 1) + "|")
        for s in seeds:
            row = [f"{y:.0f} ({m})" for y, m in zip(ys[s], multi[s], strict=True)]
            print(f"| seed {s} | " + " | ".join(row) + " |")
        mean = np.mean([ys[s] for s in seeds], axis=0)
        print("| mean | " + " | ".join(f"{y:.0f}" for y in mean) + " |")
        curve(xs, ys, label, FIG / f"yu-{name}.png")
    servers_table(res, seeds)
    return 0


def servers_table(res: dict, seeds: tuple[int, ...]) -> None:
    """Fig. 6: mean makespan per policy as the cluster grows, SJF-BCO's lead over the
    better of FF and LS, and on how many seeds it is at least as good as both."""
    xs = (*SERVERS, 20)
    mean = {p: [np.mean([res[(s, p, n)]["makespan"] for s in seeds]) for n in xs] for p in POLICIES}
    print("\n| servers | " + " | ".join(POLICIES) + " | SJF-BCO lead | seeds won |")
    print("|---" * (len(POLICIES) + 3) + "|")
    for i, n in enumerate(xs):
        best = min(mean["ff"][i], mean["ls"][i])
        won = sum(
            res[(s, "sjf-bco", n)]["makespan"]
            <= min(res[(s, "ff", n)]["makespan"], res[(s, "ls", n)]["makespan"])
            for s in seeds
        )
        cells = " | ".join(f"{mean[p][i]:.0f}" for p in POLICIES)
        lead = (1 - mean["sjf-bco"][i] / best) * 100
        print(f"| {n} | {cells} | {lead:.1f}% | {won} of {len(seeds)} |")
    fig, ax = plots.figure((5, 3.5))
    for p in POLICIES:
        ax.plot(xs, mean[p], marker="o", label=p)
    ylabel = f"mean makespan over {len(seeds)} seeds (s)"
    plots.finish(fig, ax, FIG / "yu-servers.png", "servers", ylabel)


if __name__ == "__main__":
    sys.exit(main())
