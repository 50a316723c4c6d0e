"""uvicorn's httptools protocol with the limits it lacks: a deadline and a size cap for headers.

uvicorn (0.5x) times out idle keep-alive connections, but not a client that opens a connection
and sends its headers slowly or never finishes them, and httptools buffers a header of any size:
300 such sockets used to lock every client out, and a 200 MiB header was read whole. Here each
request's headers must arrive within `header_timeout` seconds and `max_header_bytes` bytes, else
the connection gets 408 or 431 and is closed. (uvicorn's `limit_concurrency` bounds connections;
its `h11_max_incomplete_event_size` does not apply to httptools.)

It also lets a handler take a request's body straight into a buffer of its own (BODY_INTO in
the scope's extensions): uvicorn copies each part three times before the handler sees it (into
the cycle's bytearray, into a bytes for the ASGI message, then the handler's copy), which was
a fifth of the event loop's CPU on a 768 MiB push. A sink takes one copy, and reading never
pauses for the handler: the buffer is bounded, not the queue.

A body of declared length goes further: once a handler has taken it, the socket reads the rest
of it straight into the handler's buffer (recv_into, through an asyncio BufferedProtocol put in
the connection's place until the body's last byte), instead of into a bytes object that the
HTTP parser copies again into a slice for us to copy in. On a 1 GiB upload those copies and
their callbacks were a fifth of the time the server held the interpreter lock, and reading
directly took the event loop's thread from 1.1-1.3 to 0.8 s of CPU. The parser never sees
those bytes, so the connection gets a fresh one for its next request.

And it lets a handler send a response body from a file with sendfile(2) (SEND_FILE): a xorb
range served in pieces went through a worker thread, a copy into Python and the ASGI send
chain for each piece, and a download's client spent most of its time waiting on that loop.
"""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import functools
import mmap
from collections.abc import Iterable
from typing import BinaryIO, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from ..platform.sendfile import native_sendfile

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
# The scope extension under which a handler finds `into(buffer, limit) -> BodySink`.
BODY_INTO = "git-xet.body_into"
# The scope extension under which a handler finds
# `await send_file(file, offset, count, idle_timeout) -> bytes sent`.
SEND_FILE = "git-xet.send_file"
# What one sendfile(2) call is given at most: each such piece must leave within the idle
# timeout (a piece of the streamed answers it replaces was 960 KiB).
SEND_FILE_PIECE = 1 << 20
# What one read of a body goes into when it has nowhere to land (past the limit, or after the
# handler let go of its buffer): counted, then dropped.
DISCARD_BYTES = 256 * 1024


class BodySink:
    """The rest of one request's body, written into `buffer` as the connection receives it.

    Bytes past `limit` are counted, never written (the handler refuses the body once
    `received > limit`); after close() nothing is written, so the buffer may go to another
    request even while this one's client is still sending."""

    def __init__(self, buffer: bytearray | mmap.mmap, limit: int) -> None:
        if limit > len(buffer):
            raise ValueError(f"a body limit of {limit} bytes does not fit a {len(buffer)}-byte buffer")
        self.buffer: bytearray | mmap.mmap | None = buffer
        self.limit = limit
        self.received = 0

    def write(self, data: bytes) -> None:
        end = self.received + len(data)
        if self.buffer is not None and end <= self.limit:
            self.buffer[self.received : end] = data
        self.received = end

    def space(self, most: int) -> memoryview | None:
        """Where the next at most `most` bytes are to be read into: the buffer right after what
        is in, up to the limit; None past the limit or once closed (such bytes are only
        counted). Call advance() with how many were read, before any other call."""
        if self.buffer is None or self.received >= self.limit:
            return None
        return memoryview(self.buffer)[self.received : self.received + min(most, self.limit - self.received)]

    def advance(self, count: int) -> None:
        """`count` bytes were read into space()."""
        self.received += count

    def close(self) -> None:
        self.buffer = None


