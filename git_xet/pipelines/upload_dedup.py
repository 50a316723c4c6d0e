"""Where an upload finds a file's chunks already stored: in this session's xorbs, in the shard
cache's index of every chunk it has seen, or through the store's global dedup; and the
fragmentation guard that refuses a match too short to be worth a term.

pipelines/upload.py places chunks a little behind hashing (PLACEMENT_LAG): chunks are looked up
in the index in batches as they are hashed, hits become anchors, and a run of stored chunks from
the chunk being placed becomes one term.
"""

from __future__ import annotations

import itertools
from collections import deque

from ..client.backend import XetBackend
from ..client.chunk_index import CachedXorb, ChunkIndex
from ..core.hashes import XetHash, is_global_dedup_eligible
from .upload_objects import Term, XorbSlot

GLOBAL_DEDUP_SPACING = 256  # chunks between two global dedup queries of one file
# Chunks are looked up in the cache index in batches (one query each), at the latest this
# many chunks after being hashed: a hit still reaches PLACEMENT_LAG - PROBE_SPAN chunks back.
PROBE_SPAN = 64
# The fragmentation guard, with hf-xet's parameters (its DefragPrevention defaults): over the
# last FRAGMENTATION_WINDOW terms, once there are that many, the average chunks per term must
# stay at FRAGMENTATION_TARGET (or FRAGMENTATION_TARGET * FRAGMENTATION_HYSTERESIS while
# matches are being taken), or matches shorter than the average are stored again.
FRAGMENTATION_WINDOW = 128
FRAGMENTATION_TARGET = 8.0
FRAGMENTATION_HYSTERESIS = 0.5


class FragmentationGuard:
    """Refuse short dedup matches while the file is being shattered into tiny terms: a file of
    many short terms downloads as many small ranges (docs/benchmarks.md has the figure).

    hf-xet's rule exactly (xet-core's DefragPrevention), so that on any data both clients
    dedup the same chunks: sending no more than hf-xet means refusing no match it takes. The
    average counts the term being built; a match continuing the last term is always taken
    (the caller checks that)."""

    def __init__(self) -> None:
        self.terms: deque[int] = deque()  # chunks in each of the last FRAGMENTATION_WINDOW terms
        self.chunks = 0  # their sum
        self.low_threshold = True  # hysteresis: lowered while matches are taken

    def accepts(self, run_chunks: int) -> bool:
        if len(self.terms) < FRAGMENTATION_WINDOW:
            return True  # too few terms for an estimate
        average = self.chunks / len(self.terms)
        target = FRAGMENTATION_TARGET * FRAGMENTATION_HYSTERESIS if self.low_threshold else FRAGMENTATION_TARGET
        if average >= target:
            self.low_threshold = True
        elif run_chunks < average:
            self.low_threshold = False  # refusing: take matches again only at the full target
            return False
        return True

    def new_term(self, chunks: int) -> None:
        self.terms.append(chunks)
        self.chunks += chunks
        if len(self.terms) > FRAGMENTATION_WINDOW:
            self.chunks -= self.terms.popleft()

    def grow_term(self, chunks: int) -> None:
        if self.terms:
            self.terms[-1] += chunks
            self.chunks += chunks


class FileState:
    """One file being streamed through the upload: chunks hashed so far, and how many placed."""

    def __init__(self) -> None:
        self.hashes: list[XetHash] = []
        self.offsets: list[int] = [0]  # chunk i spans offsets[i]:offsets[i + 1]
        self.placed = 0
        self.terms: list[Term] = []
        self.guard = FragmentationGuard()
        self.new_bytes = 0
        self.deduped_bytes = 0
        self.last_global_query = -GLOBAL_DEDUP_SPACING
        self.unprobed: list[int] = []  # chunks not looked up yet
        # Cached xorbs found by probing chunks ahead of placement: (file chunk j, xorb,
        # index of chunk j in it). A run through chunk j may start before it.
        self.anchors: deque[tuple[int, CachedXorb, int]] = deque()
        # The xorb of the last cached run, and how its chunk numbers relate to the file's
        # (index in xorb = file chunk + offset): after a small edit the run usually resumes there.
        self.hint: tuple[CachedXorb, int] | None = None


def continues(terms: list[Term], target: XetHash | XorbSlot, chunk_start: int) -> bool:
    """Whether chunks of `target` from `chunk_start` on would extend the file's last term."""
    return bool(terms) and terms[-1].target == target and terms[-1].chunk_end == chunk_start


