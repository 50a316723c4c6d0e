"""What the client's callers see of HTTP, whoever carries a request (httpx, in
client/http_client.py): answers, their headers and bodies, timeouts, and the TransportError
family that callers retry. Free of httpx, so that modules naming these types import cheaply."""

from __future__ import annotations

import functools
import json as jsonlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..core.errors import XetError
from ..core.scattered import OutgoingBytes
from .errors import TransferError

if TYPE_CHECKING:
    import ssl

READ_PIECE = 64 << 10  # what one read of a streamed body asks for (below glibc's 1 MiB mmap threshold)

class Timeouts(NamedTuple):
    """Seconds to connect, and for each wait on the socket after that (None: no limit)."""

    connect: float | None
    read: float | None
    write: float | None


class TransportError(XetError):
    """The connection failed before a whole answer arrived: transient, so callers retry."""


class ConnectError(TransportError):
    """No connection (refused, unreachable, a failed TLS handshake)."""


class ConnectTimeout(ConnectError):
    """The connection was not made in time."""


class WriteError(TransportError):
    """The connection failed while the request was being sent."""


class WriteTimeout(WriteError):
    """The server stopped taking the request's bytes."""


class ReadError(TransportError):
    """The connection failed or ended while the answer was being read."""


class ReadTimeout(ReadError):
    """The server stopped sending."""


class RemoteProtocolError(TransportError):
    """The server answered with something that is not HTTP/1.x, or hung up without answering."""


@functools.cache
def verifying_tls_context() -> ssl.SSLContext:
    """The TLS context of this process's https:// connections, made on first use: it trusts the
    OS certificate store plus SSL_CERT_FILE/SSL_CERT_DIR (OpenSSL's default verify paths), so
    corporate CAs installed on the machine work without extra configuration."""
    import ssl

    return ssl.create_default_context()


class Headers:
    """An answer's header fields by case-insensitive name; a repeated field's values are joined
    with ", " (RFC 9110, 5.3)."""

    def __init__(self, fields: list[tuple[str, str]] | None = None) -> None:
        self._values: dict[str, str] = {}
        for name, value in fields or []:
            key = name.lower()
            self._values[key] = f"{self._values[key]}, {value}" if key in self._values else value

    def get(self, name: str, default: str = "") -> str:
        return self._values.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def items(self) -> list[tuple[str, str]]:
        return list(self._values.items())

    def __repr__(self) -> str:
        return f"Headers({sorted(self._values)})"  # names only: values may be credentials


class BodySource(Protocol):
    """Where a Response's body comes from, as it is read."""

    def read(self, size: int) -> bytes:
        """Up to `size` bytes; b"" once the body has ended."""

    def readinto(self, view: memoryview) -> int:
        """Fill `view` as far as the body goes; the count put there (0 once it has ended)."""

    @property
    def finished(self) -> bool:
        """Whether the body has been read to its end."""

    def release(self) -> None:
        """Done with the body: its connection goes back to the pool if the body was read to
        its end and the server keeps the connection open, else it is closed."""


