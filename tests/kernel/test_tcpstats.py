"""The emulation's TCP counters: read per namespace from /proc/PID/net, checked with nstat."""

from __future__ import annotations

import json
import sys

from grouper.experiments.tcpstats import COUNTERS, host_counters

# nstat names a counter by its table and its name: TcpRetransSegs, TcpExtTCPTimeouts
NSTAT = {name: table + counter for (_, table, counter), name in COUNTERS.items()}


def test_counters_of_a_namespace_match_nstat_in_it(pair):
    sleeper = pair.popen(pair.a, "sleep", "60")  # a process inside namespace a
    pair.sink(pair.b, 5301)
    for _ in range(3):
        pair.run(pair.a, sys.executable, "tests/tcp_tool.py", "send", pair.addr_b, "5301", "200000")
    ours = host_counters(sleeper.pid)  # ip netns exec execs sleep: the same pid
    out = pair.run(pair.a, "nstat", "-a", "-z", "-s", "--json").stdout
    theirs = json.loads(out)["kernel"]
    assert ours["segments_sent"] > 100  # 600 kB went out of this namespace
    for name, value in ours.items():
        assert value == theirs[NSTAT[name]], name
