"""GET of a xorb byte range, received straight into the caller's buffer.

A download's bytes nearly all arrive as xorb ranges. Through httpx every piece of a body
becomes a new bytes object, h11 joins pieces into another, and the caller copies the result
into its window: ~0.15 CPU s per 256 MiB here, against ~0.06 s for http.client's `readinto`,
which has the kernel copy each piece into the window itself (`python bench/transfer.py`,
client CPU on download). So a plain range GET goes this way: a direct connection (the caller
uses this reader only when the environment names no proxy), one kept-alive connection per
thread and origin, and an answer 200 or 206 with its body as it is (http.client asks for
`Accept-Encoding: identity`). A redirect is not followed here: the caller is told (None) and
asks again through its httpx client, which follows it as it does for every other request.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from typing import NamedTuple

from .errors import TransferError
from .plain_transport import open_connection, peer_closed

_REDIRECTS = (301, 302, 303, 307, 308)


class RangeAnswer(NamedTuple):
    """What a range GET got: its status; for 200/206 how many bytes of the window were
    filled, for anything else the start of the body (for the error message) and Retry-After."""

    status: int
    received: int = 0
    error_body: bytes = b""
    retry_after: str = ""


class DirectRangeReader:
    """Range GETs over http.client, one kept-alive connection per (thread, origin).

    `tls()` gives the TLS context for https:// origins, asked for on first use (loading the
    system's certificates costs ~20 ms, and most agents never need it). Timeouts: `connect_timeout`
    to connect, `read_timeout` for each wait on the socket after that (a stalled transfer
    fails and the caller's retries take over). Of a refusal's body, at most `error_limit` bytes
    are kept (for its message)."""

    def __init__(
        self, *, connect_timeout: float, read_timeout: float, headers: dict[str, str], tls: Callable[[], ssl.SSLContext], error_limit: int
    ) -> None:
        self._connect_timeout = connect_timeout
        self._error_limit = error_limit
        self._read_timeout = read_timeout
        self._headers = dict(headers)
        self._tls = tls
        self._local = threading.local()

    def _connections(self) -> dict[tuple[str, str, int], http.client.HTTPConnection]:
        pool = getattr(self._local, "connections", None)
        if pool is None:
            pool = self._local.connections = {}
        return pool

    def close(self) -> None:
        """Close this thread's connections (others close when their thread's state goes)."""
        for conn in self._connections().values():
            conn.close()
        self._connections().clear()

    def read_into(self, url: str, headers: dict[str, str], window: memoryview, skip: int) -> RangeAnswer | None:
        """GET `url` with `headers` and put bytes [skip, skip + len(window)) of a 200 body (a
        server that ignored Range; reading stops at the window's end), or the whole of a 206
        body, into `window`: a 206 body longer than the window is an error (TransferError).
        None: the answer is a redirect, for the caller to follow. Connection failures raise
        TransferError (retryable); a half-read connection is closed, never reused."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise TransferError(f"cannot download from a {scheme or 'relative'} URL", retryable=False)
        port = parts.port or (443 if scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        key = (scheme, parts.hostname, port)
        pool = self._connections()
        try:
            response = self._send(pool, key, target, {**self._headers, **headers})
        except (OSError, http.client.HTTPException) as exc:
            pool.pop(key, None)
            raise TransferError(f"connection to {parts.hostname}:{port} failed: {type(exc).__name__}: {exc}", retryable=True) from None
        conn = pool[key]
        try:
            answer = self._read_answer(response, window, skip)
        except BaseException:
            pool.pop(key, None)
            conn.close()
            raise
        if answer is None or not response.isclosed():
            pool.pop(key, None)  # a redirect's body, or a body we stopped reading: not reusable
            conn.close()
        return answer

    def _send(self, pool: dict, key: tuple[str, str, int], target: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        """Send the GET on this thread's connection to the origin, if it is still open, else on
        a new one. A kept-alive connection the server closed meanwhile is found out either
        before sending (it reads as ready: EOF) or by the answer never starting; a GET may
        then be sent again on a fresh connection."""
        conn = pool.get(key)
        if conn is not None and (conn.sock is None or peer_closed(conn.sock)):
            conn.close()
            conn = None
        if conn is not None:
            try:
                conn.request("GET", target, headers=headers)
                return conn.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                conn.close()
        pool[key] = conn = open_connection(key, self._tls, self._connect_timeout, self._read_timeout)
        conn.request("GET", target, headers=headers)
        return conn.getresponse()

    def _read_answer(self, response: http.client.HTTPResponse, window: memoryview, skip: int) -> RangeAnswer | None:
        status = response.status
        if status in _REDIRECTS:
            return None
        if status == 206:
            skip = 0  # the range asked for, from its first byte
        try:
            if status not in (200, 206):
                return RangeAnswer(status, error_body=response.read(self._error_limit), retry_after=response.getheader("retry-after", ""))
            while skip:
                skipped = len(response.read(min(skip, 1 << 20)))
                if not skipped:
                    return RangeAnswer(status)
                skip -= skipped
            received = 0
            size = len(window)
            while received < size:
                n = response.readinto(window[received:])
                if not n:
                    break
                received += n
            if received == size and status == 206 and response.read(1):
                raise TransferError(f"xorb range longer than the {size} bytes asked for", retryable=True)
        except (OSError, http.client.HTTPException) as exc:
            raise TransferError(f"download interrupted: {type(exc).__name__}: {exc}", retryable=True) from None
        return RangeAnswer(status, received)

