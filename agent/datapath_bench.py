"""``grouper bench datapath``: what the agent's kernel state costs a saturated link.

Two namespaces joined by a veth pair; iperf3 sends ``--streams`` parallel TCP flows from
``a`` to ``b`` as fast as the machine allows, for ``--seconds``, under four states of
host ``a``'s NIC:

* ``none``: the NIC as the kernel made it (veth: no qdisc);
* ``nft``: only the agent's nftables table (empty plan);
* ``agent``: the agent's qdisc and table, empty plan (what an idle agent costs);
* ``agent_10k``: the same with ``--entries`` rules (10,000 by default: per-connection
  elements and port elements), the iperf3 flows among them in band 1;
* ``agent_10k_single`` (only with ``--txqueues`` > 1): ``agent_10k`` with one band
  qdisc as root over all TX queues (``agent.multiqueue: single``) instead of one per
  queue, which shows what the per-queue layout saves.

The states run interleaved: ``--runs`` rounds, each measuring every state once, in an
order rotated by one each round (so no state always runs first, or always after the
same one), and a machine that slows down for a while slows every state alike. Each
state reports its median, its range over the runs, and CPU seconds per gigabit moved
(iperf3's sender and receiver processes, where veth's softirq work is charged), with
the share of the machine's CPU the hypervisor stole during its runs. A comparison
between two states gets a verdict only when the difference of their medians is larger
than the spread (the wider of the two ranges); otherwise it says no verdict, and why.

The state is installed by the agent's own :class:`agent.enforcer.Enforcer` in a child
process inside ``a``, and removed before the next state; the namespaces are deleted in
``finally``. The qdisc shapes at ``LINK_MBPS`` (far above what a veth carries here), so
the cost measured is the datapath's, not a rate limit.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from grouper.agent.kernel.netns import NetnsPair
from grouper.common.errors import ConfigError
from grouper.common.interpreter import python_argv
from grouper.common.output import table, write_json

STATES = ("none", "nft", "agent", "agent_10k")
MQ_STATES = (*STATES, "agent_10k_single")
LINK_MBPS = 400_000
PORT = 5201


# (state, baseline): what each verdict compares
COMPARISONS = (
    ("nft", "none"),
    ("agent", "none"),
    ("agent_10k", "agent"),
    ("agent_10k", "none"),
    ("agent_10k_single", "agent_10k"),
)


def bench_datapath(
    entries: int,
    streams: int,
    seconds: float,
    runs: int,
    json_path: str | None,
    txqueues: int = 1,
) -> int:
    """Ranges are checked where the CLI reads them (``grouper.cli.argtypes``)."""
    if os.geteuid() != 0:
        raise ConfigError("bench datapath", "needs root (it creates network namespaces)")
    tag = os.getpid() % 100000
    a, b = f"gdp{tag}a", f"gdp{tag}b"
    states = STATES if txqueues == 1 else MQ_STATES
    samples: dict[str, list[dict[str, float]]] = {s: [] for s in states}
    server = None
    net = NetnsPair(a, b, "10.97.0.1", "10.97.0.2", "dpa", "dpb", txqueues)
    try:
        net.open()
        server = subprocess.Popen(
            ["ip", "netns", "exec", b, "iperf3", "-s", "-p", str(PORT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_listening(b, server)
        for r in range(runs):
            for state in states[r % len(states) :] + states[: r % len(states)]:
                with _State(a, state, entries):
                    samples[state].append(_iperf(a, streams, seconds))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"grouper: bench datapath failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        net.close()
    result = {
        "entries": entries,
        "streams": streams,
        "seconds": seconds,
        "runs": runs,
        "txqueues": txqueues,
        "order": "interleaved, rotated by one state per round",
        **summarise(samples),
    }
    write_json(result, json_path)
    if json_path != "-":
        _print(result)
    return 0


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "spread": max(values) - min(values),
    }


def summarise(samples: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per state: Gbit/s and CPU seconds per Gbit (median, min, max, spread = max -
    min), steal; per comparison, a verdict only where the difference of medians is
    larger than the wider of the two spreads."""
    gbps = {s: _spread([x["gbps"] for x in v]) for s, v in samples.items()}
    cpu = {s: _spread([x["cpu_s_per_gbit"] for x in v]) for s, v in samples.items()}
    verdicts = []
    for state, base in COMPARISONS:
        if state in samples and base in samples:
            verdicts.append(_verdict(state, base, gbps, "gbps", len(samples[state])))
            verdicts.append(_verdict(state, base, cpu, "cpu_s_per_gbit", len(samples[state])))
    return {
        "gbps": {s: v["median"] for s, v in gbps.items()},
        "gbps_stats": gbps,
        "cpu_s_per_gbit": {s: v["median"] for s, v in cpu.items()},
        "cpu_stats": cpu,
        "steal": {s: max(x["steal"] for x in v) for s, v in samples.items()},
        "runs_all": samples,
        "verdicts": verdicts,
    }


