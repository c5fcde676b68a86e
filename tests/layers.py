"""Skipping a root-only test layer, the same way for every layer.

Without root (or a tool the layer needs) its tests skip with the reason; in CI
(``GROUPER_REQUIRE_ROOT_TESTS`` set) that is an error instead: a skipped kernel,
emulation or framework test there is a failure to investigate, not a pass.
"""

from __future__ import annotations

import os

import pytest


def skip_layer(items: list, layer: str, reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get("GROUPER_REQUIRE_ROOT_TESTS"):
        raise pytest.UsageError(f"{reason}, and GROUPER_REQUIRE_ROOT_TESTS is set")
    for item in items:
        if f"tests/{layer}" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))
