"""Which workload properties make grouper pull away from Sincronia on the testbed?

Runs ``builtin:testbed`` and variants of it under fs, sincronia and grouper, two
variants at a time (one process each), and prints grouper's average SCT over
Sincronia's and over fair sharing's:

* ``base``: the paper's testbed (every model runs 500/1000/2000/4000 iterations x scale);
* ``overlap``: PS push and pull at once (``model.ps_mode: overlap``);
* ``same-size``: every model 305 MB (the four models' mean), so one iteration's size
  says nothing;
* ``stage-spread``: each model's stage iterations x 4, 2, 1, 0.5 (DeepSpeech2, ResNet152,
  AlexNet, VGG19): the smallest model runs the longest stages, so one iteration's size
  no longer tells how long a stage is;
* ``staggered``: the first round's cojobs arrive 0, 150, 300, 450 s apart;
* ``spread+staggered``: both.

    python scripts/testbed_properties.py [SEED ...]
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from grouper.workloads.generators import MODELS, SPREAD_FACTORS, testbed

MEAN_SIZE = sum(m for m, _ in MODELS.values()) / len(MODELS)
VARIANTS = {
    "base": {},
    "overlap": {},
    "same-size": {"model_bytes": MEAN_SIZE},
    "stage-spread": {"stage_factors": SPREAD_FACTORS},  # = builtin:testbed-spread
    "staggered": {"stagger": 600.0},
    "spread+staggered": {"stage_factors": SPREAD_FACTORS, "stagger": 600.0},
}


def run(task: tuple[str, int]) -> tuple[str, int, dict[str, float]]:
    from grouper.simulator.run import run_policies

    name, seed = task
    wl = testbed(seed, **VARIANTS[name])
    if name == "overlap":
        wl = replace(wl, ps_mode="overlap")
    runs = run_policies(wl, ["fs", "sincronia", "grouper"], seed=seed, progress=False)
    return name, seed, {p: r.summary["avg_sct"] for p, r in runs.items()}


def main() -> None:
    seeds = [int(s) for s in sys.argv[1:]] or [1]
    tasks = [(name, seed) for seed in seeds for name in VARIANTS]
    print("variant           seed  fs       sincronia  grouper  g/sinc  g/fs")
    with ProcessPoolExecutor(2) as pool:
        for name, seed, r in pool.map(run, tasks):
            print(
                f"{name:17s} {seed:4d}  {r['fs']:7.1f}  {r['sincronia']:9.1f}  "
                f"{r['grouper']:7.1f}  {r['grouper'] / r['sincronia']:.3f}   "
                f"{r['grouper'] / r['fs']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
