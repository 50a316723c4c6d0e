"""Xorb ranges read into their windows (client/http_client.py's Response.readinto) from a real
`git xet serve`: the same bytes as a plain httpx GET of the range reads whole, and never around
a proxy the environment names."""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from git_xet.agent.protocol import Transfer
from git_xet.agent.routing import StoreRouter
from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.client.http_client import Client
from git_xet.core.extension import CAPABILITIES, Capabilities
from git_xet.core.reconstruction import FetchRange
from git_xet.platform.memory import xorb_range_windows
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.http_stub import http_stub
from tests.support.server_process import running_server

ONE_TRY = RetryPolicy(max_attempts=1, base_delay=0.01)


def _bytes(view: bytes | bytearray | memoryview) -> bytes:
    data = bytes(view)
    if isinstance(view, memoryview):
        xorb_range_windows().give_back(view)
    return data


def test_ranges_read_into_windows_agree_with_whole_reads(tmp_path: Path) -> None:
    data = random_bytes(40_000_000, 5)  # several ranges, windows pooled and not
    with running_server(tmp_path / "data") as srv:
        token = StaticToken(srv.token("write"))
        with Uploader(HttpCasBackend(srv.url, token)) as up:
            file_hex = up.add_bytes(data).file_hex
            up.finalize()
        direct = HttpCasBackend(srv.url, token, policy=ONE_TRY)
        fetches = direct.reconstruction(file_hex).fetches
        assert len(fetches) >= 3
        for fetch in fetches:
            assert fetch.url is not None
            whole = httpx.get(fetch.url, headers={"Range": f"bytes={fetch.byte_start}-{fetch.byte_end}"}).content
            assert _bytes(direct.fetch(fetch)) == whole
        # Each range was asked for twice, once each way, and the access log counts the bytes
        # the kernel sent from the xorb's file (http_guard.SEND_FILE) as it counts any others.
        log = srv.log_once_it_has("/v1/xorb-data/", 2 * len(fetches))
        lines = [json.loads(x.split(" ", 3)[-1]) for x in log.splitlines() if '"/v1/xorb-data/' in x]
        assert sorted(line["bytes_out"] for line in lines) == sorted(2 * [f.byte_end - f.byte_start + 1 for f in fetches])
        assert isinstance(direct.http, Client)
        direct.close()


def test_a_proxy_in_the_environment_is_never_bypassed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_server(tmp_path / "data") as srv:
        token = StaticToken(srv.token("write"))
        with Uploader(HttpCasBackend(srv.url, token)) as up:
            file_hex = up.add_bytes(random_bytes(100_000, 6)).file_hex
            up.finalize()
        fetch = HttpCasBackend(srv.url, token).reconstruction(file_hex).fetches[0]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
        monkeypatch.setenv("HTTP_PROXY", dead_proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with pytest.raises(TransferError, match="Connection refused"):  # the dead proxy; the server is up
            HttpCasBackend(srv.url, token, policy=ONE_TRY).fetch(fetch)
        monkeypatch.delenv("HTTP_PROXY")
        assert len(_bytes(HttpCasBackend(srv.url, token, policy=ONE_TRY).fetch(fetch))) == fetch.byte_end - fetch.byte_start + 1


class _RangeRecorder(BaseHTTPRequestHandler):
    """Answers any range GET with zeros and notes how it was asked; lists our extension when
    asked, as a `git xet serve` does (the router asks before a standalone download)."""

    encodings: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path == CAPABILITIES:
            body = json.dumps(Capabilities(lfs_objects=True).to_json()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        _RangeRecorder.encodings.append(self.headers.get("Accept-Encoding", ""))
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        self.send_response(206)
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        self.wfile.write(bytes(last - first + 1))

    def log_message(self, *args: object) -> None:
        pass


def test_the_agents_stores_share_one_client_and_ask_for_ranges_as_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's router gives every HTTP store its one shared client, for a standalone server
    and for a negotiated (Hub) CAS; every range is asked for as stored (`Accept-Encoding:
    identity`), by the direct client and by httpx alike: a store's bytes are never re-encoded."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    _RangeRecorder.encodings = []
    with http_stub(_RangeRecorder) as url:
        fetch = FetchRange("ab" * 32, 0, 1, 0, 9_999, url=f"{url}/xorb")
        router = StoreRouter("origin")
        monkeypatch.setenv("GIT_XET_ENDPOINT", url)
        standalone, _ = router.route(Transfer("download", "cd" * 32, 10_000_000, None, None))
        monkeypatch.delenv("GIT_XET_ENDPOINT")
        negotiated, _ = router.route(Transfer("download", "cd" * 32, 10_000_000, None, {"href": url, "header": {"X-Xet-Cas-Url": url}}))
        assert isinstance(standalone, HttpCasBackend) and isinstance(negotiated, HttpCasBackend) and standalone is not negotiated
        assert standalone.http is negotiated.http is router.http() and isinstance(router.http(), Client)
        for backend in (standalone, negotiated):
            assert _bytes(backend.fetch(fetch)) == bytes(10_000)
        router.http().close()
    assert _RangeRecorder.encodings == ["identity"] * 2
