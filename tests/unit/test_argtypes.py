"""The CLI's number parsers: any text gives a value within the bounds or one
ArgumentTypeError (argparse turns it into exit 2 and one line), nothing else."""

from __future__ import annotations

import argparse
import math

from hypothesis import given
from hypothesis import strategies as st

from grouper.cli import argtypes as T

SPACE = st.sampled_from(["", " ", "\n", "\t", " \r\n"])
NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
# numbers as a shell may pass them (float() and int() accept surrounding whitespace)
TEXT = st.one_of(st.text(max_size=12), st.tuples(SPACE, NUMBER, SPACE).map("".join))


@given(TEXT, st.floats(-1e6, 1e6), st.floats(0, 1e6), st.booleans())
def test_real_gives_a_finite_number_in_its_range_or_refuses(text, lo, width, lo_open):
    hi = lo + width
    parse = T.real(lo, hi, lo_open=lo_open)
    try:
        x = parse(text)
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e)
        return
    assert math.isfinite(x) and lo <= x <= hi and not (lo_open and x == lo)


@given(TEXT, st.integers(-1000, 1000), st.integers(0, 1000))
def test_count_gives_an_integer_in_its_range_or_refuses(text, lo, width):
    parse = T.count(lo, lo + width)
    try:
        n = parse(text)
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(n, int) and lo <= n <= lo + width
