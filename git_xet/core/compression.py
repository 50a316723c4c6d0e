"""Chunk compression: None, LZ4 (frame format) and ByteGrouping4 + LZ4, with a selection policy.

Decoders are bounded: the declared uncompressed size (at most MAX_CHUNK_SIZE) caps what the
LZ4 decoder may produce, so a hostile payload cannot make us allocate more than that.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import IntEnum

import lz4.block
import lz4.frame

from .constants import MAX_CHUNK_SIZE
from .errors import FormatError
from .native import native_disabled


class CompressionScheme(IntEnum):
    NONE = 0
    LZ4 = 1
    BG4_LZ4 = 2


def bg4_split(data: bytes | memoryview) -> bytes:
    """Byte grouping: all bytes at i % 4 == 0, then 1, 2, 3 (extra bytes go to the first groups)."""
    raw = bytes(data)
    return raw[0::4] + raw[1::4] + raw[2::4] + raw[3::4]


def bg4_join(grouped: bytes | memoryview, length: int) -> bytes:
    """Inverse of bg4_split for an original of `length` bytes."""
    if len(grouped) != length:
        raise FormatError(f"byte-grouped data is {len(grouped)} bytes, expected {length}")
    base, extra = divmod(length, 4)
    out = bytearray(length)
    pos = 0
    for lane in range(4):
        size = base + (1 if lane < extra else 0)
        out[lane::4] = grouped[pos : pos + size]
        pos += size
    return bytes(out)


# The frame header leaves out the content size (the chunk header has it): 8 bytes a chunk fewer
# than python-lz4's default. Every LZ4 frame decoder (lz4_flex in hf-xet, lz4js in
# huggingface.js, liblz4 here) reads each of the three encodings below.
HC_LEVEL = 3
# LZ4HC is tried on chunks that fast LZ4 shrinks below this share of their size.
HC_TRY_BELOW = 0.75
_BLOCK = 64 * 1024
# Frame descriptor for independent 64 KiB blocks without content size: FLG, BD, header checksum.
_INDEPENDENT_HEADER = bytes.fromhex("04224d18604082")
_RAW_BLOCK_FLAG = 0x80000000


def _lz4_compress(data: bytes | memoryview, level: int = 0) -> bytes:
    """One LZ4 frame: fast mode with linked 64 KiB blocks, or LZ4HC (`level`) in one block per
    chunk (at most 128 KiB), which encodes a long run shortest."""
    if level:
        return lz4.frame.compress(data, compression_level=level, store_size=False, block_size=lz4.frame.BLOCKSIZE_MAX256KB)
    return lz4.frame.compress(data, store_size=False)


def _lz4_independent_blocks(data: bytes | memoryview) -> bytes:
    """One LZ4 frame of independently compressed 64 KiB blocks, hf-xet's layout (lz4_flex's
    default). liblz4's one-shot block compressor indexes a block under 64 KiB more densely than
    its streaming mode, so on small chunks this frame is often the shorter one."""
    out = bytearray(_INDEPENDENT_HEADER)
    view = memoryview(data)
    for start in range(0, len(view), _BLOCK):
        block = view[start : start + _BLOCK]
        packed = lz4.block.compress(block, store_size=False)
        if len(packed) < len(block):
            out += len(packed).to_bytes(4, "little") + packed
        else:
            out += (len(block) | _RAW_BLOCK_FLAG).to_bytes(4, "little") + block
    out += bytes(4)  # end mark
    return bytes(out)


def _lz4_decompress(payload: bytes | memoryview, size: int) -> bytes:
    decoder = lz4.frame.LZ4FrameDecompressor()
    try:
        out = decoder.decompress(payload, max_length=size)
    except RuntimeError as exc:  # python-lz4 reports malformed frames as RuntimeError
        raise FormatError(f"corrupt LZ4 frame: {exc}") from None
    if len(out) != size or not decoder.eof:
        raise FormatError(f"LZ4 frame does not decode to the declared {size} bytes")
    return out


def compress(data: bytes | memoryview, scheme: CompressionScheme) -> bytes:
    """Encode `data` with exactly `scheme` (no fallback; see compress_chunk for the policy)."""
    if scheme is CompressionScheme.NONE:
        return bytes(data)
    if scheme is CompressionScheme.LZ4:
        return _lz4_compress(data)
    if scheme is CompressionScheme.BG4_LZ4:
        return _lz4_compress(bg4_split(data))
    raise FormatError(f"unknown compression scheme {scheme!r}")


def decompress(payload: bytes | memoryview, scheme: int, uncompressed_size: int) -> bytes | memoryview:
    """Decode one chunk payload; never produces more than `uncompressed_size` bytes.

    A raw (NONE) payload comes back as it was passed, uncopied: hashing and writing it need no
    copy, and most chunks of incompressible data are raw.
    """
    if not 0 < uncompressed_size <= MAX_CHUNK_SIZE:
        raise FormatError(f"chunk size {uncompressed_size} outside 1..{MAX_CHUNK_SIZE}")
    if scheme == CompressionScheme.NONE:
        if len(payload) != uncompressed_size:
            raise FormatError("uncompressed chunk payload length differs from its declared size")
        return payload
    if scheme == CompressionScheme.LZ4:
        return _lz4_decompress(payload, uncompressed_size)
    if scheme == CompressionScheme.BG4_LZ4:
        return bg4_join(_lz4_decompress(payload, uncompressed_size), uncompressed_size)
    raise FormatError(f"unknown compression scheme {scheme}")


def compress_chunk(data: bytes | memoryview, preferred: CompressionScheme) -> tuple[CompressionScheme, bytes | memoryview]:
    """Compress with `preferred`, or store raw when that does not make the chunk smaller
    (then `data` itself comes back, uncopied).

    The shortest of a few LZ4 frames: hf-xet's encoder (lz4_flex) picks other matches than
    liblz4, and no single liblz4 mode is always as short, so a chunk of one 64 KiB block that
    fast mode shrinks is compressed again one-shot (a denser match index below 64 KiB). On clearly compressible chunks (text, tables,
    sparse data) LZ4HC is tried too: a third shorter than either. An incompressible chunk
    (most weights) pays one fast pass, which gives up quickly on noise.
    """
    if preferred is not CompressionScheme.NONE:
        source = bg4_split(data) if preferred is CompressionScheme.BG4_LZ4 else data
        packed = _lz4_compress(source)
        if len(packed) < len(data) <= _BLOCK:  # one block, compressible: one-shot may do better
            packed = min(packed, _lz4_independent_blocks(source), key=len)
        if len(packed) < HC_TRY_BELOW * len(data):
            packed = min(packed, _lz4_compress(source, HC_LEVEL), key=len)
        if len(packed) < len(data):
            return preferred, packed
    return CompressionScheme.NONE, data


_POPCOUNT = bytes(bin(i).count("1") for i in range(256))
_POPCOUNT_VALUES = [bytes([v]) for v in range(9)]
BG4_KL_THRESHOLD = 0.02


def lane_popcount_histograms_reference(sample: bytes | memoryview) -> tuple[int, ...]:
    """For each lane k (bytes at i % 4 == k), how many bytes have popcount p: entry 9 * k + p.

    The specification of the C ``_bg4.lane_popcount_histograms`` (tests compare the two) and
    the fallback without it.
    """
    raw = bytes(sample)
    out: list[int] = []
    for lane in range(4):
        counts = raw[lane::4].translate(_POPCOUNT)
        out.extend(counts.count(v) for v in _POPCOUNT_VALUES)
    return tuple(out)


def _load_histograms() -> Callable[[bytes | memoryview], tuple[int, ...]]:
    if native_disabled():
        return lane_popcount_histograms_reference
    try:
        from ._bg4 import lane_popcount_histograms
    except ImportError:
        return lane_popcount_histograms_reference
    return lane_popcount_histograms


lane_popcount_histograms = _load_histograms()


def bg4_recommended(sample: bytes | memoryview) -> bool:
    """xet-core's BG4 predictor: compare per-lane popcount histograms to the pooled one.

    Structured data (floats, ints) has lanes whose bytes look different (e.g. exponent bytes vs
    mantissa bytes); when the largest KL divergence of a lane's distribution of per-byte
    popcounts from the pooled distribution exceeds 0.02, grouping bytes by lane helps LZ4.
    """
    flat = lane_popcount_histograms(sample)
    histograms = [flat[9 * lane : 9 * lane + 9] for lane in range(4)]
    pooled = [1 + sum(h[j] for h in histograms) for j in range(9)]
    pooled_total = sum(pooled) - 9  # the +1 smoothing is not counted, as in xet-core
    max_kl = 0.0
    for hist in histograms:
        total = sum(hist)
        if 0 in hist:
            # xet-core sums p * ln(p / q) over all nine counts: an empty one makes the sum NaN
            # (0 * -inf), and Rust's f64::max keeps the other operand, so such a lane never
            # decides. Matched here, or equal chunks would get different schemes than hf-xet's.
            continue
        kl = 0.0
        for j in range(9):
            p = hist[j] / total
            kl += p * math.log(p / (pooled[j] / pooled_total))
        max_kl = max(max_kl, kl)
    return max_kl > BG4_KL_THRESHOLD


def predict_scheme(sample: bytes | memoryview) -> CompressionScheme:
    """The scheme to try for a run of chunks that `sample` represents."""
    return CompressionScheme.BG4_LZ4 if bg4_recommended(sample) else CompressionScheme.LZ4
