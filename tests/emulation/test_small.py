"""builtin:small on an emulated leaf-spine: grouper beats fair sharing on the whole
workload's average SCT by a stated margin, bytes verified, bands used, DSCP on the
wire, and every job completing when the coordinator dies halfway."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time

from scapy.all import IP, TCP, rdpcap

from grouper.common.queues import QueueConfig
from grouper.experiments.emulation import Emulation
from grouper.experiments.spec import spec_of
from grouper.workloads import load_workload
from grouper.workloads.model import Workload

SENDER, RECEIVER, PORT = "h1", "h4", "leaf2-h4"  # switch egress port toward the receiver


def dscp_map(em: Emulation, host: str) -> dict[tuple[str, int], int]:
    out = {}
    for match in ("dport", "sport"):
        text = em.fabric.host(host).cmd(f"nft -j list map inet grouper dscp_{match}")
        try:
            objs = json.loads(text)["nftables"]
        except (ValueError, KeyError):
            continue
        for o in objs:
            for key, verdict in o.get("map", {}).get("elem", []):
                addr, port = key["concat"]
                out[(match, addr, int(port))] = int(verdict["goto"]["target"].split("_")[1])
    return out


def capture_window(em: Emulation, pcap: str, seconds: float) -> tuple[dict, dict]:
    """Plan read twice before the capture on the switch port, every 0.1 s during it and
    once after: only entries unchanged across all readings count (a plan that changes
    and changes back within the window is not a stable plan)."""
    first = dscp_map(em, SENDER)
    time.sleep(0.5)
    second = dscp_map(em, SENDER)
    before = {k: v for k, v in second.items() if first.get(k) == v}
    leaf = em.fabric.leaves[1]
    dump = leaf.popen(
        ["tcpdump", "--immediate-mode", "-Z", "root", "-i", PORT, "-U", "-w", pcap, "tcp"],
        stderr=subprocess.DEVNULL,
    )
    during = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        during.append(dscp_map(em, SENDER))
        time.sleep(0.1)
    dump.send_signal(signal.SIGINT)
    dump.wait(timeout=10)
    after = dscp_map(em, SENDER)
    return before, {k: v for k, v in after.items() if all(d.get(k) == v for d in during)}


# grouper's average SCT over fair sharing's on builtin:small measured 0.70-0.75 on this
# 2-core VM (docs/results/emulation.md); the test demands at most this, so run-to-run noise of
# the emulation (a few percent) cannot flip it, while a scheduler that orders nothing
# (ratio ~1.0) fails.
MARGIN = 0.9


def wl_stages(wl: Workload) -> int:
    return sum(len(c.stage_iterations) for c in wl.cojobs)


def avg_sct(out) -> float:
    return sum(s["sct"] for s in out.replay.stages) / len(out.replay.stages)


def test_grouper_beats_fair_sharing_and_marks_what_the_plan_says(tmp_path):
    wl = load_workload("builtin:small")
    spec = spec_of(wl, QueueConfig())
    fair = Emulation(spec, "fs", 0.5, tmp_path / "fs")
    try:
        fair.start()
        fs_out = asyncio.run(fair.run(wl))
    finally:
        fair.stop()
    assert fs_out.replay.errors == [] and not fs_out.replay.ledger.shortfall()
    # the run names each connection's path and TCP state, under the congestion control
    # every host was given
    assert set(fair.host_cc.values()) == {spec.cc}, fair.host_cc
    cross = [c for c in fair.connections if c["src"].split(".")[1] != c["dst"].split(".")[1]]
    assert cross and all(c["spine"] in ("spine1", "spine2") for c in cross), fair.connections
    assert all(c["cc"] == spec.cc and c["rtt_ms_mean"] > 0 for c in cross), cross

    em = Emulation(spec, "grouper", 0.5, tmp_path / "grouper")
    windows = []
    try:
        em.start()

        async def main():
            run = asyncio.create_task(em.run(wl))
            for i in range(6):
                await asyncio.sleep(1.0)
                pcap = str(tmp_path / f"w{i}.pcap")
                before, after = await asyncio.to_thread(capture_window, em, pcap, 1.0)
                windows.append((pcap, before, after))
            return await run

        out = asyncio.run(main())
    finally:
        em.stop()
    ratio = avg_sct(out) / avg_sct(fs_out)
    assert ratio <= MARGIN, f"grouper/fs average SCT {ratio:.3f} (fs {avg_sct(fs_out):.2f} s)"
    assert out.replay.errors == []
    assert out.replay.ledger.sent and not out.replay.ledger.shortfall()
    assert len(out.replay.stages) == len(fs_out.replay.stages) == wl_stages(wl)
    used = {h: {b for b, n in bands.items() if n > 0} for h, bands in out.band_bytes.items()}
    assert max(len(b) for b in used.values()) >= 2, used

    # DSCP is set when the sender enqueues a packet: a packet queued (or starved in a
    # low band) before the plan changed leaves later with the old mark, so a few
    # stragglers are legitimate; the plan's DSCP must dominate.
    src, dst = spec.addresses[SENDER], spec.addresses[RECEIVER]
    checked = mismatched = 0
    for pcap, before, after in windows:
        stable = {k: v for k, v in before.items() if after.get(k) == v and k[1] == dst}
        for pkt in rdpcap(pcap):
            if IP not in pkt or TCP not in pkt or len(pkt[TCP].payload) == 0:
                continue
            if pkt[IP].src != src or pkt[IP].dst != dst:
                continue
            t = pkt[TCP]
            key = (
                ("dport", dst, t.dport)
                if ("dport", dst, t.dport) in stable
                else ("sport", dst, t.sport)
            )
            if key in stable:  # bytes, not packets: captures hold offload-sized packets
                checked += pkt[IP].len
                mismatched += pkt[IP].len * (pkt[IP].tos >> 2 != stable[key])
    assert checked >= 100_000, f"only {checked} bytes of stable plans crossed the port"
    assert mismatched <= 0.05 * checked, f"{mismatched} of {checked} bytes off-plan"


def test_jobs_complete_and_every_byte_arrives_when_the_coordinator_dies(tmp_path):
    wl = load_workload("builtin:small")
    spec = spec_of(wl, QueueConfig())
    em = Emulation(spec, "grouper", 0.5, tmp_path / "kill")
    try:
        em.start()
        out = asyncio.run(em.run(wl, kill_coordinator_after=6.0))
        logs = {h: (tmp_path / "kill" / f"{h}-agent.log").read_text() for h in spec.host_names}
    finally:
        em.stop()
    assert em.coordinator is not None and em.coordinator.returncode is not None
    assert out.replay.errors == []
    assert not out.replay.ledger.shortfall()
    assert {j["cojob"] for j in out.replay.jobs} == {"ps-small", "ring-mid", "ps-big"}
    assert len(out.replay.jobs) == 6
    assert any("dropped all priorities" in text for text in logs.values())
