"""Global order -> per-host bands and DSCPs (Fig. 7-8), queues, overflow, encoding."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig, default_dscp_table, tos_byte
from grouper.pda.admission import adadual_admit
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.policies import flow_priorities, host_plans, schedule
from grouper.pda.priorities import map_priorities, port_bands
from grouper.pda.snapshot import build_snapshot


def fig7_snapshot():
    """Machines A, B, C; S1 on A and B, S2 on A and C, S3 on B and C (both directions)."""

    def pair(x, y, size):
        return [FlowSpec(x, y, size), FlowSpec(y, x, size)]

    cojobs = [
        Cojob("S1", (1,), (Job.explicit("j", pair("A", "B", 1.0)),)),
        Cojob("S2", (1,), (Job.explicit("j", pair("A", "C", 2.0)),)),
        Cojob("S3", (1,), (Job.explicit("j", pair("B", "C", 3.0)),)),
    ]
    return build_snapshot(cojobs, ["A", "B", "C"])


def test_fig7_local_priorities():
    snap = fig7_snapshot()
    sched = schedule(snap, "baraat")  # FIFO: S1, S2, S3 is the global order here
    assert sched.ordered_ids() == ["S1/1", "S2/1", "S3/1"]
    plans = host_plans(snap, sched, QueueConfig())
    band = {h: {f["cojob"]: f["band"] for f in p["flows"]} for h, p in plans.items()}
    # local priority 1, 2 -> bands 1, 2 (band 0 is reserved for control traffic)
    assert band == {"A": {"S1": 1, "S2": 2}, "B": {"S1": 1, "S3": 2}, "C": {"S2": 1, "S3": 2}}
    table = QueueConfig().dscp_table
    # Fig. 8: flows into C carry C's receive ranks: S2 -> 1, S3 -> 2
    into_c = {f["cojob"]: f["dscp"] for h in "AB" for f in plans[h]["flows"] if f["dst"] == "C"}
    assert into_c == {"S2": table[1], "S3": table[2]}
    assert plans["C"]["send_order"] == ["S2/1", "S3/1"]


def test_sender_band_and_receiver_dscp_use_different_ranks():
    # X sends two stages to different receivers; at Y the second stage is the only one.
    cojobs = [
        Cojob("P", (1,), (Job.explicit("j", [FlowSpec("X", "Z", 1.0)]),)),
        Cojob("Q", (1,), (Job.explicit("j", [FlowSpec("X", "Y", 5.0)]),)),
    ]
    snap = build_snapshot(cojobs, ["X", "Y", "Z"])
    plans = host_plans(snap, schedule(snap, "baraat"), QueueConfig())
    f = {x["cojob"]: x for x in plans["X"]["flows"]}
    assert (f["P"]["band"], f["Q"]["band"]) == (1, 2)
    assert f["Q"]["dscp"] == QueueConfig().dscp_table[1]  # rank 1 at Y's downlink


def many_stages_one_port(sizes):
    cojobs = [
        Cojob(f"c{i}", (1,), (Job.explicit("j", [FlowSpec("a", "b", s)]),))
        for i, s in enumerate(sizes)
    ]
    return build_snapshot(cojobs, ["a", "b"])


def bands_for(snap, cfg):
    return flow_priorities(snap, schedule(snap, "baraat"), cfg).band.tolist()


def test_overflow_without_admission_shares_last_data_band():
    cfg = QueueConfig(queues=4, admission=None)  # data bands 1, 2; scavenger 3
    assert bands_for(many_stages_one_port([5, 5, 5, 1, 1]), cfg) == [1, 2, 2, 2, 2]


def test_overflow_with_admission_shares_once_and_rest_wait_in_scavenger():
    model = ContentionModel(a=0.0, b=1.0, eta=0.5)  # share if new/old < 1/3
    cfg = QueueConfig(queues=4, admission=model)
    # owner of band 2 has 9; first overflow (4) fails 4/9, second (2) passes 2/9,
    # third (1) would pass too but at most two share a queue -> scavenger.
    assert bands_for(many_stages_one_port([5, 9, 4, 2, 1]), cfg) == [1, 2, 3, 2, 3]


def late_bands(ordered, late, cfg):
    """Bands on one port when ``ordered`` stage sizes were ordered (in that order) and
    ``late`` ones arrived since the last PDA run (appended, as between two periods)."""
    snap = many_stages_one_port([*ordered, *late])
    previous = [f"c{i}/1" for i in range(len(ordered))]
    return flow_priorities(snap, schedule(snap, "grouper", previous), cfg).band.tolist()


def test_a_late_stage_takes_a_free_data_band():
    # data bands 1..6: two ordered stages leave band 3 free; no sharing, no admission
    # (it used to wait in the scavenger band whenever its port had two ordered stages)
    assert late_bands([5, 9], [100], QueueConfig()) == [1, 2, 3]


def test_a_late_stage_past_the_data_bands_is_an_overflow_unit_like_any_other():
    model = ContentionModel(a=0.0, b=1.0, eta=0.5)  # share if new/old < 1/3
    cfg = QueueConfig(queues=4, admission=model)  # data bands 1, 2; scavenger 3
    assert late_bands([5, 9], [2], cfg) == [1, 2, 2], "admitted next to the owner (2/9)"
    assert late_bands([5, 9], [4], cfg) == [1, 2, 3], "refused (4/9): scavenger"
    # an ordered overflow unit comes first; a late one admitted after it still waits
    assert late_bands([5, 9, 2], [1], cfg) == [1, 2, 2, 3]
    # a refused ordered overflow unit leaves the share to the late one
    assert late_bands([5, 9, 4], [1], cfg) == [1, 2, 3, 2]


def test_dscp_encoding_in_the_tos_byte():
    assert tos_byte(46) == 0xB8  # EF
    assert tos_byte(8) == 0x20  # CS1
    assert tos_byte(48) == 0xC0  # CS6
    with pytest.raises(ConfigError):
        tos_byte(64)
    assert default_dscp_table(8) == (56, 48, 40, 32, 24, 16, 8, 0)  # no bands named
    assert default_dscp_table(8, 6, 7) == (56, 48, 40, 32, 24, 16, 0, 8)
    assert QueueConfig().dscp_table == (56, 48, 40, 32, 24, 16, 0, 8)
    assert QueueConfig().unmarked_warning() == ""
    bad = QueueConfig(dscp=(56, 48, 40, 32, 24, 16, 8, 0))
    assert bad.unmarked_warning().startswith("queues.dscp: DSCP 0 (unmarked traffic")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queues": 1}, "^queues: must be between 2 and 16"),
        ({"queues": 0}, "^queues: must be between 2 and 16"),
        ({"queues": 2, "reserved": (0,)}, "^queues: no band left"),
        ({"reserved": (9,)}, r"^reserved\[0\]: band 9 out of range"),
        ({"dscp": (1, 2, 3)}, "^dscp: needs one code point per band"),
        ({"queues": 3, "dscp": (1, 1, 2)}, "^dscp: code points must be distinct"),
        ({"queues": 3, "dscp": (1, 70, 2)}, r"^dscp\[1\]: must be between 0 and 63"),
    ],
)
def test_queue_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        QueueConfig(**kwargs)


def test_default_band_for_unscheduled_flows_is_last_data_band():
    cfg = QueueConfig()
    snap = many_stages_one_port([1.0])
    fp = map_priorities(
        snap.stage_loads, np.array([0]), np.array([-1]), snap.flow_src, snap.flow_dst, 2, cfg
    )
    assert fp.band.tolist() == [cfg.default_band] == [6]


def reference_bands(loads, order, cfg, active=None, unlimited=False):
    """Bands as a plain loop over ports and the units loading each in global order
    (what port_bands vectorizes): 1 + band per (unit, port), 0 where nothing is sent."""
    dense = loads.toarray()
    out = np.zeros(dense.shape, dtype=np.int64)
    data = list(cfg.data_bands)
    for p in range(dense.shape[1]):
        units = [u for u in order if dense[u, p] > 0 and (active is None or active[u])]
        admitted = False
        for r, u in enumerate(units):
            if unlimited:
                band = data[0] + r
            elif r < len(data) or cfg.admission is None or cfg.scavenger_band is None:
                band = data[min(r, len(data) - 1)]
            elif not admitted and adadual_admit(dense[u, p], [dense[units[len(data) - 1], p]],
                                                cfg.admission):  # fmt: skip
                band, admitted = data[-1], True
            else:
                band = cfg.scavenger_band
            out[u, p] = band + 1
    return out


def test_a_unit_ordered_twice_is_refused():
    with pytest.raises(ValueError, match="order: a unit appears more than once"):
        port_bands(sparse.csr_matrix(np.ones((3, 2))), np.array([0, 1, 1, 2]), QueueConfig())


def test_vectorized_bands_match_a_plain_loop():
    """Ranks, the overflow rule, the active units, units left out of the order and the
    unlimited bands agree with a loop over every port, on random loads (zeros and
    negative entries carry nothing); ``lookup`` reads them back for any pair."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, p = rng.integers(1, 40), rng.integers(1, 6)
        scale = rng.choice([1, 100, 1e4, -1], size=(n, p))
        dense = rng.random((n, p)) * (rng.random((n, p)) < 0.6) * scale
        loads, order = sparse.csr_matrix(dense), rng.permutation(n)
        if rng.random() < 0.2:  # some units not ordered (none, at times)
            order = order[: rng.integers(0, n + 1)]
        cfg = QueueConfig(queues=int(rng.integers(3, 9)))
        active = rng.random(n) < 0.8 if rng.random() < 0.5 else None
        unlimited = bool(rng.random() < 0.2)
        pb = port_bands(loads, order, cfg, active, unlimited)
        want = reference_bands(loads, order, cfg, active, unlimited)
        assert pb.band.shape == loads.shape
        assert (pb.band.toarray() == want).all()
        units, ports = rng.integers(0, n, 50), rng.integers(0, p, 50)  # lookup, any pair
        assert (pb.lookup(units, ports, -7) == np.where(want > 0, want - 1, -7)[units, ports]).all()
