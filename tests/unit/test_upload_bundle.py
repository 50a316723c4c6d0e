"""The upload bundle's layout: what pack_bundle writes parse_bundle reads back exactly, and any
other body is a FormatError (never another exception, never a read past the body)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core.errors import FormatError
from git_xet.core.upload_bundle import MAX_BUNDLE_XORBS, pack_bundle, parse_bundle

xorb_lists = st.lists(st.tuples(st.binary(min_size=32, max_size=32), st.binary(min_size=1, max_size=300)), max_size=MAX_BUNDLE_XORBS)


@given(xorb_lists, st.binary(min_size=1, max_size=500))
def test_what_is_packed_parses_back(xorbs: list[tuple[bytes, bytes]], shard: bytes) -> None:
    body = pack_bundle(xorbs, shard)
    # The layout, restated: count, (hash, length) per xorb, the bodies, then the shard.
    expected = struct.pack("<I", len(xorbs)) + b"".join(h + struct.pack("<I", len(b)) for h, b in xorbs) + b"".join(b for _, b in xorbs) + shard
    assert body == expected
    parsed, parsed_shard = parse_bundle(body)
    assert [(h, bytes(b)) for h, b in parsed] == xorbs
    assert bytes(parsed_shard) == shard


@given(xorb_lists, st.binary(min_size=1, max_size=100), st.data())
def test_a_cut_body_is_refused(xorbs: list[tuple[bytes, bytes]], shard: bytes, data: st.DataObject) -> None:
    body = pack_bundle(xorbs, shard)
    cut = data.draw(st.integers(0, len(body) - len(shard) - 1))  # anywhere before the shard begins
    with pytest.raises(FormatError):
        parse_bundle(body[:cut])


@given(st.binary(max_size=400))
def test_any_bytes_parse_or_raise_format_error(body: bytes) -> None:
    try:
        xorbs, shard = parse_bundle(body)
    except FormatError:
        return
    assert len(xorbs) <= MAX_BUNDLE_XORBS and len(shard) > 0
    assert 4 + 36 * len(xorbs) + sum(len(b) for _, b in xorbs) + len(shard) == len(body)


def test_limits() -> None:
    with pytest.raises(FormatError, match="at most"):
        parse_bundle(struct.pack("<I", MAX_BUNDLE_XORBS + 1) + bytes(36 * (MAX_BUNDLE_XORBS + 1)) + b"shard")
    with pytest.raises(FormatError, match="empty"):
        parse_bundle(struct.pack("<I", 1) + bytes(32) + struct.pack("<I", 0) + b"shard")
    with pytest.raises(FormatError, match="no shard"):
        parse_bundle(pack_bundle([(bytes(32), b"xorb")], b""))
    with pytest.raises(ValueError):
        pack_bundle([(bytes(32), b"x")] * (MAX_BUNDLE_XORBS + 1), b"shard")
