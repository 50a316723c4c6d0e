"""A shard and the small xorbs it needs, in one request body: one round trip per small file.

A push of many small files to `git xet serve` costs each file a xorb upload and a shard upload,
two round trips where git-lfs `basic` makes one PUT. Our agent sends both in one body when the
xorbs are small (the server then stores each xorb, verified, before it registers the shard:
the same order, the same checks, as the two requests). Only our server accepts it, and our
client sends it only to a server of ours; the Hub and hf-xet never see it.

Layout, all integers little-endian::

    u32 count                          number of xorbs, at most MAX_BUNDLE_XORBS
    count x (32-byte xorb hash, u32 length)
    the xorb bodies, in that order     footerless, as POST /v1/xorbs takes them
    the shard                          upload form, the rest of the body
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .errors import FormatError
from .hashes import XetHash

MAX_BUNDLE_XORBS = 16
_COUNT = struct.Struct("<I")
_ENTRY = struct.Struct("<32sI")


def pack_bundle(xorbs: Sequence[tuple[bytes, bytes | memoryview]], shard: bytes) -> bytes:
    """The body for `xorbs` ((raw hash, footerless body) pairs) and `shard`."""
    if len(xorbs) > MAX_BUNDLE_XORBS:
        raise ValueError(f"a bundle holds at most {MAX_BUNDLE_XORBS} xorbs, not {len(xorbs)}")
    head = _COUNT.pack(len(xorbs)) + b"".join(_ENTRY.pack(bytes(xorb_hash), len(body)) for xorb_hash, body in xorbs)
    return b"".join([head, *(bytes(body) for _, body in xorbs), shard])


def parse_bundle(body: bytes | memoryview) -> tuple[list[tuple[XetHash, memoryview]], memoryview]:
    """The xorbs ((raw hash, body view) pairs) and the shard of a bundle; FormatError for
    anything else (too many xorbs, lengths beyond the body, an empty shard)."""
    view = memoryview(body).cast("B")
    if len(view) < _COUNT.size:
        raise FormatError("an upload bundle starts with its xorb count")
    (count,) = _COUNT.unpack_from(view)
    if count > MAX_BUNDLE_XORBS:
        raise FormatError(f"an upload bundle holds at most {MAX_BUNDLE_XORBS} xorbs, not {count}")
    pos = _COUNT.size + count * _ENTRY.size
    if len(view) < pos:
        raise FormatError("the upload bundle ends inside its xorb table")
    xorbs: list[tuple[XetHash, memoryview]] = []
    for i in range(count):
        xorb_hash, length = _ENTRY.unpack_from(view, _COUNT.size + i * _ENTRY.size)
        if length == 0 or pos + length > len(view):
            raise FormatError(f"xorb {i} of the upload bundle is empty or runs past its end")
        xorbs.append((XetHash(xorb_hash), view[pos : pos + length]))
        pos += length
    if pos == len(view):
        raise FormatError("the upload bundle holds no shard")
    return xorbs, view[pos:]