class Response:
    """An answer: its status and headers at once, its body as the caller reads it.

    A response from a request made with `stream=True` must be closed (or read to the end with
    `read`); one made without has its whole body in `content` already."""

    def __init__(self, status_code: int, headers: Headers, url: str, body: BodySource) -> None:
        self.status_code = status_code
        self.headers = headers
        self.url = url
        self._body = body
        self._content: bytes | None = None

    def __repr__(self) -> str:
        return f"<Response {self.status_code}>"  # the URL may be presigned: a credential

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._body.release()

    def iter_raw(self, piece: int = READ_PIECE) -> Iterator[bytes]:
        """The body as it arrives (not decoded), in pieces of at most `piece` bytes."""
        try:
            while data := self._body.read(piece):
                yield data
        finally:
            if self._body.finished:
                self._body.release()

    def readinto(self, view: memoryview) -> int:
        """Fill `view` from the body, as far as it goes; the count put there."""
        return self._body.readinto(view)

    def read(self, limit: int | None = None, *, truncate: bool = False) -> bytes:
        """The rest of the body, decoded (gzip, deflate), into `content`; then closed. Beyond
        `limit` bytes it is refused unread (TransferError), or with `truncate` cut there."""
        if self._content is not None:
            return self._content
        inflater = _Inflater.for_encoding(self.headers.get("content-encoding"))
        parts: list[bytes] = []
        received = 0
        try:
            for raw in self.iter_raw():
                piece = raw if inflater is None else inflater.inflate(raw, None if limit is None else limit - received + 1)
                if limit is not None and received + len(piece) > limit:
                    if not truncate:
                        raise TransferError(f"the server's answer is larger than {limit} bytes; refusing to read it")
                    parts.append(piece[: limit - received])
                    break
                parts.append(piece)
                received += len(piece)
            else:
                if inflater is not None:
                    inflater.finish()
        finally:
            self.close()
        self._content = b"".join(parts)
        return self._content

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise RuntimeError("the body of a streamed response is read with read() first")
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class _Inflater:
    """A Content-Encoding we never ask for but accept (liberal in what we accept): gzip (one
    member or several, as `gzip.decompress` reads them) or deflate, undone piece by piece, each
    piece's output bounded (a small body can inflate a thousandfold). A stream that is corrupt,
    cut short or followed by other bytes is a RemoteProtocolError."""

    def __init__(self, gzip: bool) -> None:
        import zlib

        self._zlib = zlib
        self._gzip = gzip
        self._state = self._new_stream()

    def _new_stream(self) -> Any:
        return self._zlib.decompressobj(self._zlib.MAX_WBITS | 16 if self._gzip else self._zlib.MAX_WBITS)

    @classmethod
    def for_encoding(cls, encoding: str) -> _Inflater | None:
        """None for identity, or an encoding we do not know (the body is taken as it is)."""
        encoding = encoding.strip().lower()
        return cls(encoding != "deflate") if encoding in ("gzip", "x-gzip", "deflate") else None

    def inflate(self, raw: bytes, most: int | None) -> bytes:
        """The output of `raw`: all of it, or at most `most` bytes (then the rest is dropped:
        the caller has more than it will keep)."""
        out = b""
        try:
            while raw:
                if self._state.eof:  # a gzip member ended: another follows, or garbage does
                    if not self._gzip:
                        raise RemoteProtocolError("the server's compressed answer has bytes after its end")
                    self._state = self._new_stream()
                room = 0 if most is None else most - len(out)  # (0 for decompress: no bound)
                if most is not None and room <= 0:
                    break
                out += self._state.decompress(raw, room)
                raw = self._state.unused_data if self._state.eof else b""
        except self._zlib.error as exc:
            raise RemoteProtocolError(f"the server's compressed answer is corrupt: {exc}") from None
        return out

    def finish(self) -> None:
        if not self._state.eof:
            raise RemoteProtocolError("the server's compressed answer ends before its compressed stream does")


class HttpClient(Protocol):
    """What the client's callers need of HTTP (client/http_client.Client), named without
    importing httpx: modules that only pass a client along stay cheap to import."""

    @property
    def timeouts(self) -> Timeouts: ...

    def __enter__(self) -> HttpClient: ...

    def __exit__(self, *exc: object) -> None: ...

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: OutgoingBytes | None = None,
        json: Any = None,
        stream: bool = False,
        limit: int | None = None,
        auth: Any = None,
    ) -> Response:
        """Send the request (following redirects) and return the answer. With `stream`, the
        body is for the caller to read and close; without, it is read now, at most `limit`
        bytes (else TransferError). `auth`: an httpx.Auth layer (client/http_auth.py).
        Connection failures raise TransportError."""
        ...

    def close(self) -> None: ...

    @property
    def is_closed(self) -> bool: ...
