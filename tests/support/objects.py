"""Build XET objects for tests with the protocol core."""

from __future__ import annotations

from git_xet.core import xorb
from git_xet.pipelines.file_hashing import FileDigest, hash_bytes


def single_xorb(data: bytes) -> tuple[xorb.VerifiedXorb, FileDigest]:
    """All of `data`'s chunks in one xorb (data must fit: at most 64 MiB), and its digest."""
    digest = hash_bytes(data)
    builder = xorb.XorbBuilder()
    pos = 0
    for size, chunk_digest in zip(digest.chunk_sizes, digest.chunk_hashes):
        builder.add(data[pos : pos + size], chunk_digest)
        pos += size
    return builder.build(), digest
