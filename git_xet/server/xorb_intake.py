"""Uploaded xorbs: received into reusable buffers and verified while they arrive.

Joining a 64 MiB body from its parts cost a fresh 64 MiB allocation per upload (page faults
on every byte) and a second copy of the body in memory; the chunk hashes then waited until
the last byte. Here each part is copied once into a buffer of MAX_XORB_BODY bytes taken from
a small pool (by the connection itself under our protocol: see http_io.body_into), and a
worker thread hashes the complete chunk records (and the CRC-64 a grant declares) every
ADVANCE_STEP bytes, so when the body is in, little verification is left.

Memory per request stays what it was: one buffer of at most MAX_XORB_BODY bytes, and the
body limits of body_parts apply. Idle buffers are kept for reuse (KEPT_BUFFERS at most) and
marked MADV_FREE, so the kernel may take their pages back under memory pressure.
"""

from __future__ import annotations

import asyncio
import mmap
import threading
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass

from starlette.requests import Request

from ..core.xorb import MAX_XORB_BODY_BYTES
from ..core.xorb_stream import StreamingXorbVerifier
from ..platform.memory import anonymous_buffer, free_pages
from .http_io import body_into
from .worker_threads import in_worker

# The largest serialized xorb verify_xorb accepts, plus room for a footer a client may send.
MAX_XORB_BODY = MAX_XORB_BODY_BYTES + 1024 * 1024
# Bytes received between two verification steps: large enough that a step's thread hand-off
# is negligible, small enough that little hashing is left once the last byte arrives.
ADVANCE_STEP = 4 * 1024 * 1024
KEPT_BUFFERS = 4


class ReceiveBuffers:
    """Anonymous maps of MAX_XORB_BODY bytes, reused across uploads (a fresh one costs its
    page faults again); any number may be out at once, at most `keep` are kept when idle."""

    def __init__(self, keep: int = KEPT_BUFFERS, size: int = MAX_XORB_BODY) -> None:
        self.size = size
        self._keep = keep
        self._idle: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return anonymous_buffer(self.size)  # private: MADV_FREE applies to private anonymous memory only

    def give_back(self, buffer: mmap.mmap) -> None:
        with self._lock:
            if len(self._idle) >= self._keep:
                return  # unmapped once the last view of it is gone
            free_pages(buffer)
            self._idle.append(buffer)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


@dataclass(frozen=True)
class ReceivedXorb:
    """A complete body: its length and the verifier that has followed it."""

    length: int
    verifier: StreamingXorbVerifier


@asynccontextmanager
async def receive_xorb(request: Request, buffers: ReceiveBuffers, limit: int, idle_timeout: float, crc: bool = False) -> AsyncIterator[ReceivedXorb]:
    """Receive the request's body (within body_parts' bounds, `limit` <= the buffer size) into
    a pooled buffer, verifying it as it arrives; the buffer goes back to the pool when the
    block ends, so store the verified xorb inside it."""
    if limit > buffers.size:
        raise ValueError(f"a body limit of {limit} bytes does not fit a {buffers.size}-byte buffer")
    buffer = buffers.take()
    stepping: asyncio.Future[None] | None = None
    try:
        verifier = StreamingXorbVerifier(buffer, crc=crc)
        received = stepped = 0
        async with aclosing(body_into(request, buffer, limit, idle_timeout)) as arrivals:  # closed: no byte lands after
            async for received in arrivals:
                if received - stepped >= ADVANCE_STEP and (stepping is None or stepping.done()):
                    if stepping is not None:
                        stepping.result()
                    stepping = asyncio.ensure_future(in_worker(verifier.advance, received))
                    stepped = received
        if stepping is not None:
            await stepping
        yield ReceivedXorb(received, verifier)
    finally:
        if stepping is not None and not stepping.done():
            # A step still reads the buffer: it must not be handed to another upload before.
            await asyncio.wait([stepping])
        buffers.give_back(buffer)
