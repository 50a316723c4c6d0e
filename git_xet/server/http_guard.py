"""uvicorn's httptools protocol with the limits it lacks: a deadline and a size cap for headers.

uvicorn (0.5x) times out idle keep-alive connections, but not a client that opens a connection
and sends its headers slowly or never finishes them, and httptools buffers a header of any size:
300 such sockets used to lock every client out, and a 200 MiB header was read whole. Here each
request's headers must arrive within `header_timeout` seconds and `max_header_bytes` bytes, else
the connection gets 408 or 431 and is closed. (uvicorn's `limit_concurrency` bounds connections;
its `h11_max_incomplete_event_size` does not apply to httptools.)
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Set `header_timeout` and `max_header_bytes` on a subclass (see `guarded_protocol`)."""

    header_timeout = DEFAULT_HEADER_TIMEOUT
    max_header_bytes = DEFAULT_MAX_HEADER_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
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
        self._start_headers()

    def on_headers_complete(self) -> None:
        self._stop_headers()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_headers()
        super().connection_lost(exc)


def guarded_protocol(header_timeout: float, max_header_bytes: int) -> type[GuardedHttpToolsProtocol]:
    """A protocol class with these limits, for `uvicorn.Config(http=...)`."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes},
    )
