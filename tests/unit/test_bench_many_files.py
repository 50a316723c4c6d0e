"""bench/many_files.py's --as-before: the factors it names are the ones the bench knows, `all`
is every one, and an unknown one is refused with the known ones named (a typo would otherwise
silently measure the user's setup while claiming the old one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import many_files


@given(st.lists(st.sampled_from(many_files.FACTORS)), st.sampled_from([",", ", ", " ,"]))
def test_known_factors_parse_to_themselves(factors: list[str], sep: str) -> None:
    assert many_files.parse_factors(sep.join(factors)) == frozenset(factors)


def test_all_is_every_factor() -> None:
    assert many_files.parse_factors("all") == frozenset(many_files.FACTORS)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1).filter(lambda w: w not in many_files.FACTORS and w != "all"))
def test_an_unknown_factor_is_refused_naming_the_known_ones(word: str) -> None:
    with pytest.raises(ValueError, match="known: log"):
        many_files.parse_factors(f"log,{word}")
