"""Content-defined chunking with the XET gearhash (draft section "Content-Defined Chunking").

Two implementations of one function, ``scan(block, h, chunk_len) -> (cuts, h, chunk_len)``:

* ``scan_reference``: the draft's loop, byte by byte, in pure Python (~5 MB/s). It is the
  specification we test against and the fallback when the C extension is missing.
* ``_gearhash.scan``: the same loop in C (GIL released), ~1 GB/s and more.

On top of ``scan``: ``Chunker`` (streaming: feed blocks of any size, get absolute chunk end
offsets, identical to one-shot), ``chunk_boundaries`` (one-shot) and ``iter_chunks``
(turn an iterable of blocks into chunk byte strings).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator

from .constants import CHUNK_MASK, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE
from .gearhash_table import GEARHASH_TABLE
from .native import native_disabled

ScanResult = tuple[list[int], int, int]
_U64 = 0xFFFFFFFFFFFFFFFF


def scan_reference(block: bytes | bytearray | memoryview, h: int, chunk_len: int) -> ScanResult:
    """Feed `block` to a chunker in state (h, chunk_len); the draft's loop, unoptimised.

    Returns the exclusive end offsets (relative to `block`) of the chunks completed in it and
    the new state. chunk_len counts the bytes already in the current chunk.
    """
    table = GEARHASH_TABLE
    cuts: list[int] = []
    for i, byte in enumerate(bytes(block)):
        h = ((h << 1) + table[byte]) & _U64
        chunk_len += 1
        if chunk_len < MIN_CHUNK_SIZE:
            continue
        if chunk_len >= MAX_CHUNK_SIZE or (h & CHUNK_MASK) == 0:
            cuts.append(i + 1)
            h = 0
            chunk_len = 0
    return cuts, h, chunk_len


ScanFn = Callable[[bytes | bytearray | memoryview, int, int], ScanResult]


def _load_native() -> ScanFn | None:
    if native_disabled():
        return None
    try:
        from . import _gearhash
    except ImportError:
        return None
    return _gearhash.scan


_native_scan = _load_native()
NATIVE_AVAILABLE = _native_scan is not None

if _native_scan is None and not native_disabled():
    warnings.warn(
        "git-xet: the C chunking extension is not built; chunking runs in pure Python at a few "
        "MB/s. Reinstall with a C compiler available (e.g. `apt-get install gcc python3-dev`, "
        "then `pip install --force-reinstall .`).",
        RuntimeWarning,
        stacklevel=2,
    )
scan: ScanFn = scan_reference if _native_scan is None else _native_scan


class Chunker:
    """Streaming chunker: the boundaries do not depend on how the input is split into blocks."""

    __slots__ = ("_chunk_len", "_h", "_offset", "_scan")

    def __init__(self, scan_fn: Callable[..., ScanResult] | None = None) -> None:
        self._h = 0
        self._chunk_len = 0
        self._offset = 0
        self._scan = scan_fn or scan

    @property
    def offset(self) -> int:
        """Total bytes fed so far (the absolute offset of the next block)."""
        return self._offset

    def feed(self, block: bytes | bytearray | memoryview) -> list[int]:
        """Absolute end offsets of the chunks completed by this block."""
        cuts, self._h, self._chunk_len = self._scan(block, self._h, self._chunk_len)
        base = self._offset
        self._offset += len(block)
        return [base + c for c in cuts]

    def finish(self) -> int | None:
        """End offset of the final, shorter chunk if bytes are pending; resets the chunker."""
        pending = self._chunk_len
        end = self._offset
        self._h = self._chunk_len = self._offset = 0
        return end if pending else None


def chunk_boundaries(data: bytes | bytearray | memoryview, scan_fn: Callable[..., ScanResult] | None = None) -> list[int]:
    """One-shot: the exclusive end offset of every chunk of `data` (empty data: no chunk)."""
    chunker = Chunker(scan_fn)
    ends = chunker.feed(data)
    last = chunker.finish()
    if last is not None:
        ends.append(last)
    return ends


def iter_chunks(blocks: Iterable[bytes | bytearray | memoryview]) -> Iterator[bytes]:
    """Turn a stream of blocks (any sizes) into the stream of chunk byte strings.

    Memory stays bounded by one block plus one chunk: only the tail after the last cut of a
    block is carried over.
    """
    chunker = Chunker()
    carry = bytearray()
    for block in blocks:
        if not block:
            continue
        view = memoryview(block)
        start = chunker.offset
        prev = 0
        for end in chunker.feed(view):
            rel = end - start
            if carry:
                carry += view[prev:rel]
                yield bytes(carry)
                carry.clear()
            else:
                yield bytes(view[prev:rel])
            prev = rel
        carry += view[prev:]
    if chunker.finish() is not None:
        yield bytes(carry)
