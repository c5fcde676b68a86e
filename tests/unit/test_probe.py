"""The agent's calibration probes (``agent.probe``) over real TCP on the loopback, and
the client's refusals. The path through real agents on the emulated fabric is in
``tests/emulation/test_calibrate.py``; the authorization in ``tests/kernel/test_authz.py``."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest
import yaml

from grouper.agent import probe
from grouper.agent.probe import ProbeBusy, ProbeError, Prober
from grouper.common.wire import WireError
from tests.netns import GROUPER, ROOT

LO = "127.0.0.1"


async def _run(listener: Prober, senders: list[tuple[Prober, int]], size: float, rounds: int):
    """The listener's rounds and each sender's: sender i takes the next n ports."""
    k = sum(n for _, n in senders)
    token, ports = listener.listen(k)
    calls, at = [listener.run(token, "", [], size, rounds)], 0
    for p, n in senders:
        calls.append(p.run("", LO, ports[at : at + n], size, rounds))
        at += n
    return await asyncio.gather(*calls)


def test_two_ends_run_every_round_and_close_their_sockets():
    a, b = Prober(LO), Prober(LO)
    got = asyncio.run(_run(a, [(b, 3)], 1e6, 2))
    assert [len(r) for r in got] == [2, 2]
    assert all(t > 0 for r in got for t in r)
    assert not a._listening  # the token is spent
    assert asyncio.run(_run(a, [(b, 1)], 2e5, 1))  # the host is free again


def test_several_senders_share_one_listener_as_in_the_star_pattern():
    hub, s1, s2 = Prober(LO), Prober(LO), Prober(LO)
    got = asyncio.run(_run(hub, [(s1, 2), (s2, 1)], 4e5, 1))
    assert [len(r) for r in got] == [1, 1, 1]


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda p: p.listen(0), "tasks"),
        (lambda p: p.listen(probe.MAX_TASKS + 1), "tasks"),
        (lambda p: asyncio.run(p.run("", LO, [1], float("nan"), 1)), "bytes"),
        (lambda p: asyncio.run(p.run("", LO, [1], 0.0, 1)), "bytes"),
        (lambda p: asyncio.run(p.run("", LO, [1], 2.0 * probe.MAX_BYTES, 1)), "bytes"),
        (lambda p: asyncio.run(p.run("", LO, [1], 1e3, 0)), "rounds"),
        (lambda p: asyncio.run(p.run("", LO, [1], 1e3, probe.MAX_ROUNDS + 1)), "rounds"),
        (lambda p: asyncio.run(p.run("t", LO, [1], 1e3, 1)), "token"),
        (lambda p: asyncio.run(p.run("", "", [], 1e3, 1)), "token"),
        (lambda p: asyncio.run(p.run("", LO, [], 1e3, 1)), "peer_ports"),
        (lambda p: asyncio.run(p.run("nosuch", "", [], 1e3, 1)), "token"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(call, field):
    with pytest.raises(ProbeError, match=rf"^{field}: "):
        call(Prober(LO))


def test_a_host_without_a_data_address_refuses():
    with pytest.raises(ProbeError, match="^address: "):
        Prober("").listen(1)


def test_one_probe_at_a_time_per_host():
    p = Prober(LO)
    token, _ = p.listen(1)
    with pytest.raises(ProbeBusy):
        p.listen(1)
    p.close()
    p.listen(1)  # closing frees the host
    p.close()


def test_unclaimed_listening_sockets_close_after_their_ttl(monkeypatch):
    monkeypatch.setattr(probe, "LISTEN_TTL", -1.0)
    p = Prober(LO)
    _, ports = p.listen(2)
    p.listen(1)  # the first expired: not busy
    p.close()
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((LO, port), timeout=2).close()


def test_ends_that_disagree_on_the_size_fail_rather_than_hang():
    a, b = Prober(LO), Prober(LO)
    token, ports = a.listen(1)

    async def both():
        return await asyncio.gather(
            a.run(token, "", [], 1e4, 1), b.run("", LO, ports, 2e4, 1), return_exceptions=True
        )

    got = asyncio.run(asyncio.wait_for(both(), 20))
    assert any(isinstance(r, WireError) for r in got), got


def test_calibrate_with_config_names_the_agent_that_does_not_answer(tmp_path):
    cfg = tmp_path / "cluster.yaml"
    hosts = [
        {
            "name": h,
            "address": f"10.9.0.{i}",
            "nic": "eth0",
            "link_mbps": 1000,
            "agent": f"unix:{tmp_path}/{h}.sock",
        }  # fmt: skip
        for i, h in enumerate(("a", "b"), 1)
    ]
    cfg.write_text(yaml.safe_dump({"cluster": "t", "hosts": hosts}))
    r = subprocess.run(
        [*GROUPER, "calibrate", "--config", str(cfg), "--sizes", "0.1,0.2", "--max-k", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--config: listen with k=1" in lines[0], r.stderr
    assert "UNAVAILABLE" in lines[0] and "Traceback" not in r.stderr


def test_a_sender_that_connects_to_only_some_ports_leaves_no_connection_open(monkeypatch):
    monkeypatch.setattr(probe, "ACCEPT_TIMEOUT", 1.0)
    a = Prober(LO)
    token, ports = a.listen(2)
    held = socket.create_connection((LO, ports[0]), timeout=2)  # the second never comes
    try:
        with pytest.raises(TimeoutError):
            asyncio.run(a.run(token, "", [], 1e4, 1))
        held.settimeout(2)
        assert held.recv(1) == b"", "the accepted connection was closed"
    finally:
        held.close()
    assert not a._listening
