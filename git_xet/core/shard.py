"""MDB shard format: file reconstructions (file info) and xorb chunk lists (CAS info).

Two serialized forms:

* upload form (``with_footer=False``): header with footer_size 0, file info section, CAS info
  section, nothing else. This is the body of ``POST /v1|v2/shards``.
* stored form (``with_footer=True``): plus lookup tables and the 200-byte footer carrying the
  chunk-hash HMAC key, creation time and key expiry. Global dedup answers use it.

Parsers never preallocate from counts read off the wire: every count is checked against the
bytes actually left before anything is read.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, TypeVar

from .constants import HASH_SIZE, ZERO_HASH
from .errors import FormatError, TruncatedError
from .hashes import XetHash, hash_sort_key, hash_to_hex, hex_to_hash, hmac_chunk_hash, truncated_hash

T = TypeVar("T")

SHARD_HEADER_TAG = b"HFRepoMetaData\x00" + bytes(
    [0x55, 0x69, 0x67, 0x45, 0x6A, 0x7B, 0x81, 0x57, 0x83, 0xA5, 0xBD, 0xD9, 0x5C, 0xCD, 0xD1, 0x4A, 0xA9]
)
SHARD_HEADER_VERSION = 2
SHARD_FOOTER_VERSION = 1
ENTRY_SIZE = 48
HEADER_SIZE = 48
FOOTER_SIZE = 200
NO_EXPIRY = 2**64 - 1

FILE_FLAG_WITH_VERIFICATION = 1 << 31
FILE_FLAG_WITH_METADATA_EXT = 1 << 30
CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE = 1 << 31

_BOOKEND = b"\xff" * HASH_SIZE + bytes(16)
_HEADER = struct.Struct("<32sQQ")
_FILE_HEADER = struct.Struct("<32sII8s")
_FILE_ENTRY = struct.Struct("<32sIIII")
_HASH_AND_RESERVED = struct.Struct("<32s16s")
_CAS_HEADER = struct.Struct("<32sIIII")
_CAS_ENTRY = struct.Struct("<32sIIII")
_FOOTER = struct.Struct("<QQQQQQQQQ32sQQ48sQQQQ")
assert _FOOTER.size == FOOTER_SIZE


class FileTerm(NamedTuple):
    """One term of a file reconstruction: chunks [chunk_start, chunk_end) of a xorb."""

    xorb_hash: XetHash
    unpacked_bytes: int
    chunk_start: int
    chunk_end: int
    cas_flags: int = 0


class FileInfo(NamedTuple):
    """A file's reconstruction, with per-term verification hashes and its sha256 when known.

    `sha256` is the ordinary digest (hashlib byte order); on the wire it is stored lane-swapped
    so that its hash string equals the usual sha256 hex, as hf-xet does.
    """

    file_hash: XetHash
    terms: tuple[FileTerm, ...]
    verification: tuple[bytes, ...] | None = None
    sha256: bytes | None = None

    @property
    def flags(self) -> int:
        flags = 0
        if self.verification is not None:
            flags |= FILE_FLAG_WITH_VERIFICATION
        if self.sha256 is not None:
            flags |= FILE_FLAG_WITH_METADATA_EXT
        return flags

    @property
    def size(self) -> int:
        return sum(t.unpacked_bytes for t in self.terms)

    def num_entries(self) -> int:
        """Size of this block in 48-byte entries (header, terms, verification, metadata)."""
        n = 1 + len(self.terms)
        if self.verification is not None:
            n += len(self.terms)
        if self.sha256 is not None:
            n += 1
        return n


class CasChunk(NamedTuple):
    chunk_hash: XetHash
    byte_start: int
    unpacked_bytes: int
    flags: int = 0


class CasInfo(NamedTuple):
    """A xorb's chunk list: what dedup matches against."""

    xorb_hash: XetHash
    chunks: tuple[CasChunk, ...]
    num_bytes_on_disk: int = 0
    cas_flags: int = 0

    @property
    def num_bytes_in_cas(self) -> int:
        return sum(c.unpacked_bytes for c in self.chunks)

    @classmethod
    def from_chunks(
        cls,
        xorb_hash: XetHash,
        chunk_hashes: Sequence[XetHash],
        chunk_sizes: Sequence[int],
        num_bytes_on_disk: int = 0,
        flags: Sequence[int] | None = None,
    ) -> CasInfo:
        chunks = []
        start = 0
        for i, (digest, size) in enumerate(zip(chunk_hashes, chunk_sizes)):
            chunks.append(CasChunk(digest, start, size, flags[i] if flags else 0))
            start += size
        return cls(xorb_hash, tuple(chunks), num_bytes_on_disk)


