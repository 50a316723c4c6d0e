"""Deterministic test data, including xet-core's splitmix64 generator (its chunking vectors use it)."""

from __future__ import annotations

import random
import struct

_U64 = (1 << 64) - 1


def splitmix64_bytes(n: int, seed: int) -> bytes:
    """xet-core's create_random_data(n, seed): splitmix64 outputs as little-endian u64s, truncated."""
    state = seed
    out = bytearray()
    while len(out) < n:
        state = (state + 0x9E3779B97F4A7C15) & _U64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
        out += struct.pack("<Q", z ^ (z >> 31))
    return bytes(out[:n])


def random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def float32_like(n: int, seed: int) -> bytes:
    """Structured data resembling float32 weights: similar exponent bytes, noisy mantissas."""
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 0.02) for _ in range(n // 4 + 1)]
    return struct.pack(f"<{len(values)}f", *values)[:n]


def mask_hit_window(seed: int = 1) -> bytes:
    """64 bytes after which the gearhash state satisfies the cut mask (h & MASK == 0).

    Found by scanning random data with the reference-checked chunker: any cut that is not a
    forced 128 KiB cut is a mask hit, and the state depends only on the last 64 bytes.
    """
    from git_xet.core.chunking import chunk_boundaries
    from git_xet.core.constants import MAX_CHUNK_SIZE

    data = random_bytes(4_000_000, seed)
    prev = 0
    for end in chunk_boundaries(data):
        if end - prev < MAX_CHUNK_SIZE and end < len(data):
            return data[end - 64 : end]
        prev = end
    raise AssertionError("no mask hit found")


def planted(size: int, hit_ends: list[int], seed: int = 7) -> bytes:
    """Random data of `size` bytes with a mask-hit window ending at each offset in hit_ends."""
    data = bytearray(random_bytes(size, seed))
    window = mask_hit_window()
    for end in hit_ends:
        data[end - 64 : end] = window
    return bytes(data)
