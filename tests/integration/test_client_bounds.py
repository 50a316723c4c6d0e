"""The client does not trust sizes a server declares: a hostile CAS server on 127.0.0.1 (a
stand-in: no real server misbehaves on cue) ignores Range, sends more than asked, declares
huge ranges and answers with endless bodies; the client allocates only what it asked for,
stops reading, and says what went wrong."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.support.http_stub import http_stub

import pytest

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import MAX_ANSWER_BYTES, HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.core import hashes
from git_xet.pipelines.download import download
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb

NO_RETRY = RetryPolicy(max_attempts=1)
DATA = random_bytes(600_000, 11)
XORB, DIGEST = single_xorb(DATA)
XORB_HEX = hashes.hash_to_hex(XORB.xorb_hash)
FILE_HEX = hashes.hash_to_hex(DIGEST.file_hash)


@dataclass
class Behaviour:
    """What the hostile server does; `sent` counts the xorb bytes it managed to write."""

    xorb: str = "honest"  # honest | ignore_range | longer | endless_error
    reconstruction: str = "honest"  # honest | huge_range | endless
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _plan(base: str, declared_end: int | None = None) -> dict:
    end = len(XORB.body) - 1 if declared_end is None else declared_end
    return {
        "offset_into_first_range": 0,
        "terms": [{"hash": XORB_HEX, "unpacked_length": len(DATA), "range": {"start": 0, "end": len(XORB.chunk_hashes)}}],
        "xorbs": {XORB_HEX: [{"url": f"{base}/xorb", "ranges": [{"chunks": {"start": 0, "end": len(XORB.chunk_hashes)}, "bytes": {"start": 0, "end": end}}]}]},
    }


@contextmanager
def hostile_server(behaviour: Behaviour) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _write_counted(self, data: bytes) -> None:
            self.wfile.write(data)
            with behaviour.lock:
                behaviour.sent += len(data)

        def do_GET(self) -> None:  # http.server's naming
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path.startswith("/v2/reconstructions/"):
                if behaviour.reconstruction == "endless":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    try:
                        self.wfile.write(b'{"terms": [')
                        for _ in range(2 * MAX_ANSWER_BYTES // 65536):
                            self.wfile.write(b" " * 65536)
                    except OSError:
                        pass  # the client hung up, as it should
                    return
                plan = _plan(base, 8 * 1024**3 if behaviour.reconstruction == "huge_range" else None)
                body = json.dumps(plan).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            body = bytes(XORB.body)
            try:
                if behaviour.xorb == "ignore_range":
                    # 200 with the object and then 1 GiB of junk: the client must stop early.
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body) + 1024**3))
                    self.end_headers()
                    self._write_counted(body)
                    for _ in range(1024**3 // 65536):
                        self._write_counted(bytes(65536))
                elif behaviour.xorb == "longer":
                    self.send_response(206)
                    self.send_header("Content-Length", str(len(body) + 4096))
                    self.end_headers()
                    self._write_counted(body + bytes(4096))
                elif behaviour.xorb == "endless_error":
                    self.send_response(500)
                    self.send_header("Content-Length", str(1024**3))
                    self.end_headers()
                    for _ in range(1024**3 // 65536):
                        self._write_counted(b"x" * 65536)
                else:
                    self.send_response(206)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self._write_counted(body)
            except OSError:
                pass  # the client hung up

    with http_stub(Handler) as url:
        yield url


def _download(url: str) -> bytes:
    out = io.BytesIO()
    download(HttpCasBackend(url, policy=NO_RETRY), FILE_HEX, out)
    return out.getvalue()


def test_honest_server_works() -> None:
    with hostile_server(Behaviour()) as url:
        assert _download(url) == DATA


def test_a_server_ignoring_range_is_read_only_as_far_as_needed() -> None:
    behaviour = Behaviour(xorb="ignore_range")
    with hostile_server(behaviour) as url:
        assert _download(url) == DATA
    assert behaviour.sent < 64 * 1024**2, f"the client read {behaviour.sent} bytes of a 1 GiB body"


def test_a_range_longer_than_asked_is_refused() -> None:
    with hostile_server(Behaviour(xorb="longer")) as url, pytest.raises(TransferError, match="longer than"):
        _download(url)


def test_a_huge_declared_range_is_refused_before_allocating() -> None:
    with hostile_server(Behaviour(reconstruction="huge_range")) as url, pytest.raises(TransferError, match="larger than a xorb"):
        _download(url)


def test_an_endless_answer_is_cut_off() -> None:
    with hostile_server(Behaviour(reconstruction="endless")) as url, pytest.raises(TransferError, match="larger than"):
        _download(url)


def test_an_endless_error_body_is_cut_off() -> None:
    behaviour = Behaviour(xorb="endless_error")
    with hostile_server(behaviour) as url, pytest.raises(TransferError, match="HTTP 500"):
        _download(url)
    assert behaviour.sent < 64 * 1024**2
