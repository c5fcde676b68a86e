"""Agent planning logic without root: registry, plans, nft rendering, JSON-lines."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.jsonl import JsonlTailer
from grouper.agent.kernel.layout import BandLayout
from grouper.agent.kernel.nft_rules import count_changes, render_changes, render_table
from grouper.agent.plan import Rule, desired_rules
from grouper.agent.registry import Registry
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig

ADDR = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}


def job(cojob="c1", job_id="j1", ports=(5001,), **kw):
    d = {
        "cojob_id": cojob,
        "job_id": job_id,
        "arch": "flows",
        "stage_iterations": [10, 20],
        "flows": [
            {"src_host": "a", "dst_host": "b", "dst_port": p, "bytes_per_iteration": 100.0}
            for p in ports
        ],
    }
    d.update(kw)
    return d


def test_registration_progress_and_stage_events(tmp_path):
    reg = Registry(tmp_path / "state.json", known_hosts=set(ADDR))
    kinds = [e.kind for e in reg.register(job())]
    assert kinds == ["REGISTERED", "STAGE_STARTED"]
    assert reg.register(job()) == []  # idempotent
    ev = reg.progress({"cojob_id": "c1", "job_id": "j1", "iterations_done": 12})
    assert [(e.kind, e.stage) for e in ev] == [("STAGE_FINISHED", 1), ("STAGE_STARTED", 2)]
    assert reg.progress({"cojob_id": "c1", "job_id": "j1", "iterations_done": 5}) == []
    assert list(reg.local_flows("a")) == ["c1/j1/b:5001"]
    # persisted atomically and reloaded
    again = Registry(tmp_path / "state.json")
    assert again.jobs[("c1", "j1")].iterations_done == 12
    reg.job_finished({"cojob_id": "c1", "job_id": "j1"})
    assert reg.local_flows("a") == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arch": "mesh"}, "^arch: must be one of ps, ring, flows"),
        ({"stage_iterations": []}, "^stage_iterations: needs at least 1"),
        ({"stage_iterations": [5, -1]}, r"^stage_iterations\[1\]: must be at least 1"),
        (
            {
                "flows": [
                    {"src_host": "a", "dst_host": "b", "dst_port": 70000, "bytes_per_iteration": 1}
                ]
            },
            r"^flows\[0\]\.dst_port: must be between",
        ),
        (
            {"flows": [{"src_host": "a", "dst_host": "b", "bytes_per_iteration": 1}]},
            r"^flows\[0\]\.dst_port: required \(or give src_port, or pids\)",
        ),
        (
            {
                "flows": [
                    {"src_host": "a", "dst_host": "q", "dst_port": 1, "bytes_per_iteration": 1}
                ]
            },
            r"^flows\[0\]\.dst_host: unknown host 'q'",
        ),
        (
            {
                "flows": [
                    {"src_host": "a", "dst_host": "b", "dst_port": 1, "bytes_per_iteration": -3}
                ]
            },
            r"^flows\[0\]\.bytes_per_iteration: must be",
        ),
        (
            {
                "flows": [
                    {"src_host": "a", "dst_host": "b", "dst_port": 7, "bytes_per_iteration": 1},
                    {"src_host": "a", "dst_host": "b", "dst_port": 7, "bytes_per_iteration": 2},
                ]
            },
            r"^flows\[1\]: duplicate flow ",
        ),
        ({"cojob_id": "a/b"}, "^cojob_id: must not contain"),
        ({"colour": "red"}, "^colour: unknown key"),
        ({"arch": "ps", "model_bytes": 0}, "^model_bytes: must be positive for arch 'ps'"),
    ],
)
def test_registration_errors_name_the_field(change, message):
    reg = Registry(known_hosts=set(ADDR))
    with pytest.raises(ConfigError, match=message):
        reg.register(job(**change))
    assert reg.jobs == {}


def test_conflicting_reregistration_is_refused():
    reg = Registry()
    reg.register(job())
    with pytest.raises(ConfigError, match="already registered with a different spec"):
        reg.register(job(ports=(6000,)))


def plan(version, flows, host="a", inbound=()):
    return {
        "version": version,
        "host": host,
        "flows": [{"flow_id": f, "band": b, "dscp": d} for f, b, d in flows],
        "inbound": [{"src_host": h, "port": p, "by_source": s} for h, p, s in inbound],
    }


def flows_of(*jobs):
    reg = Registry()
    for j in jobs:
        reg.register(j)
    return reg.local_flows("a")


def test_plan_to_rules_and_conflicting_keys_take_the_higher_priority():
    flows = flows_of(job(), job(cojob="c2", ports=(5001, 5002)))
    version, rules = desired_rules(
        plan(3, [("c1/j1/b:5001", 3, 32), ("c2/j1/b:5001", 1, 48), ("c2/j1/b:5002", 2, 40)]),
        host="a",
        in_force=2,
        flows=flows,
        addresses=ADDR,
        queues=QueueConfig(),
    )
    assert version == 3
    assert rules == {
        ("dport", "10.0.0.2", 5001): Rule(1, 48),
        ("dport", "10.0.0.2", 5002): Rule(2, 40),
    }


def test_inbound_flows_become_ack_keys_in_the_control_band():
    version, rules = desired_rules(
        plan(3, [], inbound=[("b", 6300, False), ("b", 7000, True)]),
        host="a",
        in_force=2,
        flows=flows_of(job()),
        addresses=ADDR,
        queues=QueueConfig(),
    )
    ctl = Rule(0, QueueConfig().dscp_table[0])
    assert rules == {
        ("in_sport", "10.0.0.2", 6300): ctl,  # our ACKs on b -> a:6300 leave from port 6300
        ("in_dport", "10.0.0.2", 7000): ctl,  # b's flow matched by its source port 7000
    }


@pytest.mark.parametrize(
    ("p", "message"),
    [
        (plan(2, []), "^plan.version: stale: 2 is not newer than 2"),
        (plan(3, [], inbound=[("zz", 1, False)]), r"^plan.inbound\[0\].src_host: unknown host"),
        (plan(3, [], inbound=[("b", 0, False)]), r"^plan.inbound\[0\].port: must be at least 1"),
        (plan(3, [], inbound=[("b", 70000, 0)]), r"^plan.inbound\[0\].port: must be at most"),
        (plan(3, [], host="b"), "^plan.host: plan is for 'b', this agent is 'a'"),
        (plan(3, [("c1/j1/b:9", 1, 48)]), r"^plan.flows\[0\].flow_id: unknown flow"),
        (plan(3, [("c1/j1/b:5001", 1, 48)] * 2), r"^plan.flows\[1\].flow_id: .* appears twice"),
        (plan(3, [("c1/j1/b:5001", 8, 48)]), r"^plan.flows\[0\].band: 8 out of range 0..7"),
        (plan(3, [("c1/j1/b:5001", 1, 99)]), r"^plan.flows\[0\].dscp: 99 is not in the DSCP"),
        ({"version": "x", "host": "a"}, "^plan.version: expected an integer"),
        ({"version": 3, "host": "a", "extra": 1}, "^plan.extra: unknown key"),
    ],
)
def test_malformed_plans_are_refused_with_the_field(p, message):
    with pytest.raises(ConfigError, match=message):
        desired_rules(
            p, host="a", in_force=2, flows=flows_of(job()), addresses=ADDR, queues=QueueConfig()
        )


def test_nft_table_and_incremental_changes():
    layout = BandLayout("htb", 8)
    old = {("dport", "10.0.0.2", 5001): Rule(1, 48), ("sport", "10.0.0.3", 7000): Rule(2, 40)}
    new = {("dport", "10.0.0.2", 5001): Rule(2, 48), ("dport", "10.0.0.2", 5002): Rule(1, 40)}
    text = render_table("eth0", QueueConfig(), layout, (7070,), old)
    assert "delete table inet grouper" in text
    assert 'oifname "eth0" meta nfproto ipv4 jump classify' in text
    assert "tcp dport { 7070 } meta priority set 4752:10 ip dscp set 56 return" in text
    assert "add element inet grouper band_dport { 10.0.0.2 . 5001 : 4752:11 }" in text
    assert "add element inet grouper ours_dport { 10.0.0.2 . 5001 }" in text
    # pure ACKs and handshakes are re-marked only when their connection is in our sets
    assert "ip length < 100 tcp flags & (syn | fin | rst | psh | ack) == ack goto tiny" in text
    ctl = "meta priority set 4752:10 ip dscp set 56 return"
    assert f"    ip daddr . tcp sport @ours_in_sport {ctl}" in text
    assert f"    ip saddr . ip daddr . tcp sport . tcp dport @ours_conn {ctl}" in text
    ctl6 = ctl.replace("ip dscp", "ip6 dscp")
    assert f"    ip6 saddr . ip6 daddr . tcp sport . tcp dport @ours_conn6 {ctl6}" in text
    # a map is only ever looked up with `map`/`vmap`, never as a set: Debian 12's 6.1
    # kernel refuses `... @band_dport` with "Invalid argument"
    for line in text.splitlines():
        for name in ("@band_", "@dscp_"):
            assert name not in line or " map @" in line or " vmap @" in line, line
    diff = render_changes(old, new, layout)
    assert diff.splitlines() == [
        "add element inet grouper ours_dport { 10.0.0.2 . 5002 }",
        "delete element inet grouper ours_sport { 10.0.0.3 . 7000 }",
        "delete element inet grouper band_dport { 10.0.0.2 . 5001 }",
        "add element inet grouper band_dport"
        " { 10.0.0.2 . 5001 : 4752:12, 10.0.0.2 . 5002 : 4752:11 }",
        "delete element inet grouper band_sport { 10.0.0.3 . 7000 }",
        "add element inet grouper dscp_dport { 10.0.0.2 . 5002 : goto dscp_40 }",
        "delete element inet grouper dscp_sport { 10.0.0.3 . 7000 }",
    ]
    assert count_changes(old, new) == 3
    assert render_changes(new, new, layout) == ""


def test_band_layouts():
    assert BandLayout("prio", 8).classid_text(0) == "4752:1"
    assert BandLayout("htb", 8).classid_text(7) == "4752:17"
    assert BandLayout("htb", 8).band_of_minor(0x13) == 3
    assert BandLayout("prio", 8).band_of_minor(9) is None


def test_jsonl_tailer_applies_complete_lines_once_and_reports_bad_ones(tmp_path):
    seen = []

    def handle(ev, caller):
        if ev.get("bad"):
            raise ConfigError("bad", "refused")
        assert caller.uid == os.getuid() and caller.pid == 0  # the file's owner calls
        seen.append(ev["n"])

    t = JsonlTailer(tmp_path, handle)
    f = tmp_path / "j.jsonl"
    f.write_text('{"n": 1}\n{"bad": true}\nnot json\n{"n": 2')
    assert t.poll() == 1
    with f.open("a") as fh:
        fh.write('}\n{"n": 3}\n')
    assert t.poll() == 2
    assert t.poll() == 0
    assert seen == [1, 2, 3]
    assert t.errors == ["j.jsonl:2: bad: refused", "j.jsonl:3: not JSON: Expecting value"]


def test_jsonl_files_others_may_write_or_symlinks_are_not_read(tmp_path):
    seen = []
    t = JsonlTailer(tmp_path, lambda ev, caller: seen.append(ev["n"]) or "")
    shared = tmp_path / "shared.jsonl"
    shared.write_text('{"n": 1}\n')
    shared.chmod(0o666)  # anyone could write another user's events under its owner's uid
    (tmp_path / "link.jsonl").symlink_to(shared)
    assert t.poll() == 0 and seen == []
    assert t.poll() == 0 and len(t.errors) == 2, t.errors  # each said once
    assert all("ignored: not a regular file only its owner writes" in e for e in t.errors)
    shared.chmod(0o644)
    assert t.poll() == 1 and seen == [1]


def test_plan_entries_for_finished_jobs_are_skipped_not_refused():
    reg = Registry()
    reg.register(job())
    reg.register(job(cojob="c2", ports=(5002,)))
    reg.job_finished({"cojob_id": "c1", "job_id": "j1"})
    _, rules = desired_rules(
        plan(1, [("c1/j1/b:5001", 1, 48), ("c2/j1/b:5002", 2, 40)]),
        host="a",
        in_force=0,
        flows=reg.local_flows("a"),
        addresses=ADDR,
        queues=QueueConfig(),
        finished=reg.finished_flows("a"),
    )
    assert rules == {("dport", "10.0.0.2", 5002): Rule(2, 40)}


_FIELD = st.one_of(
    st.integers(-3, 70), st.booleans(), st.floats(allow_nan=False), st.none(),
    st.text(max_size=6), st.just(""), st.lists(st.integers(), max_size=1),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.dictionaries(st.sampled_from(["flow_id", "band", "dscp", "bandx"]), _FIELD),
        st.fixed_dictionaries({"flow_id": _FIELD, "band": _FIELD, "dscp": _FIELD}),
        _FIELD,
    )
)
def test_a_plan_entry_read_quickly_is_one_the_field_checks_accept_as_is(raw):
    """The quick read of a plan entry gives a value only where the field-by-field checks
    (which name the field of anything else) accept the entry and give the same values."""
    from grouper.agent.plan import ENTRY_KEYS, _valid_entry
    from grouper.common import validate as v

    queues = QueueConfig()
    got = _valid_entry(raw, queues.queues, frozenset(queues.dscp_table))
    if got is None:
        return
    e = v.mapping(raw, "e", ENTRY_KEYS)
    band = v.integer(v.get(e, "band", "e"), "e.band", minimum=0)
    dscp = v.integer(v.get(e, "dscp", "e"), "e.dscp", minimum=0)
    assert got == (v.string(v.get(e, "flow_id", "e"), "e.flow_id"), band, dscp)
    assert band < queues.queues and dscp in queues.dscp_table