def _verdict(state: str, base: str, stats: dict, what: str, runs: int) -> dict[str, Any]:
    diff = stats[state]["median"] - stats[base]["median"]
    spread = max(stats[state]["spread"], stats[base]["spread"])
    out = {"state": state, "against": base, "what": what, "difference": diff, "spread": spread}
    rel = diff / stats[base]["median"]
    if runs < 2:
        return out | {"verdict": None, "why": "one run per state has no spread"}
    if abs(diff) <= spread:
        why = f"difference {rel:+.1%} is within the spread of the runs"
        return out | {"verdict": None, "why": why}
    if what == "gbps":
        text = f"{abs(rel):.1%} {'faster' if diff > 0 else 'slower'}"
    else:
        text = f"{abs(rel):.1%} {'more' if diff > 0 else 'less'} CPU per Gbit"
    return out | {"verdict": text, "why": "difference larger than the spread of the runs"}


def _print(result: dict[str, Any]) -> None:
    g, c, steal = result["gbps_stats"], result["cpu_stats"], result["steal"]
    none = g["none"]["median"]
    rows = [
        [s, f"{g[s]['median']:.2f}", f"{g[s]['min']:.2f}-{g[s]['max']:.2f}",
         f"{g[s]['median'] / none:.1%}", f"{c[s]['median']:.3f}",
         f"{c[s]['min']:.3f}-{c[s]['max']:.3f}", f"{steal[s]:.0%}"]
        for s in g
    ]  # fmt: skip
    head = ["state", "Gbit/s", "range", "of none", "CPU s/Gbit", "range", "max steal"]
    print(table(rows, head))
    for v in result["verdicts"]:
        what = "throughput" if v["what"] == "gbps" else "CPU/Gbit"
        told = v["verdict"] or f"no verdict ({v['why']})"
        print(f"{v['state']} vs {v['against']}, {what}: {told}")


def _wait_listening(ns: str, server: subprocess.Popen, timeout: float = 10.0) -> None:
    """Until iperf3 listens on ``PORT`` in ``ns`` (or has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        ss = subprocess.run(
            ["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{PORT}"],
            capture_output=True, text=True,
        )  # fmt: skip
        if ss.stdout.strip():
            return
        time.sleep(0.02)
    raise RuntimeError(f"iperf3 server not listening on {PORT} in {ns}")


def _cpu_jiffies() -> tuple[int, int]:
    """(stolen, total) jiffies of the machine since boot (/proc/stat's cpu line)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return fields[7], sum(fields)


def _iperf(ns: str, streams: int, seconds: float) -> dict[str, float]:
    """One run: Gbit/s received, CPU seconds per Gbit of the sender and receiver
    processes, and the machine's stolen share meanwhile."""
    before = _cpu_jiffies()
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "iperf3", "-c", "10.97.0.2", "-p", str(PORT), "-J",
         "-P", str(streams), "-t", str(seconds), "-O", "1"],
        capture_output=True, text=True, timeout=seconds + 30,
    )  # fmt: skip
    after = _cpu_jiffies()
    if out.returncode != 0:
        raise RuntimeError(f"iperf3: {out.stdout[-300:]} {out.stderr[-300:]}")
    end = json.loads(out.stdout)["end"]
    gbps = end["sum_received"]["bits_per_second"] / 1e9
    load = end["cpu_utilization_percent"]  # of one CPU, over the run, per process
    cpu = (load["host_total"] + load["remote_total"]) / 100  # CPU s per s
    total = after[1] - before[1]
    steal = (after[0] - before[0]) / total if total > 0 else 0.0
    return {"gbps": gbps, "cpu_s_per_gbit": cpu / gbps, "steal": steal}


class _State:
    """Install one state in namespace ``ns`` for the duration of a ``with`` block."""

    def __init__(self, ns: str, state: str, entries: int) -> None:
        self.ns, self.state, self.entries = ns, state, entries
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> _State:
        if self.state == "none":
            return self
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns,
             *python_argv("-m", "grouper.agent.datapath_bench", self.state, str(self.entries))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"installing state {self.state} failed")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the child removes what it installed, then exits
            self.proc.wait(30)


def _rules(entries: int) -> dict[tuple, Any]:
    """``entries`` rules: iperf3's port in band 1, the rest per-connection elements of
    made-up connections and port elements, spread over the data bands."""
    from grouper.agent.plan import Rule
    from grouper.common.queues import QueueConfig

    q = QueueConfig()
    data = q.data_bands
    rules: dict[tuple, Any] = {("dport", "10.97.0.2", PORT): Rule(1, q.dscp_table[1])}
    for i in range(entries - 1):
        band = data[i % len(data)]
        rule = Rule(band, q.dscp_table[band])
        addr = f"10.{96 - i // 60000}.{i // 250 % 240}.{i % 250 + 1}"
        if i % 2:
            rules[("conn", "10.97.0.1", addr, 20000 + i % 40000, 5000 + i % 7)] = rule
        else:
            rules[("dport", addr, 6000 + i % 50000)] = rule
    return rules


def _child(state: str, entries: int) -> None:
    from grouper.agent.enforcer import Enforcer
    from grouper.agent.kernel import nft_rules
    from grouper.common.queues import QueueConfig

    single = state == "agent_10k_single"
    enf = Enforcer("dpa", QueueConfig(), LINK_MBPS, control_ports=(7070,), multiqueue=not single)
    try:
        if state == "nft":
            enf._replace({})
        else:
            enf.start()
            if state.startswith("agent_10k"):
                enf.apply(_rules(entries))
        print("ready", flush=True)
        sys.stdin.read()
    finally:
        if state == "nft":
            enf.nft.run(nft_rules.delete_table())
        else:
            enf.stop()
        enf.close()


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
