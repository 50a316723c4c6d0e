"""DirectRangeReader against a real HTTP/1.1 server on 127.0.0.1 whose answers each test picks."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.errors import TransferError
from git_xet.client.range_get import DirectRangeReader
from tests.support.counting_server import CountingHandler, CountingServer, serving
from tests.support.datagen import random_bytes

DATA = random_bytes(1 << 20, 11)


class _Handler(CountingHandler):

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
            self._send(206, DATA[first : last + 1])
        elif path == "/whole":  # a server that ignores Range
            self._send(200, DATA)
        elif path == "/longer":  # more than was asked for
            self._send(206, DATA[first : last + 2])
        elif path == "/cut":  # promises the range, sends half, hangs up
            body = DATA[first : last + 1]
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
            self._send(206, DATA[first : last + 1])
            self.close_connection = True
        elif path == "/stall":
            self.send_response(206)
            self.send_header("Content-Length", str(last - first + 1))
            self.end_headers()
            self.wfile.flush()
            time.sleep(1.5)
            self.close_connection = True


@pytest.fixture(scope="module")
def server() -> Iterator[CountingServer]:
    with serving(_Handler) as srv:
        yield srv


def _reader(read_timeout: float = 30.0) -> DirectRangeReader:
    return DirectRangeReader(connect_timeout=5.0, read_timeout=read_timeout, headers={"User-Agent": "test-agent"}, tls=ssl.create_default_context, error_limit=64 * 1024)


def _get(reader: DirectRangeReader, url: str, first: int, last: int) -> tuple[int, bytes] | None:
    window = bytearray(last - first + 1)
    answer = reader.read_into(url, {"Range": f"bytes={first}-{last}", "X-Test": "1"}, memoryview(window), first)
    if answer is None:
        return None
    return answer.status, bytes(window[: answer.received])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(DATA) - 1), st.integers(1, 200_000), st.sampled_from(["/range", "/whole"]))
def test_any_range_comes_back_exactly(server: CountingServer, first: int, size: int, path: str) -> None:
    last = min(len(DATA) - 1, first + size - 1)
    reader = _reader()
    try:
        answer = _get(reader, server.url + path, first, last)
    finally:
        reader.close()
    assert answer == (206 if path == "/range" else 200, DATA[first : last + 1])


def test_one_connection_carries_every_range_of_a_thread_with_our_headers(server: CountingServer) -> None:
    reader = _reader()
    before = server.connections
    for first in range(0, 500_000, 50_000):
        assert _get(reader, server.url + "/range?sig=abc", first, first + 40_000) == (206, DATA[first : first + 40_001])
    assert server.connections - before == 1
    path, headers = server.requests[-1]
    assert path == "/range?sig=abc"  # the query string (a presigned URL's signature) is sent as given
    assert headers["User-Agent"] == "test-agent" and headers["X-Test"] == "1" and headers["Range"] == "bytes=450000-490000"
    assert headers["Accept-Encoding"] == "identity"  # the body must come as stored
    reader.close()


def test_threads_do_not_share_a_connection(server: CountingServer) -> None:
    reader = _reader()
    before = server.connections
    results: list[object] = []

    def work() -> None:
        results.extend(_get(reader, server.url + "/range", i, i + 9999) for i in range(0, 100_000, 10_000))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == sorted([(206, DATA[i : i + 10_000]) for i in range(0, 100_000, 10_000)] * 4, key=str)
    assert server.connections - before == 4


def test_a_connection_the_server_closed_is_replaced_not_reported(server: CountingServer) -> None:
    reader = _reader()
    before = server.connections
    for first in (0, 1000, 2000):
        assert _get(reader, server.url + "/then-hang-up", first, first + 99) == (206, DATA[first : first + 100])
    assert server.connections - before == 3


def test_whole_answer_of_a_server_ignoring_range_is_cut_to_the_window_and_not_reused(server: CountingServer) -> None:
    reader = _reader()
    before = server.connections
    assert _get(reader, server.url + "/whole", 700_000, 700_099) == (200, DATA[700_000:700_100])
    assert _get(reader, server.url + "/whole", 0, 99) == (200, DATA[:100])  # stopped early: a new connection
    assert server.connections - before == 2


def test_a_range_longer_than_asked_is_refused(server: CountingServer) -> None:
    with pytest.raises(TransferError, match="longer than the 100 bytes") as caught:
        _get(_reader(), server.url + "/longer", 0, 99)
    assert caught.value.retryable


def test_a_cut_body_reports_what_arrived(server: CountingServer) -> None:
    assert _get(_reader(), server.url + "/cut", 0, 9999) == (206, DATA[:5000])


def test_refusals_carry_status_body_and_retry_after(server: CountingServer) -> None:
    reader = _reader()
    window = memoryview(bytearray(10))
    expired = reader.read_into(server.url + "/expired", {"Range": "bytes=0-9"}, window, 0)
    assert expired is not None and expired.status == 403 and b"expired" in expired.error_body
    busy = reader.read_into(server.url + "/busy", {"Range": "bytes=0-9"}, window, 0)
    assert busy is not None and (busy.status, busy.retry_after, json.loads(busy.error_body)["code"]) == (503, "7", "busy")


def test_a_redirect_is_left_to_the_caller(server: CountingServer) -> None:
    assert _get(_reader(), server.url + "/moved", 0, 9) is None


def test_a_stalled_answer_times_out_as_a_retryable_error(server: CountingServer) -> None:
    with pytest.raises(TransferError) as caught:
        _get(_reader(read_timeout=0.3), server.url + "/stall", 0, 9)
    assert caught.value.retryable and "timed out" in str(caught.value)


def test_nobody_listening_is_a_retryable_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with pytest.raises(TransferError) as caught:
        _get(_reader(), f"http://127.0.0.1:{port}/range", 0, 9)
    assert caught.value.retryable and f"127.0.0.1:{port}" in str(caught.value)


def test_only_http_urls_are_fetched() -> None:
    with pytest.raises(TransferError, match="file URL") as caught:
        _get(_reader(), "file:///etc/passwd", 0, 9)
    assert not caught.value.retryable


def test_https_ranges_verify_the_server_certificate(tmp_path) -> None:
    from tests.support.nginx_process import make_certificate

    ca = make_certificate(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    with serving(_Handler, tls=served) as srv:
        url = f"https://localhost:{srv.server_address[1]}/range"
        trusting = DirectRangeReader(connect_timeout=5.0, read_timeout=30.0, headers={}, tls=lambda: ssl.create_default_context(cafile=str(ca)), error_limit=64 * 1024)
        assert _get(trusting, url, 1000, 70_000) == (206, DATA[1000:70_001])
        assert _get(trusting, url, 0, 9) == (206, DATA[:10])
        with pytest.raises(TransferError, match="CERTIFICATE_VERIFY_FAILED"):
            _get(_reader(), url, 0, 9)  # the system's store does not know the test CA


def test_a_refusal_cut_short_still_reports_its_status(server: CountingServer) -> None:
    answer = _reader().read_into(server.url + "/busy-cut", {"Range": "bytes=0-9"}, memoryview(bytearray(10)), 0)
    assert answer is not None and (answer.status, answer.error_body) == (503, b"too bu")
