"""Names for numba's compiled functions in ``perf`` (``simulator.perfmap``): the map holds
each function where numba put it, and ``bench simulator --perf-map`` writes one per run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from grouper.simulator.perfmap import short_name, write_perf_map

SMALL = """4 2
1 0 2 0 1 2 2:4.0 3:2.0
2 1500 1 1 2 1:8.0 3:1.0
"""

LINE = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) (\S+)$")


def _read(path: Path) -> list[tuple[int, int, str]]:
    rows = []
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        assert m, line
        rows.append((int(m[1], 16), int(m[2], 16), m[3]))
    return rows


def test_short_name_is_the_nested_name() -> None:
    mangled = "_ZN7grouper9simulator11progressive6maxminB4v117B38c8tJTIeFIE5ArrayIxLi1E"
    assert short_name(mangled) == "grouper.simulator.progressive.maxmin"
    assert short_name("NRT_incref") == "NRT_incref"
    assert short_name("_ZN3abc") == "abc"  # a name cut short is not an error


def test_map_holds_the_simulators_kernels_where_numba_put_them(tmp_path: Path) -> None:
    from grouper.simulator.fast_state import advance
    from grouper.simulator.run import run_policies
    from grouper.workloads import load_workload

    trace = tmp_path / "t.txt"
    trace.write_text(SMALL)
    run_policies(load_workload(f"coflow:{trace}"), ["grouper"], progress=False)
    rows = _read(Path(write_perf_map(str(tmp_path))))
    where = {}
    for start, size, name in rows:
        assert size > 0
        where.setdefault(name, []).append(start)
    for (a, sa, _), (b, _, _) in zip(rows, rows[1:], strict=False):
        assert a + sa <= b  # no two ranges overlap: a sample has one name
    (cres,) = advance.overloads.values()
    entry = cres.library.get_pointer_to_function(cres.fndesc.mangled_name)
    assert entry in where["grouper.simulator.fast_state.advance"]


def test_bench_perf_map_writes_one_map_per_run(tmp_path: Path) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text(SMALL)
    got = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "bench", "simulator", "--trace", str(trace),
         "--policies", "grouper", "--perf-map", "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    maps = re.findall(r"bench: perf map (\S+)", got.stderr)
    assert len(maps) == 1
    path = Path(maps[0])
    try:
        names = {name for _, _, name in _read(path)}
        assert "grouper.simulator.fast_state.advance" in names
        assert "grouper.simulator.fast_state.rebuild" in names
    finally:
        path.unlink()
