"""Baseline orders computed from the same snapshot."""

from __future__ import annotations

import pytest

from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.common.scheduling import POLICIES
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.policies import host_plans, schedule
from grouper.pda.snapshot import build_snapshot
from grouper.workloads import load_workload


def fig3(known=True):
    wl = load_workload("builtin:fig3")
    return build_snapshot(wl.cojobs, wl.hosts, known_survivors=known)


def test_sptf_orders_jobs_by_remaining_bytes():
    sched = schedule(fig3(), "sptf")
    # remaining: job1 1+2=3, job2 1, job3 2+4=6, job4 2
    assert sched.ordered_ids() == ["A:2", "B:4", "A:1", "B:3"]


def test_baraat_is_fifo_by_stage_start():
    cj = [
        Cojob("late", (1, 1), (Job.explicit("j", [FlowSpec("src", "dst", 1.0)]),), arrival=5.0),
        Cojob("early", (1,), (Job.explicit("j", [FlowSpec("src", "dst", 9.0)]),), arrival=1.0),
    ]
    snap = build_snapshot(cj, ["src", "dst"])
    assert schedule(snap, "baraat").ordered_ids() == ["early/1", "late/1", "late/2"]


def test_sincronia_is_stage_agnostic_smallest_coflow_first_on_one_port():
    sched = schedule(fig3(known=False), "sincronia")
    # per-iteration coflows: jobs 1, 2 move 1 unit; jobs 3, 4 move 2 units
    assert sched.unit_kind == "job"
    assert set(sched.ordered_ids()[:2]) == {"A:1", "A:2"}


def test_fs_leaves_every_flow_in_the_default_band():
    snap = fig3()
    plans = host_plans(snap, schedule(snap, "fs"), QueueConfig())
    assert {f["band"] for f in plans["src"]["flows"]} == {QueueConfig().default_band}


def test_every_policy_runs_and_unknown_is_refused():
    snap = fig3()
    for p in POLICIES:
        schedule(snap, p)
    with pytest.raises(ConfigError, match="^policy: must be one of"):
        schedule(snap, "srpt")
