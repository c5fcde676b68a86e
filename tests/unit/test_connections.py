"""Connections as `ss -tin` prints them, and paired ratios with their intervals."""

from __future__ import annotations

from pathlib import Path

import pytest

from grouper.experiments.connections import parse_ss
from grouper.experiments.intervals import mean_ci95, paired_ratios
from grouper.topologies.congestion import CHOICES

# `ss -tinH state established` in a namespace, one loopback connection each way
SS = (Path(__file__).parent / "ss-tin.txt").read_text()


def test_ss_output_gives_each_connections_ends_congestion_control_and_figures():
    a, b = parse_ss(SS, CHOICES)
    assert (a["src"], a["sport"], a["dst"], a["dport"]) == ("127.0.0.1", 35662, "127.0.0.1", 5301)
    assert a["cc"] == "bbr" and a["rtt_ms"] == 0.042 and a["cwnd"] == 32
    assert a["pacing_mbps"] == pytest.approx(40517.606248)
    assert a["delivery_mbps"] == pytest.approx(55143.578944) and a["retrans"] == 52
    assert (b["sport"], b["dport"]) == (5301, 35662) and "delivery_mbps" not in b
    assert parse_ss("", CHOICES) == []


def test_an_ipv4_mapped_end_is_given_as_its_ipv4_address():
    """Gloo's dual-stack sockets: ``ip route get`` needs the IPv4 address to name the
    spine a connection takes."""
    mapped = SS.replace("127.0.0.1:35662", "[::ffff:10.1.1.2]:35662")
    (a, _) = parse_ss(mapped, CHOICES)
    assert a["src"] == "10.1.1.2" and a["dst"] == "127.0.0.1"
    (a, _) = parse_ss(SS.replace("127.0.0.1:35662", "[fe80::1%eth0]:35662"), CHOICES)
    assert a["src"] == "fe80::1"


def test_paired_ratios_take_run_i_against_run_i_with_a_95_percent_interval():
    r = paired_ratios({"fs": [10.0, 20.0], "grouper": [8.0, 18.0]})["grouper/fs"]
    assert r["runs"] == [0.8, 0.9] and r["mean"] == pytest.approx(0.85)
    assert r["ci95"] == pytest.approx(12.706 * 0.0707107 / 2**0.5, rel=1e-3)
    assert mean_ci95([3.0]) == {"mean": 3.0, "ci95": None}
    assert paired_ratios({"grouper": [1.0]}) == {}
