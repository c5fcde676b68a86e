"""Where the per-link model has a continuum of fixed points (two flows from one host in
two NIC bands and one queue of the receiver's switch port), real TCP settles at one
end of it: the NIC's strict priority decides, whichever flow started first. With a
third sender into the same port the fixed point is unique, and TCP shares the port.
(``experiments/pooled_queue.py``; the simulator, which solves such a priority cycle by
offers swept upstream first, and the rule (``simulator/fabric_rule.py``) take the end
TCP takes: docs/explanation/simulator-model.md.)"""

from __future__ import annotations

import json
import subprocess
import sys

from grouper.experiments.pooled_queue import run

MBPS = 20.0


def test_the_nic_priority_decides_a_switch_queue_only_it_feeds():
    """Through the command, as a user runs it: its whole standard output is the JSON."""
    argv = ["bench", "pooled-queue", "--cases", "ab,ba", "--seconds", "4", "--json", "-"]
    done = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    cases = json.loads(done.stdout)["cases"]
    for case in ("ab", "ba"):  # ba: b alone at the whole port first
        got = cases[case]["measured"]
        assert got["a"] > 0.8 * MBPS, (case, got)
        assert got["b"] < 0.1 * MBPS, (case, got)
        assert cases[case]["model"] == {"a": MBPS, "b": 0.0}, cases[case]


def test_a_second_sender_makes_the_switch_port_the_shared_bottleneck():
    r = run(["abc"], MBPS, 4.0)["cases"]["abc"]
    got = r["measured"]
    assert sum(got.values()) > 0.8 * MBPS, got
    assert all(0.1 * MBPS < x < 0.6 * MBPS for x in got.values()), got
    assert r["model"] == {f: round(MBPS / 3, 3) for f in "abc"}, r


def test_where_bands_pool_tcp_settles_where_the_upstream_link_decides():
    """A cycle across two hosts (each NIC's top band to one port, its second band to the
    other) and two flows tied in a band above a third: TCP gives the NICs' top bands the
    links; the simulator and the rule (simulator/fabric_rule.py) are within 10% of the
    link of TCP on every flow of the cycle, and on the tied band's total (how TCP splits
    one band between two flows over 4 s varies: 15.8 and 3.3 Mbit/s in one CI run)."""
    got = run(["cross", "tied"], MBPS, 4.0)["cases"]
    cross, tied = got["cross"], got["tied"]
    assert cross["measured"]["a"] > 0.8 * MBPS, cross
    assert cross["measured"]["b"] < 0.1 * MBPS, cross
    assert cross["rule_error"] < 0.10 and cross["model_error"] < 0.10, cross
    assert tied["measured"]["e"] < 0.1 * MBPS, tied
    band = tied["measured"]["a"] + tied["measured"]["b"]
    for rates in (tied["model"], tied["rule"]):
        assert abs(rates["a"] + rates["b"] - band) < 0.10 * MBPS, tied
        assert abs(rates["e"] - tied["measured"]["e"]) < 0.10 * MBPS, tied
