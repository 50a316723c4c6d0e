"""Hashes of the XET-BLAKE3-GEARHASH-LZ4 suite: chunk, merkle node, xorb, file, verification.

One representation: an XET hash is 32 raw bytes, typed `XetHash`, in every signature and field
named `*_hash` (chunk_hash, xorb_hash, file_hash). Its text form (``hash_to_hex``) prints each
8-byte lane as a little-endian u64, which is how every XET client and server names objects in
URLs, JSON, SQL and file names; text is converted at those edges only, and names that hold
it say so (`file_hex`, `xorb_hex`). Never `bytes.hex()`: that is not the XET text form.

A sha256 (a Git LFS oid) is the ordinary hashlib digest: `sha256` fields hold its 32 raw
bytes, `sha256_hex` and `oid` its usual lower-case hex.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import NewType

import blake3

from .constants import (
    DATA_KEY,
    GLOBAL_DEDUP_MODULUS,
    HASH_SIZE,
    INTERNAL_NODE_KEY,
    MAX_CHILDREN,
    MEAN_BRANCHING_FACTOR,
    VERIFICATION_KEY,
    ZERO_HASH,
    ZERO_KEY,
)
from .errors import FormatError
from .native import native_disabled

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")

# A NewType, not a class: chunk hashes are made by the million, and a bytes subclass would cost
# an object per hash. Type checkers still keep it apart from arbitrary bytes.
XetHash = NewType("XetHash", bytes)


# The four little-endian u64 lanes of a hash, converted in one call each way (a store turns
# hashes to and from text several times per object it touches).
_LANES = struct.Struct("<4Q")


def hash_to_hex(digest: bytes) -> str:
    """The XET string form: four little-endian u64 lanes, each as 16 hex digits."""
    if len(digest) != HASH_SIZE:
        raise FormatError(f"a hash is {HASH_SIZE} bytes, got {len(digest)}")
    return "{:016x}{:016x}{:016x}{:016x}".format(*_LANES.unpack(digest))


def hex_to_hash(text: str) -> XetHash:
    """Inverse of hash_to_hex; rejects anything but exactly 64 hex digits."""
    if len(text) != 2 * HASH_SIZE or not _HEX_DIGITS.issuperset(text):
        raise FormatError(f"not a 64-digit hex hash: {text[:80]!r}")
    return XetHash(_LANES.pack(int(text[0:16], 16), int(text[16:32], 16), int(text[32:48], 16), int(text[48:64], 16)))


def is_hash_hex(text: str) -> bool:
    """True when text is a well-formed hash string (safe to use in paths)."""
    return len(text) == 2 * HASH_SIZE and _HEX_DIGITS.issuperset(text)


def keyed_hash(key: bytes, data: bytes | memoryview) -> XetHash:
    """BLAKE3 keyed hash with a 32-byte key."""
    return XetHash(blake3.blake3(data, key=key).digest())


def chunk_hash(data: bytes | memoryview) -> XetHash:
    """Hash of one chunk's uncompressed bytes (DATA_KEY)."""
    return XetHash(blake3.blake3(data, key=DATA_KEY).digest())


def hmac_chunk_hash(chunk_digest: bytes, key: bytes) -> XetHash:
    """The keyed chunk hash used in global-dedup shards (xet-core calls it HMAC)."""
    return keyed_hash(key, chunk_digest)


def last_lane(digest: bytes) -> int:
    """The hash's last 8 bytes as a little-endian u64 (used for tree cuts and dedup sampling)."""
    return int.from_bytes(digest[24:32], "little")


def truncated_hash(digest: bytes) -> int:
    """The first lane as a little-endian u64: the key of shard lookup tables."""
    return int.from_bytes(digest[0:8], "little")


def hash_sort_key(digest: bytes) -> tuple[int, int, int, int]:
    """Ordering of xet-core's DataHash ([u64; 4] compared lane by lane) = hash-string order."""
    return struct.unpack("<4Q", digest)