def append_term(terms: list[Term], term: Term, guard: FragmentationGuard) -> None:
    """Add `term` to the file's terms, extending the last one when it continues it."""
    if continues(terms, term.target, term.chunk_start):
        last = terms[-1]
        last.chunk_end, last.length, last.file_chunk_end = term.chunk_end, last.length + term.length, term.file_chunk_end
        guard.grow_term(term.chunk_end - term.chunk_start)
        return
    guard.new_term(term.chunk_end - term.chunk_start)
    terms.append(term)


class ChunkFinder:
    """Finds runs of already-stored chunks for an Uploader: `session` maps each chunk this
    session packed to its slot and index (cleared once a shard makes them durable, when the
    index has them), `index` is the shard cache's chunk index."""

    def __init__(self, index: ChunkIndex, backend: XetBackend) -> None:
        self.index = index
        self.backend = backend
        self.session: dict[XetHash, tuple[XorbSlot, int]] = {}

    def packed(self, chunk: XetHash, slot: XorbSlot, index: int) -> None:
        """This session packed `chunk` as chunk `index` of `slot`: later copies dedup against it."""
        self.session[chunk] = (slot, index)

    def forget_session(self) -> None:
        """A shard made the session's xorbs durable (the index has their chunks now), or the
        store lost what they referenced: either way, match against the index alone."""
        self.session = {}

    def match(self, state: FileState, i: int) -> tuple[XetHash | XorbSlot, int, int] | None:
        """A run of already-stored chunks starting at i: in this session first, then the index."""
        hashes = state.hashes
        session = self.session.get(hashes[i])
        if session is not None:
            slot, index = session
            n = 1
            while i + n < len(hashes) and self.session.get(hashes[i + n]) == (slot, index + n):
                n += 1
            return slot, index, n
        return cached_run(state, i)

    def note_chunk(self, state: FileState) -> None:
        """Queue the newest chunk for an index lookup unless this session stored it; look the
        queue up once its oldest has waited PROBE_SPAN chunks."""
        j = len(state.hashes) - 1
        if state.hashes[j] not in self.session:
            state.unprobed.append(j)
        if state.unprobed and j - state.unprobed[0] >= PROBE_SPAN:
            self.probe(state)

    def probe(self, state: FileState) -> None:
        """Look the queued chunks up in the index (one query); hits become anchors.

        One query per batch rather than per chunk: each query releases the GIL, and with the
        xorb upload threads busy, getting it back costs far more than the lookup itself."""
        if not state.unprobed:
            return
        found = self.index.probe_many([state.hashes[j] for j in state.unprobed])
        for j, hit in zip(state.unprobed, found):
            if hit is not None:
                state.anchors.append((j, *hit))
        state.unprobed.clear()

    def maybe_query_global(self, state: FileState) -> bool:
        """Ask the store about the newest chunk when it is a spaced, eligible, unknown one;
        whether it was asked."""
        i = len(state.hashes) - 1
        chunk = state.hashes[i]
        if i - state.last_global_query < GLOBAL_DEDUP_SPACING or not (i == 0 or is_global_dedup_eligible(chunk)):
            return False
        if chunk in self.session:
            return False
        self.probe(state)  # is this one cached?
        if state.anchors and state.anchors[-1][0] == i:
            return False
        state.last_global_query = i
        answer = self.backend.query_dedup(chunk)
        if answer is not None and answer.cas:
            self.index.add(answer)
            found = self.index.probe(chunk)
            if found is not None:
                state.anchors.append((i, *found))
        return True


def cached_run(state: FileState, i: int) -> tuple[XetHash, int, int] | None:
    """The run of chunks from i stored consecutively in one cached xorb: in the last run's
    xorb if it goes on there (one term, not two), else where the index found chunk i, or a
    later chunk whose xorb holds chunk i too (a global dedup answer that arrived after
    chunk i was looked up)."""
    hashes, anchors = state.hashes, state.anchors
    while anchors and anchors[0][0] < i:
        anchors.popleft()
    hint = [state.hint] if state.hint is not None else []
    for xorb, offset in itertools.chain(hint, ((xorb, index - j) for j, xorb, index in anchors)):
        start = i + offset
        if xorb.has(start, hashes[i]):
            state.hint = (xorb, offset)
            n = 1
            while i + n < len(hashes) and xorb.has(start + n, hashes[i + n]):
                n += 1
            return xorb.xorb_hash, start, n
    return None
