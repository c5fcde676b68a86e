"""Names for numba's compiled code in Linux ``perf``.

py-spy stops at the first compiled call, and ``perf`` shows numba's code as bare
addresses: numba's JIT registers its functions with no profiler. ``perf report`` reads
the names of a process's JIT code from ``/tmp/perf-<pid>.map`` (one line per function:
start and size in hex, then the name) when it reports, so writing that file at the end
of a run is enough. ``grouper bench simulator --perf-map`` does it for every run it
starts; see docs/how-to/simulate-trace.md for the perf commands.
"""

from __future__ import annotations

import os

MAX_SIZE = 1 << 20  # a function longer than this is the gap to the next one: capped


def short_name(mangled: str) -> str:
    """``grouper.simulator.progressive.maxmin`` for numba's mangled
    ``_ZN7grouper9simulator11progressive6maxminB4v117...E5ArrayIx...``: the nested
    name's parts, without the ABI tags and argument types (other names as they are)."""
    if not mangled.startswith("_ZN"):
        return mangled
    parts, i = [], 3
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while j < len(mangled) and mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        parts.append(mangled[j : j + n])
        i = j + n
    return ".".join(parts) or mangled


def compiled_symbols() -> list[tuple[int, str]]:
    """(address, mangled name) of every function numba's CPU JIT holds in this process,
    from the cache or compiled, by address (numba's own ``NRT_*`` helpers are in its
    extension module, which perf names by itself)."""
    from numba.core.registry import cpu_target

    engine = cpu_target.target_context.codegen()._engine
    rows = set()
    for name in list(engine._defined_symbols):
        if name.startswith((".", "_ZN08NumbaEnv")) or " " in name:
            continue  # constants and numba's environments: data, not code
        addr = engine.get_function_address(name)
        if addr:
            rows.add((addr, name))
    return sorted(rows)


def write_perf_map(directory: str = "/tmp") -> str:
    """``<directory>/perf-<pid>.map`` for this process's compiled functions; a
    function's size runs to the next one's start (perf attributes a sample to the
    function whose range holds it). Returns the path."""
    rows = compiled_symbols()
    path = os.path.join(directory, f"perf-{os.getpid()}.map")
    with open(path, "w") as f:
        for i, (addr, name) in enumerate(rows):
            size = rows[i + 1][0] - addr if i + 1 < len(rows) else MAX_SIZE
            f.write(f"{addr:x} {min(size, MAX_SIZE):x} {short_name(name)}\n")
    return path
