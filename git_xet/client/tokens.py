"""Where CAS access tokens come from: a fixed token, or a Hub-style refresh route."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from .errors import TransferError
from .http_types import HttpClient, TransportError

REFRESH_MARGIN = 60  # seconds before expiry at which a token is renewed


class TokenSource(Protocol):
    def token(self) -> str | None:
        """A currently valid token (None: the store needs none)."""

    def invalidate(self) -> None:
        """The server refused the current token: fetch a new one next time if possible."""


class StaticToken:
    """A token given once (from config, an env var or a batch response's headers)."""

    def __init__(self, token: str | None, expires_at: float | None = None) -> None:
        self._token = token
        self._expires_at = expires_at

    def __repr__(self) -> str:
        return "StaticToken(<hidden>)"

    def token(self) -> str | None:
        if self._expires_at is not None and time.time() > self._expires_at:
            raise TransferError("the XET access token has expired and cannot be refreshed; run the command again")
        return self._token

    def invalidate(self) -> None:
        """Nothing to refresh from."""


class RefreshingToken:
    """Tokens from a refresh route (`GET .../xet-{read,write}-token/{rev}`) with the user's
    credential; renewed REFRESH_MARGIN seconds before they expire or when refused. The credential
    is fixed headers, or a callable asked at each renewal (an SSH remote's git-lfs-authenticate
    answer, which expires too)."""

    def __init__(
        self,
        refresh_url: str,
        credential_headers: dict[str, str] | Callable[[], dict[str, str]],
        http: HttpClient,
        initial: tuple[str, float] | None = None,
    ) -> None:
        self._url = refresh_url
        self._headers = credential_headers
        self._http = http
        self._lock = threading.Lock()
        self._token: str | None
        self._token, self._expires_at = initial if initial else (None, 0.0)
        self.cas_url: str | None = None

    def __repr__(self) -> str:
        return f"RefreshingToken({self._url!r}, <credentials hidden>)"

    def token(self) -> str | None:
        with self._lock:
            if self._token is None or time.time() > self._expires_at - REFRESH_MARGIN:
                self._refresh()
            return self._token

    def invalidate(self) -> None:
        with self._lock:
            self._expires_at = 0.0

    def _refresh(self) -> None:
        headers = self._headers() if callable(self._headers) else self._headers
        try:
            resp = self._http.request("GET", self._url, headers=headers, limit=1 << 20)
        except TransportError as exc:
            raise TransferError(f"cannot reach the token service {self._url}: {exc}", retryable=True) from None
        if resp.status_code in (401, 403):
            raise TransferError(
                f"the token service refused your credentials (HTTP {resp.status_code}); check HF_TOKEN or your git credentials",
                status=resp.status_code,
            )
        if resp.status_code != 200:
            raise TransferError(f"token refresh failed with HTTP {resp.status_code}", retryable=resp.status_code >= 500, status=resp.status_code)
        try:
            body = resp.json()
            self._token, self._expires_at = str(body["accessToken"]), float(body["exp"])
            self.cas_url = body.get("casUrl")
        except (ValueError, KeyError, TypeError):
            raise TransferError("the token service answered something that is not a token") from None
