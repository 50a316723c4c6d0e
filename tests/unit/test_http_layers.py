"""The layers git-xet puts on httpx, in-process (httpx.MockTransport: no socket): the auth layer
(session id, token, one refresh after a 401, no token over plain http off this machine), request
bodies sent from the buffers they lie in, and httpx's errors mapped to ours in one place (the
chain client/diagnosis.py reads kept)."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.diagnosis import CERTIFICATE, NAME, REFUSED, TIMEOUT, failure_kind
from git_xet.client.errors import TransferError
from git_xet.client.http_auth import StoreAuth
from git_xet.client.http_client import SEND_PIECE, _as_transport_error, _Pieces
from git_xet.client.http_types import ConnectError, ReadError, ReadTimeout, RemoteProtocolError, TransportError
from git_xet.client.retry import is_retryable
from git_xet.core.http_headers import SESSION_ID
from git_xet.core.scattered import ScatteredBytes


class _Tokens:
    """A token source that hands out token-1, token-2, ... one more per invalidate()."""

    def __init__(self) -> None:
        self.issued = 1
        self.invalidated = 0

    def token(self) -> str:
        return f"token-{self.issued}"

    def invalidate(self) -> None:
        self.invalidated += 1
        self.issued += 1


def _client(statuses: list[int], seen: list[httpx.Request]) -> httpx.Client:
    answers = iter(statuses)

    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(httpx.Request(request.method, request.url, headers=request.headers.copy(), content=request.content))  # (the layer edits the one it resends)
        return httpx.Response(next(answers), content=b"{}")

    return httpx.Client(transport=httpx.MockTransport(handle))


@pytest.mark.parametrize(("statuses", "tokens_sent", "status"), [([200], ["token-1"], 200), ([401, 200], ["token-1", "token-2"], 200), ([401, 401], ["token-1", "token-2"], 401)])
def test_a_refused_token_is_refreshed_and_the_request_sent_once_more(statuses: list[int], tokens_sent: list[str], status: int) -> None:
    seen: list[httpx.Request] = []
    tokens = _Tokens()
    with _client(statuses, seen) as client:
        answer = client.post("https://cas.example/v1/xorbs/default/ab", content=b"body", auth=StoreAuth("sess", tokens))
    assert answer.status_code == status
    assert [r.headers["authorization"] for r in seen] == [f"Bearer {t}" for t in tokens_sent]
    assert [r.headers[SESSION_ID] for r in seen] == ["sess"] * len(seen)
    assert [r.content for r in seen] == [b"body"] * len(seen)  # the body sent again whole
    assert tokens.invalidated == len(tokens_sent) - 1


@pytest.mark.parametrize("url", ["http://cas.example/v1/x", "http://10.0.0.1:8080/v1/x"])
def test_no_token_goes_over_plain_http_off_this_machine(url: str) -> None:
    seen: list[httpx.Request] = []
    with _client([200], seen) as client, pytest.raises(TransferError, match="plain http"):
        client.get(url, auth=StoreAuth("sess", _Tokens()))
    assert seen == []  # refused unsent


def test_the_session_id_alone_goes_with_presigned_urls_and_loopback_gets_the_token() -> None:
    seen: list[httpx.Request] = []
    with _client([200, 200], seen) as client:
        client.get("http://bucket.example/xorb?X-Amz-Signature=s", auth=StoreAuth("sess"))
        client.get("http://127.0.0.1:8080/v1/x", auth=StoreAuth("sess", _Tokens()))
    assert [(r.headers.get(SESSION_ID), r.headers.get("authorization")) for r in seen] == [("sess", None), ("sess", "Bearer token-1")]


@settings(max_examples=100, deadline=None)
@given(
    parts=st.lists(st.one_of(st.binary(max_size=300), st.integers(SEND_PIECE - 2, 3 * SEND_PIECE // 2).map(lambda n: bytes([n % 251]) * n)), max_size=12),
    as_views=st.booleans(),
)
def test_body_pieces_keep_the_bytes_pass_big_parts_as_they_are_and_can_be_sent_again(parts: list[bytes], as_views: bool) -> None:
    body = ScatteredBytes([memoryview(p) if as_views else p for p in parts])
    pieces = _Pieces(body)
    first = list(pieces)
    assert b"".join(bytes(p) for p in first) == b"".join(parts)
    assert [bytes(p) for p in list(pieces)] == [bytes(p) for p in first]  # replayable (after a 401, a 307)
    big = [p for p in body.parts if len(p) >= SEND_PIECE]
    assert [p for p in first if any(p is b for b in big)] == big  # not copied
    assert all(0 < len(p) < 2 * SEND_PIECE for p in first if not any(p is b for b in big))


def _raised(error: Exception, cause: BaseException) -> Exception:
    """`error` as httpx raises it: with the OS's or TLS library's error in its chain."""
    error.__context__ = cause
    return error


@pytest.mark.parametrize(
    ("httpx_error", "ours", "kind"),
    [
        (_raised(httpx.ConnectError("refused"), ConnectionRefusedError(111, "refused")), ConnectError, REFUSED),
        (_raised(httpx.ConnectError("name"), socket.gaierror(-2, "Name or service not known")), ConnectError, NAME),
        (_raised(httpx.ReadTimeout("slow"), TimeoutError("timed out")), ReadTimeout, TIMEOUT),
        (httpx.ReadError("reset"), ReadError, None),
        (httpx.RemoteProtocolError("illegal status line"), RemoteProtocolError, None),
    ],
)
def test_httpx_errors_become_ours_and_keep_what_diagnosis_reads(httpx_error: httpx.HTTPError, ours: type[TransportError], kind: str | None) -> None:
    try:
        try:
            raise httpx_error
        except httpx.HTTPError as exc:
            raise _as_transport_error(exc, "https://cas.example/v1/x?secret=1") from None
    except TransportError as mapped:
        assert type(mapped) is ours and is_retryable(mapped)
        assert "secret" not in str(mapped) and "cas.example" in str(mapped)
        assert failure_kind(mapped) == kind


def test_an_untrusted_certificate_is_not_retried_and_says_what_to_set() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    mapped = _as_transport_error(_raised(httpx.ConnectError("verify failed"), verify), "https://cas.example/")  # type: ignore[arg-type]
    assert isinstance(mapped, TransferError) and not mapped.retryable
    assert "SSL_CERT_FILE" in str(mapped) and "unable to get local issuer certificate" in str(mapped)
    assert failure_kind(_raised(TransferError(str(mapped)), verify)) == CERTIFICATE


def test_a_header_httpx_refuses_never_shows_its_value() -> None:
    mapped = _as_transport_error(httpx.LocalProtocolError("Illegal header value b'secret\\r\\nX: 1'"), "https://cas.example/")
    assert isinstance(mapped, TransferError) and not mapped.retryable and "secret" not in str(mapped)