class ShardFooter(NamedTuple):
    """Footer fields not derived from the content (offsets, tables and byte totals are)."""

    chunk_hash_key: bytes = ZERO_HASH
    creation_timestamp: int = 0
    key_expiry: int = NO_EXPIRY


class Shard(NamedTuple):
    files: tuple[FileInfo, ...] = ()
    cas: tuple[CasInfo, ...] = ()
    footer: ShardFooter | None = None

    @property
    def chunk_hash_key(self) -> bytes | None:
        """The HMAC key of a dedup answer, or None when chunk hashes are stored plainly."""
        if self.footer is None or self.footer.chunk_hash_key == ZERO_HASH:
            return None
        return self.footer.chunk_hash_key

    def is_expired(self, now: float | None = None) -> bool:
        if self.footer is None:
            return False
        return self.footer.key_expiry < (time.time() if now is None else now)

    def with_keyed_chunk_hashes(self, key: bytes) -> Shard:
        """A copy whose CAS chunk hashes are HMAC-keyed, as a global dedup answer sends them."""
        cas = tuple(
            info._replace(chunks=tuple(c._replace(chunk_hash=hmac_chunk_hash(c.chunk_hash, key)) for c in info.chunks))
            for info in self.cas
        )
        footer = (self.footer or ShardFooter())._replace(chunk_hash_key=key)
        return self._replace(cas=cas, footer=footer)


def sha256_to_stored(digest: bytes) -> bytes:
    """hashlib byte order -> the lane-swapped order stored in FileMetadataExt."""
    return hex_to_hash(digest.hex())


def stored_to_sha256(stored: bytes) -> bytes:
    """Inverse of sha256_to_stored."""
    return bytes.fromhex(hash_to_hex(stored))


# ---------------------------------------------------------------- serialization


def _serialize_file(info: FileInfo) -> bytes:
    if info.verification is not None and len(info.verification) != len(info.terms):
        raise ValueError("one verification hash per term is required")
    parts = [_FILE_HEADER.pack(info.file_hash, info.flags, len(info.terms), bytes(8))]
    parts += [_FILE_ENTRY.pack(t.xorb_hash, t.cas_flags, t.unpacked_bytes, t.chunk_start, t.chunk_end) for t in info.terms]
    if info.verification is not None:
        parts += [_HASH_AND_RESERVED.pack(v, bytes(16)) for v in info.verification]
    if info.sha256 is not None:
        parts.append(_HASH_AND_RESERVED.pack(sha256_to_stored(info.sha256), bytes(16)))
    return b"".join(parts)


def _serialize_cas(info: CasInfo) -> bytes:
    parts = [_CAS_HEADER.pack(info.xorb_hash, info.cas_flags, len(info.chunks), info.num_bytes_in_cas, info.num_bytes_on_disk)]
    parts += [_CAS_ENTRY.pack(c.chunk_hash, c.byte_start, c.unpacked_bytes, c.flags, 0) for c in info.chunks]
    return b"".join(parts)


def _dedupe_sorted(items: Iterable[T], key: Callable[[T], bytes]) -> list[T]:
    """Sort by hash order and keep one entry per hash (xet-core keeps them in a BTreeMap)."""
    by_hash: dict[bytes, T] = {}
    for item in items:
        by_hash.setdefault(key(item), item)
    return [by_hash[h] for h in sorted(by_hash, key=hash_sort_key)]


