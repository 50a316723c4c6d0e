"""HTTP/1.1 for the agent's direct connections, on the standard library's sockets alone.

git-lfs starts eight agents for every push and clone, each a new interpreter. In an agent that
stored one object through `git xet serve`, importing httpx (with the urllib.request, email and
cookie-jar modules it pulls in) and http.client (email.parser, ssl) was over half of its
start-up; and building and sending each request through httpx was ~30% of the agent's time per
object in a push of many small files. What an XET or LFS server needs of HTTP is small: one
request at a time per connection, bodies of a known length, answers framed by Content-Length or
chunked, kept-alive connections, redirects. That is this module. httpx still carries every
request when the environment names a proxy (client/proxied_http.py): proxies' rules (NO_PROXY,
CONNECT tunnels, their authentication) are its job.

ssl is imported only for an https:// origin, and the system's certificates are loaded then
(http_types.verifying_tls_context): an agent talking to a plain-HTTP server on the machine or the LAN
never pays for them.
"""

from __future__ import annotations

import io
import select
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from ..core.scattered import OutgoingBytes, ScatteredBytes
from .errors import TransferError
from .http_types import (
    READ_PIECE,
    Headers,
    HttpClient,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    Response,
    Timeouts,
    TransportError,
    WriteError,
    WriteTimeout,
    ConnectError,
    ConnectTimeout,
    verifying_tls_context,
)

if TYPE_CHECKING:
    import ssl

SEND_SLICE = 256 << 10  # a body is sent in slices of this many bytes, each within the write timeout
SEND_PARTS = 512  # buffers per vectored write of a scattered body (Linux takes up to 1024)
JOIN_BELOW = 64 << 10  # a body this small goes out in one send with the head
MAX_HEAD_LINE = 64 << 10
MAX_HEAD_FIELDS = 200
MAX_REDIRECTS = 10
REDIRECTS = frozenset({301, 302, 303, 307, 308})

Origin = tuple[str, str, int]  # scheme, host, port


class _StaleConnection(TransportError):
    """A kept-alive connection turned out closed before any of its answer arrived."""


