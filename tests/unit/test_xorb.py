"""Xorb building, serialization with and without footer, parsing and verification."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import xorb
from git_xet.core.chunking import iter_chunks
from git_xet.core.constants import MAX_XORB_BYTES, MAX_XORB_CHUNKS
from git_xet.core.errors import FormatError, HashMismatchError, TruncatedError
from git_xet.core.hashes import chunk_hash, xorb_hash
from tests.support.datagen import float32_like, random_bytes


def _build(chunks: list[bytes]) -> xorb.VerifiedXorb:
    builder = xorb.XorbBuilder()
    for c in chunks:
        builder.add(c)
    return builder.build()


def _sample_chunks() -> list[bytes]:
    data = bytes(100_000) + random_bytes(150_000, 1) + float32_like(200_000, 2) + b"tail"
    return list(iter_chunks([data]))


def test_compression_scheme_is_predicted_per_run_and_tried_on_every_chunk() -> None:
    """As xet-core: the run's first chunk picks the scheme; every chunk of the run, even after
    a first chunk stored raw, is compressed with it where that shrinks it."""
    run = xorb.CHUNKS_PER_COMPRESSION_DECISION
    noise = [random_bytes(9000 + k, k) for k in range(2 * run)]
    zeros = [bytes(9000 + k) for k in range(2 * run)]
    first = [noise[0]] + [zeros[k] if k % 2 else noise[k] for k in range(1, run)]
    second = [zeros[run]] + [zeros[k] if k % 2 else noise[k] for k in range(run + 1, 2 * run)]
    built = _build(first + second)
    schemes = [r.scheme for r in xorb.parse_xorb(built.body).records]
    assert schemes[:run] == [0] + [1 if k % 2 else 0 for k in range(1, run)]
    assert schemes[run:] == [1] + [1 if k % 2 else 0 for k in range(run + 1, 2 * run)]
    assert xorb.decode_all_chunks(built.body, xorb.parse_xorb(built.body).records) == first + second


_KINDS = {
    "noise": lambda k: random_bytes(8192 + 37 * k, k),
    "zeros": lambda k: bytes(8192 + 37 * k),
    "floats": lambda k: float32_like(8192 + 36 * k, k),
}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=70))
def test_compression_policy_over_runs(kinds: list[str]) -> None:
    """Every record's scheme follows xet-core's policy, derived here from the compression
    primitives alone: a run's first chunk predicts the scheme; each chunk of the run gets it
    if that shrinks the chunk, and is stored raw otherwise."""
    from git_xet.core.compression import compress_chunk, predict_scheme

    chunks = [_KINDS[kind](k) for k, kind in enumerate(kinds)]
    built = _build(chunks)
    records = xorb.parse_xorb(built.body).records
    for i, (chunk, record) in enumerate(zip(chunks, records)):
        if i % xorb.CHUNKS_PER_COMPRESSION_DECISION == 0:
            run_scheme = predict_scheme(chunk)
        assert record.scheme == compress_chunk(chunk, run_scheme)[0], i
    assert xorb.decode_all_chunks(built.body, records) == chunks


def test_build_parse_round_trip_both_forms() -> None:
    chunks = _sample_chunks()
    built = _build(chunks)
    assert built.xorb_hash == xorb_hash([chunk_hash(c) for c in chunks], [len(c) for c in chunks])
    schemes = {r.scheme for r in xorb.parse_xorb(built.body).records}
    assert schemes >= {0, 1}  # zeros compressed, random data stored raw
    for blob in (built.body, built.with_footer()):
        parsed = xorb.parse_xorb(blob)
        assert (parsed.footer is None) == (blob is built.body)
        assert xorb.decode_all_chunks(blob, parsed.records) == chunks
        assert xorb.verify_xorb(blob, built.xorb_hash).with_footer() == built.with_footer()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=20))
def test_round_trip_property(chunks: list[bytes]) -> None:
    built = _build(chunks)
    verified = xorb.verify_xorb(built.with_footer(), built.xorb_hash)
    assert verified.chunk_hashes == tuple(chunk_hash(c) for c in chunks)
    footer = xorb.XorbFooter.parse(built.with_footer()[len(built.body) : -4])
    assert footer == built.footer()


def test_reader_stops_at_last_complete_record() -> None:
    built = _build(_sample_chunks())
    parsed = xorb.parse_xorb(built.body + b"\x00\x01\x02\x03")  # like the public reference xorb
    assert parsed.body_length == len(built.body) and parsed.trailing_bytes == 4
    cut = built.body[:-10]
    parsed = xorb.parse_xorb(cut)
    assert len(parsed.records) == built.chunk_sizes.__len__() - 1
    with pytest.raises(TruncatedError):
        xorb.verify_xorb(cut)


def test_tampered_xorb_fails_verification() -> None:
    built = _build(_sample_chunks())
    with pytest.raises(HashMismatchError):
        xorb.verify_xorb(built.body, bytes(32))
    raw = bytearray(built.body)
    first = next(r for r in xorb.parse_xorb(raw).records if r.scheme == 0)
    raw[first.payload_start + 5] ^= 1
    with pytest.raises(HashMismatchError):
        xorb.verify_xorb(bytes(raw), built.xorb_hash)
    # A footer that lies about the hashes is caught too.
    footer = built.footer()
    lying = xorb.XorbFooter(footer.xorb_hash, (bytes(32), *footer.chunk_hashes[1:]), footer.byte_ends, footer.unpacked_ends)
    with pytest.raises(HashMismatchError):
        xorb.verify_xorb(built.body + lying.serialize())


@pytest.mark.parametrize(
    "header",
    [
        bytes([1]) + (10).to_bytes(3, "little") + bytes([0]) + (10).to_bytes(3, "little"),  # version
        bytes([0]) + (10).to_bytes(3, "little") + bytes([9]) + (10).to_bytes(3, "little"),  # scheme
        bytes([0]) + (10).to_bytes(3, "little") + bytes([1]) + (200_000).to_bytes(3, "little"),  # too big
        bytes([0]) + (0).to_bytes(3, "little") + bytes([0]) + (10).to_bytes(3, "little"),  # empty payload
    ],
)
def test_bad_chunk_headers_are_rejected(header: bytes) -> None:
    with pytest.raises(FormatError):
        xorb.parse_xorb(header + bytes(10))


def test_footer_with_huge_count_is_rejected_without_allocating() -> None:
    info = b"XETBLOB\x01" + bytes(32) + b"XBLBHSH\x00" + struct.pack("<I", 0xFFFFFFFF) + bytes(40)
    with pytest.raises(FormatError):
        xorb.parse_xorb(info + struct.pack("<I", len(info)))


def test_builder_limits() -> None:
    builder = xorb.XorbBuilder()
    for i in range(MAX_XORB_CHUNKS):
        builder.add(i.to_bytes(4, "little"))
    assert not builder.can_add(1)
    with pytest.raises(ValueError):
        builder.add(b"x")
    big = xorb.XorbBuilder()
    chunk = bytes(131072)
    while big.can_add(len(chunk)):
        big.add(chunk, chunk_hash(chunk))
    assert big.unpacked_size == MAX_XORB_BYTES
    with pytest.raises(ValueError):
        xorb.XorbBuilder().build()


# ---------------------------------------------------------------------------------------------
# Packing into a caller's buffer: raw chunks referenced, not copied


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=70), st.booleans())
def test_a_packed_xorb_is_the_built_xorb_with_raw_chunks_left_where_they_lie(kinds: list[str], as_views: bool) -> None:
    """pack() gives the bytes, hashes and record ends build() gives; its parts are the chunks
    stored raw, as the caller's own objects, between runs of the caller's buffer holding
    exactly the headers and compressed payloads (the records build() wrote, less raw payloads)."""
    chunks = [_KINDS[kind](k) for k, kind in enumerate(kinds)]
    sources = [memoryview(c) if as_views else c for c in chunks]
    buffer = bytearray(xorb.MAX_XORB_BODY_BYTES)
    builder = xorb.XorbBuilder(buffer)
    for source in sources:
        builder.add(source)
    packed = builder.pack()
    built = _build(chunks)
    assert packed.body.joined() == built.body and len(packed.body) == len(built.body)
    assert (packed.xorb_hash, packed.chunk_hashes, packed.byte_ends, packed.chunk_sizes) == (built.xorb_hash, built.chunk_hashes, built.byte_ends, built.chunk_sizes)
    records = xorb.parse_xorb(built.body).records
    raw = [i for i, r in enumerate(records) if r.scheme == 0]
    referenced = [p for p in packed.body.parts if any(p is sources[i] for i in raw)]
    assert len(referenced) == len(raw)  # each raw chunk once, as the object given to add()
    in_buffer = [p for p in packed.body.parts if isinstance(p, memoryview) and p.obj is buffer]
    assert len(in_buffer) + len(referenced) == len(packed.body.parts)
    written = sum(xorb.CHUNK_HEADER_SIZE + (0 if r.scheme == 0 else r.compressed_size) for r in records)
    assert sum(len(p) for p in in_buffer) == written
    assert bytes(buffer[written : written + 64]) == bytes(64)  # nothing beyond the records' headers and packed payloads


def test_a_released_packed_body_cannot_be_read_and_frees_its_buffer() -> None:
    import mmap

    buffer = mmap.mmap(-1, xorb.MAX_XORB_BODY_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    source = memoryview(random_bytes(50_000, 3))
    builder = xorb.XorbBuilder(buffer)
    builder.add(source[:20_000])
    builder.add(bytes(30_000))  # compressed: written into the buffer
    builder.add(source[20_000:])
    packed = builder.pack()
    with pytest.raises(BufferError):
        buffer.close()  # the body still looks into it
    packed.body.release()
    with pytest.raises(ValueError):
        packed.body.joined()
    buffer.close()


def test_build_and_pack_each_belong_to_one_kind_of_builder() -> None:
    own = xorb.XorbBuilder()
    own.add(b"abc")
    with pytest.raises(ValueError, match="pack"):
        xorb.XorbBuilder(bytearray(xorb.MAX_XORB_BODY_BYTES)).build()
    with pytest.raises(ValueError, match="build"):
        own.pack()
    with pytest.raises(ValueError, match="empty"):
        xorb.XorbBuilder(bytearray(xorb.MAX_XORB_BODY_BYTES)).pack()
