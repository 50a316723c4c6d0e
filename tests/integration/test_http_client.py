"""The client's one HTTP stack (client/http_client.py: httpx, with git-xet's layers), against
real servers on 127.0.0.1 (its Response, Timeouts and errors live in http_types.py).

These tests were written for the hand-written HTTP/1.1 client httpx replaced, and kept as the
behaviour that must survive it: a body read one byte short or long, or a kept-alive connection
handed to the next request with bytes of the last answer still on it, gives a caller wrong
bytes without any error. So most tests feed it classes of inputs (hypothesis):

- answer bodies of 0..300 KB framed by Content-Length, chunked (random chunk sizes, chunk
  extensions, trailer fields) and by the connection's end (HTTP/1.0, or 1.1 without a length),
  read through read(), iter_raw() and readinto() into windows of random sizes, byte-exact; a
  connection reused only after a body read to its end whose server keeps the connection (and
  not when the server sent more than its answer: client/http_pool.py);
- request bodies (bytes, memoryviews, scattered parts) around the sizes where the sending
  changes arriving whole, Content-Length and Host sent exactly once, the caller's headers
  (however spelled) over the client's defaults; a header with a line break, a method that is
  not a token or a URL with a control character refused before anything is sent;
- gzip/deflate answers decoded by read(), corrupt or cut ones refused; read(limit) refusing or
  cutting a larger body;
- malformed answers (status line, header lines, Content-Length, chunk sizes, heads over
  httpcore's bound, bodies cut short) raising the TransportError callers retry, the connection dropped;
  informational (1xx) answers skipped; HEAD, 204 and 304 answers read without a body;
- redirects (method and body per status, credentials kept only on the same origin, at most 10);
  the environment's proxy; no cookies kept; TLS set up on the first https:// request only;
  threads sharing a client; the idle-connection pool; TLS; timeouts.

Range GETs into windows are checked through HttpCasBackend.fetch (Response.readinto).

The servers are http.server handlers (tests/support/counting_server.py, which counts the
connections it accepts) and, for answers no well-behaved server sends, RawServer below: a socket
server that answers each request with scripted bytes.
"""

from __future__ import annotations

import array
import gzip
import hashlib
import itertools
import json
import os
import resource
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple
from urllib.parse import parse_qs, urlencode, urlsplit

from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from httpcore._backends.sync import SyncStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.errors import StoreUnavailableError, TransferError, UrlExpiredError
from git_xet.client import http_types
from git_xet.client.http_backend import DEFAULT_TIMEOUT, HttpCasBackend, make_http_client
from git_xet.client.retry import RetryPolicy, is_retryable, with_retries
from git_xet.client.http_types import (
    ConnectError,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    Response,
    Timeouts,
    TransportError,
    WriteTimeout,
    verifying_tls_context,
)
from git_xet.client.tokens import StaticToken
from git_xet.client.http_client import MAX_REDIRECTS, SEND_PIECE, Client
from git_xet.client.http_pool import COALESCE_BELOW
from git_xet.core.http_headers import SESSION_ID
from git_xet.core.reconstruction import FetchRange
from git_xet.core.scattered import ScatteredBytes
from git_xet.platform.memory import xorb_range_windows
from tests.support.counting_server import CountingHandler, CountingServer, serving
from tests.support.datagen import random_bytes
from tests.support.http_stub import http_stub

TIMEOUTS = Timeouts(connect=5.0, read=10.0, write=10.0)
BRIEF = Timeouts(connect=5.0, read=0.3, write=0.3)  # for tests that wait for a stall to be noticed
MALFORMED = Timeouts(connect=5.0, read=3.0, write=3.0)  # a client waiting for more shows as ReadTimeout

READERS = ("read", "iter_raw", "readinto")


def _client(timeouts: Timeouts = TIMEOUTS, *, max_idle: int = 16, headers: dict[str, str] | None = None) -> Client:
    return Client(timeouts, headers=headers, max_idle=max_idle)


def _values(fields: Sequence[tuple[str, str]], name: str) -> list[str]:
    """Every value of header `name` (case-insensitively) among `fields`, in order."""
    return [value for field, value in fields if field.lower() == name.lower()]


# ---------------------------------------------------------------------------------------------
# RawServer: scripted bytes on a socket


class RawRequest(NamedTuple):
    method: str
    target: str
    fields: list[tuple[str, str]]
    body: bytes


Reply = tuple[bytes, bool]  # the bytes to send, and whether to close the connection after them
Session = Callable[["RawServer", socket.socket, int], None]


def read_request(reader: BinaryIO) -> RawRequest | None:
    """One request off a connection (its body by Content-Length: wire sends no other framing),
    or None at the connection's end."""
    line = reader.readline()
    if not line:
        return None
    words = line.decode("latin-1").rstrip("\r\n").split(" ")
    fields: list[tuple[str, str]] = []
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        fields.append((name, value.strip()))
    lengths = _values(fields, "content-length")
    body = reader.read(int(lengths[0])) if lengths else b""
    return RawRequest(words[0], words[1] if len(words) > 1 else "", fields, body)


def answer_each(server: RawServer, sock: socket.socket, n: int) -> None:
    """Every request of the connection answered with `server.reply(request)`."""
    reader = sock.makefile("rb")
    while (request := read_request(reader)) is not None:
        with server.lock:
            server.requests.append(request)
        data, close = server.reply(request)
        sock.sendall(data)
        if close:
            return


def answer(status: int, body: bytes, *fields: str, version: bytes = b"HTTP/1.1") -> bytes:
    """An answer with these header fields and a Content-Length."""
    head = [b"%s %d Whatever" % (version, status), *(f.encode("latin-1") for f in fields), b"Content-Length: %d" % len(body)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


NEXT = answer(200, b"next")


class RawServer:
    """A TCP server on 127.0.0.1 that runs `session(server, sock, n)` for its n-th connection
    (from 1), each in a thread of its own; by default `answer_each`, so tests script answers by
    setting `reply`. It counts the connections it accepts and keeps the requests it read."""

    def __init__(self, session: Session | None = None) -> None:
        self.session: Session = session or answer_each
        self.reply: Callable[[RawRequest], Reply] = lambda request: (NEXT, False)
        self.connections = 0
        self.requests: list[RawRequest] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # how soon the accepting thread notices `stopping`
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._open: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(10)
            with self.lock:
                self.connections += 1
                n = self.connections
                self._open.append(sock)
            thread = threading.Thread(target=self._run, args=(sock, n), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, sock: socket.socket, n: int) -> None:
        try:
            self.session(self, sock, n)
        except (OSError, ValueError):
            pass  # the client hung up or sent what a test made it send
        finally:
            sock.close()

    def close(self) -> None:
        self.stopping.set()
        self._accepting.join(timeout=5)
        self._listener.close()
        with self.lock:
            socks = list(self._open)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)


@contextmanager
def raw_server(session: Session | None = None) -> Iterator[RawServer]:
    server = RawServer(session)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def raw() -> Iterator[RawServer]:
    with raw_server() as server:
        yield server


def _serve(raw: RawServer, data: bytes, close: bool = False) -> None:
    """`data` answers GET /body; anything else is answered with NEXT."""
    raw.reply = lambda request: (data, close) if request.target == "/body" else (NEXT, False)


# ---------------------------------------------------------------------------------------------
# http.server: echo, redirects, hang-ups


class Received(NamedTuple):
    method: str
    fields: list[tuple[str, str]]
    body: bytes


class _Handler(CountingHandler):
    """Answers a request with the sha256 (hex) of its body, and keeps the request (each header
    field as sent, repeats included); /redirect?status=&to= and /hop/<n> redirect; a few paths
    misbehave as named."""

    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms wait for an ACK between

    def _send(self, status: int, body: bytes, **fields: str) -> None:
        self.send_response(status)
        for name, value in fields.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/refuse-unread":  # refuses before reading the body, then hangs up
            self._send(413, b"too large")
            self.close_connection = True
            return
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length else b""
        self.server.requests.append((self.path, Received(self.command, self.headers.items(), body)))
        query = parse_qs(parts.query)
        if parts.path == "/redirect":
            self._send(int(query["status"][0]), b"moved", Location=query["to"][0])
        elif parts.path.startswith("/hop/"):
            left = int(parts.path.removeprefix("/hop/"))
            if left:
                self._send(302, b"hop", Location=f"/hop/{left - 1}")
            else:
                self._send(200, b"landed")
        elif parts.path == "/then-close":  # a kept-alive answer, then the server drops the connection
            self._send(200, b"bye")
            self.close_connection = True
        elif parts.path == "/hang-up":  # no answer at all
            self.close_connection = True
        else:
            self._send(200, hashlib.sha256(body).hexdigest().encode())

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


@pytest.fixture(scope="module")
def server() -> Iterator[CountingServer]:
    with serving(_Handler) as srv:
        yield srv


@pytest.fixture(scope="module")
def other_server() -> Iterator[CountingServer]:
    """Another origin (another port) for redirects across origins."""
    with serving(_Handler) as srv:
        yield srv


