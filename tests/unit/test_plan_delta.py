"""Plans as deltas: what the coordinator sends (``coordinator.plan_msg``) and how the
agent rebuilds the whole plan from it (``agent.plan.patch_plan``). The path through
real agents and kernels is in ``tests/kernel/test_incremental.py``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.plan import patch_plan
from grouper.agent.service import plan_dict
from grouper.common.errors import ConfigError
from grouper.common.flows import inbound_key, parse_inbound_key
from grouper.coordinator.delivery import PlanTrack
from grouper.coordinator.plan_msg import plan_request


def _as_sets(plan: dict) -> tuple[set, set]:
    flows = {(f["flow_id"], f["band"], f["dscp"]) for f in plan["flows"]}
    inbound = {(i["src_host"], i["port"], bool(i["by_source"])) for i in plan["inbound"]}
    return flows, inbound


def _roundtrip(base: dict, new: dict) -> dict:
    """base sent whole, then new as a delta on it; the plan the agent rebuilds."""
    held = plan_dict(plan_request("a", 1, base).plan)
    delta = plan_dict(plan_request("a", 2, new, base, 1).plan)
    return patch_plan(held, 1, delta)


CTL = (0, 56)
BASE = {"c/j/b:5201": (1, 48), "c/j/c:5202": (2, 40), inbound_key("b", 6000, False): CTL}


def test_a_delta_carries_only_what_changed_and_rebuilds_the_whole_plan():
    new = {"c/j/b:5201": (1, 48), "c/j/c:5202": (3, 32), "d/j/b:5300": (1, 48),
           inbound_key("c", 7000, True): CTL}  # fmt: skip
    msg = plan_request("a", 2, new, BASE, 1).plan
    assert msg.base_version == 1
    assert [(f.flow_id, f.band, f.dscp) for f in msg.flows] == [
        ("c/j/c:5202", 3, 32), ("d/j/b:5300", 1, 48)]  # fmt: skip
    assert [(i.src_host, i.port, i.by_source) for i in msg.inbound] == [("c", 7000, True)]
    assert list(msg.removed_flows) == []
    assert [(i.src_host, i.port, i.by_source) for i in msg.removed_inbound] == [("b", 6000, False)]
    whole = plan_dict(plan_request("a", 2, new).plan)
    assert _as_sets(_roundtrip(BASE, new)) == _as_sets(whole)


def test_an_unchanged_plan_is_an_empty_delta():
    msg = plan_request("a", 5, BASE, BASE, 4).plan
    assert msg.base_version == 4 and not msg.flows and not msg.inbound
    assert not msg.removed_flows and not msg.removed_inbound


def test_a_whole_plan_has_no_base():
    msg = plan_request("a", 1, BASE).plan
    assert msg.base_version == 0 and len(msg.flows) == 2 and len(msg.inbound) == 1


@pytest.mark.parametrize(
    "held, in_force, delta, field",
    [
        (None, 3, {"base_version": 3}, "plan.base_version"),  # no plan (dropped at plan_ttl)
        ({"flows": [], "inbound": []}, 4, {"base_version": 3}, "plan.base_version"),
        ({"flows": [], "inbound": []}, 3, {"base_version": 3, "removed_flows": ["x/y/z:1"]},
         "plan.removed_flows[0]"),
        ({"flows": [], "inbound": []}, 3,
         {"base_version": 3, "removed_inbound": [{"src_host": "b", "port": 1}]},
         "plan.removed_inbound[0]"),
        ({"flows": [], "inbound": []}, 3, {"base_version": 3, "flows": [{"band": 1}]},
         "plan.flows[0].flow_id"),
        ({"flows": [], "inbound": []}, 3, {"base_version": 3, "bogus": 1}, "plan.bogus"),
    ],
)  # fmt: skip
def test_a_delta_that_does_not_fit_the_plan_in_force_is_refused_naming_the_field(
    held, in_force, delta, field
):
    with pytest.raises(ConfigError) as err:
        patch_plan(held, in_force, {"version": 9, "host": "a", **delta})
    assert err.value.path == field


_flow_ids = st.sampled_from([f"c{i}/j/h{i % 3}:{5000 + i}" for i in range(12)])
_inbound = st.builds(inbound_key, st.sampled_from(["b", "c"]), st.integers(1, 9), st.booleans())
_entries = st.dictionaries(
    st.one_of(_flow_ids, _inbound), st.tuples(st.integers(0, 7), st.sampled_from([0, 8, 56]))
)


@settings(max_examples=200, deadline=None)
@given(base=_entries, new=_entries)
def test_any_delta_rebuilds_exactly_the_new_plan(base, new):
    # inbound entries always carry the control band
    new = {k: (CTL if parse_inbound_key(k) else v) for k, v in new.items()}
    base = {k: (CTL if parse_inbound_key(k) else v) for k, v in base.items()}
    got = _roundtrip(base, new)
    assert got["version"] == 2 and got["host"] == "a"
    assert _as_sets(got) == _as_sets(plan_dict(plan_request("a", 2, new).plan))


_bands = st.tuples(st.integers(0, 7), st.sampled_from([0, 8, 56]))


@settings(max_examples=200, deadline=None)
@given(base=_entries, sets=st.dictionaries(_flow_ids, _bands))
def test_a_patched_plan_goes_as_the_keys_the_patch_set(base, sets):
    """The planner's patch (``planner.PlanPatch``: the plan copied and the keys set) is
    the delta: the entries the patch set, changed or not, and it rebuilds the plan."""
    base = {k: (CTL if parse_inbound_key(k) else v) for k, v in base.items()}
    new = {**base, **sets}
    track = PlanTrack()
    track.message("a", base, 0.0, quiet=True)  # sent whole: the base of the next
    msg = track.message("a", new, 1.0, quiet=True, patch=(base, list(sets)))
    held = plan_dict(plan_request("a", 1, base).plan)
    got = patch_plan(held, 1, plan_dict(msg.plan))
    assert _as_sets(got) == _as_sets(plan_dict(plan_request("a", 2, new).plan))
    assert {f.flow_id for f in msg.plan.flows} == set(sets)


def test_a_patch_of_another_plan_than_the_one_sent_is_not_taken_as_the_delta():
    """A plan patched from one the agent was never sent (a plan since replaced) goes as
    its difference from the plan sent last."""
    other = {"c/j/b:5201": (4, 8)}
    track = PlanTrack()
    track.message("a", BASE, 0.0, quiet=True)
    new = {**other, "c/j/c:5202": (5, 0)}
    msg = track.message("a", new, 1.0, quiet=True, patch=(other, ["c/j/c:5202"]))
    held = plan_dict(plan_request("a", 1, BASE).plan)
    got = patch_plan(held, 1, plan_dict(msg.plan))
    assert _as_sets(got) == _as_sets(plan_dict(plan_request("a", 2, new).plan))