def serialize_shard(shard: Shard, *, with_footer: bool, now: int | None = None) -> bytes:
    """Serialize with files and xorbs in hash order, as xet-core does.

    with_footer=False gives the upload form; True adds lookup tables and the footer. A shard
    without footer fields gets a footer created `now` (default: the current time) that never
    expires; given footer fields are written verbatim.
    """
    files = _dedupe_sorted(shard.files, lambda f: f.file_hash)
    cas_blocks = _dedupe_sorted(shard.cas, lambda c: c.xorb_hash)
    out = bytearray(_HEADER.pack(SHARD_HEADER_TAG, SHARD_HEADER_VERSION, FOOTER_SIZE if with_footer else 0))

    file_info_offset = len(out)
    file_lookup = []
    index = 0
    for info in files:
        file_lookup.append((truncated_hash(info.file_hash), index))
        out += _serialize_file(info)
        index += info.num_entries()
    out += _BOOKEND

    cas_info_offset = len(out)
    cas_lookup = []
    chunk_lookup = []
    index = 0
    for cas in cas_blocks:
        cas_lookup.append((truncated_hash(cas.xorb_hash), index))
        for i, chunk in enumerate(cas.chunks):
            chunk_lookup.append((truncated_hash(chunk.chunk_hash), index, i))
        out += _serialize_cas(cas)
        index += 1 + len(cas.chunks)
    out += _BOOKEND

    if not with_footer:
        return bytes(out)

    footer = shard.footer or ShardFooter(creation_timestamp=int(time.time()) if now is None else now)
    file_lookup_offset = len(out)
    for key, idx in file_lookup:
        out += struct.pack("<QI", key, idx)
    cas_lookup_offset = len(out)
    for key, idx in cas_lookup:
        out += struct.pack("<QI", key, idx)
    chunk_lookup_offset = len(out)
    chunk_lookup.sort(key=lambda e: e[0])
    for key, cas_idx, chunk_idx in chunk_lookup:
        out += struct.pack("<QII", key, cas_idx, chunk_idx)
    footer_offset = len(out)
    out += _FOOTER.pack(
        SHARD_FOOTER_VERSION,
        file_info_offset,
        cas_info_offset,
        file_lookup_offset,
        len(file_lookup),
        cas_lookup_offset,
        len(cas_lookup),
        chunk_lookup_offset,
        len(chunk_lookup),
        footer.chunk_hash_key,
        footer.creation_timestamp,
        footer.key_expiry,
        bytes(48),
        sum(c.num_bytes_on_disk for c in cas_blocks),
        sum(f.size for f in files),
        sum(c.num_bytes_in_cas for c in cas_blocks),
        footer_offset,
    )
    return bytes(out)


# ---------------------------------------------------------------- parsing


class _Reader:
    """Bounded cursor over the shard bytes: every read checks what is left."""

    __slots__ = ("end", "pos", "view")

    def __init__(self, view: memoryview, end: int) -> None:
        self.view = view
        self.pos = HEADER_SIZE
        self.end = end

    def entry(self, what: str) -> memoryview:
        if self.pos + ENTRY_SIZE > self.end:
            raise TruncatedError(f"shard ends inside {what} at byte {self.pos}")
        out = self.view[self.pos : self.pos + ENTRY_SIZE]
        self.pos += ENTRY_SIZE
        return out

    def require(self, entries: int, what: str) -> None:
        if self.pos + entries * ENTRY_SIZE > self.end:
            raise TruncatedError(f"shard announces {entries} {what} entries but ends before them")


def _read_file_block(reader: _Reader, header: memoryview) -> FileInfo:
    file_hash, flags, n, _ = _FILE_HEADER.unpack(header)
    if flags & ~(FILE_FLAG_WITH_VERIFICATION | FILE_FLAG_WITH_METADATA_EXT):
        raise FormatError(f"file block has unknown flags {flags:#x}")
    with_verification = bool(flags & FILE_FLAG_WITH_VERIFICATION)
    with_metadata = bool(flags & FILE_FLAG_WITH_METADATA_EXT)
    reader.require(n * (2 if with_verification else 1) + with_metadata, "file")
    terms = []
    for _ in range(n):
        xorb, cas_flags, unpacked, start, end = _FILE_ENTRY.unpack(reader.entry("a file term"))
        if end <= start:
            raise FormatError(f"file term has an empty or reversed chunk range [{start}, {end})")
        terms.append(FileTerm(xorb, unpacked, start, end, cas_flags))
    verification = None
    if with_verification:
        verification = tuple(_HASH_AND_RESERVED.unpack(reader.entry("a verification entry"))[0] for _ in range(n))
    sha256 = None
    if with_metadata:
        sha256 = stored_to_sha256(_HASH_AND_RESERVED.unpack(reader.entry("file metadata"))[0])
    return FileInfo(file_hash, tuple(terms), verification, sha256)