class _DirectBody(asyncio.BufferedProtocol):
    """The connection's protocol while the rest of a declared-length body is read straight into
    its sink (see the module's docstring): `remaining` bytes, never one more, so that a
    pipelined request's bytes stay in the socket for the HTTP protocol, which takes the
    connection back after the body's last byte."""

    def __init__(self, owner: GuardedHttpToolsProtocol, sink: BodySink, remaining: int) -> None:
        self.owner = owner
        self.sink = sink
        self.remaining = remaining
        self.discard = bytearray(0)

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.sink.space(self.remaining)
        if view is None:
            if not self.discard:
                self.discard = bytearray(DISCARD_BYTES)
            view = memoryview(self.discard)[: min(self.remaining, DISCARD_BYTES)]
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.sink.advance(nbytes)
        self.remaining -= nbytes
        self.owner.body_read_directly(nbytes, done=self.remaining == 0)

    def eof_received(self) -> None:
        self.owner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.owner.pause_writing()

    def resume_writing(self) -> None:
        self.owner.resume_writing()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Set `header_timeout` and `max_header_bytes` on a subclass (see `guarded_protocol`)."""

    header_timeout = DEFAULT_HEADER_TIMEOUT
    max_header_bytes = DEFAULT_MAX_HEADER_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._sink: tuple[RequestResponseCycle, BodySink] | None = None
        self._body_seen = 0  # bytes of the current message's body read so far, by the parser or directly
        self._start_headers()

    def _start_headers(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _stop_headers(self) -> None:
        self._in_headers = False
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, status_line: bytes) -> None:
        self._stop_headers()
        if not self.transport.is_closing():
            self.transport.write(status_line + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._in_headers:
            self._refuse(b"HTTP/1.1 408 Request Timeout")

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._in_headers and self._header_bytes > self.max_header_bytes:
            self._refuse(b"HTTP/1.1 431 Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._body_seen = 0
        self._start_headers()

    def on_headers_complete(self) -> None:
        self._stop_headers()
        super().on_headers_complete()
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # else no request to run (an upgrade)
            extensions = cast("dict[str, object]", cycle.scope.setdefault("extensions", {}))
            extensions[BODY_INTO] = functools.partial(self._body_into, cycle)
            if native_sendfile(self.loop):
                extensions[SEND_FILE] = functools.partial(self._send_file, cycle)

    def _body_into(self, cycle: RequestResponseCycle, buffer: bytearray | mmap.mmap, limit: int) -> BodySink:
        """A sink for the rest of `cycle`'s body, holding what already arrived."""
        sink = BodySink(buffer, limit)
        if cycle.body:
            sink.write(bytes(cycle.body))
            cycle.body = type(cycle.body)()
        if not cycle.more_body:  # it is all in: on_body has nothing more for this sink
            return sink
        length = _declared_length(cycle.scope["headers"])
        remaining = None if length is None else length - self._body_seen
        # The parser's current message is `cycle`'s (its body is not over, so no later one has
        # begun), and its length is known: the socket can read the rest into the sink.
        if remaining and cycle is self.cycle and self._reads_into_buffers():
            self.transport.set_protocol(_DirectBody(self, sink, remaining))
        else:
            self._sink = (cycle, sink)
        return sink

    def _reads_into_buffers(self) -> bool:
        """Whether the transport reads into a BufferedProtocol's buffers: asyncio's own plain
        socket transport does (a selector loop's, without TLS); we do not count on others."""
        return self.scheme == "http" and isinstance(self.loop, asyncio.selector_events.BaseSelectorEventLoop)

    def body_read_directly(self, count: int, done: bool) -> None:
        """_DirectBody read `count` more bytes of the current request's body (`done`: its last;
        no other message begins meanwhile: the parser sees nothing). The parser waits for a
        body it never saw: a fresh one (configured as uvicorn configures its own) parses the
        connection's next request."""
        self._unset_keepalive_if_required()
        self._body_seen += count
        if done:
            self.transport.set_protocol(self)
            self.parser = httptools.HttpRequestParser(self)
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
            self.on_message_complete()
        self.cycle.message_event.set()

    async def _send_file(self, cycle: RequestResponseCycle, file: BinaryIO, offset: int, count: int, idle_timeout: float) -> int:
        """Send `count` bytes of `file` from `offset` as (part of) the body of `cycle`'s
        response, whose start has been sent with a Content-Length: the kernel copies from
        the page cache to the socket. The handler then ends the body with an empty last
        message. A client that takes nothing for `idle_timeout` seconds is disconnected."""
        if not cycle.response_started or cycle.response_complete or cycle.chunked_encoding is not False:
            raise RuntimeError("send_file needs a started response with a Content-Length")
        if count > cycle.expected_content_length or cycle.scope["method"] == "HEAD":
            raise RuntimeError("send_file would send more than the response's Content-Length")
        sent = 0
        while sent < count:
            if cycle.disconnected or self.transport.is_closing():
                raise ConnectionError("client disconnected")
            piece = min(SEND_FILE_PIECE, count - sent)
            try:
                done = await asyncio.wait_for(self.loop.sendfile(self.transport, file, offset + sent, piece), idle_timeout)
            except asyncio.TimeoutError:
                self.transport.close()  # part of a piece may be out: the answer is broken
                raise ConnectionError(f"client read nothing for {idle_timeout:g} s") from None
            if done != piece:
                self.transport.close()
                raise OSError(f"the file ended {count - sent - done} bytes early")
            sent += done
        cycle.expected_content_length -= sent
        return sent

    def on_body(self, body: bytes) -> None:
        self._body_seen += len(body)
        taken = self._sink
        if taken is None or taken[0] is not self.cycle or self.cycle.response_complete:
            super().on_body(body)
            return
        taken[1].write(body)
        self.cycle.message_event.set()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._sink = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_headers()
        super().connection_lost(exc)


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The Content-Length of a message with these (lower-cased) headers; None when its body is
    chunked or its length is not one plain number (the parser refuses such a message)."""
    headers = list(headers)
    lengths = [value.strip() for name, value in headers if name == b"content-length"]
    if len(lengths) != 1 or not lengths[0].isdigit() or any(name == b"transfer-encoding" for name, _ in headers):
        return None
    return int(lengths[0])


def guarded_protocol(header_timeout: float, max_header_bytes: int) -> type[GuardedHttpToolsProtocol]:
    """A protocol class with these limits, for `uvicorn.Config(http=...)`."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes},
    )
