"""The agent's HTTP client: TLS is set up on the first https:// request only (an agent that
talks to a plain-HTTP server never loads the system's certificates), requests go through a
proxy from the environment when one is set (httpx then carries them), and no cookies are kept
either way."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import ssl

import pytest

from git_xet.client import http_types, wire
from git_xet.client.http_backend import DEFAULT_TIMEOUT, make_http_client
from git_xet.client.proxied_http import ProxiedClient
from tests.support.http_stub import http_stub


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def test_tls_is_set_up_on_the_first_https_request_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    made: list[object] = []
    http_types.verifying_tls_context.cache_clear()  # one per process: forget one an earlier test made
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: made.append(1) or real(*a, **k))
    client = make_http_client()
    assert isinstance(client, wire.Client)
    with http_stub(_Recorder) as url, client:
        assert client.request("GET", f"{url}/plain").content == b"ok"
        assert made == []  # plain HTTP: no certificates loaded
        with pytest.raises(http_types.ConnectError):
            client.request("GET", f"https://127.0.0.1:{url.rsplit(':', 1)[1]}/secure")  # a plain server: the handshake fails
        assert made == [1]
        with pytest.raises(http_types.ConnectError):
            client.request("GET", f"https://127.0.0.1:{url.rsplit(':', 1)[1]}/again")
        assert made == [1]  # made once, then reused
    http_types.verifying_tls_context.cache_clear()  # not the counting one, for later tests


def test_a_proxy_from_the_environment_carries_plain_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    _Recorder.seen = []
    with http_stub(_Recorder) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = make_http_client()
        assert isinstance(client, ProxiedClient)
        with client:
            assert client.request("GET", "http://git-xet.invalid/through-the-proxy").content == b"ok"
    assert _Recorder.seen == ["http://git-xet.invalid/through-the-proxy"]  # the absolute form a proxy gets


class _CookieSetter(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cookie_headers: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        _CookieSetter.cookie_headers.append(self.headers.get("Cookie"))
        self.send_response(200)
        self.send_header("Set-Cookie", "session=abc; Path=/")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("kind", ["direct", "proxied"])
def test_cookies_a_server_sets_are_never_sent_back(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    _CookieSetter.cookie_headers = []
    client = wire.Client(DEFAULT_TIMEOUT) if kind == "direct" else ProxiedClient(DEFAULT_TIMEOUT)  # (httpx's, with no proxy to use)
    with http_stub(_CookieSetter) as url, client:
        for _ in range(3):
            answer = client.request("GET", url + "/")
            assert answer.headers["set-cookie"] == "session=abc; Path=/"  # the answer itself is untouched
    assert _CookieSetter.cookie_headers == [None, None, None]
