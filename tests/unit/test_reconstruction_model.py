"""The reconstruction model: v1/v2 JSON round trips and rejection of malformed answers."""

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core.constants import MAX_CHUNK_SIZE
from git_xet.core.errors import FormatError
from git_xet.core.reconstruction import MAX_FETCH_RANGE_BYTES, FetchRange, Reconstruction, Term

XORB_A = "a" * 64
XORB_B = "b" * 64


def _example() -> Reconstruction:
    terms = (Term(XORB_A, 2, 5, 300_000), Term(XORB_B, 0, 1, 1000), Term(XORB_A, 5, 6, 70_000))
    fetches = (
        FetchRange(XORB_A, 2, 6, 1000, 380_999, "https://x/a?sig=1"),
        FetchRange(XORB_B, 0, 1, 0, 1007, "https://x/b?sig=2"),
    )
    return Reconstruction(123, terms, fetches).validate()


@pytest.mark.parametrize("version", [1, 2])
def test_round_trip(version: int) -> None:
    plan = _example()
    assert Reconstruction.from_json(plan.to_json(version)) == plan


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 50), st.integers(1, 10**6)), min_size=1, max_size=8), st.sampled_from([1, 2]))
def test_round_trip_property(spans, version: int) -> None:
    terms = tuple(Term(XORB_A, s, s + n, min(length, n * MAX_CHUNK_SIZE)) for s, n, length in spans)
    fetches = tuple(FetchRange(XORB_A, s, s + n, s * 10, s * 10 + n * 10, f"u{i}") for i, (s, n, _) in enumerate(spans))
    plan = Reconstruction(0, terms, fetches)
    assert Reconstruction.from_json(plan.to_json(version)) == plan


def _mutations():
    base = _example().to_json(2)
    yield "not a dict"
    yield {}
    for key in ("offset_into_first_range", "terms", "xorbs"):
        bad = copy.deepcopy(base)
        del bad[key]
        yield bad
    for value in (-1, "3", 1.5, None, True, 10**9):
        bad = copy.deepcopy(base)
        bad["offset_into_first_range"] = value
        yield bad
    bad = copy.deepcopy(base)
    bad["terms"][0]["hash"] = "../../etc/passwd"
    yield bad
    bad = copy.deepcopy(base)
    bad["terms"][0]["range"] = {"start": 5, "end": 5}
    yield bad
    bad = copy.deepcopy(base)
    bad["terms"].append({"hash": "c" * 64, "unpacked_length": 5, "range": {"start": 0, "end": 1}})
    yield bad  # a term no fetch range covers
    bad = copy.deepcopy(base)
    bad["xorbs"][XORB_A][0]["ranges"][0]["bytes"] = {"start": 10, "end": 5}
    yield bad
    bad = copy.deepcopy(base)
    bad["xorbs"][XORB_A] = {"url": "x"}
    yield bad
    # Sizes no xorb can have: a client would allocate them on the server's word.
    bad = copy.deepcopy(base)
    bad["xorbs"][XORB_A][0]["ranges"][0]["bytes"] = {"start": 0, "end": MAX_FETCH_RANGE_BYTES}
    yield bad
    bad = copy.deepcopy(base)
    bad["terms"][1]["unpacked_length"] = MAX_CHUNK_SIZE + 1  # one chunk
    yield bad


@pytest.mark.parametrize("body", list(_mutations()))
def test_malformed_answers_are_rejected(body) -> None:
    with pytest.raises(FormatError):
        Reconstruction.from_json(body)
