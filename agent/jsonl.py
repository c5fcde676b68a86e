"""The second way in: a directory of JSON-lines files the agent tails.

Each line is one event with the fields of the gRPC registry calls plus ``"event"``:
``register``, ``progress``, ``stage_finished`` or ``job_finished``. Lines are applied
once complete (ending in a newline). Reading a file again after an agent restart is
harmless: registration is idempotent and progress only moves forward.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grouper.common.errors import ConfigError

log = logging.getLogger("grouper.agent.jsonl")


class JsonlTailer:
    """``handle(event)`` returns "" when the event was applied, else the error (naming
    the field); it may also raise :class:`ConfigError`."""

    def __init__(self, directory: str | Path, handle: Callable[[Any], str]) -> None:
        self.directory = Path(directory)
        self.handle = handle
        self.offsets: dict[Path, int] = {}
        self.lines: dict[Path, int] = {}
        self.errors: list[str] = []

    def poll(self) -> int:
        """Apply every complete new line; returns how many events were applied."""
        if not self.directory.is_dir():
            return 0
        applied = 0
        for path in sorted(self.directory.glob("*.jsonl")):
            try:
                with path.open("rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except OSError as exc:
                log.warning("%s: cannot read: %s", path, exc)
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
                    error = self.handle(json.loads(raw))
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

    def _error(self, where: str, message: str) -> None:
        text = f"{where}: {message}"
        self.errors.append(text)
        del self.errors[:-100]
        log.warning("refused event %s", text)
