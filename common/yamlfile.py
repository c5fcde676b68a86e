"""Reading YAML input safely: every problem is one :class:`ConfigError` line.

Refused, with the line named where there is one: files over ``MAX_BYTES``, anything
that is not a regular file (a directory, a FIFO that would block), text that is not
UTF-8, duplicate keys (the last one would silently win), anchors and aliases (an alias
bomb expands to gigabytes in whatever walks the data), tags other than YAML's plain
types, nesting deeper than ``MAX_DEPTH``, and YAML syntax errors.
The C parser is used where PyYAML has it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from grouper.common.errors import ConfigError

MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64  # nesting levels; our formats need fewer than ten


def _mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key (a list): the plain constructor refuses it
            break
        if duplicate:
            line = key_node.start_mark.line + 1
            raise ConfigError(f"line {line}", f"duplicate key {str(key)[:40]!r}")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


def _loader(base: type) -> type:
    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    return Loader


_PyLoader = _loader(yaml.SafeLoader)  # pure Python: no limits of its own
_Loader = _loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_text(path: str | Path, what: str) -> str:
    p = Path(path)
    try:
        p.stat()
    except PermissionError:  # a directory on the way is closed to us (is_file() raises)
        raise ConfigError(what, f"cannot read {str(path)[:80]}: permission denied") from None
    except OSError:
        pass  # missing, or a loop: named below
    if not p.is_file():
        kind = "a directory" if p.is_dir() else "not a regular file" if p.exists() else "missing"
        raise ConfigError(what, f"{str(path)[:80]}: {kind}")
    if p.stat().st_size > MAX_BYTES:
        raise ConfigError(what, f"{str(path)[:80]}: larger than {MAX_BYTES >> 20} MiB")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(what, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(what, f"cannot read {str(path)[:80]}: {exc.strerror}") from None


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError("", f"duplicate key {str(key)[:40]!r}")
        out[key] = value
    return out


class _NotYaml(Exception):
    pass


def _not_yaml(name: str) -> None:
    """JSON's NaN and Infinity are not YAML: such a document goes to the YAML parser,
    which reads them as strings that the fields' checks refuse, as in any file."""
    raise _NotYaml(name)


def _parse_json(text: str, what: str) -> Any:
    """A JSON document (JSON is YAML 1.2) through the C JSON parser: trace-scale
    workloads load about 100 times faster this way than through PyYAML, whose C
    parser still builds every node in Python. None when ``text`` is not JSON."""
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_constant=_not_yaml)
    except (json.JSONDecodeError, _NotYaml):
        return None  # flow-style YAML that is not JSON: the YAML parser decides
    except ConfigError as exc:
        raise ConfigError(what, exc.problem) from None
    except RecursionError:
        return None


def _shallow(data: Any) -> bool:
    """Whether parsed ``data`` nests at most MAX_DEPTH levels (walked, no recursion)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_DEPTH:
                return False
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
    return True


def parse_yaml(text: str, what: str) -> Any:
    if len(text) > MAX_BYTES:
        raise ConfigError(what, f"larger than {MAX_BYTES >> 20} MiB")
    if text.lstrip()[:1] in ("{", "["):
        data = _parse_json(text, what)
        if data is not None and (_within_depth(text) or _shallow(data)):
            return data  # else the YAML path names the line that nests too deep
    try:
        if not _plainly_safe(text):
            _check_events(text, what)
        return yaml.load(text, Loader=_Loader)
    except ConfigError as exc:
        if exc.path.startswith("line "):
            raise ConfigError(f"{what}: {exc.path}", exc.problem) from None
        raise
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        problem = (exc.problem or exc.context or "invalid").splitlines()[0][:100]
        raise ConfigError(f"{what}: line {line}", f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0][:100] if str(exc) else "invalid"
        raise ConfigError(what, f"not valid YAML: {first}") from None
    except RecursionError:
        raise ConfigError(what, "nested too deeply") from None


_FLOW_PAIR = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")
_INDENT = re.compile(r"^( *)\S", re.M)


def _plainly_safe(text: str) -> bool:
    """True when ``text`` cannot hold an anchor, an alias or nesting past MAX_DEPTH, by
    checks that run at C speed: no ``&`` or ``*`` at all, and block levels (at most one
    per column of indentation, plus one) and flow levels (rounds of removing innermost
    bracket pairs until none is left) that add up to at most MAX_DEPTH. Otherwise the
    event-by-event check decides; it makes loading about a third slower."""
    if "&" in text or "*" in text:
        return False
    return _within_depth(text, 1 + max((len(m) for m in _INDENT.findall(text)), default=0))


def _within_depth(text: str, levels: int = 0) -> bool:
    """Whether ``levels`` plus the flow nesting of ``text`` stays within MAX_DEPTH,
    found by removing innermost bracket pairs, one level per round."""
    while levels <= MAX_DEPTH:
        if "[" not in text and "{" not in text:
            return True
        text, n = _FLOW_PAIR.subn("", text)
        if n == 0:  # a bracket inside a string, or unbalanced: let the parser decide
            return False
        levels += 1
    return False


def _check_events(text: str, what: str) -> None:
    """Reject anchors, aliases and nesting past MAX_DEPTH, naming the line. libyaml
    refuses some documents on its own before our check sees their events (since
    PyYAML 6.0.4 it stops flow nesting past 1000 levels with a message of its own), so
    when it refuses, the pure-Python parser, which has no such limit, runs our check
    again: the message is ours whichever parser and version is installed."""
    try:
        _walk_events(text, what, _Loader)
    except yaml.YAMLError:
        if _Loader is not _PyLoader:
            _walk_events(text, what, _PyLoader)
        raise


def _walk_events(text: str, what: str, loader: type) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ConfigError(f"{what}: line {line}", f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else "?"
            raise ConfigError(f"{what}: line {line}", "anchors and aliases are not supported")


def load_yaml_file(path: str | Path, what: str) -> Any:
    return parse_yaml(read_text(path, what), what)
