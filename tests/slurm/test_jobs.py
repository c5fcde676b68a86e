"""Jobs as a user submits them to a real Slurm: ``sbatch`` scripts whose ``srun`` starts
each rank under ``grouper run``.

Two searches (cojobs) at once, each a 2-rank TCP ring across ``n1`` and ``n2``
(``tests/slurm/ring.py``, the user's script, in the client-only venv of Debian's
Python): ``narrow`` moves a quarter of ``wide``'s bytes per iteration, so the
coordinator puts its stages first. Checked with tools of their own: who registered each
step (the agents' Collect), the DSCP of every data segment at the switch port toward
``n2`` (a capture), the switch's per-band byte counters (``tc -s class``), and the
coordinator's view of the order and of the jobs' ends (its Prometheus endpoint).

A rank's agent socket is named by its node (``$SLURMD_NODENAME``) because both nodes
share this machine's filesystem; on a cluster every node's agent listens at the default
path and the srun line needs no ``--socket``.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from pathlib import Path

from scapy.all import IP, TCP

from grouper.common.queues import QueueConfig
from grouper.common.strict_priority import leaf_minor
from tests.capture import Capture
from tests.kernel.agent_calls import collect
from tests.kernel.star_cluster import metrics_address
from tests.kernel.test_discovery import segments
from tests.netns import TIME_SCALE, nft_json, sh
from tests.slurm.conftest import SWITCH_PORT, Site
from tests.users import User

STAGES = (6, 12)
PORTS = {"wide": 5301, "narrow": 5302, "long": 5303}
BYTES = {"wide": 4_000_000, "narrow": 500_000, "long": 1_000_000}  # per iteration, to the next
DSCP_BAND = {d: b for b, d in enumerate(QueueConfig().dscp_table)}


def home(site: Site, user: User) -> Path:
    """A folder of the user's own on the shared filesystem: scripts, job outputs."""
    path = site.work / user.name
    path.mkdir(exist_ok=True)
    os.chown(path, user.uid, user.gid)
    return path


def step_script(
    site: Site, shared: Path, user: User, cojob: str, iterations: tuple[int, ...] = STAGES
) -> Path:
    """The batch script a user writes: one srun step, every rank under grouper run."""
    venv = shared / "venv" / "bin"
    addrs = " ".join(site.addrs[n] for n in sorted(site.addrs))
    rank = (
        f"exec {venv}/grouper run --socket {site.work}/$SLURMD_NODENAME-registry.sock "
        f"--cojob {cojob} --job trial-0 --stages {','.join(map(str, iterations))} "
        f"--model-bytes {BYTES[cojob]} -- "
        f"{venv}/python {shared}/ring.py {PORTS[cojob]} {BYTES[cojob]} {sum(iterations)} {addrs}"
    )
    path = home(site, user) / f"{cojob}.sbatch"
    path.write_text(
        "#!/bin/sh\n"
        f"#SBATCH -N2 --ntasks-per-node=1 -J {cojob} -o {path.parent}/{cojob}-%j.out\n"
        f"srun sh -c '{rank}'\n"
    )
    path.chmod(0o755)
    return path


def submit(site: Site, user: User, script: Path) -> int:
    """``sbatch`` as ``user``, from the head node, in a folder the user may read."""
    out = site.slurm.as_user(user.argv, "sbatch", "--parsable", str(script), cwd=script.parent)
    return int(out.strip().split(";")[0])


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


def wait_for(cond, timeout: float, what, site: Site | None = None) -> None:  # noqa: ANN001
    """Poll ``cond``; on a timeout say ``what`` (a text, or a function giving it) and
    what the jobs printed (with ``site``)."""
    deadline = time.monotonic() + timeout * TIME_SCALE
    while not cond():
        if time.monotonic() > deadline:
            what = what() if callable(what) else what
            said = site.outputs() if site is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{said}")
        time.sleep(0.2)


def coordinator_metrics(site: Site) -> str:
    address = metrics_address(site.config)
    return urllib.request.urlopen(f"http://{address}/metrics", timeout=3).read().decode()


def stage_ranks(text: str) -> dict[str, float]:
    pattern = r'^grouper_coordinator_stage_rank\{stage="([^"]+)"\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


