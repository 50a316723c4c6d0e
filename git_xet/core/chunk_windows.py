"""The answer to a range edit: which windows of a stored file a client must re-chunk, and
summaries of the untouched gaps between them (the body of `GET /v2/file-chunk-hashes/{file}`).

A client editing bytes of a stored file (huggingface.js 2.17.5 `commit` with an "edit"
operation, xet-core `range_upload.rs`) names the dirty byte ranges. Each becomes a window made
of whole chunks, extended past the edit until two consecutive chunks both have a "stable" size
(in [2 x 8 KiB, 128 KiB - 8 KiB)): after such a pair the content-defined chunker has provably
re-synchronised, so re-chunking the window yields the original chunks from there on. Windows
that meet merge. For each gap the client gets a MerkleSubtree (to compute the new file hash
without the gap's chunks), and for each term lying wholly outside every window its
verification hash (to reuse the term in the new shard without reading it).

Pure: chunk hashes and sizes come from the index's xorb layouts, no byte of the file is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .constants import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE
from .hashes import hash_to_hex, verification_hash
from .merkle_subtree import MerkleSubtree, Node
from .shard import FileTerm


def is_stable_chunk_size(size: int) -> bool:
    """A chunk this size ends where the chunker would cut whatever came before it (with its neighbour)."""
    return 2 * MIN_CHUNK_SIZE <= size < MAX_CHUNK_SIZE - MIN_CHUNK_SIZE


def parse_dirty_ranges(value: str | None, file_size: int, max_ranges: int) -> list[tuple[int, int]]:
    """`X-Range-Dirty: bytes=A-B,C-D` (inclusive ends, as a Range header) -> sorted, merged,
    half-open ranges clipped to the file. ValueError says what is wrong."""
    if not value:
        raise ValueError(
            "send the edited byte ranges as X-Range-Dirty: bytes=START-END[,START-END...]"
        )
    unit, _, spec = value.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        raise ValueError("X-Range-Dirty must read bytes=START-END[,START-END...]")
    parts = spec.split(",")
    if len(parts) > max_ranges:
        raise ValueError(
            f"X-Range-Dirty names {len(parts)} ranges; at most {max_ranges} are served: merge nearby edits"
        )
    ranges = []
    for part in parts:
        first, dash, last = part.strip().partition("-")
        if not dash or not first.strip().isdigit() or not last.strip().isdigit():
            raise ValueError(f"X-Range-Dirty range {part.strip()[:40]!r} is not START-END")
        start, end = int(first), int(last) + 1
        if end <= start:
            raise ValueError(f"X-Range-Dirty range {part.strip()[:40]!r} ends before it starts")
        start, end = min(start, file_size), min(end, file_size)
        if start < end:
            ranges.append((start, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    if not merged:
        raise ValueError(f"X-Range-Dirty names no byte of the file ({file_size} bytes)")
    return merged


class _WindowBuilder:
    """Walks the file's chunks in order, opening a window at the first chunk that overlaps a
    dirty range and closing it at a stable boundary after the last one it overlaps."""

    def __init__(self, dirty: Sequence[tuple[int, int]]) -> None:
        self.dirty = dirty
        self.index = 0  # the dirty range being handled
        self.in_window = False
        self.gap_at_start = True  # no window has closed yet: the current gap starts the file
        self.cursor = 0  # file offset of the next chunk
        self.gap: list[Node] = []
        self.windows: list[list[int]] = []
        self.gaps: list[MerkleSubtree | None] = []
        self.previous_tail_size: int | None = None  # last clean chunk seen while extending a window

    def _overlaps(self, index: int, start: int, end: int) -> bool:
        return (
            index < len(self.dirty) and end > self.dirty[index][0] and start < self.dirty[index][1]
        )

    def _absorb_following(self, end: int) -> None:
        """Ranges that start before `end` are inside the open window."""
        while self.index + 1 < len(self.dirty) and end > self.dirty[self.index + 1][0]:
            self.index += 1

    def _close_gap(self, at_end: bool) -> None:
        subtree = MerkleSubtree.from_chunks(self.gap_at_start, self.gap, at_end)
        self.gaps.append(None if subtree.is_empty() else subtree)
        self.gap = []

    def add(self, digest: bytes, size: int) -> None:
        start, end = self.cursor, self.cursor + size
        overlaps = self._overlaps(self.index, start, end)
        if not self.in_window:
            if overlaps:
                self._close_gap(at_end=False)
                self.windows.append([start, end])
                self._absorb_following(end)
                self.in_window = True
                self.previous_tail_size = None
            else:
                self.gap.append((digest, size))
        elif overlaps or self._overlaps(self.index + 1, start, end):
            if not overlaps:
                self.index += 1
            self.windows[-1][1] = end
            self._absorb_following(end)
            self.previous_tail_size = None
        else:  # past the edits: extend until two stable chunks in a row
            self.windows[-1][1] = end
            previous, self.previous_tail_size = self.previous_tail_size, size
            if (
                previous is not None
                and is_stable_chunk_size(previous)
                and is_stable_chunk_size(size)
            ):
                self.index += 1
                self.gap_at_start = False
                self.in_window = False
                self.previous_tail_size = None
        self.cursor = end

    def finish(self) -> None:
        self._close_gap(at_end=True)


def file_chunk_hashes(
    terms: Sequence[FileTerm],
    chunks: Iterable[tuple[bytes, int]],
    file_size: int,
    dirty: Sequence[tuple[int, int]],
) -> dict:
    """The JSON body of `GET /v2/file-chunk-hashes/{file}` (field names as xet-core's
    `FileChunkHashesResponse` in xet_client/src/cas_types/mod.rs, camelCase), for a file of
    these terms whose chunks, in file order, are `chunks` (hash, size)."""
    builder = _WindowBuilder(dirty)
    term_hashes: list[list[bytes]] = [[] for _ in terms]
    term_of_chunk = (
        i for i, term in enumerate(terms) for _ in range(term.chunk_end - term.chunk_start)
    )
    total = 0
    for (digest, size), term_index in zip(chunks, term_of_chunk, strict=True):
        builder.add(digest, size)
        term_hashes[term_index].append(digest)
        total += 1
    builder.finish()
    if not builder.windows:
        raise ValueError("the dirty ranges overlap no chunk of the file")
    return {
        "totalChunks": total,
        "fileSize": file_size,
        "windows": [{"dirtyByteRange": window} for window in builder.windows],
        "hashRanges": [None if gap is None else gap.to_json() for gap in builder.gaps],
        "gapVerification": _gap_verification(terms, term_hashes, builder.windows),
    }


def _gap_verification(
    terms: Sequence[FileTerm],
    term_hashes: Sequence[Sequence[bytes]],
    windows: Sequence[Sequence[int]],
) -> list[str]:
    """The verification hash of each term that no window touches, in term order."""
    out = []
    start = 0
    w = 0
    for term, hashes_of_term in zip(terms, term_hashes, strict=True):
        end = start + term.unpacked_bytes
        while w < len(windows) and windows[w][1] <= start:
            w += 1
        if not (w < len(windows) and windows[w][0] < end):
            out.append(hash_to_hex(verification_hash(hashes_of_term)))
        start = end
    return out
