"""`git xet repo quota REPO BYTES`: the sizes it takes (bytes, K/M/G/T as powers of 1024 with an
optional B or iB, `none`) and the ones it refuses with what to give instead."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.commands.store_admin import parse_bytes

UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


@given(st.integers(0, 10**12), st.sampled_from(sorted(UNITS)), st.sampled_from(["", "B", "iB"]), st.booleans())
def test_a_size_with_any_unit_spelling(number: int, unit: str, suffix: str, lower: bool) -> None:
    text = f"{number}{unit}{suffix if unit else suffix.removeprefix('i')}"
    assert parse_bytes(text.lower() if lower else text) == number * 1024 ** UNITS[unit]


@pytest.mark.parametrize("text", ["none", "NONE", " None "])
def test_none_removes_the_quota(text: str) -> None:
    assert parse_bytes(text) is None


@pytest.mark.parametrize("text", ["", "G", "-5", "1.5G", "5X", "5 G", "ten", "5GG"])
def test_anything_else_is_refused_saying_what_to_give(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="give bytes"):
        parse_bytes(text)
