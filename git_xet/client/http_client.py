"""The client's one HTTP stack: httpx carries every request (the agent's, the pipelines',
doctor's), directly or through the proxy the environment names.

httpx owns what a hand-written client got wrong or had to re-learn: framing, kept-alive
connections and noticing the ones a server closed, redirects (credentials dropped across
origins), proxies (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY, CONNECT tunnels). This module adds only
what git-xet needs on top, in one place each:

- its answers as http_types.Response, and httpx's errors mapped to the TransportError family
  callers retry (`_as_transport_error`; an untrusted certificate is not retried);
- TLS set up on the first https:// request, trusting the OS store plus SSL_CERT_FILE and
  SSL_CERT_DIR (http_types.verifying_tls_context): an agent talking to a plain-HTTP server
  never loads certificates;
- request bodies sent from the buffers they already lie in (a scattered xorb's parts, small
  neighbours joined), replayable so that an auth layer can send them again after a 401;
- no cookies kept: XET and LFS servers authenticate by token (client/http_auth.py).

httpx is imported by this module only, and this module only where a client is made: the agent's
local-store paths never pay for it.
"""

from __future__ import annotations

import functools
import json as jsonlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from ..core.scattered import OutgoingBytes, ScatteredBytes
from . import http_pool
from .errors import TransferError
from .http_types import (
    ConnectError,
    ConnectTimeout,
    Headers,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    Response,
    Timeouts,
    TransportError,
    WriteError,
    WriteTimeout,
    verifying_tls_context,
)

if TYPE_CHECKING:
    import ssl

http_pool.configure()  # httpcore's connections: 256 KiB reads, no reuse after stray bytes, stale ones resent
# How long an idle connection is kept: httpx's default, 5 s, closed connections a client that
# paused longer (hashing a large file between two requests) would have reused. `git xet serve`
# keeps them 75 s (its Keep-Alive header); load balancers commonly 60 s. A connection the server
# closed sooner is seen closed before reuse, or resent (http_pool.py).
KEEP_IDLE = 50.0
SEND_PIECE = 256 << 10  # parts of a body smaller than this are joined up to about this size
MAX_REDIRECTS = 10
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")

_MAPPED: tuple[tuple[type[httpx.TransportError], type[TransportError]], ...] = (
    (httpx.ConnectTimeout, ConnectTimeout),
    (httpx.PoolTimeout, ConnectTimeout),
    (httpx.ConnectError, ConnectError),
    (httpx.ProxyError, ConnectError),
    (httpx.WriteTimeout, WriteTimeout),
    (httpx.WriteError, WriteError),
    (httpx.ReadTimeout, ReadTimeout),
    (httpx.ReadError, ReadError),
    (httpx.RemoteProtocolError, RemoteProtocolError),
)


def proxies_in_environment() -> bool:
    """Whether HTTP(S)_PROXY or ALL_PROXY (any case) names a proxy, as httpx reads them."""
    return any(value and name.lower() in _PROXY_VARIABLES for name, value in os.environ.items())


def _certificate_failure(exc: BaseException) -> str | None:
    """The verifier's reason when `exc` comes from an untrusted certificate, else None."""
    import ssl

    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, ssl.SSLCertVerificationError):
            return str(current.verify_message or current)
        current = current.__cause__ or current.__context__
    return None


def _tls_failure(exc: BaseException) -> bool:
    import ssl

    current: BaseException | None = exc
    while current is not None and not isinstance(current, ssl.SSLError):
        current = current.__cause__ or current.__context__
    return current is not None


def _as_transport_error(exc: httpx.HTTPError, url: str) -> TransferError | TransportError:
    """The one mapping of httpx's errors to ours. Connection failures become the TransportError
    family (retried); an untrusted certificate, a redirect loop or a request httpx refuses to
    send (a header with a line break, a URL that is not http(s)) cannot be cured by retrying.
    The message names the origin, never the path and query (a presigned URL's query is a
    credential). httpx's error stays in the chain: client/diagnosis.py reads it."""
    origin = _origin(url)
    reason = _certificate_failure(exc)
    if reason is not None:
        from .diagnosis import CERTIFICATE, advice

        return TransferError(f"{advice(CERTIFICATE, origin)} ({reason})", retryable=False)
    if isinstance(exc, httpx.TooManyRedirects):
        return TransferError(f"more than {MAX_REDIRECTS} redirects from {origin}", retryable=False)
    if isinstance(exc, httpx.LocalProtocolError):  # (its message quotes the value: maybe a credential)
        return TransferError(f"refusing to send a request to {origin}: {_UNSENDABLE}", retryable=False)
    if isinstance(exc, httpx.UnsupportedProtocol) or "location header" in str(exc):
        return TransferError(f"refusing to follow {origin} to a URL that is not http(s) or is malformed", retryable=False)
    detail = f"{origin}: {str(exc) or type(exc).__name__}"
    if isinstance(exc, httpx.ConnectError) and _tls_failure(exc):
        detail = f"the TLS handshake with {detail}"
    for httpx_class, ours in _MAPPED:
        if isinstance(exc, httpx_class):
            return ours(detail)
    return TransportError(detail)


