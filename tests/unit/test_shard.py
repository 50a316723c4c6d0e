"""Shard model: both serialized forms, ordering, flags, sha256 byte order, hostile input."""

import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import shard as sh
from git_xet.core.errors import FormatError, TruncatedError
from git_xet.core.hashes import hash_sort_key, hash_to_hex

hashes32 = st.binary(min_size=32, max_size=32)


@st.composite
def shards(draw) -> sh.Shard:
    files = []
    for _ in range(draw(st.integers(0, 4))):
        terms = tuple(
            sh.FileTerm(draw(hashes32), draw(st.integers(1, 2**31)), s, s + draw(st.integers(1, 50)))
            for s in draw(st.lists(st.integers(0, 1000), min_size=1, max_size=5))
        )
        verification = tuple(draw(hashes32) for _ in terms) if draw(st.booleans()) else None
        sha = draw(st.one_of(st.none(), hashes32))
        files.append(sh.FileInfo(draw(hashes32), terms, verification, sha))
    cas = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(1, 6))
        cas.append(
            sh.CasInfo.from_chunks(
                draw(hashes32),
                [draw(hashes32) for _ in range(n)],
                [draw(st.integers(1, 131072)) for _ in range(n)],
                draw(st.integers(0, 2**31)),
                [draw(st.sampled_from([0, sh.CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE])) for _ in range(n)],
            )
        )
    return sh.Shard(tuple(files), tuple(cas))


def _canonical(shard: sh.Shard) -> tuple:
    """Hash order, first entry per hash: duplicates collapse, as in xet-core's BTreeMap."""
    files = {f.file_hash: f for f in reversed(shard.files)}
    cas = {c.xorb_hash: c for c in reversed(shard.cas)}
    return (
        tuple(files[h] for h in sorted(files, key=hash_sort_key)),
        tuple(cas[h] for h in sorted(cas, key=hash_sort_key)),
    )


@settings(max_examples=60, deadline=None)
@given(shards())
def test_round_trip_both_forms(shard: sh.Shard) -> None:
    upload = sh.serialize_shard(shard, with_footer=False)
    assert struct.unpack_from("<Q", upload, 40)[0] == 0  # footer_size 0
    parsed = sh.parse_shard(upload)
    assert parsed.footer is None and _canonical(parsed) == _canonical(shard)
    stored = sh.serialize_shard(shard, with_footer=True, now=1_700_000_000)
    parsed = sh.parse_shard(stored)
    assert parsed.footer == sh.ShardFooter(creation_timestamp=1_700_000_000)
    assert _canonical(parsed) == _canonical(shard)
    assert sh.serialize_shard(parsed, with_footer=True) == stored


def _example() -> sh.Shard:
    data = b"example file contents"
    files = tuple(
        sh.FileInfo(bytes([i]) * 32, (sh.FileTerm(bytes([9]) * 32, 21, 0, 1),), (bytes([7]) * 32,), hashlib.sha256(data).digest())
        for i in (3, 1, 2)
    )
    return sh.Shard(files, (sh.CasInfo.from_chunks(bytes([9]) * 32, [bytes([5]) * 32], [21]),))


def test_upload_form_layout() -> None:
    blob = sh.serialize_shard(_example(), with_footer=False)
    assert blob[:32] == sh.SHARD_HEADER_TAG and blob[:14] == b"HFRepoMetaData"
    first_file = blob[48:96]
    assert first_file[:32] == bytes([1]) * 32  # sorted by hash
    assert struct.unpack_from("<I", first_file, 32)[0] == 0xC0000000
    metadata = blob[48 + 3 * 48 : 48 + 4 * 48]
    assert hash_to_hex(metadata[:32]) == hashlib.sha256(b"example file contents").hexdigest()
    # 3 files x 4 entries + bookend + CAS header + 1 chunk + bookend
    assert len(blob) == 48 + 48 * (12 + 1 + 2 + 1)


def test_keyed_chunk_hashes_for_dedup_answers() -> None:
    key = bytes(range(32))
    keyed = _example().with_keyed_chunk_hashes(key)
    parsed = sh.parse_shard(sh.serialize_shard(keyed, with_footer=True))
    assert parsed.chunk_hash_key == key
    from git_xet.core.hashes import hmac_chunk_hash

    assert parsed.cas[0].chunks[0].chunk_hash == hmac_chunk_hash(bytes([5]) * 32, key)


def test_expiry() -> None:
    shard = sh.Shard(footer=sh.ShardFooter(key_expiry=100))
    assert shard.is_expired(now=101) and not shard.is_expired(now=99)
    assert not sh.Shard().is_expired()


def test_every_truncation_is_rejected() -> None:
    for blob in (sh.serialize_shard(_example(), with_footer=False), sh.serialize_shard(_example(), with_footer=True)):
        for cut in range(len(blob)):
            with pytest.raises(FormatError):
                sh.parse_shard(blob[:cut])


def test_huge_counts_are_rejected_before_allocation() -> None:
    blob = bytearray(sh.serialize_shard(_example(), with_footer=False))
    struct.pack_into("<I", blob, 48 + 36, 0xFFFFFFFF)
    with pytest.raises(TruncatedError):
        sh.parse_shard(bytes(blob))


@pytest.mark.parametrize("offset,value", [(20, b"X"), (32, b"\x03"), (40, b"\x07")])
def test_bad_header_is_rejected(offset: int, value: bytes) -> None:
    blob = bytearray(sh.serialize_shard(_example(), with_footer=False))
    blob[offset : offset + 1] = value
    with pytest.raises(FormatError):
        sh.parse_shard(bytes(blob))


def test_other_application_ids_are_accepted() -> None:
    blob = bytearray(sh.serialize_shard(_example(), with_footer=False))
    blob[0:14] = b"MyDeployment\x00\x00"
    assert len(sh.parse_shard(bytes(blob)).files) == 3


def test_inconsistent_cas_block_is_rejected() -> None:
    blob = bytearray(sh.serialize_shard(_example(), with_footer=False))
    cas_header = 48 + 48 * 13
    struct.pack_into("<I", blob, cas_header + 40, 999)  # num_bytes_in_cas
    with pytest.raises(FormatError):
        sh.parse_shard(bytes(blob))
