"""The registry relay's private directory: made at start, removed at stop, and removed
by the next agent when the one that made it was killed (the kernel layer proves the
same on a real agent, tests/kernel/test_agent.py)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from grouper.agent.peers import PRIVATE_PREFIX, PeerRelay


def test_a_relay_after_a_killed_one_removes_the_directory_it_left(tmp_path):
    public = tmp_path / "registry.sock"
    dead = PeerRelay(public)
    dead.prepare()  # never closed: its agent was killed
    left = dead.private
    assert left is not None and left.is_dir()
    live = PeerRelay(public)
    live.prepare()
    assert not left.exists()
    assert live.private is not None and live.private.is_dir()
    assert Path(os.readlink(live.mark)) == live.private
    asyncio.run(live.close())
    assert not live.private.exists() and not live.mark.is_symlink()


def test_a_link_to_a_directory_not_a_relays_is_dropped_and_the_directory_kept(tmp_path):
    public = tmp_path / "registry.sock"
    named = tmp_path / f"{PRIVATE_PREFIX}x"  # the prefix, not in the temporary directory
    other = Path(tempfile.mkdtemp(prefix="someone-"))  # the temporary directory, not ours
    try:
        for target in (named, other):
            target.mkdir(exist_ok=True)
            public.with_name("registry.sock.private").symlink_to(target)
            relay = PeerRelay(public)
            relay.prepare()
            assert target.is_dir()
            assert Path(os.readlink(relay.mark)) == relay.private
            asyncio.run(relay.close())
    finally:
        other.rmdir()
