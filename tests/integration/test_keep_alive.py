"""Kept-alive connections wait for a client that pauses (git-xet issue 41, §2).

The server closed an idle kept-alive connection after uvicorn's 5 s; a client that paused longer
before its next request on it lost that request (huggingface.js, chunking a large file with its
event loop blocked between the dedup query and the xorb POST, got EPIPE and does not resend a
POST). Now the idle limit is --keep-alive-timeout (75 s by default, longer than load balancers'
60 s), every answer says it in `Keep-Alive: timeout=N`, and a connection idle past it is closed
(idle connections count against --max-connections). Real clients pause for generated lengths
between two requests on one connection, against a server whose limit is shortened to keep the
test short; the pauses reach past uvicorn's old 5 s.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpcore
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from git_xet.client.http_backend import make_http_client
from git_xet.client.http_types import Timeouts
from git_xet.core.http_headers import bearer
from tests.support import hfjs_peer
from tests.support.datagen import random_bytes
from tests.support.server_process import RunningServer, running_server

# The test server's idle limit: past the old 5 s, and past every pause below with room for
# undici, which lets a connection go a second or two before the server's Keep-Alive says.
KEEP_ALIVE = 10
PAUSES = st.floats(0.0, 6.5)
PAUSE_SETTINGS = settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("keepalive") / "data", "--keep-alive-timeout", str(KEEP_ALIVE)) as srv:
        yield srv


def test_the_default_idle_limit_is_what_clients_and_load_balancers_expect(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as srv:
        answer = httpx.get(f"{srv.url}/health", timeout=30)
    assert answer.headers["keep-alive"].startswith("timeout=")
    assert int(answer.headers["keep-alive"].removeprefix("timeout=")) >= 60


@PAUSE_SETTINGS
@given(pause=PAUSES)
@example(pause=6.0)
def test_httpx_pauses_and_posts_on_the_same_connection(server: RunningServer, pause: float) -> None:
    import time

    # httpx drops idle connections after its own 5 s unless told (requests/urllib3 keep them).
    with httpx.Client(timeout=30, limits=httpx.Limits(keepalive_expiry=60)) as client:
        first = client.get(f"{server.url}/health")
        assert first.headers["keep-alive"] == f"timeout={KEEP_ALIVE}"
        port = first.extensions["network_stream"].get_extra_info("socket").getsockname()[1]
        time.sleep(pause)
        second = client.post(f"{server.url}/v1/telemetry", json={})
        assert second.status_code == 200
        assert second.extensions["network_stream"].get_extra_info("socket").getsockname()[1] == port  # not a new connection


@PAUSE_SETTINGS
@given(pause=PAUSES)
@example(pause=6.0)
def test_our_client_pauses_and_posts_on_the_same_connection(server: RunningServer, pause: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's HTTP client (client/http_client.py, httpcore's pool beneath it) would open a
    new connection for a closed one; it opens one connection for both requests here, so the
    server kept it."""
    import time

    opened: list[object] = []
    original = httpcore.SyncBackend.connect_tcp

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(original(self, *args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", counted)
    token = server.token("write")
    with make_http_client(Timeouts(connect=10, read=30, write=30)) as client:
        assert client.request("GET", f"{server.url}/health").status_code == 200
        time.sleep(pause)
        answer = client.request("POST", f"{server.url}/v1/telemetry", headers=bearer(token), json={})
        assert answer.status_code == 200
    assert len(opened) == 1


@PAUSE_SETTINGS
@given(pause=st.floats(0.5, 6.5), size=st.integers(1, 400_000))
@example(pause=6.0, size=200_000)
def test_huggingface_js_blocked_before_its_xorb_post_still_uploads(server: RunningServer, tmp_path_factory: pytest.TempPathFactory, pause: float, size: int) -> None:
    """Its event loop blocked for `pause` s before the xorb POST (after its dedup query on the
    same connection): before, a pause past 5 s failed the upload (the POST went to a socket the
    server had closed)."""
    work = tmp_path_factory.mktemp("hfjs")
    path = work / "data.bin"
    path.write_bytes(random_bytes(size, size))
    endpoint = hfjs_peer.Endpoint(server.url, server.token("write", repo="peer/hfjs"), server.token("read", repo="peer/hfjs"))
    result = hfjs_peer.direct_upload([path], endpoint, block_before_xorb=pause)
    assert any(r.startswith("POST /v1/xorbs/") and r.endswith(" 200") for r in result.requests), result.requests
    assert len(result.direct) == 1


def test_a_connection_idle_past_the_limit_is_closed(tmp_path: Path) -> None:
    """The bound: a kept-alive connection that sends nothing more is closed by the server."""
    with running_server(tmp_path / "data", "--keep-alive-timeout", "1") as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while b'{"status":"ok"}' not in answer:
                piece = sock.recv(4096)
                assert piece, answer
                answer += piece
            assert b"keep-alive: timeout=1" in answer.lower()
            sock.settimeout(30)  # bounded: the server closes it after about 1 s
            assert sock.recv(4096) == b""
