"""Xorb format: chunk records (8-byte header + payload) and the optional CasObjectInfo footer.

Uploaded xorbs carry no footer (hf-xet sends none and the server rebuilds it); stored xorbs
and hf-xet's local store have one. ``parse_xorb`` reads either form; ``parse_chunk_records``
reads a bare run of records such as a byte range served for download.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from typing import NamedTuple

from .compression import CompressionScheme, compress_chunk, decompress, predict_scheme
from .constants import HASH_SIZE, MAX_CHUNK_SIZE, MAX_XORB_BYTES, MAX_XORB_CHUNKS
from .errors import FormatError, HashMismatchError, TruncatedError
from .hashes import XetHash, chunk_hash, hash_to_hex, xorb_hash
from .scattered import ScatteredBytes

CHUNK_HEADER_SIZE = 8
CHUNK_FORMAT_VERSION = 0
# The BG4 predictor runs on the first chunk of each run of this many, as xet-core's default
# (HF_XET_XORB_COMPRESSION_SCHEME_RETEST_INTERVAL) does; every chunk of the run is then
# compressed with the predicted scheme, and stored raw if that does not shrink it.
CHUNKS_PER_COMPRESSION_DECISION = 32

_FOOTER_IDENT = b"XETBLOB"
_FOOTER_VERSION = 1
_HASHES_IDENT = b"XBLBHSH"
_HASHES_VERSION = 0
_BOUNDARIES_IDENT = b"XBLBBND"
_BOUNDARIES_VERSION = 1
_TRAILER = struct.Struct("<III16s")  # num_chunks, hashes offset from end, boundaries offset from end, buffer


# A header is two little-endian u32s: version | compressed size << 8, scheme | size << 8.
_CHUNK_HEADER = struct.Struct("<II")


def pack_chunk_header(compressed_size: int, scheme: int, uncompressed_size: int) -> bytes:
    return _CHUNK_HEADER.pack(CHUNK_FORMAT_VERSION | compressed_size << 8, scheme | uncompressed_size << 8)


class ChunkRecord(NamedTuple):
    """Where one serialized chunk sits: its header at `offset`, payload right after."""

    offset: int
    compressed_size: int
    scheme: int
    uncompressed_size: int

    @property
    def payload_start(self) -> int:
        return self.offset + CHUNK_HEADER_SIZE

    @property
    def end(self) -> int:
        return self.offset + CHUNK_HEADER_SIZE + self.compressed_size


def parse_chunk_records(data: bytes | bytearray | memoryview, max_chunks: int = MAX_XORB_CHUNKS) -> tuple[list[ChunkRecord], int]:
    """Read consecutive chunk records; stop at the last complete one.

    Returns the records and the offset where parsing stopped (== len(data) when the data is
    exactly a run of records). Malformed headers (bad version, sizes out of range, unknown
    scheme) raise FormatError: only a cut-off final record is tolerated.
    """
    view = memoryview(data)
    records: list[ChunkRecord] = []
    pos = 0
    total = len(view)
    while total - pos >= CHUNK_HEADER_SIZE:
        header = view[pos : pos + CHUNK_HEADER_SIZE]
        version = header[0]
        csize = int.from_bytes(header[1:4], "little")
        scheme = header[4]
        usize = int.from_bytes(header[5:8], "little")
        if version != CHUNK_FORMAT_VERSION:
            raise FormatError(f"chunk {len(records)} at byte {pos}: unknown chunk version {version}")
        if scheme not in CompressionScheme._value2member_map_:
            raise FormatError(f"chunk {len(records)} at byte {pos}: unknown compression scheme {scheme}")
        if not 0 < usize <= MAX_CHUNK_SIZE or not 0 < csize <= MAX_CHUNK_SIZE:
            raise FormatError(f"chunk {len(records)} at byte {pos}: sizes {csize}/{usize} out of range")
        if pos + CHUNK_HEADER_SIZE + csize > total:
            break
        if len(records) >= max_chunks:
            raise FormatError(f"more than {max_chunks} chunks")
        records.append(ChunkRecord(pos, csize, scheme, usize))
        pos += CHUNK_HEADER_SIZE + csize
    return records, pos


def decode_chunk(data: bytes | bytearray | memoryview, record: ChunkRecord) -> bytes | memoryview:
    """Uncompressed bytes of one chunk record (a view into `data` for a raw chunk)."""
    payload = memoryview(data)[record.payload_start : record.end]
    return decompress(payload, record.scheme, record.uncompressed_size)


class XorbFooter(NamedTuple):
    """CasObjectInfo v1: xorb hash, chunk hashes, serialized and unpacked chunk end offsets."""

    xorb_hash: XetHash
    chunk_hashes: tuple[XetHash, ...]
    byte_ends: tuple[int, ...]
    unpacked_ends: tuple[int, ...]

    def serialize(self) -> bytes:
        """The footer followed by its 4-byte little-endian length, as xet-core writes it."""
        n = len(self.chunk_hashes)
        hashes_section = _HASHES_IDENT + bytes([_HASHES_VERSION]) + struct.pack("<I", n) + b"".join(self.chunk_hashes)
        boundaries_section = (
            _BOUNDARIES_IDENT
            + bytes([_BOUNDARIES_VERSION])
            + struct.pack("<I", n)
            + struct.pack(f"<{n}I", *self.byte_ends)
            + struct.pack(f"<{n}I", *self.unpacked_ends)
        )
        head = _FOOTER_IDENT + bytes([_FOOTER_VERSION]) + self.xorb_hash
        info_len = len(head) + len(hashes_section) + len(boundaries_section) + _TRAILER.size
        trailer = _TRAILER.pack(n, info_len - len(head), info_len - len(head) - len(hashes_section), bytes(16))
        info = head + hashes_section + boundaries_section + trailer
        return info + struct.pack("<I", len(info))

    @classmethod
    def parse(cls, info: bytes | memoryview) -> XorbFooter:
        """Parse a CasObjectInfo block (without its trailing length field)."""
        view = memoryview(info)
        size = len(view)
        min_size = 8 + HASH_SIZE + 12 + 12 + _TRAILER.size
        if size < min_size:
            raise TruncatedError("xorb footer too short")
        if bytes(view[0:7]) != _FOOTER_IDENT or view[7] != _FOOTER_VERSION:
            raise FormatError("xorb footer: bad ident or version")
        digest = bytes(view[8:40])
        pos = 40
        if bytes(view[pos : pos + 7]) != _HASHES_IDENT or view[pos + 7] != _HASHES_VERSION:
            raise FormatError("xorb footer: bad hash section ident or version")
        (n,) = struct.unpack_from("<I", view, pos + 8)
        pos += 12
        # Bound every count by the bytes actually present before allocating anything.
        if n > MAX_XORB_CHUNKS or size < pos + n * HASH_SIZE + 12 + 8 * n + _TRAILER.size:
            raise FormatError(f"xorb footer: {n} chunks do not fit in {size} bytes")
        hashes = tuple(XetHash(bytes(view[pos + i * HASH_SIZE : pos + (i + 1) * HASH_SIZE])) for i in range(n))
        pos += n * HASH_SIZE
        if bytes(view[pos : pos + 7]) != _BOUNDARIES_IDENT or view[pos + 7] != _BOUNDARIES_VERSION:
            raise FormatError("xorb footer: bad boundary section ident or version")
        (n_bounds,) = struct.unpack_from("<I", view, pos + 8)
        if n_bounds != n:
            raise FormatError("xorb footer: hash and boundary sections disagree on the chunk count")
        pos += 12
        byte_ends = struct.unpack_from(f"<{n}I", view, pos)
        unpacked_ends = struct.unpack_from(f"<{n}I", view, pos + 4 * n)
        pos += 8 * n
        if pos + _TRAILER.size != size:
            raise FormatError("xorb footer: unexpected length")
        n_trailer, _hashes_from_end, _bounds_from_end, _buffer = _TRAILER.unpack_from(view, pos)
        if n_trailer != n:
            raise FormatError("xorb footer: trailer chunk count disagrees")
        return cls(XetHash(digest), hashes, tuple(byte_ends), tuple(unpacked_ends))


_EMPTY_FOOTER_SIZE = len(XorbFooter(XetHash(bytes(32)), (), (), ()).serialize())


def stored_size(body_size: int, num_chunks: int) -> int:
    """A stored xorb object's size: its body and the footer the server rebuilds for it (the
    footer's fixed part, 32 + 4 + 4 bytes per chunk, and its length field)."""
    return body_size + _EMPTY_FOOTER_SIZE + 40 * num_chunks


