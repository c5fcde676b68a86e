"""The configuration and workload-format references: every key a YAML reader accepts,
in the reader's order, with the type, default and bounds its reader calls show
(:mod:`grouper.cli.reference.trace`) and the meaning written beside the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from grouper.cli.reference import trace as schema_trace
from grouper.cli.reference.trace import Field, Trace
from grouper.common import config_keys
from grouper.common.cluster_config import parse_cluster_config
from grouper.common.config_keys import Doc
from grouper.workloads import keys as workload_keys
from grouper.workloads.schema import parse_workload

KINDS = {"mapping": "mapping", "sequence": "list", "string": "string", "label": "name",
         "hostname": "host name", "number": "number", "integer": "integer",
         "period": "number", "boolean": "boolean", "choice": "string",
         "address": "address", "interface_name": "interface name"}  # fmt: skip

ANCHOR_RULE = (
    "Every key is a heading whose anchor is its dotted path with list brackets dropped: "
    "`{example}` is `#{anchor}`."
)


def cluster_trace() -> Trace:
    return schema_trace.read(parse_cluster_config, *config_keys.SAMPLES)


def workload_trace() -> Trace:
    return schema_trace.read(parse_workload, *workload_keys.SAMPLES)


def anchor(key: str) -> str:
    """``hosts[].link_mbps`` -> ``hosts.link_mbps``."""
    return key.replace("[]", "")


def walk(t: Trace, path: str = "") -> Iterator[str]:
    """Every accepted key under the mapping at ``path``, depth first, in the reader's
    order (a list of mappings ``x`` goes on with ``x[]``'s keys)."""
    for key in t.allowed.get(path, ()):
        full = schema_trace.normalise(f"{path}.{key}" if path else key)
        yield full
        for inner in (full, f"{full}[]"):
            if inner in t.allowed:
                yield from walk(t, inner)


def num(x: float) -> str:
    """``1e+07`` -> ``1e7``, ``3e-10`` as it is, ``10000.0`` -> ``10000``."""
    return f"{x:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _value(x: Any) -> str:
    if isinstance(x, float):
        return f"`{num(x)}`"
    if isinstance(x, list | tuple | dict):
        flow = yaml.safe_dump(x, default_flow_style=True, width=1000).strip()
        return f"`{flow}`"
    if isinstance(x, str):
        return f'`"{x}"`' if x == "" else f"`{x}`"
    return f"`{str(x).lower() if isinstance(x, bool) else x}`"


def bounds_of(f: Field | None) -> list[str]:
    if f is None:
        return []
    b, out = f.bounds, []
    if "options" in b:
        out.append("one of " + ", ".join(f"`{o}`" for o in b["options"]))
    if b.get("positive"):
        out.append("greater than 0")
    if "minimum" in b:
        out.append(f"at least {num(b['minimum'])}")
    if "maximum" in b:
        out.append(f"at most {num(b['maximum'])}")
    if "min_len" in b:
        out.append(f"at least {b['min_len']} item(s)")
    if b.get("zero_port_off"):
        out.append("port 0: off")
    if b.get("connect"):
        out.append("an address others can dial (not all-zero, broadcast or multicast)")
    if f.items is not None and f.items.kind not in ("mapping", ""):
        inner = bounds_of(f.items)
        if inner:
            out.append("each " + ", ".join(inner))
    return out


def kind_of(f: Field | None, doc: Doc) -> str:
    if doc.kind or f is None:
        return doc.kind or "?"
    kind = KINDS.get(f.kind, f.kind)
    if f.kind == "sequence" and f.items is not None:
        inner = "mappings" if f.items.kind == "mapping" else KINDS.get(f.items.kind, "")
        return f"list of {inner}s" if inner and not inner.endswith("s") else f"list of {inner}"
    return kind


def default_of(f: Field | None, doc: Doc) -> str:
    if doc.default:
        return doc.default
    if f is None:
        return ""
    if f.default is not None:
        return _value(f.default)
    if not f.given and f.kind != "mapping":
        return _value(f.value)
    return ""


def entry(key: str, f: Field | None, doc: Doc, same_as: str = "") -> list[str]:
    """One key: its heading, a line of facts, its meaning."""
    depth = key.count(".")
    level = "#" * min(2 + depth, 4)
    facts = [f"**Type** {kind_of(f, doc)}"]
    default = default_of(f, doc)
    if f is not None and f.required and not doc.default:
        facts.append("**Required**")
    elif default:
        facts.append(f"**Default** {default}")
    bounds = bounds_of(f) + ([doc.bounds] if doc.bounds else [])
    if bounds:
        facts.append("**Bounds** " + "; ".join(bounds))
    meaning = doc.meaning
    if same_as:
        meaning += f" Its keys: [`{same_as}`](config.md#{anchor(same_as)})."
    return [f"{level} `{key}` {{#{anchor(key)}}}", "", " · ".join(facts), "", meaning, ""]


def page(title: str, intro: str, t: Trace, docs: dict[str, Doc], same_as: dict) -> str:
    lines = [f"# {title}", "", intro, ""]
    for key in walk(t):
        if any(key.startswith(f"{p}.") for p in same_as):
            continue
        lines += entry(key, t.fields.get(key), docs[key], same_as.get(key, ""))
    return "\n".join(lines)


def config_page() -> str:
    intro = (
        "One YAML file describes a cluster; the coordinator, every agent and the "
        "experiment tools read the same file, and `grouper check-config FILE` checks it. "
        "Unknown keys are errors, and every error names the field "
        "(`hosts[3].nic: required`). Types, defaults and bounds on this page are read "
        "from the parser itself (`common/cluster_config.py`); the meanings are in "
        "`common/config_keys.py`.\n\n"
        + ANCHOR_RULE.format(example="hosts[].link_mbps", anchor="hosts.link_mbps")
    )
    return page("Cluster configuration", intro, cluster_trace(), config_keys.KEYS, {})


def workload_page() -> str:
    intro = (
        "A workload is a YAML file or a builtin (`builtin:NAME`) that `grouper order`, "
        "`grouper simulate` and `grouper emulate` take with `--workload`. Unknown keys "
        "are errors, and every error names the field (`cojobs[0].jobs[1].workers: a ring "
        "needs at least 2 host(s), got 1`). Types, defaults and bounds on this page are "
        "read from the parser itself (`workloads/schema.py`); the meanings are in "
        "`workloads/keys.py`. Times are in the file's `time_unit`.\n\n"
        + ANCHOR_RULE.format(example="cojobs[].jobs[].arch", anchor="cojobs.jobs.arch")
    )
    t = workload_trace()
    return page("Workload format", intro, t, workload_keys.KEYS, workload_keys.SAME_AS)
