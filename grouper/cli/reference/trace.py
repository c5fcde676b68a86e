"""What a schema reader checks, recorded while it reads a document.

The cluster config and the workload format are read by plain functions that call the
readers of :mod:`grouper.common.validate` through the module (``v.number(...)``). For
the length of :func:`trace`, those readers are wrapped: every call notes the field's
path, the reader (its type), its bounds (``minimum``, ``maximum``, ``positive``, the
options of a choice) and the value it was given, and every ``v.mapping`` notes the keys
it accepts. Reading a document that leaves the optional keys out thus shows their
defaults; the generated reference and its completeness test are built on this, so
neither can drift from the code that really reads the files.

Paths are normalised: ``hosts[3].nic`` is noted as ``hosts[].nic``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from grouper.common import validate as v

READERS = ("mapping", "sequence", "get", "string", "label", "hostname", "number", "integer",
           "period", "boolean", "choice", "address", "interface_name")  # fmt: skip
BOUND_ARGS = ("minimum", "maximum", "positive", "min_len", "options", "zero_port_off", "connect")


def normalise(path: str) -> str:
    """``cojobs[0].jobs[12].id`` -> ``cojobs[].jobs[].id``."""
    return re.sub(r"\[\d+\]", "[]", path)


@dataclass
class Field:
    """One field as its reader saw it."""

    path: str
    kind: str = ""  # the reader: number, integer, string, choice, mapping, sequence, ...
    bounds: dict[str, Any] = field(default_factory=dict)
    value: Any = None  # the value read (the default, where the document left it out)
    required: bool = False  # read with v.get and no default
    default: Any = None  # the default v.get was given, if any
    items: Field | None = None  # a list's element reader
    given: bool = True  # the document had the key (False: ``value`` is the default)
    raw: str = ""  # the path as read, list indexes kept


@dataclass
class Trace:
    fields: dict[str, Field] = field(default_factory=dict)
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # mapping -> its keys
    _depth: int = 0

    def field(self, path: str) -> Field:
        return self.fields.setdefault(path, Field(path))

    def keys(self) -> set[str]:
        """Every key some mapping accepts, as a normalised dotted path."""
        return {normalise(v.join(p, k)) for p, ks in self.allowed.items() for k in ks}


def _note(t: Trace, name: str, args: tuple, kw: dict[str, Any]) -> None:
    if name == "get":
        m, key, path = args[:3]
        f = t.field(normalise(v.join(path, key)))
        if len(args) > 3 or "default" in kw:
            f.default = args[3] if len(args) > 3 else kw["default"]
        else:
            f.required = True
        return
    value, raw = args[:2]
    path = normalise(raw)
    if name == "mapping":
        allowed = args[2] if len(args) > 2 else kw.get("allowed")
        if allowed is not None:
            t.allowed[path] = tuple(allowed)
    f = t.field(path)
    f.kind, f.value, f.raw = name, value, raw
    bounds = dict(kw)
    if name == "choice":
        bounds["options"] = tuple(args[2] if len(args) > 2 else kw["options"])
    f.bounds = {
        k: b for k, b in bounds.items() if k in BOUND_ARGS and b is not None and b is not False
    }
    if path.endswith("[]"):
        t.field(path[:-2]).items = f


def _wrap(t: Trace, name: str, reader: Callable) -> Callable:
    @functools.wraps(reader)
    def traced(*args: Any, **kw: Any) -> Any:
        if t._depth == 0:  # a reader calling another (choice -> string) is one field
            _note(t, name, args, kw)
        t._depth += 1
        try:
            return reader(*args, **kw)
        finally:
            t._depth -= 1

    return traced


@contextmanager
def trace() -> Iterator[Trace]:
    """Record every reader call made inside the ``with`` block (not thread-safe: the
    readers are patched for the whole process meanwhile)."""
    t = Trace()
    saved = {name: getattr(v, name) for name in READERS}
    try:
        for name, reader in saved.items():
            setattr(v, name, _wrap(t, name, reader))
        yield t
    finally:
        for name, reader in saved.items():
            setattr(v, name, reader)


def _given(doc: Any, raw: str) -> bool:
    """Whether ``doc`` has the field at ``raw`` (``hosts[0].nic``)."""
    node = doc
    for part in re.findall(r"[^.\[\]]+", raw):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False
    return True


def read(reader: Callable[[Any], Any], *docs: Any) -> Trace:
    """One trace of ``reader`` over every document in turn (each must be valid). A field
    is kept as first read, unless a later document leaves it out: that reading shows
    its default."""
    merged = Trace()
    for doc in docs:
        with trace() as t:
            reader(doc)
        for path, f in t.fields.items():
            f.given = _given(doc, f.raw)
            old = merged.fields.get(path)
            if old is None or old.given and not f.given:
                merged.fields[path] = f
        for path, keys in t.allowed.items():
            merged.allowed.setdefault(path, keys)
    for path, f in merged.fields.items():  # a list read empty first, its items later
        if path.endswith("[]") and path[:-2] in merged.fields:
            merged.fields[path[:-2]].items = f
    return merged