class ParsedXorb(NamedTuple):
    """A parsed xorb: its chunk records, and its footer when it had one."""

    records: list[ChunkRecord]
    body_length: int
    footer: XorbFooter | None
    trailing_bytes: int = 0

    @property
    def uncompressed_size(self) -> int:
        return sum(r.uncompressed_size for r in self.records)


def _split_footer(view: memoryview) -> tuple[memoryview, XorbFooter | None]:
    if not has_footer(view):
        return view, None
    (info_len,) = struct.unpack_from("<I", view, len(view) - 4)
    start = len(view) - 4 - info_len
    return view[:start], XorbFooter.parse(view[start : len(view) - 4])


def has_footer(data: bytes | memoryview) -> bool:
    """True when `data` ends the way a xorb with a CasObjectInfo footer does (whether that
    footer is well-formed is parse_xorb's to say)."""
    view = memoryview(data)
    if len(view) < 4:
        return False
    (info_len,) = struct.unpack_from("<I", view, len(view) - 4)
    start = len(view) - 4 - info_len
    return info_len >= len(_FOOTER_IDENT) and start >= 0 and bytes(view[start : start + 7]) == _FOOTER_IDENT


def parse_xorb(data: bytes | memoryview) -> ParsedXorb:
    """Parse a whole xorb, with or without footer.

    Without a footer the reader stops at the last complete chunk record (the public reference
    xorb ends with stray bytes). With a footer, the footer must describe exactly the records.
    """
    body, footer = _split_footer(memoryview(data))
    records, end = parse_chunk_records(body)
    if footer is not None:
        if end != len(body):
            raise FormatError("xorb with footer has bytes between its last chunk and the footer")
        if len(footer.byte_ends) != len(records) or any(r.end != e for r, e in zip(records, footer.byte_ends)):
            raise FormatError("xorb footer chunk boundaries do not match the chunk records")
        unpacked = 0
        for record, expected in zip(records, footer.unpacked_ends):
            unpacked += record.uncompressed_size
            if unpacked != expected:
                raise FormatError("xorb footer unpacked offsets do not match the chunk records")
    return ParsedXorb(records, end, footer, len(body) - end)