def split_url(url: str) -> tuple[Origin, str]:
    """An absolute http(s) URL's origin and request target (path and query, as given)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise TransferError(f"cannot send a request to a {scheme or 'relative'} URL", retryable=False)
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise TransferError("cannot send a request to a URL with an invalid port", retryable=False) from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (scheme, parts.hostname, port), target


def _host_header(origin: Origin) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"


def _is_token(text: str) -> bool:
    """An HTTP token (RFC 9110, 5.6.2), as a method must be."""
    return bool(text) and text.isascii() and all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in text)


def request_head(method: str, target: str, origin: Origin, headers: Mapping[str, str], body_length: int | None) -> bytes:
    """The request line and header block. A field value with a line break would smuggle a
    header of its own (values can come from a server, such as a grant's): refused."""
    if not _is_token(method):
        raise TransferError(f"refusing to send a request with the invalid method {method[:20]!r}", retryable=False)
    if not target.isascii() or not target.isprintable() or " " in target:  # (not quoted: a presigned URL's query is a credential)
        raise TransferError("refusing to send a request whose path holds spaces, control or non-ASCII characters", retryable=False)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {_host_header(origin)}"]
    for name, value in headers.items():
        if name.lower() in ("host", "content-length", "transfer-encoding"):
            continue
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise TransferError(f"refusing to send the request header {name.strip()[:40]!r}: it holds a line break", retryable=False)
        lines.append(f"{name}: {value}")
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    text = "\r\n".join(lines) + "\r\n\r\n"
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise TransferError("refusing to send a request header that is not Latin-1 text", retryable=False) from None


class Connection:
    """One HTTP/1.1 connection: a request, then its answer read to the end, then the next."""

    def __init__(self, origin: Origin, sock: socket.socket) -> None:
        self.origin = origin
        self.sock = sock
        self.reader: io.BufferedReader = sock.makefile("rb", buffering=READ_PIECE)  # type: ignore[assignment]

    @classmethod
    def open(cls, origin: Origin, timeouts: Timeouts, tls: Callable[[], ssl.SSLContext]) -> Connection:
        scheme, host, port = origin
        try:
            sock = socket.create_connection((host, port), timeout=timeouts.connect)
        except TimeoutError as exc:
            raise ConnectTimeout(f"connecting to {host}:{port} timed out: {exc}") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                sock = tls().wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:
            sock.close()
            raise ConnectTimeout(f"the TLS handshake with {host}:{port} timed out: {exc}") from None
        except OSError as exc:  # ssl.SSLError included
            sock.close()
            if getattr(exc, "verify_message", None):  # ssl.SSLCertVerificationError: retrying cannot help
                from .diagnosis import CERTIFICATE, advice

                reason = exc.verify_message  # type: ignore[attr-defined]
                raise TransferError(f"{advice(CERTIFICATE, f'{scheme}://{host}:{port}')} ({reason})", retryable=False) from None
            raise ConnectError(f"the TLS handshake with {host}:{port} failed: {exc}") from None
        return cls(origin, sock)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def idle_and_clean(self) -> bool:
        """Whether a kept-alive connection can carry another request: nothing waits to be
        read, neither on the socket (bytes we never asked for, or its end: the server closed
        it) nor in our buffer (a server that sent more than its answer declared; taken for the
        next answer, they would answer a request they never saw)."""
        try:
            if _readable_now(self.sock):
                return False
            self.sock.setblocking(False)  # (every exchange sets its own timeouts first)
            return not self.reader.peek(1)  # buffered bytes, or (none) b"" with nothing read
        except OSError as exc:
            # TLS reports "nothing to read yet" as SSLWantReadError (SSL_ERROR_WANT_READ = 2).
            return self.origin[0] == "https" and exc.errno == 2
        except ValueError:  # closed: no descriptor to watch
            return False

    def send(self, head: bytes, body: OutgoingBytes | None, timeout: float | None) -> None:
        """The request, head then body. A server that stops reading mid-body and hangs up
        (a refusal, usually) is not an error here: its answer may say why."""
        self.sock.settimeout(timeout)
        try:
            if isinstance(body, ScatteredBytes):
                self._send_parts([head, *body.parts])
                return
            if body is None or len(body) < JOIN_BELOW:
                self.sock.sendall(head + bytes(body or b""))
                return
            self.sock.sendall(head)
            view = memoryview(body)
            for start in range(0, len(view), SEND_SLICE):
                self.sock.sendall(view[start : start + SEND_SLICE])
        except (BrokenPipeError, ConnectionResetError):
            pass
        except TimeoutError as exc:
            raise WriteTimeout(f"sending to {self.origin[1]}:{self.origin[2]} timed out: {exc}") from None
        except OSError as exc:
            raise WriteError(f"sending to {self.origin[1]}:{self.origin[2]} failed: {exc}") from None

    def _send_parts(self, parts: list[bytes | memoryview]) -> None:
        """`parts` in order, by vectored writes (each within the write timeout) where the
        socket has them; TLS has none, so there they go in SEND_SLICE pieces (a part per
        write would make a TLS record of each 8-byte chunk header)."""
        if self.origin[0] == "https":
            for piece in _coalesced(parts, SEND_SLICE):
                self.sock.sendall(piece)
            return
        parts = [part for part in parts if len(part)]  # an empty part would never be "sent"
        done, offset = 0, 0  # parts sent whole, bytes sent of the next
        while done < len(parts):
            batch = parts[done : done + SEND_PARTS]
            if offset:
                batch[0] = memoryview(batch[0])[offset:]
            sent = self.sock.sendmsg(batch)
            while sent:
                left = len(parts[done]) - offset
                if sent < left:
                    offset += sent
                    break
                sent -= left
                done, offset = done + 1, 0

    def _line(self) -> bytes:
        line = self.reader.readline(MAX_HEAD_LINE + 1)
        if len(line) > MAX_HEAD_LINE:
            raise RemoteProtocolError("the server sent a header line longer than 64 KiB")
        return line

    def read_head(self, timeout: float | None, *, reused: bool) -> tuple[int, Headers, bool]:
        """The answer's status, headers, and whether the server keeps the connection open
        after it; informational (1xx) answers are skipped. On a `reused` connection, an end
        before the first byte means the server had closed it while idle (_StaleConnection)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                status_line = self._line()
                if not status_line:
                    if reused:
                        raise _StaleConnection
                    raise RemoteProtocolError(f"{self.origin[1]}:{self.origin[2]} closed the connection without answering")
                parts = status_line.split(None, 2)
                if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
                    raise RemoteProtocolError(f"the server's answer does not start with an HTTP/1.x status line: {status_line[:80]!r}")
                status = int(parts[1])
                fields = self._fields()
                if 100 <= status < 200 and status != 101:
                    continue
                headers = Headers(fields)
                keep_alive = parts[0] == b"HTTP/1.1" and "close" not in headers.get("connection").lower()
                return status, headers, keep_alive
        except ConnectionResetError:
            if reused:
                raise _StaleConnection from None
            raise ReadError(f"{self.origin[1]}:{self.origin[2]} reset the connection before answering") from None
        except TimeoutError as exc:
            raise ReadTimeout(f"waiting for {self.origin[1]}:{self.origin[2]} to answer timed out: {exc}") from None
        except OSError as exc:
            raise ReadError(f"reading the answer of {self.origin[1]}:{self.origin[2]} failed: {exc}") from None

    def _fields(self) -> list[tuple[str, str]]:
        fields: list[tuple[str, str]] = []
        while True:
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return fields
            if not line:
                raise RemoteProtocolError("the connection ended inside the answer's headers")
            if len(fields) == MAX_HEAD_FIELDS:
                raise RemoteProtocolError(f"the server sent more than {MAX_HEAD_FIELDS} header fields")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise RemoteProtocolError(f"malformed header line in the server's answer: {line[:80]!r}")
            fields.append((name, value.strip()))


class ConnectionBody:
    """A body read from its connection: Content-Length, chunked, or up to the connection's
    end. Released, the connection goes back to its pool only if the body was read to its
    end and the server keeps the connection open."""

    def __init__(self, conn: Connection, headers: Headers, *, has_body: bool, keep_alive: bool, give_back: Callable[[Connection], None]) -> None:
        self._conn: Connection | None = conn
        self._reader = conn.reader
        self._give_back = give_back
        self._chunked = has_body and "chunked" in headers.get("transfer-encoding").lower()
        self._left: int | None = 0  # bytes left of the body (or of the current chunk); None: until the end
        self._ended = not has_body
        self._keep_alive = keep_alive
        if has_body and not self._chunked:
            length = headers.get("content-length")
            if "content-length" in headers:
                if not (length.isascii() and length.isdigit()):
                    raise RemoteProtocolError(f"the server sent an invalid Content-Length: {length[:40]!r}")
                self._left = int(length)
                self._ended = self._left == 0
            else:
                self._left = None
                self._keep_alive = False  # the body ends with the connection

    @property
    def finished(self) -> bool:
        return self._ended

    def _where(self) -> str:
        return f"{self._conn.origin[1]}:{self._conn.origin[2]}" if self._conn else "the server"

    def _next_chunk(self) -> bool:
        """Move to the next chunk; at the last one, read the trailer, end, and say so."""
        line = self._reader.readline(MAX_HEAD_LINE + 1)
        size_text = line.split(b";", 1)[0].strip()
        if not line.endswith(b"\n") or not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise RemoteProtocolError(f"malformed chunk size line from {self._where()}: {line[:40]!r}")
        self._left = int(size_text, 16)
        if self._left == 0:
            while (trailer := self._reader.readline(MAX_HEAD_LINE + 1)) not in (b"\r\n", b"\n"):
                if not trailer:
                    raise RemoteProtocolError(f"the connection to {self._where()} ended inside a chunked body's trailer")
            self._ended = True
        return self._ended

    def _end_of_chunk(self) -> None:
        if self._reader.readline(3) not in (b"\r\n", b"\n"):
            raise RemoteProtocolError(f"a chunk from {self._where()} was longer than its declared size")

    def _room(self, size: int) -> int:
        """How many bytes the next receive may take: at most `size`, within the current chunk
        or what is left of the body; 0 once the body has ended."""
        if self._ended or self._conn is None:
            return 0
        if self._chunked and self._left == 0 and self._next_chunk():
            return 0
        return size if self._left is None else min(size, self._left)

    def _received(self, count: int) -> None:
        if count == 0:
            if self._left is not None:
                raise ReadError(f"the connection to {self._where()} ended with {self._left} bytes of the body unread")
            self._ended = True  # a body that ends with the connection
            return
        if self._left is not None:
            self._left -= count
            if self._left == 0:
                if self._chunked:
                    self._end_of_chunk()
                else:
                    self._ended = True

    def _failed(self, exc: Exception) -> TransportError:
        """The TransportError for a failure while reading; the connection is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if isinstance(exc, TransportError):
            return exc
        if isinstance(exc, TimeoutError):
            return ReadTimeout(f"reading from {self._where()} timed out: {exc}")
        return ReadError(f"reading from {self._where()} failed: {exc}")

    def read(self, size: int) -> bytes:
        try:
            room = self._room(size)
            if room == 0:
                return b""
            data = self._reader.read1(room)
            self._received(len(data))
            return data
        except (OSError, TransportError) as exc:
            raise self._failed(exc) from None

    def readinto(self, view: memoryview) -> int:
        filled = 0
        try:
            while filled < len(view):
                room = self._room(len(view) - filled)
                if room == 0:
                    break
                count = self._reader.readinto(view[filled : filled + room])
                self._received(count)
                if count == 0:
                    break
                filled += count
        except (OSError, TransportError) as exc:
            raise self._failed(exc) from None
        return filled

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._ended and self._keep_alive:
            self._give_back(conn)
        else:
            conn.close()


def _coalesced(parts: list[bytes | memoryview], size: int) -> Iterator[bytes | memoryview]:
    """`parts` regrouped: a part of `size` bytes or more as it is, smaller neighbours joined up
    to about `size` bytes."""
    pending = bytearray()
    for part in parts:
        if len(part) >= size:
            if pending:
                yield bytes(pending)
                pending.clear()
            yield part
            continue
        pending += part
        if len(pending) >= size:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


def _readable_now(sock: socket.socket) -> bool:
    """Whether reading `sock` would not block (bytes, or its end). poll, where there is one:
    select cannot watch a descriptor numbered FD_SETSIZE (1024) or above, which a process
    holding many files gets for its sockets."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


class _IdleConnections:
    """Kept-alive connections by origin, shared by the threads of one client: a request takes
    one (or opens one), and gives it back once its answer has been read to the end."""

    def __init__(self, max_idle: int) -> None:
        self._max_idle = max_idle
        self._idle: dict[Origin, list[Connection]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False

    def take(self, origin: Origin) -> Connection | None:
        """An idle connection to `origin` the server has not closed meanwhile, or None."""
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn = idle.pop()
                self._count -= 1
            if conn.idle_and_clean():
                return conn
            conn.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def give_back(self, conn: Connection) -> None:
        with self._lock:
            if not self._closed and self._count < self._max_idle:
                self._idle.setdefault(conn.origin, []).append(conn)
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


def redirected(method: str, status: int, headers: Mapping[str, str], body: OutgoingBytes | None, from_url: str, to_url: str) -> tuple[str, dict[str, str], OutgoingBytes | None]:
    """The request a redirect asks for (as browsers, curl and httpx make it): 303, and 301/302
    after a POST, become a GET without a body; 307 and 308 repeat the request. Credentials are
    not sent to another origin."""
    next_headers = dict(headers)
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
        next_headers = {k: v for k, v in next_headers.items() if k.lower() not in ("content-type", "content-length")}
    if split_url(from_url)[0] != split_url(to_url)[0]:
        next_headers = {k: v for k, v in next_headers.items() if k.lower() not in ("authorization", "cookie")}
    return method, next_headers, body


class Client(HttpClient):
    """HTTP/1.1 to any origin, directly, with kept-alive connections (at most `max_idle` kept
    idle) shared by the calling threads. `headers` go with every request (a caller's own win,
    whatever their case). https:// origins get the TLS context `tls()` returns, asked for on
    first use."""

    def __init__(
        self,
        timeouts: Timeouts,
        *,
        headers: Mapping[str, str] | None = None,
        tls: Callable[[], ssl.SSLContext] = verifying_tls_context,
        max_idle: int = 16,
    ) -> None:
        super().__init__(timeouts)
        self._headers = {"Accept": "*/*", "Accept-Encoding": "identity", **(headers or {})}
        self._tls = tls
        self._pool = _IdleConnections(max_idle)

    def close(self) -> None:
        """Close the idle connections; a request still under way closes its own when done."""
        self._pool.close()

    @property
    def is_closed(self) -> bool:
        return self._pool.closed

    def _send(self, method: str, url: str, headers: dict[str, str], body: OutgoingBytes | None) -> Response:
        given = {name.lower() for name in headers}
        merged = {name: value for name, value in self._headers.items() if name.lower() not in given} | headers
        for _ in range(MAX_REDIRECTS + 1):
            resp = self._exchange(method, url, merged, body)
            location = resp.headers.get("location")
            if resp.status_code not in REDIRECTS or not location:
                return resp
            resp.read(64 << 10, truncate=True)  # a short body read to its end keeps the connection
            next_url = urljoin(url, location)
            method, merged, body = redirected(method, resp.status_code, merged, body, url, next_url)
            url = next_url
        raise TransferError(f"more than {MAX_REDIRECTS} redirects from {split_url(url)[0][1]}", retryable=False)

    def _exchange(self, method: str, url: str, headers: Mapping[str, str], body: OutgoingBytes | None) -> Response:
        """One request and its answer's head, on an idle connection to the origin if there is
        one (sent again on a new one if the server had closed it), else on a new one."""
        origin, target = split_url(url)
        body_length = len(body) if body is not None else (0 if method in ("POST", "PUT", "PATCH") else None)
        head = request_head(method, target, origin, headers, body_length)
        conn = self._pool.take(origin)
        if conn is not None:
            try:
                return self._on(conn, method, url, head, body, reused=True)
            except _StaleConnection:
                conn.close()
        conn = Connection.open(origin, self._timeouts, self._tls)
        try:
            return self._on(conn, method, url, head, body, reused=False)
        except _StaleConnection:  # (not raised for a new connection)
            conn.close()
            raise RemoteProtocolError(f"{origin[1]}:{origin[2]} closed the connection without answering") from None

    def _on(self, conn: Connection, method: str, url: str, head: bytes, body: OutgoingBytes | None, *, reused: bool) -> Response:
        try:
            conn.send(head, body, self._timeouts.write)
            status, headers, keep_alive = conn.read_head(self._timeouts.read, reused=reused)
            has_body = method != "HEAD" and status not in (204, 304)
            source = ConnectionBody(conn, headers, has_body=has_body, keep_alive=keep_alive, give_back=self._pool.give_back)
        except _StaleConnection:
            raise
        except BaseException:
            conn.close()
            raise
        return Response(status, headers, url, source)
