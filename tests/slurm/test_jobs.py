"""Jobs as a user submits them to a real Slurm: ``sbatch`` scripts whose ``srun`` starts
each rank under ``grouper run``.

Two searches (cojobs) at once, each a 2-rank TCP ring across ``n1`` and ``n2``
(``tests/slurm/ring.py``, the user's script, in the client-only venv of Debian's
Python): ``narrow`` moves a sixteenth of ``wide``'s bytes per iteration, so each of its
stages (at most 12 iterations) is smaller than what is left of any stage of ``wide``
(at least one iteration) and the coordinator puts narrow's stages first however far
``wide`` has got. Checked with tools of their own: who registered each
step (the agents' Collect), the DSCP of every data segment at the switch port toward
``n2`` (a capture), the switch's per-band byte counters (``tc -s class``), and the
coordinator's view of the order and of the jobs' ends (its Prometheus endpoint).
"""

from __future__ import annotations

from scapy.all import IP, TCP

from grouper.common.queues import QueueConfig
from grouper.common.strict_priority import leaf_minor
from tests.capture import Capture
from tests.kernel.test_discovery import segments
from tests.netns import sh
from tests.slurm.conftest import SWITCH_PORT, Site
from tests.slurm.jobs import (
    STAGES,
    Step,
    coordinator_metrics,
    jobs_ended,
    output,
    registered,
    ring_elements,
    running_jobs,
    stage_ranks,
    step_script,
    submit,
    wait_for,
)

STEPS = {  # per iteration, each rank sends nbytes to the next
    "wide": Step("wide", 5301, 4_000_000),
    "narrow": Step("narrow", 5302, 250_000),
}
# narrow's largest stage is smaller than one iteration of wide's
assert max(STAGES) * STEPS["narrow"].nbytes < STEPS["wide"].nbytes
DSCP_BAND = {d: b for b, d in enumerate(QueueConfig().dscp_table)}


def switch_band_bytes(site: Site, node: str) -> dict[int, int]:
    """band -> bytes the switch's port toward ``node`` sent from that band's queue
    (``tc -s class show``; the port's classes are ``1:<leaf_minor(band)>``)."""
    text = sh("ip", "netns", "exec", site.star.switch, "tc", "-s", "class", "show",
              "dev", SWITCH_PORT[node]).stdout.splitlines()  # fmt: skip
    minor = {f"1:{leaf_minor(b):x}": b for b in range(len(QueueConfig().dscp_table))}
    out = {}
    for line, after in zip(text, text[1:], strict=False):
        words = line.split()
        if len(words) > 2 and words[0] == "class" and words[2] in minor:
            assert after.split()[0] == "Sent", after
            out[minor[words[2]]] = int(after.split()[1])
    return out


def bands_on_the_wire(packets: list, dport: int) -> list[tuple[float, int, int]]:
    """(time, band, payload bytes) of the data segments toward ``dport`` from the first
    that carries a plan's DSCP: before it, a job's bytes leave unmarked (DSCP 0, the
    default band's) until the agent has found its connection by pid and the
    coordinator's plan covers it; after it, DSCP 0 is the band the plan chose."""
    sports = {p[TCP].sport for p in packets if TCP in p and p[TCP].dport == dport}
    out = []
    for sport in sports:
        data = segments(packets, sport)
        first = next((i for i, (_, d, _) in enumerate(data) if d), len(data))
        out += [(t, DSCP_BAND[d], n) for t, d, n in data[first:]]
    return sorted(out)


def timeline(segs: list, t0: float, step: float = 0.5) -> str:
    """Bands by interval (from the first segment): what a failed order check shows."""
    if not segs:
        return "-"
    out: dict[int, dict[int, int]] = {}
    for t, band, n in segs:
        out.setdefault(int((t - t0) / step), {}).setdefault(band, 0)
        out[int((t - t0) / step)][band] += n
    return " ".join(f"{k * step:g}:{dict(sorted(v.items()))}" for k, v in sorted(out.items()))


