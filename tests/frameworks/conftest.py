"""Framework tests: real training code we did not write (PyTorch DDP over Gloo, Optuna)
under real agents and a real coordinator, in namespaces. Root, torch and optuna."""

from __future__ import annotations

import importlib.util
import os

from tests.layers import skip_layer


def pytest_collection_modifyitems(config, items):
    missing = [m for m in ("torch", "optuna") if importlib.util.find_spec(m) is None]
    reason = None
    if os.geteuid() != 0:
        reason = "framework tests need root (network namespaces, qdiscs, nftables)"
    elif missing:
        reason = f"framework tests need {', '.join(missing)} (make setup installs them)"
    skip_layer(items, "frameworks", reason)
