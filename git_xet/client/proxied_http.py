"""The client's HTTP (client/wire.py's interface) through httpx, for when the environment names
a proxy: httpx reads HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, tunnels https:// through CONNECT
and authenticates to the proxy. Imported only then; direct connections never load httpx."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from ..core.scattered import OutgoingBytes, contiguous
from .http_types import (
    ConnectError,
    ConnectTimeout,
    Headers,
    HttpClient,
    RemoteProtocolError,
    ReadError,
    ReadTimeout,
    Response,
    Timeouts,
    TransportError,
    WriteError,
    WriteTimeout,
    verifying_tls_context,
)

def _as_transport_error(exc: httpx.TransportError) -> TransportError:
    """wire's error for httpx's, so callers handle one family (and retry it)."""
    detail = f"{type(exc).__name__}: {exc}"
    for httpx_class, ours in (
        (httpx.ConnectTimeout, ConnectTimeout),
        (httpx.ConnectError, ConnectError),
        (httpx.ProxyError, ConnectError),
        (httpx.WriteTimeout, WriteTimeout),
        (httpx.WriteError, WriteError),
        (httpx.ReadTimeout, ReadTimeout),
        (httpx.ReadError, ReadError),
        (httpx.PoolTimeout, ConnectTimeout),
        (httpx.RemoteProtocolError, RemoteProtocolError),
    ):
        if isinstance(exc, httpx_class):
            return ours(detail)
    return TransportError(detail)


class _HttpxBody:
    """wire's BodySource over a streamed httpx answer (its raw, undecoded bytes)."""

    def __init__(self, answer: httpx.Response) -> None:
        self._answer = answer
        self._pieces: Iterator[bytes] = answer.iter_raw()
        self._held = b""
        self._ended = False

    @property
    def finished(self) -> bool:
        return self._ended

    def read(self, size: int) -> bytes:
        if not self._held and not self._ended:
            try:
                self._held = next(self._pieces, b"")
            except httpx.TransportError as exc:
                self._answer.close()
                raise _as_transport_error(exc) from None
            self._ended = not self._held
        piece, self._held = self._held[:size], self._held[size:]
        return piece

    def readinto(self, view: memoryview) -> int:
        filled = 0
        while filled < len(view) and (piece := self.read(len(view) - filled)):
            view[filled : filled + len(piece)] = piece
            filled += len(piece)
        return filled

    def release(self) -> None:
        self._answer.close()


class _NoCookies(httpx.Cookies):
    """A cookie store that keeps none: XET and LFS servers authenticate by token, and the
    official client (reqwest without its cookie store) sends no cookies either."""

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


class ProxiedClient(HttpClient):
    """wire.Client's interface, with httpx carrying requests through the environment's proxy."""

    def __init__(self, timeouts: Timeouts, *, headers: Mapping[str, str] | None = None, max_idle: int = 16) -> None:
        super().__init__(timeouts)
        self._http = _CookielessClient(
            timeout=httpx.Timeout(connect=timeouts.connect, read=timeouts.read, write=timeouts.write, pool=timeouts.connect),
            trust_env=True,
            verify=verifying_tls_context(),
            follow_redirects=True,
            headers={"Accept-Encoding": "identity", **(headers or {})},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=max_idle),
        )

    def close(self) -> None:
        self._http.close()

    @property
    def is_closed(self) -> bool:
        return self._http.is_closed

    def _send(self, method: str, url: str, headers: dict[str, str], body: OutgoingBytes | None) -> Response:
        # httpx's hint says bytes; it sends any buffer, and a view spares a copy of a xorb. It
        # takes one buffer: a scattered xorb is joined here (one copy, on the proxied path only).
        content = contiguous(body) if body is not None else None
        request = self._http.build_request(method, url, headers=headers, content=content)  # type: ignore[arg-type]
        try:
            answer = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise _as_transport_error(exc) from None
        return Response(answer.status_code, Headers(answer.headers.multi_items()), str(answer.url), _HttpxBody(answer))
