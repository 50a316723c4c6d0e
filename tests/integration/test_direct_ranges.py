"""Xorb ranges read straight into their windows (client/range_get.py) from a real `git xet serve`:
the same bytes as through httpx, and never around a proxy the environment names."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend, make_http_client
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.memory import xorb_range_windows
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.server_process import running_server

ONE_TRY = RetryPolicy(max_attempts=1, base_delay=0.01)


def _bytes(view: bytes | bytearray | memoryview) -> bytes:
    data = bytes(view)
    if isinstance(view, memoryview):
        xorb_range_windows().give_back(view)
    return data


def test_direct_and_httpx_reads_agree_on_every_range(tmp_path: Path) -> None:
    data = random_bytes(40_000_000, 5)  # several ranges, windows pooled and not
    with running_server(tmp_path / "data") as srv:
        token = StaticToken(srv.token("write"))
        with Uploader(HttpCasBackend(srv.url, token)) as up:
            file_hex = up.add_bytes(data).file_hex
            up.finalize()
        direct = HttpCasBackend(srv.url, token, policy=ONE_TRY)
        through_httpx = HttpCasBackend(srv.url, token, policy=ONE_TRY, http=make_http_client())
        fetches = direct.reconstruction(file_hex).fetches
        assert len(fetches) >= 3
        for fetch in fetches:
            assert _bytes(direct.fetch(fetch)) == _bytes(through_httpx.fetch(fetch))
        # Each range was asked for twice, once each way.
        assert srv.log().count("/v1/xorb-data/") >= 2 * len(fetches)
        direct.close()
        through_httpx.close()


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