_UNSENDABLE = "its method, a header name or a header value holds a line break, a space or another character HTTP does not allow there"


def _is_token(text: str) -> bool:
    """An HTTP token (RFC 9110, 5.6.2), as a method must be (a grant's comes from a server)."""
    return bool(text) and text.isascii() and all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in text)


@functools.lru_cache(maxsize=64)
def _checked_url(url: str) -> httpx.URL:
    """`url` parsed, if it is one a request can go to: absolute http(s), with a host and a
    valid port. Anything else cannot become sendable by retrying. Remembered: a push of many
    small files posts each to the same URL, and parsing one costs ~25 us (an httpx.URL is
    immutable; a refusal is an exception, never remembered)."""
    try:
        parsed = httpx.URL(url)
        usable = parsed.scheme in ("http", "https") and bool(parsed.host) and (parsed.port is None or 0 < parsed.port < 65536)
    except (httpx.InvalidURL, TypeError):
        usable = False
    if not usable:
        scheme = url.partition("://")[0].lower() if "://" in url else "relative"
        raise TransferError(f"cannot send a request to a {scheme[:10]} URL, or one without a valid host and port", retryable=False)
    return parsed


def _origin(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "the server"
    return f"{parsed.scheme}://{parsed.netloc.decode('ascii', 'replace')}" if parsed.host else "the server"


class _Pieces:
    """A request body as httpx sends an iterable: the buffers it already lies in, parts under
    SEND_PIECE joined with their neighbours in one copy (a part per write would send each
    8-byte chunk header on its own). Not a generator, so httpx may send it again (after a 401,
    a 307)."""

    def __init__(self, body: bytes | memoryview | ScatteredBytes) -> None:
        self._parts = body.parts if isinstance(body, ScatteredBytes) else (body,)

    def __iter__(self) -> Iterator[bytes]:
        pending: list[bytes | memoryview] = []
        size = 0
        for part in self._parts:
            if len(part) >= SEND_PIECE:
                if size:
                    yield b"".join(pending)
                    pending, size = [], 0
                yield part  # type: ignore[misc]  # (a buffer: the socket sends any)
            else:
                pending.append(part)
                size += len(part)
                if size >= SEND_PIECE:
                    yield b"".join(pending)
                    pending, size = [], 0
        if size:
            yield b"".join(pending)


class _Body:
    """http_types.BodySource over a streamed httpx answer: its raw (undecoded) pieces as the
    connection delivers them, copied once, into the caller's window by `readinto`."""

    def __init__(self, answer: httpx.Response, url: str) -> None:
        self._answer = answer
        self._url = url
        self._pieces: Iterator[bytes] = answer.iter_raw()
        self._held = memoryview(b"")
        self._ended = False

    @property
    def finished(self) -> bool:
        return self._ended

    def _fill(self) -> memoryview:
        if not self._held and not self._ended:
            try:
                self._held = memoryview(next(self._pieces, b""))
            except httpx.HTTPError as exc:
                self._answer.close()
                raise _as_transport_error(exc, self._url) from None
            self._ended = not self._held
        return self._held

    def read(self, size: int) -> bytes:
        held = self._fill()
        piece, self._held = held[:size], held[size:]
        return bytes(piece)

    def readinto(self, view: memoryview) -> int:
        filled = 0
        while filled < len(view):
            held = self._fill()
            if not held:
                break
            count = min(len(held), len(view) - filled)
            view[filled : filled + count] = held[:count]
            self._held = held[count:]
            filled += count
        return filled

    def release(self) -> None:
        self._answer.close()


class _NoCookies(httpx.Cookies):
    """A cookie store that keeps none (the official client, reqwest without its cookie store,
    sends none either)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass


class _CookielessClient(httpx.Client):
    """httpx.Client with _NoCookies (httpx copies whatever store it is given into its own)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._none_kept = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._none_kept

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("this client keeps no cookies")


class _TlsOnFirstUse(httpx.BaseTransport):
    """Direct connections: plain http:// on one pool, https:// on another made on the first
    https:// request with the verifying TLS context (loading the OS store costs ~10 ms)."""

    def __init__(self, limits: httpx.Limits, tls: Callable[[], ssl.SSLContext]) -> None:
        self._limits = limits
        self._make_tls = tls
        self._plain = httpx.HTTPTransport(verify=False, limits=limits)  # (never asked for TLS)
        self._tls: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return self._plain.handle_request(request)
        if self._tls is None:
            self._tls = httpx.HTTPTransport(verify=self._make_tls(), limits=self._limits)
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


class Client:
    """Kept-alive connections (at most `max_idle` idle) shared by the calling threads, redirects
    followed, the environment's proxy used. `headers` go with every request (a caller's own
    win, whatever their case). https:// origins get the TLS context `tls()` returns, asked for
    on first use."""

    def __init__(
        self,
        timeouts: Timeouts,
        *,
        headers: Mapping[str, str] | None = None,
        max_idle: int = 16,
        tls: Callable[[], ssl.SSLContext] = verifying_tls_context,
    ) -> None:
        self._timeouts = timeouts
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=max_idle, keepalive_expiry=KEEP_IDLE)
        proxied = proxies_in_environment()
        self._http = _CookielessClient(
            timeout=httpx.Timeout(connect=timeouts.connect, read=timeouts.read, write=timeouts.write, pool=timeouts.connect),
            trust_env=True,
            # With a proxy in the environment, httpx makes its transports (the proxy's among
            # them; a custom transport would turn the environment's proxies off), TLS now;
            # without, TLS waits for the first https:// request.
            verify=tls() if proxied else False,
            transport=None if proxied else _TlsOnFirstUse(limits, tls),
            limits=limits,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            headers={"Accept-Encoding": "identity", **(headers or {})},
        )

    @property
    def timeouts(self) -> Timeouts:
        return self._timeouts

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections; a streamed answer still open closes its own when done."""
        self._http.close()

    @property
    def is_closed(self) -> bool:
        return self._http.is_closed

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
        auth: httpx.Auth | None = None,
    ) -> Response:
        """Send the request (following redirects) and return the answer. With `stream`, the
        body is for the caller to read and close; without, it is read now, at most `limit`
        bytes (else TransferError). `auth` is a layer that signs the request (and may send it
        again: client/http_auth.py). Connection failures raise TransportError."""
        merged = dict(headers or {})
        if json is not None:
            if not any(name.lower() == "content-type" for name in merged):
                merged["Content-Type"] = "application/json"
            body = jsonlib.dumps(json, separators=(",", ":")).encode()  # compact, as hf-xet and httpx send it
        # The client frames the request itself: a caller's Host, Content-Length or
        # Transfer-Encoding would contradict it.
        merged = {k: v for k, v in merged.items() if k.lower() not in ("host", "content-length", "transfer-encoding")}
        content: bytes | _Pieces | None = None
        if body is not None:
            if isinstance(body, memoryview) and (body.format != "B" or body.ndim != 1):
                body = body.cast("B")  # counted and sent in bytes, whatever its items
            merged["Content-Length"] = str(len(body))
            content = body if isinstance(body, bytes) else _Pieces(body)
        if not _is_token(method) or any(c in text for c in "\r\n\0" for field in merged.items() for text in field):
            raise TransferError(f"refusing to send a request to {_origin(url)}: {_UNSENDABLE}", retryable=False)  # (before a connection is taken)
        target = _checked_url(url)
        try:
            request = self._http.build_request(method, target, headers=merged, content=content)
            answer = self._http.send(request, stream=True, auth=auth)
        except httpx.HTTPError as exc:
            raise _as_transport_error(exc, url) from None
        except (UnicodeEncodeError, httpx.InvalidURL):  # (a method or header that is not ASCII / Latin-1)
            raise TransferError(f"refusing to send a request to {_origin(url)}: {_UNSENDABLE}", retryable=False) from None
        resp = Response(answer.status_code, Headers(answer.headers.multi_items()), str(answer.url), _Body(answer, url))
        if not stream:
            resp.read(limit)
        return resp
