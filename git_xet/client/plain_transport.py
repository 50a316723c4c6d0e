"""httpx's transport for direct connections, over the standard library's http.client.

httpx's own transport is httpcore with h11: ~15 ms of imports in every agent (git-lfs starts
eight per push), and ~0.3 ms of CPU per request in its connection pool and parser, which a push
of a thousand small files pays a thousand times. http.client parses in C where it matters and
is imported anyway. httpx stays the API every caller uses (timeouts, redirects, proxies, errors);
only the bytes on the wire go this way. Not used when the environment names a proxy: httpx's
own transports carry those (see http_backend.make_http_client).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator

import httpx

# What one read of a response body asks of the socket's buffer: answers are small (JSON, shards,
# small objects), and a large body is read in pieces that stay below the 1 MiB mmap threshold.
READ_PIECE = 64 << 10
_CONNECT, _WRITE, _READ = "connect", "write", "read"
_TIMEOUTS: dict[str, type[httpx.TimeoutException]] = {_CONNECT: httpx.ConnectTimeout, _WRITE: httpx.WriteTimeout, _READ: httpx.ReadTimeout}
_FAILURES: dict[str, type[httpx.NetworkError]] = {_CONNECT: httpx.ConnectError, _WRITE: httpx.WriteError, _READ: httpx.ReadError}
# A kept-alive connection the server closed while it sat idle fails like this on reuse.
_STALE = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)

Origin = tuple[str, str, int]


def peer_closed(sock: socket.socket) -> bool:
    """Whether an idle kept-alive socket has been closed by the server (readable with nothing
    pending for us means EOF, or bytes we never asked for: either way, not reusable)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def open_connection(
    origin: Origin, tls: Callable[[], ssl.SSLContext], connect_timeout: float | None, read_timeout: float | None
) -> http.client.HTTPConnection:
    """A connected HTTP(S) connection to `origin`: `connect_timeout` to connect, then
    `read_timeout` for each wait on the socket; an https origin gets the context `tls()` gives."""
    scheme, host, port = origin
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=connect_timeout, context=tls())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=connect_timeout)
    conn.connect()
    assert conn.sock is not None
    conn.sock.settimeout(read_timeout)
    return conn


def _as_httpx_error(exc: BaseException, phase: str, request: httpx.Request) -> httpx.TransportError:
    """The httpx error a failure at `phase` stands for: all are TransportErrors, which the
    callers' retries treat as transient."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return _TIMEOUTS[phase](detail, request=request)
    if isinstance(exc, http.client.HTTPException):  # including a server that hung up unanswered
        return httpx.RemoteProtocolError(detail, request=request)
    return _FAILURES[phase](detail, request=request)


class _IdleConnections:
    """Kept-alive connections by origin, shared by the threads of one client: a request takes
    one (or opens one), and gives it back once its answer has been read to the end."""

    def __init__(self, tls: Callable[[], ssl.SSLContext], max_idle: int) -> None:
        self._tls = tls
        self._max_idle = max_idle
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False

    def take(self, origin: Origin) -> http.client.HTTPConnection | None:
        """An idle connection to `origin` the server has not closed meanwhile, or None."""
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn = idle.pop()
                self._count -= 1
            if conn.sock is not None and not peer_closed(conn.sock):
                return conn
            conn.close()

    def open(self, origin: Origin, connect_timeout: float | None, read_timeout: float | None) -> http.client.HTTPConnection:
        return open_connection(origin, self._tls, connect_timeout, read_timeout)

    def give_back(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and self._count < self._max_idle:
                self._idle.setdefault(origin, []).append(conn)
                self._count += 1
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [conn for idle in self._idle.values() for conn in idle]
            self._idle.clear()
            self._count = 0
        for conn in conns:
            conn.close()


class _AnswerBody(httpx.SyncByteStream):
    """A response body read from its connection as the caller iterates; closing it gives the
    connection back when the body was read to its end (else the connection is closed: the rest
    of the body would be read as the next answer)."""

    def __init__(self, response: http.client.HTTPResponse, done: Callable[[bool], None], request: httpx.Request) -> None:
        self._response = response
        self._done: Callable[[bool], None] | None = done
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                piece = self._response.read(READ_PIECE)  # (read1 never marks the end as reached)
            except (OSError, http.client.HTTPException) as exc:
                self._finish(reusable=False)
                raise _as_httpx_error(exc, _READ, self._request) from None
            if not piece:
                return
            yield piece

    def _finish(self, *, reusable: bool) -> None:
        done, self._done = self._done, None
        if done is not None:
            done(reusable)

    def close(self) -> None:
        self._finish(reusable=self._response.isclosed())


class PlainTransport(httpx.BaseTransport):
    """HTTP/1.1 over http.client with kept-alive connections (at most `max_idle` kept), TLS
    from `tls()` made on the first https:// request: loading the system's certificates costs
    ~20 ms, and an agent talking to a plain-HTTP server never needs them."""

    def __init__(self, tls: Callable[[], ssl.SSLContext], *, max_idle: int = 16) -> None:
        self._connections = _IdleConnections(tls, max_idle)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"cannot send a request to a {url.scheme or 'relative'} URL", request=request)
        origin: Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts = request.extensions.get("timeout", {})
        conn = self._connections.take(origin)
        replayable = isinstance(request.stream, httpx.ByteStream)  # bytes, JSON or no body
        if conn is not None:
            try:
                return self._exchange(conn, origin, request)
            except _STALE as exc:
                conn.close()
                if not replayable:
                    raise _as_httpx_error(exc, _READ, request) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _as_httpx_error(exc, _READ, request) from None
        try:
            conn = self._connections.open(origin, timeouts.get(_CONNECT), timeouts.get(_READ))
        except (OSError, http.client.HTTPException) as exc:
            raise _as_httpx_error(exc, _CONNECT, request) from None
        try:
            return self._exchange(conn, origin, request)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise _as_httpx_error(exc, _READ, request) from None

    def _exchange(self, conn: http.client.HTTPConnection, origin: Origin, request: httpx.Request) -> httpx.Response:
        """Send the request on `conn` and read the answer's head; the body is read later, by
        whoever iterates the response."""
        target = request.url.raw_path.decode("ascii")
        conn.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in request.headers.raw:
            conn.putheader(name, value)
        chunked = "transfer-encoding" in request.headers
        try:
            conn.endheaders()
            assert isinstance(request.stream, httpx.SyncByteStream)
            for piece in request.stream:
                if chunked and piece:
                    conn.send(b"%x\r\n" % len(piece))
                    conn.send(piece)
                    conn.send(b"\r\n")
                elif not chunked:
                    conn.send(piece)
            if chunked:
                conn.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading: its answer (a refusal, usually) may say why
        except TimeoutError as exc:
            raise _as_httpx_error(exc, _WRITE, request) from None
        response = conn.getresponse()

        def done(reusable: bool) -> None:
            if reusable and conn.sock is not None:
                self._connections.give_back(origin, conn)
            else:
                conn.close()

        return httpx.Response(
            response.status,
            headers=response.getheaders(),
            stream=_AnswerBody(response, done, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode("ascii", "replace")},
        )

    def close(self) -> None:
        self._connections.close()
