"""Verify a xorb while its bytes arrive, instead of after the whole body is in.

A server receiving a 64 MiB upload spends the transfer time waiting; hashing each chunk
record as soon as it is complete overlaps that work with the network, and the CRC-64 an upload
grant declares is computed on the same pass. The result is exactly what ``verify_xorb`` would
return for the finished body, and so are the errors: any body the incremental pass cannot
follow (a malformed header, a footer sent along, too many chunks) is handed to ``verify_xorb``
whole at the end, so it accepts and refuses the same bodies with the same messages.
"""

from __future__ import annotations

import mmap

from .checksums import crc64nvme
from .constants import MAX_XORB_CHUNKS
from .errors import FormatError, HashMismatchError
from .hashes import XetHash, chunk_hash, xorb_hash
from .xorb import MAX_XORB_BODY_BYTES, VerifiedXorb, decode_chunk, has_footer, parse_chunk_records, verify_xorb


class StreamingXorbVerifier:
    """Parses, decodes and hashes the chunk records of a body being written into `buffer`.

    The receiver appends bytes to `buffer` and calls `advance(n)` once its first `n` bytes are
    final (from one thread at a time; the receiver may keep writing beyond `n` meanwhile), then
    `finish(length)` when the body is complete. The buffer must not be reused before the
    VerifiedXorb that `finish` returns (its body is a view into it) has been stored.
    """

    def __init__(self, buffer: bytearray | mmap.mmap, crc: bool = False) -> None:
        self._view = memoryview(buffer)
        self._scanned = 0  # bytes parsed into complete chunk records
        self._hashes: list[XetHash] = []
        self._sizes: list[int] = []
        self._ends: list[int] = []
        self._followable = True  # False once the body is something only verify_xorb can judge
        self._want_crc = crc and crc64nvme is not None
        self._crc = 0
        self._crc_end = 0

    def advance(self, available: int) -> None:
        """Hash every chunk record complete within the first `available` bytes, and extend the
        CRC-64 over them. Cheap to call often: work is done once per byte."""
        if self._want_crc and available > self._crc_end:
            assert crc64nvme is not None
            self._crc = crc64nvme(self._view[self._crc_end : available], self._crc)
            self._crc_end = available
        if not self._followable or available - self._scanned < 8:
            return
        window = self._view[self._scanned : available]
        try:
            records, parsed = parse_chunk_records(window, MAX_XORB_CHUNKS - len(self._hashes))
            digests = [chunk_hash(decode_chunk(window, record)) for record in records]
        except FormatError:
            # A footer, garbage or a chunk that does not decode: verify_xorb judges the whole
            # body at the end (its checks come in its own order, so its error is the one to give).
            self._followable = False
            return
        self._hashes += digests
        self._sizes += (record.uncompressed_size for record in records)
        self._ends += (self._scanned + record.end for record in records)
        self._scanned += parsed

    def crc64(self, length: int) -> int:
        """CRC-64/NVME of the first `length` bytes (requires crc=True and the C extension)."""
        if not self._want_crc:
            raise RuntimeError("this verifier computes no CRC-64")
        self.advance(length)
        if self._crc_end != length:
            raise ValueError(f"CRC-64 covers {self._crc_end} bytes, not {length}")
        return self._crc

    def finish(self, length: int, expected_hash: bytes | None = None) -> VerifiedXorb:
        """The verified xorb of the first `length` bytes; FormatError or HashMismatchError
        exactly as ``verify_xorb`` raises them for the same bytes."""
        self.advance(length)
        body = self._view[:length]
        if not self._followable or self._scanned != length or not self._hashes or has_footer(body):
            return verify_xorb(body, expected_hash)
        if length > MAX_XORB_BODY_BYTES:
            raise FormatError(f"xorb is {length} bytes serialized, more than the {MAX_XORB_BODY_BYTES}-byte limit")
        digest = xorb_hash(self._hashes, self._sizes)
        if expected_hash is not None and digest != expected_hash:
            raise HashMismatchError("xorb content does not match its hash")
        return VerifiedXorb(
            xorb_hash=digest, chunk_hashes=tuple(self._hashes), byte_ends=tuple(self._ends), chunk_sizes=tuple(self._sizes), body=body
        )
