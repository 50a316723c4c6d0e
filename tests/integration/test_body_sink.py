"""Request bodies taken straight into a handler's buffer (http_guard.BodySink, http_io.body_into),
through a real uvicorn server on loopback running our protocol, with raw sockets as clients.

What must hold whatever the client does: the buffer ends up holding exactly the body, bytes that
arrived before the handler asked for them included; nothing lands past the limit or after the
handler let go of the buffer (it goes back to a pool shared by every upload); and a pipelined
request's body never lands in the previous request's buffer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from git_xet.server import http_guard
from git_xet.server.errors import RequestRefused
from git_xet.server.http_guard import BODY_INTO, BodySink
from git_xet.server.http_io import body_into
from tests.support.guarded_uvicorn import guarded_uvicorn

KIB = 1024
LIMIT = 512 * KIB
SENTINEL = 0xA5
HOLD = 0.3  # seconds a handler waits while the client goes on sending


class Handlers:
    """The ASGI app: POST /take takes the body; /late first waits HOLD s (the body piles up
    in the connection); /stop lets go of the buffer after the first arrival, then waits HOLD s
    before it answers. Each answers what its buffer held, and remembers the buffer."""

    def __init__(self) -> None:
        self.buffers: list[bytearray] = []
        self.sunk: list[bool] = []
        self.let_go = threading.Event()  # set once /stop has closed its sink

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        buffer = bytearray([SENTINEL]) * (LIMIT + 64 * KIB)
        self.buffers.append(buffer)
        self.sunk.append(BODY_INTO in scope.get("extensions", {}))
        if scope["path"] == "/late":
            await asyncio.sleep(HOLD)
        received = 0
        try:
            async with aclosing(body_into(request, buffer, LIMIT)) as arrivals:
                async for arrived in arrivals:
                    received = arrived
                    if scope["path"] == "/stop":
                        break
        except RequestRefused as refused:
            await _answer(send, refused.status, {"error": str(refused)})
            return
        if scope["path"] == "/stop":
            self.let_go.set()
            await asyncio.sleep(HOLD)
        await _answer(send, 200, {"received": received, "sha256": hashlib.sha256(buffer[:received]).hexdigest()})


async def _answer(send, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[int, Handlers]]:
    handlers = Handlers()
    with guarded_uvicorn(handlers) as port:
        yield port, handlers


class DirectReads:
    """What the protocol did while a test ran: the sizes of the reads the socket made straight
    into a sink's buffer (http_guard's BufferedProtocol), and whether a handler has taken its
    body into a sink yet."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.sink_taken = threading.Event()


@pytest.fixture()
def direct_reads() -> Iterator[DirectReads]:
    seen = DirectReads()
    protocol, reader = http_guard.GuardedHttpToolsProtocol, http_guard._DirectBody
    body_into, buffer_updated = protocol._body_into, reader.buffer_updated

    def taking(self, *args):
        sink = body_into(self, *args)
        seen.sink_taken.set()
        return sink

    def counted(self, nbytes: int) -> None:
        seen.sizes.append(nbytes)
        buffer_updated(self, nbytes)

    protocol._body_into = taking  # type: ignore[method-assign]
    reader.buffer_updated = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        protocol._body_into = body_into  # type: ignore[method-assign]
        reader.buffer_updated = buffer_updated  # type: ignore[method-assign]


