"""PlainTransport (httpx over http.client) against a real HTTP/1.1 server on 127.0.0.1 whose
behaviour each test picks: bodies of every shape both ways, kept-alive connections reused only
when safe, and every failure surfacing as the httpx error callers retry."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.plain_transport import PlainTransport
from tests.support.counting_server import CountingHandler, CountingServer, serving
from tests.support.datagen import random_bytes

DATA = random_bytes(300_000, 5)


class _Handler(CountingHandler):

    def _answer(self, status: int, body: bytes, *, chunked: bool = False) -> None:
        self.send_response(status)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 7000):
                piece = body[start : start + 7000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        self.wfile.flush()

    def _request_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().strip(), 16)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
                if size == 0:
                    return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self) -> None:
        body = self._request_body()
        self.server.requests.append((self.path, self.headers.items()))
        if self.path == "/refuse-unread":  # answers before reading the body, then hangs up
            self._answer(413, b"too large")
            self.close_connection = True
            return
        self._answer(200, hashlib.sha256(body).hexdigest().encode())

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.items()))
        if self.path == "/chunked":
            self._answer(200, DATA, chunked=True)
        elif self.path == "/stall":
            time.sleep(2)
            self._answer(200, b"late")
        elif self.path == "/hang-up":
            self.close_connection = True  # no answer at all
        elif self.path == "/then-close":  # a keep-alive answer, then the server drops the connection
            self._answer(200, b"bye")
            self.close_connection = True
        else:
            self._answer(200, DATA)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()


@pytest.fixture(scope="module")
def server() -> Iterator[CountingServer]:
    with serving(_Handler) as srv:
        yield srv


def _client(timeout: float = 10.0) -> httpx.Client:
    return httpx.Client(transport=PlainTransport(lambda: pytest.fail("no TLS for plain HTTP")), timeout=timeout)


def _url(server: CountingServer, path: str) -> str:
    return server.url + path


def test_one_kept_alive_connection_carries_sequential_requests(server: CountingServer) -> None:
    before = server.connections
    with _client() as client:
        for _ in range(20):
            assert client.get(_url(server, "/data")).content == DATA
    assert server.connections - before == 1


def test_the_request_head_holds_each_header_once(server: CountingServer) -> None:
    server.requests.clear()
    with _client() as client:
        client.get(_url(server, "/data"), headers={"User-Agent": "probe/1"})
    _, headers = server.requests[-1]
    names = [name.lower() for name, _ in headers]
    assert sorted(set(names)) == sorted(names)  # http.client adds no Host or Accept-Encoding of its own
    assert ("User-Agent", "probe/1") in headers
    assert ("Host", f"127.0.0.1:{server.server_address[1]}") in headers


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 40_000), max_size=12), declared=st.booleans())
def test_streamed_request_bodies_arrive_whole(server: CountingServer, sizes: list[int], declared: bool) -> None:
    """Pieces as memoryviews (as uploads send them), with a declared length or chunked."""
    body = random_bytes(sum(sizes), len(sizes))
    pieces, start = [], 0
    for size in sizes:
        pieces.append(memoryview(body)[start : start + size])
        start += size
    headers = {"Content-Length": str(len(body))} if declared else {}
    with _client() as client:
        answer = client.post(_url(server, "/echo-hash"), content=iter(pieces), headers=headers)  # type: ignore[arg-type]
    assert answer.text == hashlib.sha256(body).hexdigest()


def test_chunked_and_head_answers_are_read_as_sent(server: CountingServer) -> None:
    with _client() as client:
        assert client.get(_url(server, "/chunked")).content == DATA
        head = client.head(_url(server, "/data"))
        assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(DATA))
        assert client.get(_url(server, "/data")).content == DATA  # the connection is still in step


def test_a_body_left_unread_is_not_taken_for_the_next_answer(server: CountingServer) -> None:
    before = server.connections
    with _client() as client:
        with client.stream("GET", _url(server, "/data")) as resp:
            next(resp.iter_raw())  # one piece, then closed: the rest is still on the wire
        assert client.get(_url(server, "/data")).content == DATA
    assert server.connections - before == 2  # the half-read connection was dropped, not reused


def test_a_connection_the_server_closed_is_not_reused(server: CountingServer) -> None:
    before = server.connections
    with _client() as client:
        assert client.get(_url(server, "/then-close")).content == b"bye"
        time.sleep(0.1)  # the close has arrived: the idle connection reads as EOF
        assert client.post(_url(server, "/echo-hash"), content=b"x").text == hashlib.sha256(b"x").hexdigest()
    assert server.connections - before == 2


def test_a_server_that_hangs_up_mid_upload_gives_its_refusal_or_a_transport_error(server: CountingServer) -> None:
    """Whether the refusal can still be read depends on the kernel (a reset may discard it);
    either way the caller gets something it handles, and the next request works."""
    body = b"z" * (8 << 20)  # more than the socket buffers take: the send meets a closed connection
    with _client() as client:
        try:
            answer = client.post(_url(server, "/refuse-unread"), content=iter([body]), headers={"Content-Length": str(len(body))})  # type: ignore[arg-type]
        except httpx.TransportError:
            pass
        else:
            assert answer.status_code == 413 and answer.content == b"too large"
        assert client.get(_url(server, "/data")).content == DATA


def test_failures_are_httpx_transport_errors(server: CountingServer) -> None:
    with _client(timeout=0.5) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.get(_url(server, "/stall"))
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(_url(server, "/hang-up"))
        with pytest.raises(httpx.UnsupportedProtocol):
            client.get("ftp://127.0.0.1/x")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with _client() as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{port}/nobody-listens")


def test_concurrent_requests_get_their_own_answers(server: CountingServer) -> None:
    """Threads sharing one client (the agent's uploads and downloads do) each get the answer to
    their own request: no connection is handed to two requests at once."""
    bodies = [random_bytes(1000 + i * 997, i) for i in range(16)]
    answers: dict[int, str] = {}

    def post(i: int) -> None:
        answers[i] = client.post(_url(server, "/echo-hash"), content=bodies[i]).text

    with _client() as client:
        threads = [threading.Thread(target=post, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert answers == {i: hashlib.sha256(body).hexdigest() for i, body in enumerate(bodies)}