def _read_cas_block(reader: _Reader, header: memoryview) -> CasInfo:
    xorb, cas_flags, n, bytes_in_cas, bytes_on_disk = _CAS_HEADER.unpack(header)
    reader.require(n, "CAS chunk")
    chunks = []
    expected_start = 0
    for _ in range(n):
        digest, start, size, flags, _reserved = _CAS_ENTRY.unpack(reader.entry("a CAS chunk"))
        if start != expected_start:
            raise FormatError("CAS chunk byte offsets are not contiguous")
        expected_start += size
        chunks.append(CasChunk(digest, start, size, flags))
    if expected_start != bytes_in_cas:
        raise FormatError("CAS block byte count disagrees with its chunks")
    return CasInfo(xorb, tuple(chunks), bytes_on_disk, cas_flags)


def _parse_footer(view: memoryview, size: int) -> tuple[ShardFooter, int, int]:
    fields = _FOOTER.unpack_from(view, size - FOOTER_SIZE)
    (version, file_off, cas_off, fl_off, fl_n, cl_off, cl_n, ch_off, ch_n, key, created, expiry, _buf,
     _on_disk, _materialized, _stored, footer_off) = fields  # fmt: skip
    if version != SHARD_FOOTER_VERSION:
        raise FormatError(f"unsupported shard footer version {version}")
    if footer_off != size - FOOTER_SIZE or file_off != HEADER_SIZE:
        raise FormatError("shard footer offsets are inconsistent with its size")
    if not HEADER_SIZE + ENTRY_SIZE <= cas_off <= footer_off - ENTRY_SIZE:
        raise FormatError("shard footer CAS offset lies outside the shard's sections")
    footer = ShardFooter(key, created, expiry)
    if fl_off == fl_n == cl_off == cl_n == ch_off == ch_n == 0:
        # No lookup tables: the sections run up to the footer. huggingface.js uploads shards
        # like this; the tables are only an index for readers, so nothing is lost.
        return footer, cas_off, footer_off
    if not (cas_off <= fl_off <= cl_off <= ch_off <= footer_off):
        raise FormatError("shard lookup tables are out of order")
    if (cl_off - fl_off) != 12 * fl_n or (ch_off - cl_off) != 12 * cl_n or (footer_off - ch_off) != 16 * ch_n:
        raise FormatError("shard lookup table sizes disagree with their entry counts")
    return footer, cas_off, fl_off


def parse_shard(data: bytes | memoryview) -> Shard:
    """Parse a shard in upload form or stored form; raises FormatError on anything inconsistent."""
    view = memoryview(data)
    size = len(view)
    if size < HEADER_SIZE + 2 * ENTRY_SIZE:
        raise TruncatedError("shard too short")
    tag, version, footer_size = _HEADER.unpack_from(view, 0)
    if tag[15:] != SHARD_HEADER_TAG[15:]:
        raise FormatError("not a shard (bad magic)")
    if version != SHARD_HEADER_VERSION:
        raise FormatError(f"unsupported shard header version {version}")
    if footer_size not in (0, FOOTER_SIZE):
        raise FormatError(f"unsupported shard footer size {footer_size}")
    footer = None
    sections_end = size
    if footer_size:
        if size < HEADER_SIZE + 2 * ENTRY_SIZE + FOOTER_SIZE:
            raise TruncatedError("shard too short for its footer")
        footer, cas_offset, sections_end = _parse_footer(view, size)

    reader = _Reader(view, sections_end)
    files = []
    while True:
        header = reader.entry("the file info section")
        if bytes(header) == _BOOKEND:
            break
        files.append(_read_file_block(reader, header))
    if footer is not None and reader.pos != cas_offset:
        raise FormatError("shard footer CAS offset does not match the file info section")
    cas = []
    while True:
        header = reader.entry("the CAS info section")
        if bytes(header) == _BOOKEND:
            break
        cas.append(_read_cas_block(reader, header))
    if reader.pos != sections_end:
        raise FormatError(f"{sections_end - reader.pos} unexpected bytes after the CAS info section")
    return Shard(tuple(files), tuple(cas), footer)