def _last(srv: CountingServer) -> Received:
    received: Received = srv.requests[-1][1]
    return received


def _sha(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Answer bodies, however framed and however read


class Framed(NamedTuple):
    wire: bytes  # the answer as sent
    body: bytes  # its body
    close: bool  # the server closes the connection after sending it
    reusable: bool  # whether the client may reuse the connection once the body is read
    head: int  # where the body starts in `wire`
    spans: list[tuple[int, int]]  # where in `wire` body bytes are (a cut there is a ReadError)


FRAMINGS = ("length", "chunked", "http/1.0", "http/1.0+length", "no-length", "length+close")
# (h11 refuses whitespace before a chunk extension's ";": no server we talk to sends it)
CHUNK_EXTENSIONS = (b"", b"", b";x=y", b";name", b';q="a;b"', b";a=1;b=2")
TRAILERS = (b"X-Trailer: t", b"Checksum: sha256=abc", b"Expires: Wed, 21 Oct 2015 07:28:00 GMT")


def _size_line(draw: st.DrawFn, size: int) -> bytes:
    digits: bytes = draw(st.sampled_from([b"%x", b"%X", b"%04x"])) % size
    return digits + draw(st.sampled_from(CHUNK_EXTENSIONS)) + b"\r\n"


def _chunked(draw: st.DrawFn, body: bytes) -> Framed:
    size = len(body)
    cuts = sorted({c for c in draw(st.lists(st.integers(1, max(1, size - 1)), max_size=24)) if 0 < c < size})
    bounds = [0, *cuts, size] if size else [0]
    out = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    head = len(out)
    spans = []
    for start, end in itertools.pairwise(bounds):
        out += _size_line(draw, end - start)
        spans.append((len(out), len(out) + end - start))
        out += body[start:end] + b"\r\n"
    out += _size_line(draw, 0)
    for trailer in draw(st.lists(st.sampled_from(TRAILERS), max_size=3)):
        out += trailer + b"\r\n"
    out += b"\r\n"
    return Framed(bytes(out), body, False, True, head, spans)


@st.composite
def framed_answers(draw: st.DrawFn, framings: Sequence[str] = FRAMINGS, min_size: int = 0, max_size: int = 300_000) -> Framed:
    """An answer whose body (0..300 KB) is framed one of the ways HTTP/1.x frames bodies. The
    servers of `length+close` and `http/1.0+length` keep the connection open: a client that
    reused it anyway would show as one connection too few."""
    size = max(min_size, min(max_size, draw(st.integers(0, max_size // 1000)) * 1000 + draw(st.integers(0, 1023))))
    body = random_bytes(size, draw(st.integers(0, 1000)))  # (the size drawn in KB and bytes: spread over the range)
    framing = draw(st.sampled_from(framings))
    if framing == "chunked":
        return _chunked(draw, body)
    head, close, reusable = {
        "length": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size, False, True),
        "http/1.0": (b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\n", True, False),
        "http/1.0+length": (b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % size, False, False),
        "no-length": (b"HTTP/1.1 200 OK\r\n\r\n", True, False),
        "length+close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % size, False, False),
    }[framing]
    return Framed(head + body, body, close, reusable, len(head), [(len(head), len(head) + size)])


def _read_all(resp: Response, how: str, size: int, piece: int, windows: list[int]) -> bytes:
    """The body through read(), iter_raw(piece) or readinto() into windows of these sizes in
    turn, checking each call gave what it should."""
    if how == "read":
        return resp.read()
    if how == "iter_raw":
        pieces = list(resp.iter_raw(piece))
        assert all(0 < len(p) <= piece for p in pieces)
        return b"".join(pieces)
    got = bytearray()
    for turn in itertools.count():
        window = memoryview(bytearray(windows[turn % len(windows)]))
        count = resp.readinto(window)
        assert count == min(len(window), size - len(got))  # a window is filled unless the body ends
        if not count:
            break
        got += window[:count]
    return bytes(got)


@settings(max_examples=80, deadline=None)
@given(
    framed=framed_answers(),
    how=st.sampled_from(READERS),
    piece=st.integers(1, 100_000),
    windows=st.lists(st.integers(1, 150_000), min_size=1, max_size=6),
)
def test_bodies_arrive_byte_exact_however_framed_and_read(raw: RawServer, framed: Framed, how: str, piece: int, windows: list[int]) -> None:
    _serve(raw, framed.wire, framed.close)
    before = raw.connections
    with _client() as client:
        with client.request("GET", raw.url + "/body", stream=True) as resp:
            assert resp.status_code == 200
            assert _read_all(resp, how, len(framed.body), piece, windows) == framed.body
        assert client.request("GET", raw.url + "/next").content == b"next"
    assert raw.connections - before == (1 if framed.reusable else 2)


@settings(max_examples=40, deadline=None)
@given(framed=framed_answers(framings=("length", "chunked"), min_size=1), data=st.data())
def test_a_body_left_unread_is_never_taken_for_the_next_answer(raw: RawServer, framed: Framed, data: st.DataObject) -> None:
    keep = data.draw(st.integers(0, len(framed.body) - 1), label="bytes read before closing")
    _serve(raw, framed.wire, framed.close)
    before = raw.connections
    with _client() as client:
        with client.request("GET", raw.url + "/body", stream=True) as resp:
            window = memoryview(bytearray(keep))
            assert resp.readinto(window) == keep and window == framed.body[:keep]
        assert client.request("GET", raw.url + "/next").content == b"next"
    assert raw.connections - before == 2  # the half-read connection was dropped, not reused


@settings(max_examples=30, deadline=None)
@given(
    framed=framed_answers(framings=("length", "chunked"), max_size=8000),
    extra=st.one_of(st.binary(min_size=1, max_size=100), st.just(answer(200, b"fake!")), st.just(b"\r\n")),
    how=st.sampled_from(READERS),
)
def test_bytes_after_an_answer_are_never_taken_for_the_next_answer(raw: RawServer, framed: Framed, extra: bytes, how: str) -> None:
    """A server that sends more than its answer declared (in the same packet: the bytes are in
    the client's buffer, not on the socket) leaves a connection that is not reused."""
    _serve(raw, framed.wire + extra)
    before = raw.connections
    with _client(MALFORMED) as client:
        with client.request("GET", raw.url + "/body", stream=True) as resp:
            assert _read_all(resp, how, len(framed.body), 100_000, [100_000]) == framed.body
        assert client.request("GET", raw.url + "/next").content == b"next"
    assert raw.connections - before == 2


@settings(max_examples=50, deadline=None)
@given(framed=framed_answers(framings=("length", "chunked", "no-length")), data=st.data(), truncate=st.booleans(), streamed=st.booleans())
def test_read_refuses_or_cuts_a_body_over_its_limit(raw: RawServer, framed: Framed, data: st.DataObject, truncate: bool, streamed: bool) -> None:
    body = framed.body
    limit = data.draw(st.one_of(st.integers(max(0, len(body) - 3), len(body) + 3), st.integers(0, 300_001)), label="limit")
    _serve(raw, framed.wire, framed.close)
    with _client() as client:
        if len(body) <= limit or (truncate and streamed):
            if streamed:
                got = client.request("GET", raw.url + "/body", stream=True).read(limit, truncate=truncate)
            else:
                got = client.request("GET", raw.url + "/body", limit=limit).content
            assert got == body[:limit]
            return
        with pytest.raises(TransferError) as caught:
            if streamed:
                client.request("GET", raw.url + "/body", stream=True).read(limit)
            else:
                client.request("GET", raw.url + "/body", limit=limit)
    assert f"larger than {limit} bytes" in str(caught.value) and not caught.value.retryable


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(0, 200_000),
    seed=st.integers(0, 100),
    repeat=st.integers(1, 4),
    encoding=st.sampled_from(["gzip", "x-gzip", "GZIP", "deflate"]),
    chunked=st.booleans(),
    data=st.data(),
)
def test_gzip_and_deflate_answers_are_decoded_by_read(raw: RawServer, size: int, seed: int, repeat: int, encoding: str, chunked: bool, data: st.DataObject) -> None:
    plain = random_bytes(size, seed) * repeat  # repeated: compressible
    packed = zlib.compress(plain) if encoding == "deflate" else gzip.compress(plain)
    if chunked:
        third = len(packed) // 3 + 1
        pieces = [packed[i : i + third] for i in range(0, len(packed), third)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        wire_bytes = b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (encoding.encode(), body)
    else:
        wire_bytes = answer(200, packed, f"Content-Encoding: {encoding}")
    limit = data.draw(st.none() | st.integers(max(0, len(plain) - 2), len(plain) + 2) | st.integers(0, len(plain)), label="limit")
    _serve(raw, wire_bytes)
    with _client() as client:
        if limit is None or len(plain) <= limit:
            assert client.request("GET", raw.url + "/body", limit=limit).content == plain
        else:  # the limit is on the decoded body
            with pytest.raises(TransferError):
                client.request("GET", raw.url + "/body", limit=limit)
        with client.request("GET", raw.url + "/body", stream=True) as resp:
            assert b"".join(resp.iter_raw()) == packed  # iter_raw gives the body as sent
    assert raw.requests[-1].fields and _values(raw.requests[-1].fields, "accept-encoding") == ["identity"]


# ---------------------------------------------------------------------------------------------
# Request bodies and header blocks

JOIN, SLICE = 64 << 10, SEND_PIECE  # httpcore reads and h11 frames in 64 KiB; parts are joined up to SEND_PIECE
BODY_SIZES = st.one_of(
    st.sampled_from(sorted({0, 1, JOIN - 1, JOIN, JOIN + 1, SLICE - 1, SLICE, SLICE + 1, 2 * SLICE + 3})),
    st.integers(0, 3 * SLICE),
)


@settings(max_examples=40, deadline=None)
@given(
    size=BODY_SIZES,
    kind=st.sampled_from(["bytes", "memoryview", "memoryview-slice"]),
    method=st.sampled_from(["POST", "PUT", "PATCH"]),
    stray=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_request_bodies_arrive_whole_with_one_content_length_and_host(server: CountingServer, size: int, kind: str, method: str, stray: bool, seed: int) -> None:
    """The caller's own Content-Length, Host and Transfer-Encoding (`stray`) are not sent: the
    client frames the body itself."""
    data = random_bytes(size + 7, seed)
    body: bytes | memoryview = {"bytes": data[:size], "memoryview": memoryview(data[:size]), "memoryview-slice": memoryview(data)[7:]}[kind]
    headers = {"Content-Length": "1", "Host": "evil.example", "Transfer-Encoding": "chunked"} if stray else {}
    server.requests.clear()
    with _client() as client:
        resp = client.request(method, server.url + "/echo", body=body, headers=headers)
    assert (resp.status_code, resp.text) == (200, _sha(body))
    seen = _last(server)
    assert (seen.method, seen.body) == (method, bytes(body))
    assert _values(seen.fields, "content-length") == [str(size)]
    assert _values(seen.fields, "host") == [f"127.0.0.1:{server.server_address[1]}"]
    assert _values(seen.fields, "transfer-encoding") == []


def _cut(data: bytes, cuts: list[int]) -> ScatteredBytes:
    """`data` as parts split at `cuts` (clamped, in order; a repeated cut makes an empty part),
    each a view of `data` or a bytes copy, alternately."""
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    view = memoryview(data)
    return ScatteredBytes([view[a:b] if i % 2 else bytes(view[a:b]) for i, (a, b) in enumerate(itertools.pairwise(bounds))])


@settings(max_examples=30, deadline=None)
@given(size=BODY_SIZES, cuts=st.lists(st.integers(0, 3 * SLICE), max_size=1500), seed=st.integers(0, 1000))
def test_a_scattered_body_arrives_whole_however_it_is_cut(server: CountingServer, size: int, cuts: list[int], seed: int) -> None:
    """Parts by vectored writes, more of them than one write takes (SEND_PARTS), empty ones
    included; the server sees one body of the parts' total length."""
    data = random_bytes(size, seed)
    body = _cut(data, cuts)
    server.requests.clear()
    with _client() as client:
        resp = client.request("POST", server.url + "/echo", body=body)
    assert (resp.status_code, resp.text) == (200, _sha(data))
    seen = _last(server)
    assert seen.body == data and _values(seen.fields, "content-length") == [str(size)]


@settings(max_examples=30, deadline=None)
@given(size=BODY_SIZES, cuts=st.lists(st.integers(0, 3 * SLICE), max_size=8), seed=st.integers(0, 1000))
def test_a_small_body_leaves_in_one_write_with_its_head(server: CountingServer, size: int, cuts: list[int], seed: int) -> None:
    """A body under COALESCE_BELOW (a small file's upload bundle) goes in its head's write: one
    send, and one read for the server to wake up to. A larger one follows its head, which goes
    alone (so that a failed head write still tells a request the server never saw)."""
    data = random_bytes(size, seed)
    writes: list[bytes] = []
    original = SyncStream.write

    def recorded(self: SyncStream, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            writes.append(bytes(buffer))
        original(self, buffer, timeout)

    server.requests.clear()
    with _client() as client, pytest.MonkeyPatch.context() as patch:
        patch.setattr(SyncStream, "write", recorded)
        resp = client.request("POST", server.url + "/echo", body=_cut(data, cuts))
    assert (resp.status_code, resp.text) == (200, _sha(data))
    assert _last(server).body == data
    sent = b"".join(writes)
    assert sent.startswith(b"POST /echo ") and sent.endswith(b"\r\n\r\n" + data)
    if 0 < size < COALESCE_BELOW:
        assert len(writes) == 1
    else:
        assert writes[0].endswith(b"\r\n\r\n") and len(writes[0]) == len(sent) - size


@pytest.mark.parametrize(
    ("method", "body", "length"),
    [("GET", None, []), ("DELETE", None, []), ("HEAD", None, []), ("GET", b"", ["0"]), ("GET", b"abc", ["3"]), ("POST", None, ["0"]), ("PUT", None, ["0"]), ("PATCH", None, ["0"])],
)
def test_content_length_is_sent_for_a_body_and_for_methods_that_expect_one(server: CountingServer, method: str, body: bytes | None, length: list[str]) -> None:
    with _client() as client:
        resp = client.request(method, server.url + "/echo", body=body)
    assert resp.status_code == 200 and resp.content == (b"" if method == "HEAD" else _sha(body or b"").encode())
    assert _values(_last(server).fields, "content-length") == length


def test_a_json_body_is_sent_compact_with_its_type_unless_the_caller_set_one(server: CountingServer) -> None:
    """Compact, as hf-xet and httpx send it: a grant request's bytes are the same as theirs."""
    value = {"operation": "upload", "objects": [{"oid": "ab" * 32, "size": 1}], "é": None}
    with _client() as client:
        client.request("POST", server.url + "/echo", json=value)
        seen = _last(server)
        assert json.loads(seen.body) == value and _values(seen.fields, "content-type") == ["application/json"]
        assert b" " not in seen.body
        client.request("POST", server.url + "/echo", json=value, headers={"content-type": "application/vnd.git-lfs+json"})
        assert _values(_last(server).fields, "content-type") == ["application/vnd.git-lfs+json"]


TOKEN_TEXT = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-/.;=", min_size=1, max_size=20)
DEFAULTS = {"User-Agent": "git-xet/test", "X-Default": "d"}
HEADER_NAMES = ("User-Agent", "Accept", "Accept-Encoding", "X-Default", "X-Caller", "Authorization")
SPELLINGS: tuple[Callable[[str], str], ...] = (str, str.lower, str.upper, str.swapcase)


@settings(max_examples=40, deadline=None)
@given(
    caller=st.dictionaries(st.sampled_from(HEADER_NAMES), TOKEN_TEXT, max_size=6),
    spellings=st.lists(st.sampled_from(SPELLINGS), min_size=len(HEADER_NAMES), max_size=len(HEADER_NAMES)),
)
def test_caller_headers_win_over_the_client_defaults_and_each_is_sent_once(server: CountingServer, caller: dict[str, str], spellings: list[Callable[[str], str]]) -> None:
    """However the caller spells a name (HTTP names are case-insensitive)."""
    spelled = {spellings[HEADER_NAMES.index(name)](name): value for name, value in caller.items()}
    with _client(headers=DEFAULTS) as client:
        client.request("GET", server.url + "/echo", headers=spelled)
    expected = {"Host": f"127.0.0.1:{server.server_address[1]}", "Accept": "*/*", "Accept-Encoding": "identity", "Connection": "keep-alive", **DEFAULTS, **caller}
    fields = _last(server).fields
    assert sorted(name.lower() for name, _ in fields) == sorted(name.lower() for name in expected)  # each once, nothing else
    assert {name: _values(fields, name) for name in expected} == {name: [value] for name, value in expected.items()}


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(["X-Grant", "Authorization", "User-Agent"]),
    before=TOKEN_TEXT,
    line_break=st.sampled_from(["\r\n", "\n", "\r"]),
    after=st.sampled_from(["X-Injected: 1", "", "GET /smuggled HTTP/1.1"]),
    in_name=st.booleans(),
)
def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(server: CountingServer, name: str, before: str, line_break: str, after: str, in_name: bool) -> None:
    headers = {name + line_break + after: before} if in_name else {name: before + line_break + after}
    with _client() as client:
        client.request("GET", server.url + "/echo")  # leaves one idle connection
        connections, requests = server.connections, len(server.requests)
        with pytest.raises(TransferError, match="refusing to send") as caught:
            client.request("POST", server.url + "/echo", headers=headers, body=b"x" * 100)
        assert not caught.value.retryable
        assert client.request("GET", server.url + "/echo").status_code == 200  # on the idle connection, still in step
    assert (server.connections, len(server.requests)) == (connections, requests + 1)


TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _is_token(text: str) -> bool:
    """An HTTP token (RFC 9110, 5.6.2), as a method must be."""
    return bool(text) and all(c in TCHARS for c in text)


@settings(max_examples=40, deadline=None)
@given(
    method=st.one_of(
        st.text(alphabet=TCHARS, min_size=1, max_size=12).filter(lambda m: m.upper() != "HEAD"),
        st.text(max_size=12).filter(lambda m: not _is_token(m)),
        st.sampled_from(["PUT / HTTP/1.1\r\nX-Injected: 1\r\nX-Rest:", "GET ", "G\tET", "GÉT", "GET\n", ""]),
    )
)
def test_a_method_is_sent_if_it_is_a_token_and_refused_before_sending_if_not(raw: RawServer, method: str) -> None:
    """(A grant's method comes from the server.)"""
    raw.reply = lambda request: (NEXT, False)
    before = (raw.connections, len(raw.requests))
    with _client(MALFORMED) as client:
        if _is_token(method):
            assert client.request(method, raw.url + "/m").status_code == 200
            assert (raw.requests[-1].method, raw.requests[-1].target) == (method.upper(), "/m")  # (httpx sends methods upper-case)
            return
        with pytest.raises(TransferError, match="refusing to send") as caught:
            client.request(method, raw.url + "/m")
    assert not caught.value.retryable
    assert (raw.connections, len(raw.requests)) == before


def _target(url: str) -> str:
    """The request target of `url` as given: its path and query."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


URL_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?"


@settings(max_examples=40, deadline=None)
@given(
    path=st.one_of(
        st.text(alphabet=URL_CHARACTERS, max_size=30),  # what a URL holds unescaped (RFC 3986)
        st.builds(lambda a, b: f"{a}%{b:02X}", st.text(alphabet=URL_CHARACTERS, max_size=10), st.integers(0, 255)),  # escapes
        st.text(max_size=30),  # spaces, control characters, non-ASCII
        st.sampled_from(["a b", "é", "a?q=a b", "\x7f", "\x00", "%20ok", "a?b=c&d=%E2%82%AC"]),
    )
)
def test_a_target_is_sent_as_given_when_it_is_a_valid_url_and_escaped_otherwise(raw: RawServer, path: str) -> None:
    """A URL it is given (a presigned one above all: its signature covers the path and query)
    goes out exactly as given when it is already a valid URL; other characters are sent
    percent-encoded, never raw (a space or line break would split the request line), and a
    URL holding a control character is refused unsent."""
    raw.reply = lambda request: (NEXT, False)
    url = raw.url + "/" + path
    target = _target(url)
    before = (raw.connections, len(raw.requests))
    with _client(MALFORMED) as client:
        if any(ord(c) < 0x20 or c == "\x7f" for c in path):
            with pytest.raises(TransferError, match="cannot send") as caught:  # (no URL holds one)
                client.request("GET", url)
            assert not caught.value.retryable and path not in str(caught.value)
            assert (raw.connections, len(raw.requests)) == before
            return
        assert client.request("GET", url).content == b"next"
    sent = raw.requests[-1].target
    assert sent.isascii() and sent.isprintable() and " " not in sent
    if all(c in URL_CHARACTERS + "%" for c in target):
        assert sent == target


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://127.0.0.1/x", "relative/path", "//127.0.0.1/x", "http:///no-host", "http://127.0.0.1:99999/x", "http://127.0.0.1:port/x"],
)
def test_only_absolute_http_urls_are_requested(url: str) -> None:
    with _client() as client, pytest.raises(TransferError) as caught:
        client.request("GET", url)
    assert not caught.value.retryable


# ---------------------------------------------------------------------------------------------
# Malformed answers


def _accepted(raw: RawServer, data: bytes, method: str = "GET") -> Response:
    """The answer (read whole) to a request answered with `data`; the next request must come
    on the same connection and get its own answer."""
    _serve(raw, data)
    before = raw.connections
    with _client(MALFORMED) as client:
        resp = client.request(method, raw.url + "/body")
        assert client.request("GET", raw.url + "/next").content == b"next"
    assert raw.connections - before == 1
    return resp


def _malformed(raw: RawServer, data: bytes, *, close: bool = False, stream: bool = False) -> TransportError:
    """The error of a request answered with `data`; the next request must come on a new
    connection (the server kept this one open unless `close`) and get its own answer."""
    _serve(raw, data, close)
    before = raw.connections
    with _client(MALFORMED) as client:
        with pytest.raises(TransportError) as caught:
            client.request("GET", raw.url + "/body", stream=stream)
        assert client.request("GET", raw.url + "/next").content == b"next"
    assert raw.connections - before == 2
    return caught.value


def _not_a_status_line(line: bytes) -> bool:
    return b"\n" not in line and not line.lstrip().startswith(b"HTTP/1.")


@settings(max_examples=40, deadline=None)
@given(
    line=st.one_of(
        st.binary(max_size=80).filter(_not_a_status_line),
        st.builds(lambda code: b"HTTP/1.1 " + code + b" OK", st.binary(max_size=6).filter(lambda c: b"\n" not in c and not (c.isdigit() and len(c) == 3))),
        st.sampled_from([b"HTTP/2 200 OK", b"HTTP/1.1", b"http/1.1 200 OK", b"ICY 200 OK", b"HTTP/1.1 2000 OK", b"HTTP/1.1 20 OK", b"HTTP/1.1 +20 OK", b"<html>"]),
    )
)
def test_an_answer_without_an_http_status_line_is_a_protocol_error(raw: RawServer, line: bytes) -> None:
    error = _malformed(raw, line + b"\r\nContent-Length: 2\r\n\r\nok")
    assert type(error) is RemoteProtocolError


HEADER_TEXT = st.binary(min_size=1, max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b)


@settings(max_examples=40, deadline=None)
@given(
    line=st.one_of(
        HEADER_TEXT.filter(lambda b: b":" not in b),  # no colon
        # (obsolete line folding is not here: h11 unfolds it, as RFC 9112, 5.2 lets a client do)
        st.builds(lambda rest: b": " + rest, HEADER_TEXT),  # no name
        st.builds(lambda ws: b"Name" + ws + b": value", st.sampled_from([b" ", b"\t"])),  # white space before the colon
    ),
    at=st.integers(0, 3),
)
def test_a_malformed_header_line_is_a_protocol_error(raw: RawServer, line: bytes, at: int) -> None:
    fields = [b"Content-Length: 2", b"X-A: 1", b"X-B: 2"]
    fields.insert(at, line)
    error = _malformed(raw, b"HTTP/1.1 200 OK\r\n" + b"\r\n".join(fields) + b"\r\n\r\nok")
    assert type(error) is RemoteProtocolError


def _invalid_length(text: str) -> bool:
    value = text.strip()
    return bool(value) and not (value.isascii() and value.isdigit())


INVALID_LENGTHS = st.one_of(
    st.sampled_from(["-1", "1.0", "0x10", "+3", "2, 3", "2 2", "ten", "1e3", "\xb2", "1\xb9"]),  # (² and ¹ are str.isdigit)
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF), min_size=1, max_size=12).filter(_invalid_length),
)


@settings(max_examples=50, deadline=None)
@given(value=INVALID_LENGTHS, stream=st.booleans())
def test_an_invalid_content_length_is_a_protocol_error(raw: RawServer, value: str, stream: bool) -> None:
    error = _malformed(raw, b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\nok" % value.encode("latin-1"), stream=stream)
    assert type(error) is RemoteProtocolError


@pytest.mark.parametrize("value", [b"", b" ", b"\x85"])
def test_an_empty_content_length_is_a_protocol_error_not_a_body_to_the_end(raw: RawServer, value: bytes) -> None:
    error = _malformed(raw, b"HTTP/1.1 200 OK\r\nContent-Length:%s\r\n\r\nok" % value)
    assert type(error) is RemoteProtocolError


def test_two_content_lengths_are_a_protocol_error(raw: RawServer) -> None:
    error = _malformed(raw, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!")
    assert type(error) is RemoteProtocolError


def _bad_chunk_size(line: bytes) -> bool:
    token = line.split(b";", 1)[0].strip()
    return b"\n" not in line and b"\r" not in line and (not token or any(c not in b"0123456789abcdefABCDEF" for c in token))


@settings(max_examples=40, deadline=None)
@given(
    fault=st.one_of(
        st.sampled_from([b"", b" ", b"-1", b"0x2", b"+2", b"2 2", b"g", b";x=y"]).map(lambda size: size + b"\r\nab\r\n"),
        st.binary(min_size=1, max_size=10).filter(_bad_chunk_size).map(lambda size: size + b"\r\nab\r\n"),
        st.just(b"2\r\nabc\r\n"),  # longer than its size
        st.just(b"2\r\nab"),  # no CRLF after the chunk's data
        st.just(b"2\nab\r\n" + b"1" * 70_000 + b"\r\nx\r\n"),  # a size line longer than 64 KiB
    ),
    before=st.lists(st.binary(min_size=1, max_size=50), max_size=3),
)
def test_a_malformed_chunk_is_a_protocol_error(raw: RawServer, fault: bytes, before: list[bytes]) -> None:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in before)
    error = _malformed(raw, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + fault + b"0\r\n\r\n")
    assert type(error) is RemoteProtocolError


MAX_HEAD = 100 << 10  # httpcore's bound on an answer's head (status line and fields)


@settings(max_examples=30, deadline=None)
@given(length=st.one_of(st.integers(MAX_HEAD - 200, MAX_HEAD + 200), st.integers(16, 3 * MAX_HEAD)), fields=st.integers(1, 400))
def test_answer_heads_are_bounded_and_read_whole_below_the_bound(raw: RawServer, length: int, fields: int) -> None:
    """A server cannot make the client buffer an endless head: one over MAX_HEAD bytes (one
    long field, or many) is a protocol error; one well under it is read whole."""
    each = max(1, length // fields)
    lines = [b"X-F%d: %s" % (i, b"a" * each) for i in range(fields)]
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + b"\r\n".join(lines) + b"\r\n\r\nok"
    if len(data) > MAX_HEAD + (64 << 10) + 100:  # (checked while incomplete: up to one 64 KiB read more)
        assert type(_malformed(raw, data)) is RemoteProtocolError
        return
    if len(data) < MAX_HEAD - 100:
        resp = _accepted(raw, data)
        assert (resp.content, len(resp.headers.items())) == (b"ok", fields + 1)


@settings(max_examples=60, deadline=None)
@given(framed=framed_answers(framings=("length", "chunked"), min_size=1), data=st.data(), how=st.sampled_from(READERS))
def test_a_body_cut_short_is_an_error_never_a_short_body(raw: RawServer, framed: Framed, data: st.DataObject, how: str) -> None:
    """Cut anywhere after the head: an error callers retry (h11 calls a body that ended early a
    protocol error, as it does a cut inside a chunk's framing)."""
    cut = data.draw(st.integers(framed.head, len(framed.wire) - 1), label="bytes sent before hanging up")
    _serve(raw, framed.wire[:cut], close=True)
    with _client(MALFORMED) as client, client.request("GET", raw.url + "/body", stream=True) as resp, pytest.raises(TransportError) as caught:
        _read_all(resp, how, len(framed.body), 100_000, [100_000])
    assert isinstance(caught.value, (ReadError, RemoteProtocolError)) and is_retryable(caught.value)


@settings(max_examples=30, deadline=None)
@given(
    interim=st.lists(st.tuples(st.sampled_from([100, 102, 103]), st.lists(st.sampled_from([b"Link: </s.css>; rel=preload", b"X-Progress: 1"]), max_size=3)), max_size=5),
)
def test_informational_answers_before_the_real_one_are_skipped(raw: RawServer, interim: list[tuple[int, list[bytes]]]) -> None:
    heads = b"".join(b"HTTP/1.1 %d Info\r\n%s\r\n" % (code, b"".join(f + b"\r\n" for f in fields)) for code, fields in interim)
    resp = _accepted(raw, heads + answer(200, b"real", "X-Final: 1"))
    assert (resp.status_code, resp.content, resp.headers.get("x-final")) == (200, b"real", "1")
    assert "link" not in resp.headers and "x-progress" not in resp.headers


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from([("HEAD", 200), ("HEAD", 404), ("HEAD", 204), ("HEAD", 304), ("GET", 204), ("POST", 204), ("GET", 304), ("PUT", 304)]),
    framing=st.sampled_from([b"Content-Length: 1000\r\n", b"Transfer-Encoding: chunked\r\n", b"", b"Content-Length: 0\r\n"]),
)
def test_head_204_and_304_answers_have_no_body(raw: RawServer, case: tuple[str, int], framing: bytes) -> None:
    """Whatever their framing fields say: the next answer on the connection follows at once."""
    method, status = case
    resp = _accepted(raw, b"HTTP/1.1 %d Whatever\r\n%s\r\n" % (status, framing), method)
    assert (resp.status_code, resp.content) == (status, b"")


# ---------------------------------------------------------------------------------------------
# Redirects


@settings(max_examples=60, deadline=None)
@given(
    status=st.sampled_from(sorted((301, 302, 303, 307, 308))),
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    size=st.integers(0, 100_000),
    body_kind=st.sampled_from(["bytes", "memoryview"]),
    cross=st.booleans(),
    relative=st.booleans(),
)
def test_redirects_follow_the_rules_for_method_body_and_credentials(
    server: CountingServer, other_server: CountingServer, status: int, method: str, size: int, body_kind: str, cross: bool, relative: bool
) -> None:
    """303 and 302, and 301 after a POST, become a GET without a body, as browsers
    and httpx do; 307/308 (and 301 after anything else) repeat method and body; Authorization
    goes only to the origin it was meant for, and a Cookie to none after a redirect."""
    data = random_bytes(size, size)
    body = (memoryview(data) if body_kind == "memoryview" else data) if method in ("POST", "PUT", "PATCH") else None
    target = other_server if cross else server
    to = ("" if relative and not cross else target.url) + "/landing"
    headers = {"Authorization": "Bearer secret", "Cookie": "c=1", "Content-Type": "application/x-test", "X-Keep": "1"}
    with _client() as client:
        resp = client.request(method, server.url + "/redirect?" + urlencode({"status": status, "to": to}), headers=headers, body=body)
    as_get = status in (302, 303) or (status == 301 and method == "POST")
    sent = None if as_get else body
    assert (resp.status_code, resp.text, resp.url) == (200, _sha(sent or b""), target.url + "/landing")
    path, seen = target.requests[-1]
    assert path == "/landing" and (seen.method, seen.body) == ("GET" if as_get else method, bytes(sent or b""))
    assert _values(seen.fields, "content-length") == ([] if sent is None else [str(size)])
    assert as_get or _values(seen.fields, "content-type") == ["application/x-test"]  # (httpx keeps it on a GET: harmless)
    assert _values(seen.fields, "authorization") == ([] if cross else ["Bearer secret"])
    assert _values(seen.fields, "cookie") == []  # (httpx leaves cookies to its jar, which keeps none here)
    assert _values(seen.fields, "x-keep") == ["1"]


@settings(max_examples=16, deadline=None)
@given(hops=st.integers(0, 15))
def test_at_most_10_redirects_are_followed_on_one_connection(server: CountingServer, hops: int) -> None:
    server.requests.clear()
    before = server.connections
    with _client() as client:
        if hops <= MAX_REDIRECTS:
            assert client.request("GET", server.url + f"/hop/{hops}").content == b"landed"
        else:
            with pytest.raises(TransferError, match="more than 10 redirects") as caught:
                client.request("GET", server.url + f"/hop/{hops}")
            assert not caught.value.retryable
    assert len(server.requests) == min(hops, MAX_REDIRECTS) + 1
    assert server.connections - before == 1  # the redirects' bodies were read: the connection kept


@pytest.mark.parametrize("to", ["ftp://127.0.0.1/x", "file:///etc/passwd", "https://127.0.0.1:port/x"])
def test_a_redirect_to_a_non_http_url_is_refused(server: CountingServer, to: str) -> None:
    with _client() as client, pytest.raises(TransferError) as caught:
        client.request("GET", server.url + "/redirect?" + urlencode({"status": 302, "to": to}))
    assert not caught.value.retryable


# ---------------------------------------------------------------------------------------------
# Connections: reuse, the pool, threads


def test_one_kept_alive_connection_carries_sequential_requests(server: CountingServer) -> None:
    before = server.connections
    with _client() as client:
        for i in range(20):
            assert client.request("POST", server.url + "/echo", body=b"%d" % i).text == _sha(b"%d" % i)
    assert server.connections - before == 1


def test_connections_numbered_past_select_s_limit_are_reused_and_their_close_seen(server: CountingServer) -> None:
    """A process holding many files gets socket descriptors of 1024 (FD_SETSIZE) and above,
    which select() cannot watch: the check before reusing a connection must still work."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        assert hard == resource.RLIM_INFINITY or hard >= wanted, f"the test needs {wanted} descriptors; the hard limit is {hard}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    filler: list[int] = [os.open(os.devnull, os.O_RDONLY)]  # every descriptor below 1100 taken
    try:
        while filler[-1] < 1100:
            filler.append(os.dup(filler[0]))
        before = server.connections
        with _client() as client:
            for i in range(5):
                assert client.request("POST", server.url + "/echo", body=b"%d" % i).text == _sha(b"%d" % i)
            assert server.connections - before == 1
            assert client.request("GET", server.url + "/then-close").content == b"bye"
            time.sleep(0.1)  # the close has arrived: the idle connection reads as EOF
            assert client.request("POST", server.url + "/echo", body=b"x").text == _sha(b"x")
        assert server.connections - before == 2
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_the_server_closed_while_idle_is_not_reused(server: CountingServer) -> None:
    before = server.connections
    with _client() as client:
        assert client.request("GET", server.url + "/then-close").content == b"bye"
        time.sleep(0.1)  # the close has arrived: the idle connection reads as EOF
        assert client.request("POST", server.url + "/echo", body=b"x").text == _sha(b"x")
    assert server.connections - before == 2


def _closes_reused(how: str) -> Session:
    """Connection 1 answers its first request, then hangs up (FIN or RST) on the next one
    without answering; later connections answer."""

    def session(server: RawServer, sock: socket.socket, n: int) -> None:
        reader = sock.makefile("rb")
        for turn in itertools.count():
            request = read_request(reader)
            if request is None:
                return
            with server.lock:
                server.requests.append(request)
            if n > 1 or turn == 0:
                sock.sendall(NEXT)
                continue
            if how == "rst":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return

    return session


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_a_connection_that_closes_without_answering_is_retried_by_the_policy_on_a_new_one(how: str) -> None:
    """httpcore does not resend on its own (it cannot know the server did not act on the
    request): the error is one client/retry.py retries, and the next attempt goes on a new
    connection."""
    with raw_server(_closes_reused(how)) as srv, _client() as client:
        assert client.request("GET", srv.url + "/1").content == b"next"
        with pytest.raises(TransportError) as caught:
            client.request("POST", srv.url + "/2", body=b"again")
        assert is_retryable(caught.value)
        answer = with_retries("test", lambda: client.request("POST", srv.url + "/2", body=b"again"), RetryPolicy(max_attempts=2, base_delay=0))
        assert answer.content == b"next"
        assert srv.connections == 2
        assert [(r.target, r.body) for r in srv.requests] == [("/1", b""), ("/2", b"again"), ("/2", b"again")]


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
def test_an_idempotent_request_a_reused_connection_drops_unanswered_is_resent_once_on_a_new_one(how: str, method: str) -> None:
    """The server's close crossed the request (it closed the idle connection as the request
    arrived): nothing was done, so the pool sends it again on another connection, as the
    hand-written client did, instead of failing it to the retry policy."""
    body = b"again" if method == "PUT" else None
    with raw_server(_closes_reused(how)) as srv, _client() as client:
        assert client.request("GET", srv.url + "/1").content == b"next"
        answer = client.request(method, srv.url + "/2", body=body)
        assert answer.status_code == 200 and answer.content == (b"" if method == "HEAD" else b"next")
        assert srv.connections == 2
        assert [(r.method, r.target) for r in srv.requests] == [("GET", "/1"), (method, "/2"), (method, "/2")]


def _answers_once(server: RawServer, sock: socket.socket, n: int) -> None:
    """Every connection answers its first request and hangs up on its second unanswered."""
    reader = sock.makefile("rb")
    for turn in range(2):
        request = read_request(reader)
        if request is None:
            return
        with server.lock:
            server.requests.append(request)
        if turn == 0:
            sock.sendall(NEXT)


def test_a_request_is_resent_at_most_once() -> None:
    """Two idle connections that both drop the next request unanswered: the request goes on one,
    once more on the other, and then fails to the retry policy (not sent a third time, nor on
    and on while the pool holds connections)."""
    with raw_server(_answers_once) as srv, _client() as client:
        first = client.request("GET", srv.url + "/a", stream=True)  # two connections at once,
        second = client.request("GET", srv.url + "/b", stream=True)  # both idle once read
        assert (first.read(), second.read()) == (b"next", b"next")
        with pytest.raises(TransportError) as caught:
            client.request("GET", srv.url + "/x")
        assert is_retryable(caught.value)
        assert srv.connections == 2
        assert sorted(r.target for r in srv.requests) == ["/a", "/b", "/x", "/x"]


def _answers_then_resets(reset: threading.Event, done: threading.Event) -> Session:
    """Connection 1 answers one request, then, once `reset` is set, resets itself (RST) unasked
    and sets `done`: the next write to it fails. Later connections answer each request."""

    def session(server: RawServer, sock: socket.socket, n: int) -> None:
        if n > 1:
            return answer_each(server, sock, n)
        request = read_request(sock.makefile("rb"))
        if request is None:
            return
        with server.lock:
            server.requests.append(request)
        sock.sendall(NEXT)
        reset.wait(10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # (the RST goes now, on loopback straight into the client's socket)
        done.set()

    return session


def test_a_post_whose_head_never_left_a_reset_idle_connection_is_resent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server reset the idle connection just before the POST took it (the reset arriving
    after httpcore's check that the idle socket is unreadable: that timing is made by hiding
    the reset from the check). The head's write fails, so the server cannot have seen the POST:
    it is sent on a new connection. Without the resend httpcore reads on and fails it."""
    reset, done = threading.Event(), threading.Event()
    with raw_server(_answers_then_resets(reset, done)) as srv, _client() as client:
        assert client.request("GET", srv.url + "/1").content == b"next"
        original = SyncStream.get_extra_info

        def unreadable(self: SyncStream, info: str) -> object:
            return False if info == "is_readable" else original(self, info)

        monkeypatch.setattr(SyncStream, "get_extra_info", unreadable)
        reset.set()
        assert done.wait(10)
        assert client.request("POST", srv.url + "/2", body=b"once").content == b"next"
        assert srv.connections == 2
        assert [(r.method, r.target, r.body) for r in srv.requests] == [("GET", "/1", b""), ("POST", "/2", b"once")]


def test_a_server_hanging_up_without_answering_is_a_protocol_error(server: CountingServer) -> None:
    with _client() as client, pytest.raises(TransportError) as caught:
        client.request("GET", server.url + "/hang-up")
    assert type(caught.value) is RemoteProtocolError


@pytest.mark.parametrize("max_idle", [0, 1, 2])
def test_at_most_max_idle_connections_are_kept(raw: RawServer, max_idle: int) -> None:
    raw.reply = lambda request: (NEXT, False)
    before = raw.connections
    with _client(max_idle=max_idle) as client:
        for _ in range(2):  # two requests at a time, twice
            first = client.request("GET", raw.url + "/a", stream=True)
            second = client.request("GET", raw.url + "/b", stream=True)
            assert (first.read(), second.read()) == (b"next", b"next")
    assert raw.connections - before == 2 + 2 - min(max_idle, 2)


def test_closing_the_client_closes_its_idle_connections() -> None:
    ended = threading.Event()

    def session(server: RawServer, sock: socket.socket, n: int) -> None:
        reader = sock.makefile("rb")
        while read_request(reader) is not None:
            sock.sendall(NEXT)
        ended.set()

    with raw_server(session) as srv:
        client = _client()
        assert client.request("GET", srv.url + "/").content == b"next"
        assert not ended.wait(0.2)  # kept alive: the server waits for the next request
        assert not client.is_closed
        client.close()
        assert ended.wait(5) and client.is_closed


def test_threads_sharing_a_client_each_get_their_own_answers(server: CountingServer) -> None:
    """Threads sharing one client (the agent's uploads and downloads do) each get the answer to
    their own request: no connection is handed to two requests at once."""
    bodies = [random_bytes(1000 + i * 9973, i) for i in range(16)]
    answers: dict[int, list[str]] = {}
    failures: dict[int, Exception] = {}
    before = server.connections

    def post(i: int) -> None:
        try:
            answers[i] = [client.request("POST", server.url + "/echo", body=bodies[i]).text for _ in range(5)]
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread it failed in
            failures[i] = exc

    # Patient timeouts: 16 threads and the server share two loaded cores, and what is tested is
    # which answer each thread gets, not how soon.
    with _client(Timeouts(connect=60.0, read=60.0, write=60.0)) as client:
        threads = [threading.Thread(target=post, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert failures == {}
    assert answers == {i: [_sha(body)] * 5 for i, body in enumerate(bodies)}
    assert server.connections - before <= 16


# ---------------------------------------------------------------------------------------------
# Timeouts and failures to connect


def _stalls_after(data: bytes) -> Session:
    """Reads a request, sends `data`, then neither sends nor closes until the server stops."""

    def session(server: RawServer, sock: socket.socket, n: int) -> None:
        if read_request(sock.makefile("rb")) is not None:
            sock.sendall(data)
            server.stopping.wait(10)

    return session


def test_a_server_that_stalls_before_answering_is_a_read_timeout() -> None:
    with raw_server(_stalls_after(b"")) as srv, _client(BRIEF) as client:
        start = time.monotonic()
        with pytest.raises(TransportError) as caught:
            client.request("GET", srv.url + "/")
        assert type(caught.value) is ReadTimeout and time.monotonic() - start < 3


@pytest.mark.parametrize("how", READERS)
def test_a_server_that_stalls_inside_the_body_is_a_read_timeout(how: str) -> None:
    with raw_server(_stalls_after(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)) as srv, _client(BRIEF) as client:
        with client.request("GET", srv.url + "/", stream=True) as resp, pytest.raises(TransportError) as caught:
            _read_all(resp, how, 1000, 1000, [1000])
        assert type(caught.value) is ReadTimeout


def test_a_server_that_never_reads_the_body_is_a_write_timeout() -> None:
    def session(server: RawServer, sock: socket.socket, n: int) -> None:
        server.stopping.wait(10)

    with raw_server(session) as srv, _client(BRIEF) as client:
        start = time.monotonic()
        with pytest.raises(TransportError) as caught:
            client.request("PUT", srv.url + "/", body=bytes(64 << 20))  # more than the sockets' buffers take
        assert type(caught.value) is WriteTimeout and time.monotonic() - start < 5


def test_a_server_that_hangs_up_mid_upload_gives_its_refusal_or_a_transport_error(server: CountingServer) -> None:
    """Whether the refusal can still be read depends on the kernel (a reset may discard it);
    either way the caller gets something it handles, and the next request works."""
    body = b"z" * (8 << 20)  # more than the socket buffers take: the send meets a closed connection
    with _client() as client:
        try:
            resp = client.request("POST", server.url + "/refuse-unread", body=body)
        except TransportError:
            pass
        else:
            assert (resp.status_code, resp.content) == (413, b"too large")
        assert client.request("POST", server.url + "/echo", body=b"x").text == _sha(b"x")


def _unused_port() -> int:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port: int = unused.getsockname()[1]
    return port  # closed when the block ended: nothing listens there


def test_nobody_listening_is_a_connect_error_naming_the_origin() -> None:
    port = _unused_port()
    with _client() as client, pytest.raises(TransportError) as caught:
        client.request("GET", f"http://127.0.0.1:{port}/x")
    assert type(caught.value) is ConnectError and f"127.0.0.1:{port}" in str(caught.value)
    assert is_retryable(caught.value)


# ---------------------------------------------------------------------------------------------
# TLS


def _answers_anything_in_plain_http(server: RawServer, sock: socket.socket, n: int) -> None:
    """A plain-HTTP server's answer to whatever arrives (a TLS ClientHello included)."""
    if sock.recv(65536):
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_https_to_a_plain_server_is_a_connect_error_and_plain_http_asks_for_no_tls() -> None:
    asked: list[int] = []

    def tls() -> ssl.SSLContext:
        asked.append(1)
        return ssl.create_default_context()

    with raw_server(_answers_anything_in_plain_http) as srv, Client(TIMEOUTS, tls=tls) as client:
        assert client.request("GET", srv.url + "/").status_code == 400
        assert asked == []
        with pytest.raises(TransportError) as caught:
            client.request("GET", f"https://127.0.0.1:{srv.port}/")
        assert type(caught.value) is ConnectError and "TLS handshake" in str(caught.value)
        assert asked == [1]


def test_the_default_tls_context_is_made_once_for_every_https_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    create = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(1)
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    verifying_tls_context.cache_clear()
    try:
        with raw_server(_answers_anything_in_plain_http) as srv, Client(TIMEOUTS) as client:
            assert client.request("GET", srv.url + "/").status_code == 400
            assert made == []  # plain HTTP loads no certificates
            for _ in range(3):  # three connections (each handshake fails)
                with pytest.raises(ConnectError):
                    client.request("GET", f"https://127.0.0.1:{srv.port}/")
            assert srv.connections == 4
        assert made == [1]
    finally:
        verifying_tls_context.cache_clear()  # the next caller gets a context of the real ssl


def test_https_verifies_the_server_certificate_and_keeps_the_connection(tmp_path: Path) -> None:
    from tests.support.nginx_process import make_certificate

    ca = make_certificate(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    with serving(_Handler, tls=served) as srv:
        url = f"https://localhost:{srv.server_address[1]}/echo"
        before = srv.connections
        with Client(TIMEOUTS, tls=lambda: ssl.create_default_context(cafile=str(ca))) as trusting:
            for size in (0, 70_000, 300_000):
                body = random_bytes(size, size)
                assert trusting.request("PUT", url, body=body).text == _sha(body)
                scattered = _cut(body, list(range(0, size, 997)) + [size // 2] * 2)  # parts over TLS, coalesced
                assert trusting.request("PUT", url, body=scattered).text == _sha(body)
                with trusting.request("GET", url, stream=True) as resp:
                    assert resp.read() == _sha(b"").encode()
        assert srv.connections - before == 1
        with Client(TIMEOUTS, tls=ssl.create_default_context) as untrusting, pytest.raises(TransferError, match="is not trusted") as caught:
            untrusting.request("GET", url)  # the system's store does not know the test CA
        assert not caught.value.retryable  # trying again cannot help


# ---------------------------------------------------------------------------------------------
# Xorb ranges into windows: HttpCasBackend.fetch

XORB_DATA = random_bytes(1 << 20, 11)
XORB = "ab" * 32


class _XorbHandler(CountingHandler):
    """A store of one object, XORB_DATA, answering range GETs well or badly by path."""

    disable_nagle_algorithm = True

    def _range(self) -> tuple[int, int]:
        first, last = self.headers["Range"].removeprefix("bytes=").split("-")
        return int(first), int(last)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, length: int | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self) -> None:
        self.server.requests.append((self.path, dict(self.headers)))
        first, last = self._range()
        path = self.path.split("?")[0]
        if path == "/range":  # a well-behaved store
            self._send(206, XORB_DATA[first : last + 1])
        elif path == "/whole":  # a server that ignores Range
            self._send(200, XORB_DATA)
        elif path == "/longer":  # more than was asked for
            self._send(206, XORB_DATA[first : last + 2])
        elif path == "/short":  # less than was asked for, and says so
            self._send(206, XORB_DATA[first : first + (last - first + 1) // 2])
        elif path == "/cut":  # promises the range, sends half, hangs up
            body = XORB_DATA[first : last + 1]
            self._send(206, body[: len(body) // 2], length=len(body))
            self.close_connection = True
        elif path == "/expired":
            self._send(403, b"<Error>Request has expired</Error>")
        elif path == "/busy":
            self._send(503, json.dumps({"error": "too busy", "code": "busy"}).encode(), {"Retry-After": "7"})
        elif path == "/busy-cut":  # a refusal whose body never fully arrives
            self._send(503, b"too bu", length=100)
            self.close_connection = True
        elif path == "/moved":
            self._send(307, b"", {"Location": "/range"})
        elif path == "/then-hang-up":  # answers fully, then closes the kept-alive connection
            self._send(206, XORB_DATA[first : last + 1])
            self.close_connection = True
        elif path == "/stall":
            self.send_response(206)
            self.send_header("Content-Length", str(last - first + 1))
            self.end_headers()
            self.wfile.flush()
            time.sleep(1.5)
            self.close_connection = True


@pytest.fixture(scope="module")
def store() -> Iterator[CountingServer]:
    with serving(_XorbHandler) as srv:
        yield srv


@contextmanager
def _backend(attempts: int = 1, timeouts: Timeouts = TIMEOUTS) -> Iterator[HttpCasBackend]:
    """A backend with a bearer token (which xorb URLs must never get), retrying at once."""
    with _client(timeouts, headers={"User-Agent": "test-agent"}) as client:
        yield HttpCasBackend("http://cas.invalid", StaticToken("secret-token"), policy=RetryPolicy(max_attempts=attempts, base_delay=0.0), http=client)


def _fetch(backend: HttpCasBackend, url: str, first: int, last: int) -> bytes:
    got = backend.fetch(FetchRange(XORB, 0, 1, first, last, url))
    data = bytes(got)
    if isinstance(got, memoryview):
        xorb_range_windows().give_back(got)
    return data


def _fetch_error(store: CountingServer, path: str, attempts: int = 1, timeouts: Timeouts = TIMEOUTS) -> tuple[BaseException, int]:
    """The error fetching bytes 0-99 at `path` raised, and how many requests it took."""
    before = len(store.requests)
    with _backend(attempts, timeouts) as backend, pytest.raises(TransferError) as caught:
        _fetch(backend, store.url + path, 0, 99)
    return caught.value, len(store.requests) - before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(0, len(XORB_DATA) - 1), size=st.one_of(st.integers(1, 200_000), st.just(len(XORB_DATA))), path=st.sampled_from(["/range", "/whole"]))
def test_any_range_comes_back_exactly(store: CountingServer, first: int, size: int, path: str) -> None:
    last = min(len(XORB_DATA) - 1, first + size - 1)
    with _backend() as backend:
        assert _fetch(backend, store.url + path, first, last) == XORB_DATA[first : last + 1]


def test_one_connection_carries_every_range_with_the_range_and_no_token(store: CountingServer) -> None:
    before = store.connections
    with _backend() as backend:
        for first in range(0, 500_000, 50_000):
            assert _fetch(backend, store.url + "/range?sig=abc", first, first + 40_000) == XORB_DATA[first : first + 40_001]
        session = backend.session_id
    assert store.connections - before == 1
    path, headers = store.requests[-1]
    assert path == "/range?sig=abc"  # the query string (a presigned URL's signature) is sent as given
    assert (headers["User-Agent"], headers["Range"], headers[SESSION_ID]) == ("test-agent", "bytes=450000-490000", session)
    assert headers["Accept-Encoding"] == "identity"  # the body must come as stored
    assert "Authorization" not in headers  # a presigned URL gets no bearer token


def test_threads_fetching_ranges_share_at_most_one_connection_each(store: CountingServer) -> None:
    before = store.connections
    results: list[bytes] = []
    lock = threading.Lock()

    def work(backend: HttpCasBackend) -> None:
        for i in range(0, 100_000, 10_000):
            data = _fetch(backend, store.url + "/range", i, i + 9999)
            with lock:
                results.append(data)

    with _backend() as backend:
        threads = [threading.Thread(target=work, args=(backend,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert sorted(results) == sorted([XORB_DATA[i : i + 10_000] for i in range(0, 100_000, 10_000)] * 4)
    assert 1 <= store.connections - before <= 4


def test_a_connection_the_server_closed_is_replaced_not_reported(store: CountingServer) -> None:
    before = store.connections
    with _backend() as backend:
        for first in (0, 1000, 2000):
            assert _fetch(backend, store.url + "/then-hang-up", first, first + 99) == XORB_DATA[first : first + 100]
    assert store.connections - before == 3


def test_whole_answer_of_a_server_ignoring_range_is_cut_to_the_window_and_not_reused(store: CountingServer) -> None:
    before = store.connections
    with _backend() as backend:
        assert _fetch(backend, store.url + "/whole", 700_000, 700_099) == XORB_DATA[700_000:700_100]
        assert _fetch(backend, store.url + "/whole", 0, 99) == XORB_DATA[:100]  # stopped early: a new connection
    assert store.connections - before == 2


def test_a_range_longer_than_asked_is_refused_and_retried(store: CountingServer) -> None:
    error, requests = _fetch_error(store, "/longer", attempts=2)
    assert requests == 2 and "longer than the 100 bytes" in str(error)
    assert isinstance(error.__cause__, TransferError) and error.__cause__.retryable


def test_a_range_shorter_than_asked_is_a_retryable_error(store: CountingServer) -> None:
    error, requests = _fetch_error(store, "/short", attempts=2)
    assert requests == 2 and "truncated (50 of 100 bytes)" in str(error)
    assert isinstance(error.__cause__, TransferError) and error.__cause__.retryable


def test_a_cut_body_is_a_retryable_read_error(store: CountingServer) -> None:
    error, requests = _fetch_error(store, "/cut", attempts=2)
    assert requests == 2 and "failed after 2 attempts" in str(error)
    assert isinstance(error.__cause__, (ReadError, RemoteProtocolError))  # (h11: a body ended early)


def test_an_expired_url_is_not_retried(store: CountingServer) -> None:
    error, requests = _fetch_error(store, "/expired", attempts=3)
    assert requests == 1 and type(error) is UrlExpiredError and (error.status, error.retryable) == (403, False)


def test_a_refusal_carries_its_status_code_and_retry_after(store: CountingServer) -> None:
    error, requests = _fetch_error(store, "/busy")
    cause = error.__cause__
    assert requests == 1 and type(cause) is StoreUnavailableError
    assert (cause.status, cause.code, cause.retry_after, cause.retryable) == (503, "busy", 7.0, True)
    assert "too busy" in str(cause)


def test_a_refusal_cut_short_is_a_retryable_read_error(store: CountingServer) -> None:
    """(DirectRangeReader reported the 503 with the part of its body that came; the status is
    now lost with the connection, and the fetch retried all the same.)"""
    error, _ = _fetch_error(store, "/busy-cut")
    assert isinstance(error.__cause__, (ReadError, RemoteProtocolError))  # (h11: a body ended early)


def test_a_redirect_is_followed_with_the_range(store: CountingServer) -> None:
    with _backend() as backend:
        assert _fetch(backend, store.url + "/moved", 10, 19) == XORB_DATA[10:20]
    (moved, first), (landed, second) = store.requests[-2:]
    assert (moved, landed) == ("/moved", "/range") and first["Range"] == second["Range"] == "bytes=10-19"


def test_a_stalled_range_times_out_as_a_retryable_error(store: CountingServer) -> None:
    error, _ = _fetch_error(store, "/stall", timeouts=BRIEF)
    assert type(error.__cause__) is ReadTimeout and "timed out" in str(error)


def test_nobody_listening_for_a_range_is_a_connect_error() -> None:
    port = _unused_port()
    with _backend() as backend, pytest.raises(TransferError) as caught:
        _fetch(backend, f"http://127.0.0.1:{port}/range", 0, 9)
    assert type(caught.value.__cause__) is ConnectError and f"127.0.0.1:{port}" in str(caught.value)


def test_only_http_urls_are_fetched() -> None:
    with _backend() as backend, pytest.raises(TransferError, match="file URL") as caught:
        _fetch(backend, "file:///etc/passwd", 0, 9)
    assert not caught.value.retryable


# ---------------------------------------------------------------------------------------------
# Compressed answers that are not what they say


def _valid_stream(body: bytes, gzip_wrapped: bool) -> bool:
    state = zlib.decompressobj(zlib.MAX_WBITS | 32 if gzip_wrapped else zlib.MAX_WBITS)
    try:
        state.decompress(body)
    except zlib.error:
        return False
    return state.eof


@settings(max_examples=40, deadline=None)
@given(
    encoding=st.sampled_from(["gzip", "deflate"]),
    fault=st.sampled_from(["garbage", "cut", "raw-deflate"]),
    data=st.data(),
)
def test_a_compressed_body_that_is_corrupt_or_cut_short_is_a_protocol_error(raw: RawServer, encoding: str, fault: str, data: st.DataObject) -> None:
    plain = random_bytes(data.draw(st.integers(0, 50_000), label="size"), 3) * 2
    packed = zlib.compress(plain) if encoding == "deflate" else gzip.compress(plain)
    if fault == "garbage":
        body = data.draw(st.binary(min_size=1, max_size=2000).filter(lambda b: not _valid_stream(b, encoding != "deflate")), label="body")
    elif fault == "cut":
        body = packed[: data.draw(st.integers(0, len(packed) - 1), label="cut")]
    else:  # deflate without its zlib wrapper (some servers' "deflate")
        squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = squeeze.compress(plain) + squeeze.flush()
    error = _malformed_body(raw, answer(200, body, f"Content-Encoding: {encoding}"))
    assert type(error) is RemoteProtocolError


def _malformed_body(raw: RawServer, data: bytes) -> TransportError:
    _serve(raw, data)
    with _client(MALFORMED) as client, pytest.raises(TransportError) as caught:
        client.request("GET", raw.url + "/body")
    return caught.value


@settings(max_examples=25, deadline=None)
@given(members=st.lists(st.binary(min_size=1, max_size=1000), min_size=2, max_size=4))
def test_a_gzip_body_of_several_members_is_decoded_whole(raw: RawServer, members: list[bytes]) -> None:
    """RFC 1952 allows several gzip members in a row (gzip.decompress reads them all)."""
    _serve(raw, answer(200, b"".join(gzip.compress(m) for m in members), "Content-Encoding: gzip"))
    with _client(MALFORMED) as client:
        assert client.request("GET", raw.url + "/body").content == b"".join(members)


@settings(max_examples=25, deadline=None)
@given(first=st.binary(max_size=1000), garbage=st.binary(min_size=1, max_size=1000))
def test_bytes_after_a_gzip_stream_are_a_protocol_error(raw: RawServer, first: bytes, garbage: bytes) -> None:
    _serve(raw, answer(200, gzip.compress(first) + garbage, "Content-Encoding: gzip"))
    with _client(MALFORMED) as client, pytest.raises(RemoteProtocolError):
        client.request("GET", raw.url + "/body")


@pytest.mark.parametrize("typecode", ["B", "H", "I", "d"])
def test_a_memoryview_body_is_counted_and_sent_in_bytes_whatever_its_items(server: CountingServer, typecode: str) -> None:
    items = array.array(typecode, [i % 251 for i in range(1, 1001)])
    with _client() as client:
        echoed = client.request("POST", server.url + "/echo", body=memoryview(items)).text
    assert echoed == _sha(items.tobytes())


# ---------------------------------------------------------------------------------------------
# TLS set up on the first https:// request only, the environment's proxy, no cookies


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
        with make_http_client() as client:
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


def test_cookies_a_server_sets_are_never_sent_back(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    _CookieSetter.cookie_headers = []
    client = Client(DEFAULT_TIMEOUT)
    with http_stub(_CookieSetter) as url, client:
        for _ in range(3):
            answer = client.request("GET", url + "/")
            assert answer.headers["set-cookie"] == "session=abc; Path=/"  # the answer itself is untouched
    assert _CookieSetter.cookie_headers == [None, None, None]
