"""Reading YAML input safely: every problem is one :class:`ConfigError` line.

Refused, with the line named where there is one: files over ``MAX_BYTES``, anything
that is not a regular file (a directory, a FIFO that would block), text that is not
UTF-8, duplicate keys (the last one would silently win), anchors and aliases (an alias
bomb expands to gigabytes in whatever walks the data), tags other than YAML's plain
types, nesting deeper than ``MAX_DEPTH``, and YAML syntax errors.
The C parser is used where PyYAML has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from common.errors import ConfigError

MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64  # nesting levels; our formats need fewer than ten
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    pass


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


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_text(path: str | Path, what: str) -> str:
    p = Path(path)
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


def parse_yaml(text: str, what: str) -> Any:
    if len(text) > MAX_BYTES:
        raise ConfigError(what, f"larger than {MAX_BYTES >> 20} MiB")
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise ConfigError(
                        f"{what}: line {line}", f"nested deeper than {MAX_DEPTH} levels"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ConfigError(f"{what}: line {line}", "anchors and aliases are not supported")
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


def load_yaml_file(path: str | Path, what: str) -> Any:
    return parse_yaml(read_text(path, what), what)
