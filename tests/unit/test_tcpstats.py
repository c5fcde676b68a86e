"""Parsing the kernel's TCP counter tables (the kernel path: tests/kernel/test_tcpstats.py)."""

from __future__ import annotations

import pytest

from grouper.experiments.tcpstats import parse_tables, total


def test_parse_tables_pairs_names_with_values():
    text = "Tcp: RtoMin OutSegs RetransSegs\nTcp: 200 12 3\nUdp: InDatagrams\nUdp: 5\n"
    assert parse_tables(text) == {
        "Tcp": {"RtoMin": 200, "OutSegs": 12, "RetransSegs": 3},
        "Udp": {"InDatagrams": 5},
    }


@pytest.mark.parametrize("text", ["Tcp: A B\nTcp: 1\n", "Tcp: A\nUdp: 1\n"])
def test_parse_tables_refuses_a_broken_table(text):
    with pytest.raises(ValueError, match="unexpected counter table line"):
        parse_tables(text)


def test_total_sums_every_host():
    got = total({"h1": {"timeouts": 2}, "h2": {"timeouts": 3, "segments_sent": 7}})
    assert got["timeouts"] == 5 and got["segments_sent"] == 7 and got["fast_retransmits"] == 0
