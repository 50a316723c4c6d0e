"""What git-xet asks of httpcore's kept-alive connections (the pool beneath httpx) beyond its
defaults, set once when client/http_client.py is imported. httpcore has no hooks for these, so
they wrap four methods of its HTTP/1.1 connection; each is checked by
tests/integration/test_http_client.py against servers that misbehave on purpose.

- Reading: 256 KiB per call, not 64 KiB (a xorb range is up to 64 MiB): fetching the ranges of
  a 256 MiB file from `git xet serve` on 127.0.0.1 took 0.44 client CPU-seconds, not 0.59 (a
  quarter less per-piece work in h11 and httpcore).
- Reuse: a connection whose answer was followed by more bytes than it declared (already read
  into h11's buffer, so httpcore's check that an idle socket is unreadable cannot see them) is
  closed, not reused: the next request would get those bytes as its answer, or a protocol error.
- Writing: a request's head goes out in one write with its body when the body is small
  (COALESCE_BELOW), not in a write of its own: a small upload (a bundle of one small file's xorb
  and shard) costs one send, and the server one wake-up to read it, not two.
- Resending: a request on a reused connection that the server closed while it was idle (the
  close crossing the request on the wire: no answer byte came back) goes once more, on another
  connection, when that cannot do anything twice: a method that is idempotent, or a request
  whose head never left (its first write failed). Other requests fail with the TransportError
  that client/retry.py's policy retries (a POST that may have arrived is its caller's to judge).
"""

from __future__ import annotations

from typing import Any

import h11
import httpcore
from httpcore._sync.http11 import HTTP11Connection

READ_PIECE = 256 << 10
COALESCE_BELOW = 256 << 10  # bodies under this go out in one write with their request's head
_IDEMPOTENT = frozenset({b"GET", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"TRACE"})
_RESENT = "git_xet.resent"  # request.extensions key: this request was resent once already
_UNSENT = "_git_xet_head_unsent"  # connection attribute: the last request's head failed to go
_HELD = "_git_xet_held_head"  # connection attribute: a head's bytes, to go with the body's first piece


def _answer_closed(original: Any) -> Any:
    def closed(self: HTTP11Connection) -> None:
        original(self)
        if self.is_idle():
            leftover, ended = self._h11_state.trailing_data
            if leftover or ended:
                self.close()

    return closed


def _head_sent(original: Any) -> Any:
    def send(self: HTTP11Connection, request: httpcore.Request) -> None:
        setattr(self, _UNSENT, True)
        setattr(self, _HELD, None)  # (none left by a request that failed before its body)
        original(self, request)  # (a WriteError here: httpcore goes on to read an answer)
        if getattr(self, _HELD, None) is None:  # else it leaves with the body (_coalesced)
            setattr(self, _UNSENT, False)

    return send


def _small_body(event: h11.Request) -> bool:
    """Whether the request declares a body of 1 to COALESCE_BELOW - 1 bytes."""
    for name, value in event.headers:
        if name == b"content-length":
            return value.isdigit() and 0 < int(value) < COALESCE_BELOW
    return False


def _coalesced(original: Any) -> Any:
    def send_event(self: HTTP11Connection, event: h11.Event, timeout: float | None = None) -> None:
        held: bytes | None = getattr(self, _HELD, None)
        if held is not None:
            setattr(self, _HELD, None)
            if isinstance(event, h11.Data):
                self._network_stream.write(held + (self._h11_state.send(event) or b""), timeout=timeout)
                setattr(self, _UNSENT, False)
                return
            self._network_stream.write(held, timeout=timeout)  # (no body piece came: the head alone)
            setattr(self, _UNSENT, False)
        elif isinstance(event, h11.Request) and _small_body(event):
            setattr(self, _HELD, self._h11_state.send(event))  # h11 has framed it: written with the body
            return
        original(self, event, timeout)

    return send_event


def _stale_resent(original: Any) -> Any:
    def handle(self: HTTP11Connection, request: httpcore.Request) -> httpcore.Response:
        try:
            return original(self, request)
        except (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError):
            reused = self._request_count > 1
            unanswered = self._h11_state.their_state is h11.SEND_RESPONSE and not self._h11_state.trailing_data[0]
            harmless = request.method in _IDEMPOTENT or getattr(self, _UNSENT, False)
            if reused and unanswered and harmless and not request.extensions.get(_RESENT):
                request.extensions[_RESENT] = True
                raise httpcore.ConnectionNotAvailable() from None  # the pool's cue to take another connection
            raise

    return handle


def configure() -> None:
    """Set the above on httpcore's HTTP/1.1 connections (once per process)."""
    if getattr(HTTP11Connection, "_git_xet_configured", False):
        return
    HTTP11Connection.READ_NUM_BYTES = READ_PIECE
    HTTP11Connection._response_closed = _answer_closed(HTTP11Connection._response_closed)  # type: ignore[method-assign]
    HTTP11Connection._send_request_headers = _head_sent(HTTP11Connection._send_request_headers)  # type: ignore[method-assign]
    HTTP11Connection._send_event = _coalesced(HTTP11Connection._send_event)  # type: ignore[method-assign]
    HTTP11Connection.handle_request = _stale_resent(HTTP11Connection.handle_request)  # type: ignore[method-assign]
    HTTP11Connection._git_xet_configured = True  # type: ignore[attr-defined]
