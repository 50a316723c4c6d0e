"""Response bodies sent from a file by the kernel (http_guard.SEND_FILE, http_io.FileRangeResponse),
through a real uvicorn server on loopback running our protocol, with raw sockets as clients.

What must hold: the answer carries exactly the asked bytes of the file, framed so that the next
request on the same connection is answered too; a HEAD gets the headers and no body; a client
that stops reading is dropped after the idle timeout, and the server goes on answering others;
a file shorter than the answer it was promised for ends the connection instead of hanging it.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import Response

from git_xet.server.http_guard import SEND_FILE, SEND_FILE_PIECE
from git_xet.server.http_io import FileRangeResponse
from tests.support.guarded_uvicorn import guarded_uvicorn

IDLE_TIMEOUT = 1.0
FILE_BYTES = 3 * SEND_FILE_PIECE + 12345  # several pieces, and a partial one


class Files:
    """The ASGI app: GET /{offset}/{count}[/short] answers bytes [offset, offset + count) of
    its file (`short`: of a copy cut at offset + count // 2) and remembers whether the kernel
    path was offered."""

    def __init__(self, root: Path) -> None:
        self.data = os.urandom(FILE_BYTES)
        self.path = root / "object"
        self.path.write_bytes(self.data)
        self.short = root / "short"
        self.offered: list[bool] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        offset_s, count_s, *rest = scope["path"].strip("/").split("/")
        offset, count = int(offset_s), int(count_s)
        self.offered.append(SEND_FILE in scope.get("extensions", {}))
        path = self.path
        if rest == ["short"]:
            self.short.write_bytes(self.data[: offset + count // 2])
            path = self.short
        # What answers where the kernel path is not offered (and for a HEAD): the same bytes.
        fallback = Response(self.data[offset : offset + count], status_code=206)
        await FileRangeResponse(open(path, "rb"), offset, count, IDLE_TIMEOUT, fallback)(scope, receive, send)  # noqa: ASYNC230, SIM115 - a small local file; the response closes it


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[int, Files]]:
    with tempfile.TemporaryDirectory() as tmp:
        files = Files(Path(tmp))
        with guarded_uvicorn(files) as port:
            yield port, files


def _read_answer(sock: socket.socket, pending: bytearray, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    """One answer off `sock` (status, headers, body); `pending` carries bytes read past it."""
    while b"\r\n\r\n" not in pending:
        more = sock.recv(1 << 20)
        assert more, "connection closed before an answer"
        pending += more
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = 0 if head_only else int(headers["content-length"])
    body = bytearray(rest)
    while len(body) < length:
        more = sock.recv(1 << 20)
        assert more, f"connection closed {length - len(body)} bytes short"
        body += more
    pending[:] = body[length:]
    return int(lines[0].split()[1]), headers, bytes(body[:length])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=st.lists(st.tuples(st.integers(0, FILE_BYTES - 1), st.integers(1, FILE_BYTES)), min_size=1, max_size=3))
def test_each_answer_is_exactly_its_range_and_the_connection_goes_on(served, ranges: list[tuple[int, int]]) -> None:
    port, files = served
    asked = [(offset, min(count, FILE_BYTES - offset)) for offset, count in ranges]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        pending = bytearray()
        for offset, count in asked:  # one after another on one kept-alive connection
            files.offered.clear()
            sock.sendall(f"GET /{offset}/{count} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            status, headers, body = _read_answer(sock, pending)
            assert (status, int(headers["content-length"])) == (206, count)
            assert body == files.data[offset : offset + count]
            assert files.offered == [True]
        assert not pending


def test_a_head_gets_the_headers_and_no_body(served) -> None:
    port, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        pending = bytearray()
        sock.sendall(b"HEAD /10/5000 HTTP/1.1\r\nHost: x\r\n\r\nGET /0/3 HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = _read_answer(sock, pending, head_only=True)
        assert (status, headers["content-length"]) == (206, "5000")
        status, _, body = _read_answer(sock, pending)  # the GET's answer comes next, not a body
        assert (status, body) == (206, served[1].data[:3])


def test_a_client_that_stops_reading_is_dropped_and_others_are_answered(served) -> None:
    port, files = served
    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(f"GET /0/{FILE_BYTES} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(IDLE_TIMEOUT + 2)  # reads nothing meanwhile
        with socket.create_connection(("127.0.0.1", port), timeout=30) as other:
            other.sendall(b"GET /5/100 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answer(other, bytearray())[2] == files.data[5:105]
        # The server gave up on the stalled one: draining it ends in EOF (or a reset) well
        # short of the file, however long we read.
        stalled.settimeout(30)
        received = 0
        try:
            while more := stalled.recv(1 << 20):
                received += len(more)
        except ConnectionResetError:
            pass
        assert received < FILE_BYTES


def test_a_file_shorter_than_promised_ends_the_connection(served) -> None:
    port, files = served
    count = 2 * SEND_FILE_PIECE
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET /100/{count}/short HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        received = b""
        try:
            while more := sock.recv(1 << 20):
                received += more
        except ConnectionResetError:
            pass
    _, _, body = received.partition(b"\r\n\r\n")
    assert files.data[100:].startswith(body)
    assert len(body) < count
