"""The registry's ownership rules as logic: callers are given (the kernel layer takes
them from real sockets of real users, tests/kernel/test_users.py)."""

from __future__ import annotations

import copy
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.ownership import RateLimit, Refusal
from grouper.agent.peers import ROOT, Caller
from grouper.agent.registry import Registry
from grouper.common.errors import ConfigError
from grouper.common.registry_policy import RegistryPolicy, parse_registry_policy

ALICE, BOB = Caller(1001, 1001, 0), Caller(1002, 1002, 0)
CALLERS = (ALICE, BOB, ROOT)


def job(cojob: str, weight: float = 1.0, port: int = 5001, **kw) -> dict:
    return {
        "cojob_id": cojob, "job_id": "j", "arch": "flows", "stage_iterations": [10, 20],
        "weight": weight,
        "flows": [{"src_host": "a", "dst_host": "b", "dst_port": port,
                   "bytes_per_iteration": 100.0}],
        **kw,
    }  # fmt: skip


def registry(**policy) -> Registry:
    return Registry(known_hosts={"a", "b"}, host="a", policy=RegistryPolicy(**policy))


def test_another_users_job_cannot_be_changed_but_root_may():
    reg = registry()
    reg.register(job("c1"), ALICE)
    key = {"cojob_id": "c1", "job_id": "j"}
    for call, data in (
        (reg.register, job("c1")),
        (reg.progress, key | {"iterations_done": 3}),
        (reg.stage_finished, key | {"stage": 1}),
        (reg.job_finished, key),
    ):
        with pytest.raises(Refusal, match=r"^job_id: job c1/j is another user's \(uid 1001\)"):
            call(data, BOB)
    reg.progress(key | {"iterations_done": 3}, ALICE)
    reg.progress(key | {"iterations_done": 4}, ROOT)
    assert reg.jobs[("c1", "j")].owner == 1001 and reg.jobs[("c1", "j")].iterations_done == 4


def test_an_ordinary_users_weight_is_capped_and_an_admin_group_lifts_the_cap():
    reg = registry(max_weight=2.0, admin_group="")
    with pytest.raises(Refusal, match=r"^weight: 5 is above 2, the most an ordinary user"):
        reg.register(job("c1", weight=5.0), ALICE)
    reg.register(job("c1", weight=5.0), ROOT)
    reg.admin_gid = 4242
    reg.register(job("c2", weight=5.0, port=5002), Caller(1001, 1001, 0, frozenset({4242})))


def test_jobs_per_user_are_bounded_for_users_not_root():
    reg = registry(max_jobs_per_user=2)
    reg.register(job("c1"), ALICE)
    reg.register(job("c2", port=5002), ALICE)
    with pytest.raises(Refusal, match=r"^job_id: uid 1001 holds 2 jobs here"):
        reg.register(job("c3", port=5003), ALICE)
    reg.register(job("c3", port=5003), BOB)
    reg.register(job("c4", port=5004), ROOT)


def test_another_users_process_is_refused_and_own_cgroup_is_roots_only():
    reg = registry()
    me = Caller(os.getuid(), os.getgid(), os.getpid())
    stranger = Caller(os.getuid() + 1, os.getgid(), 0)
    with pytest.raises(Refusal, match=rf"^pids\[0\]: process {os.getpid()} belongs to another"):
        reg.register(job("c1", pids=[os.getpid()]), stranger)
    own = job("c1", flows=[], pids=[os.getpid()], own_cgroup=True)
    if not me.root:
        with pytest.raises(Refusal, match=r"^own_cgroup: only root's jobs get a cgroup"):
            reg.register(own, me)


def test_the_rate_of_a_users_calls_is_bounded_and_refills():
    now = [0.0]
    rate = RateLimit(5.0, clock=lambda: now[0])
    for _ in range(5):
        rate.take(ALICE)
    with pytest.raises(Refusal, match=r"^caller: uid 1001 called more than 5 times a second"):
        rate.take(ALICE)
    rate.take(BOB)
    for _ in range(50):
        rate.take(ROOT)
    now[0] += 0.2  # one call's worth back
    rate.take(ALICE)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"max_weight": 0}, "agent.registry.max_weight: must be positive"),
        ({"max_jobs_per_user": 0}, "agent.registry.max_jobs_per_user: must be at least 1"),
        ({"calls_per_second": "fast"}, "agent.registry.calls_per_second: expected a number"),
        ({"owner": 1}, "agent.registry"),
    ],
)
def test_bad_registry_policies_name_the_field(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_registry_policy(raw)
    assert str(err.value).startswith(message), str(err.value)


OPS = st.lists(
    st.tuples(
        st.sampled_from(CALLERS),
        st.sampled_from(("register", "progress", "job_finished")),
        st.sampled_from(("c1", "c2", "c3")),
        st.sampled_from((1.0, 3.0)),  # weight: 3 is above an ordinary user's cap
        st.integers(0, 30),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_interleaved_calls_never_change_a_jobs_owner_and_refusals_change_nothing(ops):
    reg = registry(max_weight=2.0, max_jobs_per_user=2)
    owners: dict[tuple[str, str], int] = {}
    for caller, kind, cojob, weight, n in ops:
        before = copy.deepcopy(reg.jobs)
        key = {"cojob_id": cojob, "job_id": "j"}
        data = {
            "register": job(cojob, weight=weight, port=5000 + int(cojob[1])),
            "progress": key | {"iterations_done": n},
            "job_finished": key,
        }[kind]
        try:
            getattr(reg, kind)(data, caller)
        except ConfigError:
            assert reg.jobs == before, f"refused {kind} of {caller} changed the registry"
            continue
        for k, j in reg.jobs.items():
            assert owners.setdefault(k, j.owner) == j.owner, f"{k} changed owner"
        entry = reg.jobs.get((cojob, "j"))
        if entry is not None and not caller.root:
            assert entry.owner == caller.uid, "a user's accepted call was on another's job"
