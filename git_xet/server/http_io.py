"""Request bodies and streamed responses with bounds: size, and time without progress.

A stalled upload or a client that stops reading must not pin a connection's buffers forever.
"""

from __future__ import annotations

import asyncio
import mmap
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import BinaryIO

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .errors import RequestRefused
from .http_guard import BODY_INTO, SEND_FILE, BodySink

DEFAULT_IDLE_TIMEOUT = 60.0


class _IdleWatchdog:
    """Cancels `task` once it has waited `timeout` seconds for one body part.

    One timer per body, re-armed only when it fires, rather than an asyncio.wait_for per part
    (a task and a timer handle for each of the ~3000 parts of a 768 MiB push). Only time spent
    waiting for the client counts: a handler busy between parts is not the client's delay."""

    def __init__(self, timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._timeout = timeout
        self.waiting_since: float | None = None
        self.expired = False
        self._timer = self._loop.call_later(timeout, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        since = self.waiting_since
        if since is not None and now - since >= self._timeout and self._task is not None:
            self.expired = True
            self._task.cancel()
            return
        self._timer = self._loop.call_at((since if since is not None else now) + self._timeout, self._check)

    def wait_begins(self) -> None:
        self.waiting_since = self._loop.time()

    def wait_ends(self) -> None:
        self.waiting_since = None

    def took_cancel(self) -> bool:
        """Whether a CancelledError came from this watchdog (then it is consumed)."""
        if not self.expired:
            return False
        uncancel = getattr(self._task, "uncancel", None)  # Python 3.11+
        if uncancel is not None:
            uncancel()
        return True

    def stop(self) -> None:
        self._timer.cancel()


def _declared_length(request: Request, limit: int) -> int | None:
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        return None
    if int(declared) > limit:
        raise RequestRefused(413, f"body of {declared} bytes exceeds the {limit}-byte limit")
    return int(declared)


async def _arrivals(request: Request, limit: int, idle_timeout: float, sink: BodySink | None) -> AsyncGenerator[tuple[bytes, int], None]:
    """(part, bytes received so far) per ASGI message, within body_parts' bounds. With a
    sink, the connection writes the body into it and parts are empty (except any that came
    as messages, which are written into it here)."""
    declared = _declared_length(request, limit)
    received = 0
    watchdog = _IdleWatchdog(idle_timeout)
    try:
        while True:
            watchdog.wait_begins()
            try:
                message = await request.receive()
            except asyncio.CancelledError:
                if watchdog.took_cancel():
                    raise RequestRefused(408, f"no body bytes for {idle_timeout:g} s; send the request again") from None
                raise
            watchdog.wait_ends()
            if message["type"] == "http.disconnect":
                raise RequestRefused(400, "client disconnected before sending the whole body")
            part = message.get("body", b"")
            if sink is not None:
                sink.write(part)
                received = sink.received
            else:
                received += len(part)
            if received > limit:
                raise RequestRefused(413, f"body exceeds the {limit}-byte limit")
            yield part, received
            if not message.get("more_body", False):
                break
    finally:
        watchdog.stop()
    if declared is not None and received != declared:
        raise RequestRefused(400, "body is shorter than its Content-Length")


async def body_parts(request: Request, limit: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> AsyncIterator[bytes]:
    """The body's parts as they arrive, refused (413) past `limit` bytes (before a part that
    crosses it is yielded) and (408) after `idle_timeout` seconds without a byte: iterate it
    only once the request is authorized."""
    async with aclosing(_arrivals(request, limit, idle_timeout, None)) as arrivals:  # its timer stops with us
        async for part, _ in arrivals:
            if part:
                yield part


async def body_into(request: Request, buffer: bytearray | mmap.mmap, limit: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> AsyncGenerator[int, None]:
    """The body written into `buffer` (from offset 0) as it arrives, within body_parts' bounds
    (`limit` <= len(buffer)); yields how many bytes are in after each arrival. Under our
    protocol (http_guard.BODY_INTO) the connection writes into the buffer itself; elsewhere
    (another ASGI server, a test client) each part is copied in. Nothing is written into the
    buffer once the iteration ends."""
    into = request.scope.get("extensions", {}).get(BODY_INTO)
    sink = into(buffer, limit) if into is not None else BodySink(buffer, limit)
    try:
        last = 0
        async with aclosing(_arrivals(request, limit, idle_timeout, sink)) as arrivals:
            async for _, received in arrivals:
                if received != last:
                    last = received
                    yield received
    finally:
        sink.close()


async def read_body(request: Request, limit: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> bytes:
    """The whole body, within the bounds of body_parts (for small bodies: xorbs are received
    into reusable buffers instead, see xorb_intake)."""
    return b"".join([part async for part in body_parts(request, limit, idle_timeout)])


class PacedStreamingResponse(StreamingResponse):
    """A streaming response that gives up on a client that stops reading: each piece must be
    taken within `idle_timeout` seconds, else the connection is dropped (uvicorn's send waits
    while the socket's buffer is full, so a non-reading client would otherwise pin memory)."""

    def __init__(self, content, idle_timeout: float, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.idle_timeout = idle_timeout

    async def stream_response(self, send) -> None:
        async def paced(message) -> None:
            try:
                await asyncio.wait_for(send(message), self.idle_timeout)
            except asyncio.TimeoutError:
                raise ConnectionError(f"client read nothing for {self.idle_timeout:g} s") from None

        await super().stream_response(paced)


class FileRangeResponse(Response):
    """Bytes [offset, offset + count) of an open file as the body of a GET, sent by the kernel
    where the server offers it (http_guard.SEND_FILE: no worker thread, no copy into Python, no
    ASGI message per piece); elsewhere (a HEAD, another ASGI server, a test client) `fallback`
    answers instead. The file is closed once the answer is done, either way."""

    def __init__(self, file: BinaryIO, offset: int, count: int, idle_timeout: float, fallback: Response) -> None:
        if fallback.headers.get("content-length") != str(count):
            raise ValueError(f"the fallback answer must declare Content-Length: {count}")
        super().__init__(status_code=fallback.status_code)
        self.raw_headers = fallback.raw_headers  # the same answer, however its body is sent
        self.file = file
        self.offset = offset
        self.count = count
        self.idle_timeout = idle_timeout
        self.fallback = fallback

    async def __call__(self, scope, receive, send) -> None:
        send_file = scope.get("extensions", {}).get(SEND_FILE)
        try:
            if send_file is None or scope["method"] != "GET":
                await self.fallback(scope, receive, send)
                return
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            await send_file(self.file, self.offset, self.count, self.idle_timeout)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()
