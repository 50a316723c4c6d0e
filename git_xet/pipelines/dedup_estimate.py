"""Estimate what uploading a new version of a file would send, given the old version.

Chunk-level dedup: chunks of NEW whose hash appears in OLD (or earlier in NEW) are free;
the rest would be uploaded. This is the lower bound a push of NEW after OLD can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from .file_hashing import FileDigest


@dataclass(frozen=True)
class DedupEstimate:
    new_size: int
    new_chunks: int
    unique_chunks: int
    unique_bytes: int

    @property
    def unique_fraction(self) -> float:
        return self.unique_bytes / self.new_size if self.new_size else 0.0


def estimate_upload(old: FileDigest, new: FileDigest) -> DedupEstimate:
    seen = set(old.chunk_hashes)
    unique_chunks = unique_bytes = 0
    for digest, size in zip(new.chunk_hashes, new.chunk_sizes):
        if digest not in seen:
            seen.add(digest)
            unique_chunks += 1
            unique_bytes += size
    return DedupEstimate(new.size, len(new.chunk_hashes), unique_chunks, unique_bytes)