def is_global_dedup_eligible(digest: bytes) -> bool:
    """A chunk whose hash is a multiple of 1024 in its last lane is worth a global dedup query."""
    return last_lane(digest) % GLOBAL_DEDUP_MODULUS == 0


def merged_node_hash(children: Sequence[tuple[bytes, int]]) -> tuple[XetHash, int]:
    """One internal node: keyed hash over '{hex} : {size}\\n' lines, and the summed size."""
    text = "".join(f"{hash_to_hex(h)} : {size}\n" for h, size in children)
    return keyed_hash(INTERNAL_NODE_KEY, text.encode("ascii")), sum(size for _, size in children)


def _next_merge_cut(nodes: Sequence[tuple[bytes, int]], start: int) -> int:
    """Number of nodes from `start` merged into the next parent (2..9, content defined)."""
    remaining = len(nodes) - start
    if remaining <= 2:
        return remaining
    end = min(MAX_CHILDREN, remaining)
    for i in range(2, end):
        if last_lane(nodes[start + i][0]) % MEAN_BRANCHING_FACTOR == 0:
            return i + 1
    return end


def merkle_root_reference(nodes: Sequence[tuple[bytes, int]]) -> XetHash:
    """Root of the aggregated hash tree over (hash, size) leaves; ZERO_HASH when empty.

    The specification of merkle_root's C path (`_merkle.merge_level` builds each level's node
    texts; tests compare the two) and the fallback without it."""
    if not nodes:
        return XetHash(ZERO_HASH)
    level: Sequence[tuple[bytes, int]] = nodes
    while len(level) > 1:
        parents = []
        start = 0
        while start < len(level):
            cut = _next_merge_cut(level, start)
            parents.append(merged_node_hash(level[start : start + cut]))
            start += cut
        level = parents
    return XetHash(level[0][0])


def _load_merge_level() -> Callable[[bytes, Sequence[int]], tuple[list[bytes], list[int]]] | None:
    if native_disabled():
        return None
    try:
        from ._merkle import merge_level
    except ImportError:
        return None
    return merge_level


_merge_level = _load_merge_level()


def merkle_root(nodes: Sequence[tuple[bytes, int]]) -> XetHash:
    """Root of the aggregated hash tree over (hash, size) leaves; ZERO_HASH when empty: each
    level's node texts built in C, each parent hashed here (see merkle_root_reference)."""
    if _merge_level is None or len(nodes) < 2:
        return merkle_root_reference(nodes)
    level = b"".join(h for h, _ in nodes)
    sizes: Sequence[int] = [size for _, size in nodes]
    try:
        while len(sizes) > 1:
            texts, sizes = _merge_level(level, sizes)
            level = b"".join([blake3.blake3(text, key=INTERNAL_NODE_KEY).digest() for text in texts])
    except (OverflowError, ValueError):  # sizes past 64 bits, or hashes not 32 bytes: as the reference says
        return merkle_root_reference(nodes)
    return XetHash(level)


def xorb_hash(chunk_hashes: Sequence[bytes], chunk_sizes: Sequence[int]) -> XetHash:
    """Hash of a xorb: the merkle root of its chunks (independent of compression)."""
    if len(chunk_hashes) != len(chunk_sizes):
        raise ValueError("chunk_hashes and chunk_sizes differ in length")
    return merkle_root(list(zip(chunk_hashes, chunk_sizes)))


def file_hash(chunk_hashes: Sequence[bytes], chunk_sizes: Sequence[int]) -> XetHash:
    """Hash of a file from its chunks. An empty file hashes to 32 zero bytes, as hf-xet does."""
    if not chunk_hashes:
        return XetHash(ZERO_HASH)
    return keyed_hash(ZERO_KEY, xorb_hash(chunk_hashes, chunk_sizes))


def verification_hash(chunk_hashes: Sequence[bytes]) -> XetHash:
    """Term verification hash over the raw chunk hashes of one term's chunk range."""
    return keyed_hash(VERIFICATION_KEY, b"".join(chunk_hashes))
