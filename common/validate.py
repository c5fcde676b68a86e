"""Small helpers to read untrusted mappings with path-qualified errors.

Every reader takes the mapping, the key and the path of the mapping; it returns the
value converted to the wanted type or raises :class:`ConfigError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from common.errors import ConfigError, short

_MISSING = object()


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def mapping(value: Any, path: str, allowed: Iterable[str] | None = None) -> Mapping[str, Any]:
    """Check that ``value`` is a mapping; with ``allowed``, reject unknown keys."""
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    if allowed is not None:
        allowed = set(allowed)
        for key in value:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise ConfigError(join(path, str(key)), f"unknown key (known: {known})")
    return value


def sequence(value: Any, path: str, *, min_len: int = 0) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"expected a list, got {type(value).__name__}")
    if len(value) < min_len:
        raise ConfigError(path, f"needs at least {min_len} item(s), got {len(value)}")
    return list(value)


def get(m: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    if key in m:
        return m[key]
    if default is _MISSING:
        raise ConfigError(join(path, key), "required")
    return default


def string(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(path, f"expected a string, got {type(value).__name__}")
    text = str(value)
    if not text:
        raise ConfigError(path, "must not be empty")
    return text


_LABEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,79}")


def label(value: Any, path: str) -> str:
    """A name that becomes one path component of an output folder: letters, digits,
    ``.``, ``_`` and ``-``, not starting with ``.``, at most 80 characters (so never
    ``..``, ``/`` or an absolute path)."""
    text = string(value, path)
    if not _LABEL.fullmatch(text):
        raise ConfigError(
            path,
            f"{short(text)} is not a plain name (letters, digits, '.', '_', '-'; "
            "not starting with '.'; at most 80 characters)",
        )
    return text


_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")


def hostname(value: Any, path: str) -> str:
    """A valid host name (RFC 1123: dot-separated labels of letters, digits and inner
    hyphens, 63 characters each, 253 in all): it names a host in flow ids, in
    certificates and on the command line."""
    text = string(value, path)
    if len(text) > 253 or not _HOSTNAME.fullmatch(text):
        raise ConfigError(
            path,
            f"{short(text)} is not a valid host name (letters, digits, inner '-', "
            "dot-separated labels)",
        )
    return text


def label_from_path(spec: str) -> str:
    """A plain name derived from a file path (its stem, other characters as ``_``)."""
    from pathlib import PurePath

    stem = re.sub(r"[^A-Za-z0-9._-]", "_", PurePath(spec).stem).lstrip(".")[:80]
    return stem or "workload"


def number(value: Any, path: str, *, minimum: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        # YAML 1.1 reads "1e9" as a string; accept numeric strings explicitly.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(path, f"expected a number, got {short(value)}") from None
        else:
            raise ConfigError(path, f"expected a number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x):
        raise ConfigError(path, f"must be finite, got {short(value)}")
    if positive and x <= 0:
        raise ConfigError(path, f"must be positive, got {short(value)}")
    if minimum is not None and x < minimum:
        raise ConfigError(path, f"must be at least {minimum:g}, got {short(value)}")
    return x


def integer(value: Any, path: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(path, f"expected an integer, got {short(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(path, f"must be at least {minimum}, got {value}")
    return int(value)


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false, got {short(value)}")
    return value


def choice(value: Any, path: str, options: Iterable[str]) -> str:
    options = list(options)
    text = string(value, path)
    if text not in options:
        raise ConfigError(path, f"must be one of {', '.join(options)}; got {short(text)}")
    return text


def address(value: Any, path: str, *, zero_port_off: bool = False) -> str:
    """HOST:PORT or unix:PATH; with ``zero_port_off``, port 0 means "off"."""
    text = string(value, path)
    if text.startswith("unix:"):
        return text
    host, sep, port = text.rpartition(":")
    lowest = 0 if zero_port_off else 1
    if not sep or not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ConfigError(path, f"expected HOST:PORT or unix:PATH, got {short(text)}")
    return text
