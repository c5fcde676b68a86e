#!/usr/bin/env python3
"""Validate ``grouper switch-config --os sonic`` output against SONiC's YANG models.

Not run in CI (it needs libyang's ``yanglint`` and a checkout of SONiC's models, neither
of which is a project dependency); docs/how-to/switches.md says how it was run. It turns the
config_db tables into YANG instance data (RFC 7951 JSON, the shape SONiC's own
sonic-yang-mgmt translation gives them), adds the PORT rows the leafrefs point at, and
runs yanglint with the models that define the tables:

    python3 scripts/validate-sonic-yang.py CONFIG_DB.json MODELS_DIR

MODELS_DIR is sonic-buildimage's src/sonic-yang-models/yang-models with the
yang-templates/*.j2 rendered into it (yang_model_type="py"). Exit status: yanglint's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MODULES = (
    "sonic-device_metadata",
    "sonic-port",
    "sonic-dscp-tc-map",
    "sonic-tc-queue-map",
    "sonic-scheduler",
    "sonic-queue",
    "sonic-port-qos-map",
)


def _list(module: str, table: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {f"{module}:{module}": {table: {f"{table}_LIST": rows}}}


def _maps(db: dict[str, Any], table: str, key: str, value: str, num: tuple[str, ...]) -> list:
    def typed(leaf: str, text: str) -> Any:
        return int(text) if leaf in num else text

    return [
        {
            "name": name,
            table: [{key: typed(key, k), value: typed(value, v)} for k, v in entries.items()],
        }
        for name, entries in db.get(table, {}).items()
    ]


def instance(db: dict[str, Any]) -> dict[str, Any]:
    ports = sorted(db.get("PORT_QOS_MAP", {}))
    out: dict[str, Any] = {}
    out.update(
        _list(
            "sonic-port",
            "PORT",
            [{"name": p, "lanes": str(i), "speed": 100000} for i, p in enumerate(ports)],
        )
    )
    out.update(
        _list(
            "sonic-dscp-tc-map",
            "DSCP_TO_TC_MAP",
            _maps(db, "DSCP_TO_TC_MAP", "dscp", "tc", ("tc",)),
        )
    )
    out.update(
        _list(
            "sonic-tc-queue-map",
            "TC_TO_QUEUE_MAP",
            _maps(db, "TC_TO_QUEUE_MAP", "tc", "qindex", ("tc",)),
        )
    )
    out.update(
        _list(
            "sonic-scheduler",
            "SCHEDULER",
            [{"name": n, **fields} for n, fields in db.get("SCHEDULER", {}).items()],
        )
    )
    queues = []
    for key, fields in db.get("QUEUE", {}).items():
        ifname, qindex = key.split("|")
        queues.append({"ifname": ifname, "qindex": qindex, **fields})
    out.update(_list("sonic-queue", "QUEUE", queues))
    qos = [{"ifname": p, **fields} for p, fields in db.get("PORT_QOS_MAP", {}).items()]
    out.update(_list("sonic-port-qos-map", "PORT_QOS_MAP", qos))
    return out


def main(argv: list[str]) -> int:
    db = json.loads(Path(argv[1]).read_text())
    models = Path(argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "instance.json"
        data.write_text(json.dumps(instance(db), indent=1))
        cmd = ["yanglint", "-p", str(models), "-t", "config"]
        cmd += [str(models / f"{m}.yang") for m in MODULES] + [str(data)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stderr.write(result.stderr)
    print(f"yanglint exit {result.returncode}; {len(db.get('QUEUE', {}))} QUEUE rows checked")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
