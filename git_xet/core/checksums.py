"""CRC-64/NVME, the checksum an upload grant declares for a xorb (and S3 verifies on PUT).

``crc64nvme_reference`` is the plain bitwise definition; the C extension (``_crc64``) computes
the same ~100x faster. Without the extension, ``crc64nvme`` is None: callers that need speed
(the uploader) then skip upload grants and send xorbs directly.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable

from .native import native_disabled

POLY = 0x9A6C9329AC4BC9B5  # reflected
_MASK = (1 << 64) - 1


def _table() -> list[int]:
    out = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (POLY if crc & 1 else 0)
        out.append(crc)
    return out


_TABLE = _table()


def crc64nvme_reference(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC-64/NVME of data; `crc` continues from a previous result."""
    crc = ~crc & _MASK
    for byte in bytes(data):
        crc = (crc >> 8) ^ _TABLE[(crc ^ byte) & 0xFF]
    return ~crc & _MASK


def _load_fast() -> Callable[..., int] | None:
    if native_disabled():
        return None
    try:
        from ._crc64 import crc64nvme as fast
    except ImportError:
        return None
    return fast


crc64nvme: Callable[..., int] | None = _load_fast()


def crc64nvme_of_parts(parts: Iterable[bytes | memoryview]) -> int:
    """CRC-64/NVME of the concatenation of `parts`, computed part by part (the C version where
    it is built, else the reference)."""
    checksum = crc64nvme or crc64nvme_reference
    crc = 0
    for part in parts:
        crc = checksum(part, crc)
    return crc


def crc64nvme_header(value: int) -> str:
    """The value as S3's `x-amz-checksum-crc64nvme` header: base64 of the big-endian u64."""
    return base64.b64encode(value.to_bytes(8, "big")).decode("ascii")