def compare_bands(narrow: list, wide: list) -> tuple[int, int, int]:
    """Narrow's bytes sent while wide's transfer was under way (between wide's first and
    last data segment, whether or not the switch let one of wide's through just then:
    a strict band above it can hold it back for seconds): (in a band above the one
    wide's latest segment had, in a band below, compared)."""
    ahead = behind = compared = 0
    j = 0
    for t, band, n in narrow:
        if not wide or not wide[0][0] <= t <= wide[-1][0]:
            continue
        while j + 1 < len(wide) and wide[j + 1][0] <= t:
            j += 1
        compared += n
        ahead += n if band < wide[j][1] else 0
        behind += n if band > wide[j][1] else 0
    return ahead, behind, compared


def test_two_searches_a_user_submits_run_in_the_coordinators_order(site, users, shared):  # noqa: F811
    alice = users[0]
    capture = Capture(site.star.popen, site.star.switch, SWITCH_PORT["n2"],
                      site.work / "to-n2.pcap", "tcp and dst host " + site.addrs["n2"])  # fmt: skip
    before = switch_band_bytes(site, "n2")
    # narrow arrives while wide runs in its planned band, as a search's short stage
    # arrives behind a long one
    ids = {"wide": submit(site, alice, step_script(site, shared, alice, STEPS["wide"]))}
    wait_for(lambda: all(ring_elements(site, STEPS["wide"].port).values()), 30,
             "wide's connections classified on both nodes", site)  # fmt: skip
    ids["narrow"] = submit(site, alice, step_script(site, shared, alice, STEPS["narrow"]))
    wait_for(lambda: site.slurm.states().get(str(ids["narrow"]), "").startswith("R"), 5,
             "narrow to start beside wide", site)  # fmt: skip

    keys = {(n, c, "trial-0") for n in site.addrs for c in ids}
    wait_for(lambda: keys <= set(registered(site)), 60, "both steps registered", site)
    assert {registered(site)[k] for k in keys} == {alice.uid}, "each step is its user's"
    ranks: dict[str, float] = {}

    def ordered() -> bool:
        ranks.update(stage_ranks(coordinator_metrics(site)))
        first = {c: min((r for s, r in ranks.items() if s.startswith(c)), default=0) for c in ids}
        return all(first.values())

    wait_for(ordered, 30, lambda: f"the coordinator to order both searches' stages: {ranks}")
    wait_for(lambda: not site.slurm.queue(), 120, "both jobs to end")
    packets = [p for p in capture.stop() if IP in p]
    for c, job in ids.items():
        out = output(site, alice, c, job)
        assert out.count(f"done {sum(STAGES)} iterations") == 2, out

    narrow, wide = (bands_on_the_wire(packets, STEPS[c].port) for c in ("narrow", "wide"))
    t0 = min(t for t, _, _ in narrow + wide) if narrow + wide else 0.0
    ahead, behind, compared = compare_bands(narrow, wide)
    total = sum(n for _, _, n in narrow)
    assert compared > 0.5 * total, (
        f"narrow ran mostly outside wide's transfer ({compared} of {total}); "
        f"narrow {timeline(narrow, t0)}; wide {timeline(wide, t0)}"
    )
    # the coordinator's order puts narrow first; where admission lets the two share
    # bandwidth they may share a band, but narrow never waits behind wide
    assert behind <= 0.05 * compared and ahead >= 0.5 * compared, (
        f"of narrow's {compared} bytes beside wide, {ahead} ahead and {behind} behind; "
        f"narrow {timeline(narrow, t0)}; wide {timeline(wide, t0)}"
    )
    after = switch_band_bytes(site, "n2")
    top = min(b for _, b, _ in narrow)
    counted = sum(n for _, b, n in narrow if b == top)
    assert after[top] - before[top] >= counted, "the switch counted narrow's band's bytes"
    wait_for(lambda: jobs_ended(coordinator_metrics(site), "completed") >= len(ids), 30,
             "the coordinator to see every job complete")  # fmt: skip
    wait_for(lambda: not any(running_jobs(site, c) for c in ids), 15,
             "the agents to end the finished steps' jobs")  # fmt: skip
