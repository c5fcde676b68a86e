"""The replay registers cojobs that arrive together in workload order, and no cojob
waits forever for one that failed."""

import asyncio

from grouper.pda.model import Cojob, Job
from grouper.trafficgen.replay import Hosts, _same_time_predecessors, replay


def _cojob(cid: str, arrival: float) -> Cojob:
    return Cojob(cid, (1,), (Job(f"{cid}-j", "ps", ()),), arrival)


def test_cojobs_arriving_together_wait_for_the_one_before_them_in_the_workload():
    cojobs = [_cojob("d", 0.0), _cojob("r", 0.0), _cojob("late", 2.0), _cojob("a", 0.0)]
    assert _same_time_predecessors(cojobs, {}) == {1: 0, 3: 1}


def test_a_cojob_released_by_another_stage_waits_for_no_one_and_no_one_waits_for_it():
    cojobs = [_cojob("d", 0.0), _cojob("r", 0.0), _cojob("a", 0.0)]
    assert _same_time_predecessors(cojobs, {"r": ("d", 1)}) == {2: 0}


def test_cojobs_arriving_at_different_times_wait_for_no_one():
    cojobs = [_cojob("d", 0.0), _cojob("r", 1.0), _cojob("a", 2.0)]
    assert _same_time_predecessors(cojobs, {}) == {}


class _Refusing:
    """An agent stub whose every call fails with something other than a gRPC error."""

    async def RegisterJob(self, msg, timeout):  # noqa: N802 (the gRPC method's name)
        raise RuntimeError("agent exploded")


def test_a_failed_cojob_holds_up_no_one_who_waits_for_it():
    def ps(cid: str) -> Cojob:
        job = Job("j", "ps", (), model_bytes=1e3, workers=("h1",), servers=("h2",))
        return Cojob(cid, (1, 1), (job,), 0.0)

    hosts = Hosts(
        {"h1": "10.0.0.1", "h2": "10.0.0.2"}, {}, dict.fromkeys(("h1", "h2"), _Refusing())
    )
    cojobs = [ps("first"), ps("same-time"), ps("released")]
    # "same-time" waits for "first" to register; "released" for "first"'s stage 1,
    # which it never reaches
    res = asyncio.run(
        asyncio.wait_for(replay(cojobs, hosts, {"released": ("first", 1)}), timeout=10)
    )
    assert sorted(e.split(":")[0] for e in res.errors) == ["first", "released", "same-time"]
    assert all("agent exploded" in e for e in res.errors)
