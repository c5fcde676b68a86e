"""The second way in: a directory of JSON-lines files the agent tails.

Each line is one event with the fields of the gRPC registry calls plus ``"event"``:
``register``, ``progress``, ``stage_finished`` or ``job_finished``. Lines are applied
once complete (ending in a newline). Reading a file again after an agent restart is
harmless: registration is idempotent and progress only moves forward.

A file's events are its owner's calls (the file's uid stands for the caller, with the
same rules as the socket's peer credentials, and no process: such a job cannot name a
cgroup unless root wrote it). The agent makes the directory sticky and writable by all
(mode 1733, as /tmp), so a user may add files but not replace or remove another's, and
it reads no file that is a symlink or that others may write (group or world write bit):
such a file could hold another user's words under its owner's name.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grouper.agent.peers import Caller
from grouper.common.errors import ConfigError

log = logging.getLogger("grouper.agent.jsonl")


class JsonlTailer:
    """``handle(event, caller)`` returns "" when the event was applied, else the error
    (naming the field); it may also raise :class:`ConfigError`."""

    def __init__(self, directory: str | Path, handle: Callable[[Any, Caller], str]) -> None:
        self.directory = Path(directory)
        self.handle = handle
        self.made = False  # the directory is the agent's: made here at start
        self.offsets: dict[Path, int] = {}
        self.lines: dict[Path, int] = {}
        self.errors: list[str] = []

    def prepare(self) -> None:
        """The directory, if missing, made sticky and writable by every user (1733)."""
        if not self.directory.exists():
            self.directory.mkdir(parents=True)
            os.chmod(self.directory, 0o1733)
            self.made = True

    def poll(self) -> int:
        """Apply every complete new line; returns how many events were applied."""
        if not self.directory.is_dir():
            return 0
        applied = 0
        for path in sorted(self.directory.glob("*.jsonl")):
            try:
                owner, data = self._read(path)
            except OSError as exc:
                log.warning("%s: cannot read: %s", path, exc)
                continue
            if owner is None:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + end + 1
            for raw in data[: end + 1].splitlines():
                self.lines[path] = self.lines.get(path, 0) + 1
                where = f"{path.name}:{self.lines[path]}"
                if not raw.strip():
                    continue
                try:
                    error = self.handle(json.loads(raw), owner)
                except json.JSONDecodeError as exc:
                    self._error(where, f"not JSON: {exc.msg}")
                    continue
                except ConfigError as exc:
                    self._error(where, str(exc))
                    continue
                if error:
                    self._error(where, error)
                else:
                    applied += 1
        return applied

    def _read(self, path: Path) -> tuple[Caller | None, bytes]:
        """The file's owner as the caller, and its bytes past what was read; no caller
        for a file others may write (logged once)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            return self._ignored(path), b""  # a symlink
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022:
                return self._ignored(path), b""
            fh.seek(self.offsets.get(path, 0))
            return Caller(st.st_uid, st.st_gid, 0), fh.read()

    def _ignored(self, path: Path) -> None:
        if path not in self.offsets:  # said once
            self._error(path.name, "ignored: not a regular file only its owner writes")
            self.offsets[path] = 0

    def _error(self, where: str, message: str) -> None:
        text = f"{where}: {message}"
        self.errors.append(text)
        del self.errors[:-100]
        log.warning("refused event %s", text)
