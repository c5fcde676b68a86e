"""A plain, loop-by-loop reading of the snapshot's definition, kept as the reference
the vectorized ``pda.snapshot.build_snapshot`` is checked against
(``test_snapshot.py``): dense arrays, one cojob, stage and job at a time."""

from __future__ import annotations

import math

import numpy as np

from grouper.pda.model import Cojob


def reference_snapshot(cojobs: list[Cojob], hosts: list[str], known_survivors: bool) -> dict:
    h_of = {h: i for i, h in enumerate(hosts)}
    nh = len(hosts)
    out: dict = {k: [] for k in (
        "stage_ids", "stage_cojob", "stage_number", "stage_prev", "stage_started",
        "stage_weight", "stage_loads", "job_stage", "job_remaining", "job_weight",
    )}  # fmt: skip
    for g, cj in enumerate(cojobs):
        per_iter = []
        for job in cj.jobs:
            load = np.zeros(2 * nh)
            for f in job.flows:
                if f.src != f.dst:
                    load[h_of[f.src]] += f.bytes
                    load[nh + h_of[f.dst]] += f.bytes
            per_iter.append(load)
        left = []  # left[j][k]: iterations job j has left in stage k
        for job in cj.jobs:
            runs = job.stages if known_survivors and job.stages is not None else cj.num_stages
            before, row = 0, []
            for k, its in enumerate(cj.stage_iterations):
                done_here = min(max(job.done - before, 0), its)
                row.append(its - done_here if k < runs else 0)
                before += its
            left.append(row)
        rows_of_cojob = {}
        for k in range(cj.num_stages):
            jobs = [j for j in range(len(cj.jobs)) if left[j][k] > 0]
            if not jobs:
                continue
            first = not rows_of_cojob
            rows_of_cojob[k] = len(out["stage_ids"])
            out["stage_ids"].append(f"{cj.cojob_id}/{k + 1}")
            out["stage_cojob"].append(g)
            out["stage_number"].append(k + 1)
            out["stage_prev"].append(-1 if first else len(out["stage_ids"]) - 2)
            started = cj.stage_started[k] if k < len(cj.stage_started) else math.inf
            out["stage_started"].append(cj.arrival if first and math.isinf(started) else started)
            out["stage_weight"].append(max(cj.jobs[j].weight for j in jobs))
            out["stage_loads"].append(sum(left[j][k] * per_iter[j] for j in jobs))
        for j, job in enumerate(cj.jobs):
            ks = [k for k in range(cj.num_stages) if left[j][k] > 0]
            if not ks:
                out["job_stage"].append(-1)
            else:
                out["job_stage"].append(rows_of_cojob[min(rows_of_cojob) if cj.barrier else ks[0]])
            out["job_remaining"].append(sum(left[j]) * per_iter[j][:nh].sum())
            out["job_weight"].append(job.weight)
    return out