def decode_all_chunks(data: bytes | memoryview, records: Sequence[ChunkRecord]) -> list[bytes | memoryview]:
    return [decode_chunk(data, r) for r in records]


class XorbLayout(NamedTuple):
    """A xorb's chunk list without its bytes: what the server's index keeps per stored xorb and
    reconstruction planning cuts fetch ranges from. (XorbFooter is the same list in its wire
    form; a shard's CasInfo in the shard's.)"""

    xorb_hash: XetHash
    chunk_hashes: tuple[XetHash, ...]
    byte_ends: tuple[int, ...]  # where each chunk's record ends in the footerless body
    chunk_sizes: tuple[int, ...]  # uncompressed

    @property
    def xorb_hex(self) -> str:
        return hash_to_hex(self.xorb_hash)

    def byte_range(self, chunk_start: int, chunk_end: int) -> tuple[int, int]:
        """Inclusive byte range of chunks [chunk_start, chunk_end) in the stored xorb."""
        start = self.byte_ends[chunk_start - 1] if chunk_start else 0
        return start, self.byte_ends[chunk_end - 1] - 1


class VerifiedXorb(NamedTuple):
    """A xorb body whose chunks were decoded and hashed: what a server stores."""

    xorb_hash: XetHash
    chunk_hashes: tuple[XetHash, ...]
    byte_ends: tuple[int, ...]  # where each chunk's record ends in the footerless body
    chunk_sizes: tuple[int, ...]  # uncompressed
    body: bytes | memoryview

    def layout(self) -> XorbLayout:
        """The chunk list alone, to keep without pinning the body."""
        return XorbLayout(self.xorb_hash, self.chunk_hashes, self.byte_ends, self.chunk_sizes)

    def footer(self) -> XorbFooter:
        unpacked_ends = []
        total = 0
        for size in self.chunk_sizes:
            total += size
            unpacked_ends.append(total)
        return XorbFooter(self.xorb_hash, self.chunk_hashes, self.byte_ends, tuple(unpacked_ends))

    def with_footer(self) -> bytes:
        return b"".join((self.body, self.footer().serialize()))


