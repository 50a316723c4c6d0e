"""Bytes held as consecutive parts where they already lie, joined only where one buffer is needed.

An uploaded xorb is mostly raw chunks, and those are already in memory: in the map of the
file being pushed. Copying them into one 64 MiB body cost an agent, per 256 MiB pushed on the
reference VM, ~0.1 CPU-s of copy and ~0.25 CPU-s of faulting in the buffer's fresh pages, a
fifth of its CPU. A ScatteredBytes body is instead the records' headers (and any compressed
payloads) in the builder's buffer, between views of the file; httpx sends the parts as they
are, small neighbours joined (client/http_client.py), and what needs one buffer (a store that
verifies a xorb) calls `contiguous()`.
"""

from __future__ import annotations

from collections.abc import Sequence


class ScatteredBytes:
    """The concatenation of `parts`, without joining them.

    Valid while what the parts view stays unchanged; `release()` ends the parts' views, so a
    later use fails instead of reading a buffer someone reuses.
    """

    __slots__ = ("_length", "_released", "parts")

    def __init__(self, parts: Sequence[bytes | memoryview]) -> None:
        self.parts = tuple(parts)
        self._length = sum(len(part) for part in self.parts)
        self._released = False

    def __len__(self) -> int:
        return self._length

    def joined(self) -> bytes:
        if self._released:
            raise ValueError("these bytes were released")
        return b"".join(self.parts)

    def release(self) -> None:
        self._released = True
        for part in self.parts:
            if isinstance(part, memoryview):
                part.release()


# What the client sends as a request body or a xorb: one buffer, or parts.
OutgoingBytes = bytes | memoryview | ScatteredBytes


def parts_of(data: OutgoingBytes) -> Sequence[bytes | memoryview]:
    """`data` as a sequence of buffers (one, unless it is scattered)."""
    return data.parts if isinstance(data, ScatteredBytes) else (data,)


def contiguous(data: OutgoingBytes) -> bytes | memoryview:
    """`data` in one buffer: as it is, or its parts joined (one copy)."""
    return data.joined() if isinstance(data, ScatteredBytes) else data