def _head(path: str, length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode()


def _chunked(body: bytes) -> bytes:
    return (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"


def _answers(sock: socket.socket, count: int) -> list[tuple[int, dict]]:
    """`count` HTTP answers read off `sock` (each with a Content-Length)."""
    data = b""
    answers = []
    while len(answers) < count:
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            assert more, f"connection closed after {len(answers)} answers"
            data += more
        head, data = data.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        while len(data) < length:
            more = sock.recv(65536)
            assert more
            data += more
        answers.append((int(head.split(b" ")[1]), json.loads(data[:length])))
        data = data[length:]
    return answers


def _send(port: int, wire: bytes, pieces: list[int], count: int = 1) -> list[tuple[int, dict]]:
    """Send `wire` cut after each offset in `pieces` (a pause between pieces), read the answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        start = 0
        for cut in [*sorted({c for c in pieces if 0 < c < len(wire)}), len(wire)]:
            sock.sendall(wire[start:cut])
            start = cut
            time.sleep(0.001)
        return _answers(sock, count)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(0, LIMIT),
    chunked=st.booleans(),
    cuts=st.lists(st.integers(0, LIMIT + 200), max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_buffer_holds_exactly_the_body_however_it_arrives(served: tuple[int, Handlers], size: int, chunked: bool, cuts: list[int], seed: int) -> None:
    port, handlers = served
    body = hashlib.shake_256(seed.to_bytes(4, "big")).digest(size)
    wire = _head("/take", None if chunked else size) + (_chunked(body) if chunked else body)
    [(status, answer)] = _send(port, wire, cuts)
    assert status == 200 and answer == {"received": size, "sha256": hashlib.sha256(body).hexdigest()}
    assert handlers.sunk[-1], "our protocol offered the sink"
    assert set(handlers.buffers[-1][size:]) <= {SENTINEL}, "nothing written past the body"


def test_a_body_that_arrived_before_the_handler_asked_is_kept(served: tuple[int, Handlers]) -> None:
    """More than uvicorn's high-water mark arrives first (reading pauses), then the sink takes over."""
    port, _ = served
    body = hashlib.shake_256(b"late").digest(LIMIT)
    [(status, answer)] = _send(port, _head("/late", len(body)) + body, [])
    assert status == 200 and answer == {"received": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_past_the_limit_is_refused_and_nothing_lands_past_it(served: tuple[int, Handlers], declared: bool) -> None:
    port, handlers = served
    body = b"x" * (LIMIT + 10 * KIB)
    wire = _head("/take", len(body) if declared else None) + (body if declared else _chunked(body))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(wire)
        except OSError:  # the server may answer and close before taking it all
            pass
        [(status, answer)] = _answers(sock, 1)
    assert status == 413, answer
    assert set(handlers.buffers[-1][LIMIT:]) == {SENTINEL}


def test_after_the_handler_lets_go_nothing_more_lands_in_its_buffer(served: tuple[int, Handlers]) -> None:
    port, handlers = served
    first = b"a" * (64 * KIB)
    rest = b"b" * (LIMIT - len(first))
    handlers.let_go.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_head("/stop", LIMIT) + first)
        # Waited for, not slept on: under load the handler may take longer than any sleep.
        assert handlers.let_go.wait(30), "the handler never let go of its sink"
        sock.sendall(rest)  # while it waits, all of this reaches the connection
        [(status, answer)] = _answers(sock, 1)
    held = answer["received"]
    assert status == 200 and 0 < held <= len(first)
    buffer = handlers.buffers[-1]
    assert buffer[:held] == first[:held]
    assert set(buffer[held:]) == {SENTINEL}, "bytes landed after the sink was closed"


@pytest.mark.parametrize("first", ["/take", "/late"])
def test_a_pipelined_request_keeps_its_own_body(served: tuple[int, Handlers], first: str) -> None:
    """The second request's body arrives while the first is handled (with /late, before the
    first even asks for its body), and the rest of it only once the first is answered."""
    port, handlers = served
    one = hashlib.shake_256(b"one").digest(200 * KIB)
    two = hashlib.shake_256(b"two").digest(LIMIT)
    wire = _head(first, len(one)) + one + _head("/take", len(two)) + two
    answers = _send(port, wire, [len(wire) // 3], count=2)
    assert answers == [
        (200, {"received": len(one), "sha256": hashlib.sha256(one).hexdigest()}),
        (200, {"received": len(two), "sha256": hashlib.sha256(two).hexdigest()}),
    ]
    assert set(handlers.buffers[-2][len(one) :]) == {SENTINEL}


def test_a_declared_body_sent_after_the_handler_asked_is_read_straight_into_its_buffer(served: tuple[int, Handlers], direct_reads: DirectReads) -> None:
    """And the connection's next request is parsed as usual (a fresh parser takes over)."""
    port, _ = served
    body = hashlib.shake_256(b"direct").digest(LIMIT)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_head("/take", len(body)))
        assert direct_reads.sink_taken.wait(10), "the handler never took its body"
        sock.sendall(body)  # none of it arrived before the handler took it
        [first] = _answers(sock, 1)
        assert sum(direct_reads.sizes) == len(body)
        sock.sendall(_head("/take", 3) + b"abc" + _head("/take", None) + _chunked(b"chunked"))
        rest = _answers(sock, 2)
    assert first == (200, {"received": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    assert rest == [(200, {"received": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}), (200, {"received": 7, "sha256": hashlib.sha256(b"chunked").hexdigest()})]


def test_a_chunked_body_goes_through_the_parser(served: tuple[int, Handlers], direct_reads: DirectReads) -> None:
    """Its framing is the parser's to read: only a declared length can be read past it."""
    port, _ = served
    body = b"c" * (200 * KIB)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_head("/take", None))
        assert direct_reads.sink_taken.wait(10), "the handler never took its body"
        sock.sendall(_chunked(body))
        [(status, answer)] = _answers(sock, 1)
    assert status == 200 and answer["received"] == len(body)
    assert direct_reads.sizes == []


def test_elsewhere_the_parts_are_copied_in() -> None:
    """Under another ASGI server (no BODY_INTO), body_into copies each part into the buffer."""
    parts = [b"ab" * 1000, b"", b"cd" * 3000, b"e"]
    pending = list(parts)

    async def receive() -> dict:
        part = pending.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(pending)}

    async def take() -> tuple[list[int], bytearray]:
        buffer = bytearray(LIMIT)
        scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
        seen = [received async for received in body_into(Request(scope, receive), buffer, LIMIT)]
        return seen, buffer

    seen, buffer = asyncio.run(take())
    body = b"".join(parts)
    assert seen == [2000, 8000, 8001]  # one per arrival that brought bytes
    assert buffer[: len(body)] == body


def test_a_sink_counts_past_its_limit_without_writing_and_writes_nothing_once_closed() -> None:
    buffer = bytearray(16)
    sink = BodySink(buffer, 10)
    sink.write(b"0123456")
    sink.write(b"789")
    assert sink.received == 10 and buffer[:10] == b"0123456789"
    sink.write(b"X")
    assert sink.received == 11 and buffer[10:] == bytes(6)
    fresh = bytearray(16)
    closed = BodySink(fresh, 16)
    closed.close()
    closed.write(b"late")
    assert closed.received == 4 and fresh == bytearray(16)
    with pytest.raises(ValueError):
        BodySink(bytearray(8), 9)


@given(limit=st.integers(0, 64), reads=st.lists(st.integers(1, 40), max_size=8), close_after=st.integers(0, 8))
def test_a_sinks_space_ends_at_its_limit_and_is_gone_once_closed(limit: int, reads: list[int], close_after: int) -> None:
    """Bytes read into space() land right after what is in and never past the limit or after
    close(); every byte read is counted, landed or not."""
    buffer = bytearray([SENTINEL]) * 64
    sink = BodySink(buffer, limit)
    landed = bytearray()
    read = 0
    for number, most in enumerate(reads):
        if number == close_after:
            sink.close()
        view = sink.space(most)
        if view is not None:
            assert 0 < len(view) <= most and sink.received + len(view) <= limit
            data = bytes([number]) * len(view)
            view[:] = data
            landed += data
        count = most if view is None else len(view)  # what a recv_into into it could read
        sink.advance(count)
        read += count
    assert sink.received == read
    assert buffer[: len(landed)] == landed and set(buffer[len(landed) :]) <= {SENTINEL}
    assert len(landed) == min(limit, sum(reads[:close_after]))
