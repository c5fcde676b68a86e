"""SIGHUP: a bad new config is refused and the last good one keeps running."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from grouper.common.cluster_doc import cluster_doc
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def cfg(hosts: int) -> dict:
    return cluster_doc(
        [(f"h{i}", f"10.0.0.{i + 1}", "eth0") for i in range(hosts)],
        cluster="r",
        sockets=Path("/nonexistent"),
        scheduling={"period": 0.2},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},  # not a fixed port
        metrics={"coordinator": "127.0.0.1:0"},
    )


def wait_log(path: Path, text: str, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in log:\n{path.read_text()[-2000:]}")


def test_sighup_reload_keeps_last_good_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg(1)))
    log = tmp_path / "log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grouper.cli", "coordinator", "--config", str(path)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_log(log, "coordinator for r: 1 hosts")
        bad = cfg(2)
        del bad["hosts"][1]["nic"]
        path.write_text(yaml.safe_dump(bad))
        proc.send_signal(signal.SIGHUP)
        wait_log(log, "config reload refused, keeping the last good config: hosts[1].nic: required")
        assert proc.poll() is None
        path.write_text(yaml.safe_dump(cfg(3)))
        proc.send_signal(signal.SIGHUP)
        wait_log(log, "config reloaded: 3 hosts, policy grouper")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_reload_keeps_links_unless_their_channel_options_change():
    import asyncio

    from grouper.common.cluster_config import parse_cluster_config
    from grouper.coordinator.loop import Coordinator

    async def run() -> tuple[bool, bool, bool]:
        coord = Coordinator(parse_cluster_config(cfg(2)))
        try:
            first = dict(coord.links)
            coord.reload(parse_cluster_config(cfg(2)))
            same = all(coord.links[h] is first[h] for h in first)
            slower = cfg(2)
            slower["scheduling"]["period"] = 2.0  # reconnect backoff is capped at a period
            coord.reload(parse_cluster_config(slower))
            redialed = all(coord.links[h] is not first[h] for h in first)
            coord.reload(parse_cluster_config(cfg(1)))
            return same, redialed, set(coord.links) == {"h0"}
        finally:
            await coord.close()

    assert asyncio.run(run()) == (True, True, True)
