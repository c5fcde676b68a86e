"""Small helpers to read untrusted mappings with path-qualified errors.

Every reader takes the mapping, the key and the path of the mapping; it returns the
value converted to the wanted type or raises :class:`ConfigError`.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from grouper.common.errors import ConfigError, short
from grouper.common.limits import IFNAMSIZ, MAX_PERIOD, MIN_PERIOD

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


def ascii_int(text: str) -> int | None:
    """``text`` as an integer when it is ASCII digits (an optional sign first), else
    None: ``int()`` also takes Arabic-Indic and other Unicode digits, and ``isdigit()``
    superscripts, which no kernel, socket or YAML reader shares."""
    body = text.strip()
    digits = body[1:] if body[:1] in "+-" else body
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 4300:
        return None
    return int(body)


def _bounds(x: float, value: Any, path: str, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and x < minimum:
        raise ConfigError(path, f"must be at least {minimum:g}, got {short(value)}")
    if maximum is not None and x > maximum:
        raise ConfigError(path, f"must be at most {maximum:g}, got {short(value)}")


def number(
    value: Any,
    path: str,
    *,
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        # YAML 1.1 reads "1e9" as a string; accept numeric strings explicitly.
        if isinstance(value, str) and value.strip().isascii():
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(path, f"expected a number, got {short(value)}") from None
        elif isinstance(value, str):
            raise ConfigError(path, f"expected a number in ASCII digits, got {short(value)}")
        else:
            raise ConfigError(path, f"expected a number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:
        limit = f"at most {maximum:g}" if maximum is not None else "a float"
        raise ConfigError(path, f"too large ({limit}), got {short(value)}") from None
    if not math.isfinite(x):
        raise ConfigError(path, f"must be finite, got {short(value)}")
    if positive and x <= 0:
        raise ConfigError(path, f"must be positive, got {short(value)}")
    _bounds(x, value, path, minimum, maximum)
    return x


def integer(
    value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(path, f"expected an integer, got {short(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(path, f"must be at least {minimum}, got {short(value)}")
    if maximum is not None and value > maximum:
        raise ConfigError(path, f"must be at most {maximum}, got {short(value)}")
    return int(value)


def period(value: Any, path: str) -> float:
    """A simulated scheduling period: 0 (every event) or MIN_PERIOD to MAX_PERIOD; a
    shorter one makes a simulation of millions of scheduling rounds."""
    x = number(value, path, minimum=0, maximum=MAX_PERIOD)
    if 0 < x < MIN_PERIOD:
        raise ConfigError(path, f"must be 0 (every event) or at least {MIN_PERIOD:g}, got {x:g}")
    return x


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


def port_number(text: str, path: str, *, lowest: int = 1) -> int:
    """A TCP port in ASCII digits, ``lowest`` to 65535."""
    port = ascii_int(text) if text[:1] not in "+-" else None
    if port is None or not lowest <= port <= 65535:
        raise ConfigError(
            path,
            f"expected HOST:PORT, PORT {lowest} to 65535 in ASCII digits; got {short(text)}",
        )
    return port


def address(value: Any, path: str, *, zero_port_off: bool = False, connect: bool = False) -> str:
    """HOST:PORT ([V6]:PORT) or unix:PATH; with ``zero_port_off``, port 0 means "off".
    HOST is a host name or an IP address; with ``connect`` (an address others dial),
    not an all-zero, broadcast or multicast one."""
    text = string(value, path)
    if text.startswith("unix:"):
        if len(text) == 5 or "\0" in text:
            raise ConfigError(path, f"expected unix:PATH, got {short(text)}")
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(path, f"expected HOST:PORT or unix:PATH, got {short(text)}")
    port_number(port, path, lowest=0 if zero_port_off else 1)
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        ip = None
    if ip is None:
        if bracketed or len(host) > 253 or not _HOSTNAME.fullmatch(host):
            raise ConfigError(
                path, f"{short(host)} is not a host name or IP address (HOST:PORT, [V6]:PORT)"
            )
        return text
    if ip.version == 6 and not bracketed:
        raise ConfigError(path, f"write an IPv6 address in brackets: [{host[:40]}]:{port}")
    if connect:
        unusable(ip, path)
    return text


def unusable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, path: str) -> None:
    """Refuse an address no host can have: all-zero, broadcast, multicast, reserved."""
    kind = (
        "the all-zero" if ip.is_unspecified
        else "the broadcast" if ip == ipaddress.IPv4Address("255.255.255.255")
        else "a multicast" if ip.is_multicast
        else "a reserved" if ip.version == 4 and ip.is_reserved
        else ""
    )  # fmt: skip
    if kind:
        raise ConfigError(path, f"{ip} is {kind} address, not a host's")


_NIC_BAD = re.compile(r"[\s/:'\"`$;&|<>(){}\[\]*?!\\#~%,=]")


def interface_name(value: Any, path: str) -> str:
    """A network interface name the kernel accepts (at most 15 bytes, no '/', ':' or
    white space, not '.' or '..'), without shell metacharacters either."""
    text = string(value, path)
    if (
        len(text.encode()) >= IFNAMSIZ
        or text in (".", "..")
        or not text.isascii()
        or not text.isprintable()
        or _NIC_BAD.search(text)
    ):
        raise ConfigError(
            path,
            f"{short(text)} is not an interface name (at most {IFNAMSIZ - 1} ASCII "
            "letters, digits, '.', '-', '_', '@')",
        )
    return text
