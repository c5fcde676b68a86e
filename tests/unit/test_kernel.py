"""The simulator's one compile decorator (``simulator/kernel.py``)."""

from __future__ import annotations

import math

from grouper.simulator.kernel import kernel

# not cached: a disk cache keyed by the source alone could hand back a function compiled
# under other options


@kernel(cache=False)
def _ratio(a: float, b: float) -> float:
    return a / b


@kernel(inline="always", cache=False)
def _twice(x: float) -> float:
    return 2.0 * x


@kernel(cache=False)
def _uses_inline(x: float) -> float:
    return _twice(x) + 1.0


def test_a_division_by_zero_gives_what_numpy_gives_instead_of_raising() -> None:
    """numpy's error model: no zero test around divisions (the point of the module)."""
    assert _ratio(1.0, 0.0) == math.inf
    assert math.isnan(_ratio(0.0, 0.0))
    assert _ratio(3.0, 2.0) == 1.5


def test_options_pass_through_to_numba() -> None:
    assert _uses_inline(2.0) == 5.0
    assert _ratio.targetoptions["error_model"] == "numpy"


def test_kernels_are_cached_on_disk() -> None:
    @kernel
    def one() -> int:
        return 1

    assert one._cache.__class__.__name__ != "NullCache"
