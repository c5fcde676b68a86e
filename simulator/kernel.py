"""How the simulator's compiled loops are compiled: one decorator for all of them.

``kernel`` is numba's ``njit`` with the disk cache on and numpy's error model: a float
division by zero gives inf or nan as numpy does instead of raising ZeroDivisionError,
so numba emits no zero test and no exception path around each division and modulo
(every division in these kernels is guarded where its divisor can be 0).
``@kernel`` compiles a function; ``@kernel(inline="always")`` passes numba's options.

A rule for the kernels: an array read off a tuple (``Classes``, ``Net``, a tuple
argument) inside a loop is reference-counted at every pass (numba's
``NRT_incref``/``NRT_decref``), so the loops read arrays taken off the tuples before
them.

numba's disk cache does not see these options (nor a change in another file): after
this file changes, ``scripts/numba_stale.py`` (``make setup``) drops the package's
caches, which are then older than it.
"""

from __future__ import annotations

from functools import partial

from numba import njit

kernel = partial(njit, cache=True, error_model="numpy")
