"""Auth and the session id as a layer of the HTTP client (an httpx.Auth), not code around
each call: every CAS request carries the session id and the store's current token, and a
refused token (401) is refreshed and the request sent once more, before any retry policy sees
the answer (client/retry.py retries what is left: transient failures)."""

from __future__ import annotations

from collections.abc import Generator

import httpx

from ..core.http_headers import SESSION_ID, bearer
from .errors import TransferError
from .token_policy import may_send_credentials, plain_http_refusal
from .tokens import TokenSource


class StoreAuth(httpx.Auth):
    """Sign a request to one store: the session id (X-Xet-Session-Id) always, and with `tokens`
    its bearer token. A token is never sent over plain http off this machine (wherever the
    URL came from, it would be readable on every hop): such a request is refused unsent."""

    def __init__(self, session_id: str, tokens: TokenSource | None = None) -> None:
        self._session_id = session_id
        self._tokens = tokens

    def __repr__(self) -> str:
        return "StoreAuth(<hidden>)"

    def _sign(self, request: httpx.Request) -> None:
        request.headers[SESSION_ID] = self._session_id
        token = self._tokens.token() if self._tokens is not None else None
        if token:
            url = str(request.url)
            if not may_send_credentials(url):
                raise TransferError(plain_http_refusal(url, "for this CAS"))
            request.headers.update(bearer(token))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self._sign(request)
        response = yield request
        if response.status_code == 401 and self._tokens is not None:
            self._tokens.invalidate()  # the server refused it: a refreshing source fetches another
            self._sign(request)
            yield request