def jobs_ended(text: str, how: str) -> float:
    """The coordinator's count of jobs ended ``how`` (completed, killed)."""
    m = re.search(rf'^grouper_coordinator_jobs_ended_total\{{how="{how}"\}} (\S+)$', text, re.M)
    return float(m[1]) if m else 0.0


def registered(site: Site) -> dict[tuple[str, str, str], int]:
    """(node, cojob, job) -> the uid the agent says registered it."""
    return {
        (n, j.job.cojob_id, j.job.job_id): j.owner_uid
        for n, a in site.agents.items()
        for j in collect(a).jobs
    }


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


def compare_bands(narrow: list, wide: list, within: float = 0.5) -> tuple[int, int, int]:
    """Narrow's bytes sent while wide also sent (wide's latest segment at most
    ``within`` s away): (in a band above wide's, in a band below, compared)."""
    ahead = behind = compared = 0
    j = 0
    for t, band, n in narrow:
        while j + 1 < len(wide) and wide[j + 1][0] <= t:
            j += 1
        if wide and abs(wide[j][0] - t) <= within:
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
    ids = {"wide": submit(site, alice, step_script(site, shared, alice, "wide"))}
    wait_for(lambda: all(ring_elements(site, PORTS["wide"]).values()), 30,
             "wide's connections classified on both nodes", site)  # fmt: skip
    ids["narrow"] = submit(site, alice, step_script(site, shared, alice, "narrow"))
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
        out = (home(site, alice) / f"{c}-{job}.out").read_text()
        assert out.count(f"done {sum(STAGES)} iterations") == 2, out

    narrow, wide = (bands_on_the_wire(packets, PORTS[c]) for c in ("narrow", "wide"))
    t0 = min(t for t, _, _ in narrow + wide) if narrow + wide else 0.0
    ahead, behind, compared = compare_bands(narrow, wide)
    total = sum(n for _, _, n in narrow)
    assert compared > 0.3 * total, (
        f"narrow and wide barely overlapped ({compared} of {total}); "
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
    wait_for(lambda: not any(j.job.cojob_id in ids and not j.finished
                             for a in site.agents.values() for j in collect(a).jobs),
             15, "the agents to end the finished steps' jobs")  # fmt: skip


def ring_elements(site: Site, port: int) -> dict[str, int]:
    """node -> how many of the agent's per-connection map elements are the ring's
    (its port at either end)."""
    out = {}
    for n, ns in zip(sorted(site.addrs), site.star.hosts[1:], strict=True):
        count = 0
        for o in nft_json(ns):
            m = o.get("map")
            if m and m["name"] == "band_conn":
                count += sum(1 for key, _ in m.get("elem", []) if port in key["concat"][2:])
        out[n] = count
    return out


def test_scancel_in_a_stage_ends_the_job_and_removes_its_kernel_state(site, users, shared):  # noqa: F811
    alice = users[0]
    killed = jobs_ended(coordinator_metrics(site), "killed")
    job = submit(site, alice, step_script(site, shared, alice, "long", iterations=(400, 800)))
    wait_for(lambda: all(ring_elements(site, PORTS["long"]).values()), 60,
             "the ring's connections classified on both nodes")  # fmt: skip
    site.slurm.as_user(alice.argv, "scancel", str(job), cwd=home(site, alice))
    wait_for(lambda: not site.slurm.queue(), 30, "the cancelled job to leave the queue")
    wait_for(lambda: not any(ring_elements(site, PORTS["long"]).values()), 10,
             "the cancelled ring's map elements removed")  # fmt: skip
    left = [(n, j.job.job_id) for n, a in site.agents.items() for j in collect(a).jobs
            if j.job.cojob_id == "long" and not j.finished]  # fmt: skip
    assert not left, f"jobs of the cancelled step still running at their agents: {left}"
    wait_for(lambda: jobs_ended(coordinator_metrics(site), "killed") >= killed + 1, 15,
             "the coordinator to count the job killed in its stage")  # fmt: skip
    assert "CANCELLED" in (home(site, alice) / f"long-{job}.out").read_text()