# The largest footerless xorb body: every chunk raw (compression is kept only when it shrinks
# a chunk) plus one header per chunk. A buffer this size always holds a full xorb.
MAX_XORB_BODY_BYTES = MAX_XORB_BYTES + CHUNK_HEADER_SIZE * MAX_XORB_CHUNKS


def verify_xorb(data: bytes | memoryview, expected_hash: bytes | None = None) -> VerifiedXorb:
    """Decode every chunk, recompute the xorb hash and check it (and any footer) agrees.

    This is how a server accepts an upload: a footerless body is rebuilt with a footer from
    what the chunks actually hash to; anything truncated or tampered with fails the hash.

    The 64 MiB limit is on the serialized size, as xorb-format.md says: huggingface.js packs
    compressed chunks up to 64 MiB, so a xorb of compressible data holds more than 64 MiB
    uncompressed. Writers that cap the uncompressed size instead (hf-xet, our XorbBuilder) add
    one 8-byte header per chunk on top, so that allowance is accepted too.
    """
    parsed = parse_xorb(data)
    if not parsed.records:
        raise FormatError("xorb has no complete chunk")
    if parsed.trailing_bytes:
        raise TruncatedError(f"xorb ends with {parsed.trailing_bytes} bytes of an incomplete chunk")
    if parsed.body_length > MAX_XORB_BODY_BYTES:
        raise FormatError(f"xorb is {parsed.body_length} bytes serialized, more than the {MAX_XORB_BODY_BYTES}-byte limit")
    view = memoryview(data)
    # Decoded one chunk at a time: memory stays at one chunk beyond the body, and the work at
    # most MAX_XORB_CHUNKS chunks of MAX_CHUNK_SIZE, however well the chunks compress.
    hashes = tuple(chunk_hash(decode_chunk(view, r)) for r in parsed.records)
    sizes = tuple(r.uncompressed_size for r in parsed.records)
    digest = xorb_hash(hashes, sizes)
    if expected_hash is not None and digest != expected_hash:
        raise HashMismatchError("xorb content does not match its hash")
    if parsed.footer is not None and (parsed.footer.xorb_hash != digest or parsed.footer.chunk_hashes != hashes):
        raise HashMismatchError("xorb footer hashes do not match its chunks")
    # A footerless bytes body (the upload form) is kept as is: no 64 MiB copy.
    body = data if isinstance(data, bytes) and parsed.body_length == len(data) else bytes(view[: parsed.body_length])
    return VerifiedXorb(digest, hashes, tuple(r.end for r in parsed.records), sizes, body)


class PackedXorb(NamedTuple):
    """A xorb XorbBuilder packed into a caller's buffer: its chunk list, and its body as parts
    (record headers and compressed payloads in the buffer, raw payloads where the caller has
    them). What an uploader sends."""

    xorb_hash: XetHash
    chunk_hashes: tuple[XetHash, ...]
    byte_ends: tuple[int, ...]  # where each chunk's record ends in the body
    chunk_sizes: tuple[int, ...]  # uncompressed
    body: ScatteredBytes


