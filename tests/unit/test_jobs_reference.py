"""scripts/jobs_reference.py: the model of Wang et al.'s own simulator, in which each
waiting job's AdaDUAL poll moves the polled all-reduce one more slot (by hand)."""

from __future__ import annotations

import pytest

from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import parse_jobmix
from scripts.jobs_reference import Polled
from tests.unit.test_jobsim import SHARE, mix_doc

# A (1 GB) all-reduces from 0.2 at 1e9 B/s. B (500 MB) is ready at 0.5, when A has
# 0.7 GB left: 0.5 / 0.7 > 1/3, so AdaDUAL makes B wait next to A.
WAIT = [SHARE[0], {**SHARE[1], "model": "mid"}]


def polled_ends(scheduler: str) -> list[float]:
    sim = Polled(parse_jobmix(mix_doc(WAIT)), parse_placement("lwf:1"), parse_scheduler(scheduler))
    return [row["end"] for row in sim.run().jobs]


def test_a_job_waiting_under_ada_srsf_doubles_the_rate_of_the_all_reduce_it_polls():
    # A's last 0.7 GB at twice 1e9 B/s: 0.35 s; then B alone, 0.5 s
    assert polled_ends("ada-srsf") == pytest.approx([0.85, 1.35])


def test_srsf_does_not_poll_so_its_all_reduces_keep_eq_5s_rate():
    assert polled_ends("srsf:1") == pytest.approx([1.2, 1.7])