class XorbBuilder:
    """Accumulates chunks into one xorb within the 64 MiB / 8192-chunk limits.

    Compression follows xet-core: the BG4 predictor picks the scheme for each run of
    CHUNKS_PER_COMPRESSION_DECISION chunks, and each chunk is compressed with it (raw when
    that does not shrink it), so equal chunks get a body no larger than hf-xet's.

    Without a buffer the builder grows its own and `build()` returns a contiguous body. Given
    a reusable `buffer` of MAX_XORB_BODY_BYTES (e.g. an anonymous mmap), it writes only the
    record headers and compressed payloads there; a chunk stored raw is referenced where the
    caller has it, not copied, and `pack()` returns the body as parts (core/scattered.py).
    The caller's chunk bytes must then stay unchanged until that body is released. If they
    do not (a file rewritten during its upload), the bytes sent no longer match their hashes
    and every store refuses the xorb: each verifies what it receives.
    """

    def __init__(self, buffer: bytearray | mmap.mmap | None = None) -> None:
        if buffer is not None and len(buffer) < MAX_XORB_BODY_BYTES:
            raise ValueError(f"a xorb buffer needs {MAX_XORB_BODY_BYTES} bytes, got {len(buffer)}")
        self._owns_buffer = buffer is None
        self._buffer: bytearray | mmap.mmap = bytearray() if buffer is None else buffer
        # With a caller's buffer: the body's parts so far, and the run of buffer bytes
        # [_run_start, _used) that becomes the next part.
        self._parts: list[bytes | memoryview] = []
        self._run_start = 0
        self._used = 0
        self._hashes: list[XetHash] = []
        self._sizes: list[int] = []
        self._byte_ends: list[int] = []
        self._body_size = 0
        self._unpacked_size = 0
        self._scheme = CompressionScheme.LZ4

    @property
    def num_chunks(self) -> int:
        return len(self._hashes)

    @property
    def unpacked_size(self) -> int:
        return self._unpacked_size

    @property
    def serialized_size(self) -> int:
        return self._body_size

    def can_add(self, size: int) -> bool:
        return self.num_chunks < MAX_XORB_CHUNKS and self._unpacked_size + size <= MAX_XORB_BYTES

    def add(self, data: bytes | memoryview, digest: XetHash | None = None) -> int:
        """Append a chunk; returns its index in the xorb. Check can_add first."""
        size = len(data)
        if not 0 < size <= MAX_CHUNK_SIZE:
            raise ValueError(f"chunk size {size} outside 1..{MAX_CHUNK_SIZE}")
        if not self.can_add(size):
            raise ValueError("xorb is full")
        index = len(self._hashes)
        if index % CHUNKS_PER_COMPRESSION_DECISION == 0:
            self._scheme = predict_scheme(data)
        scheme, payload = compress_chunk(data, self._scheme)
        header = (CHUNK_FORMAT_VERSION | len(payload) << 8, scheme | size << 8)
        if self._owns_buffer:
            assert isinstance(self._buffer, bytearray)  # only a buffer of its own grows
            self._buffer += _CHUNK_HEADER.pack(*header)
            self._buffer += payload
        else:
            self._write_record(header, payload, referenced=scheme is CompressionScheme.NONE)
        self._body_size += CHUNK_HEADER_SIZE + len(payload)
        self._byte_ends.append(self._body_size)
        self._hashes.append(digest if digest is not None else chunk_hash(data))
        self._sizes.append(size)
        self._unpacked_size += size
        return index

    def _write_record(self, header: tuple[int, int], payload: bytes | memoryview, *, referenced: bool) -> None:
        """The header into the buffer; the payload too, unless `referenced` (a raw chunk):
        then the buffer's run so far becomes a part and the payload the next."""
        _CHUNK_HEADER.pack_into(self._buffer, self._used, *header)
        self._used += CHUNK_HEADER_SIZE
        if referenced:
            self._end_run()
            self._parts.append(payload)
        else:
            self._buffer[self._used : self._used + len(payload)] = payload
            self._used += len(payload)

    def _end_run(self) -> None:
        if self._used > self._run_start:
            with memoryview(self._buffer) as whole:
                self._parts.append(whole[self._run_start : self._used])  # outlives `whole`
            self._run_start = self._used

    def build(self) -> VerifiedXorb:
        """The finished xorb (body without footer, plus everything needed for its footer), from
        a builder with no caller's buffer."""
        if not self._owns_buffer:
            raise ValueError("a builder given a buffer packs its xorb as parts: pack()")
        if not self._hashes:
            raise ValueError("empty xorb")
        return VerifiedXorb(*self._chunk_lists(), bytes(self._buffer))

    def pack(self) -> PackedXorb:
        """The finished xorb, from a builder given a buffer: its body is the buffer's runs
        between the referenced raw payloads, valid until the buffer is reused."""
        if self._owns_buffer:
            raise ValueError("a builder without a buffer builds a contiguous xorb: build()")
        if not self._hashes:
            raise ValueError("empty xorb")
        self._end_run()
        return PackedXorb(*self._chunk_lists(), ScatteredBytes(self._parts))

    def _chunk_lists(self) -> tuple[XetHash, tuple[XetHash, ...], tuple[int, ...], tuple[int, ...]]:
        return xorb_hash(self._hashes, self._sizes), tuple(self._hashes), tuple(self._byte_ends), tuple(self._sizes)
