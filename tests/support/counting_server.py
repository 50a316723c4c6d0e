"""A threaded HTTP/1.1 server on 127.0.0.1 that counts the connections it accepts and keeps the
requests its handlers record, for tests of a client's connection reuse. Handlers subclass
CountingHandler; `serving(handler)` runs one for a block (shut down, closed, joined after)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a test that opens 16 connections at once
    # (test_threads_sharing_a_client_each_get_their_own_answers) could overflow it and see a
    # reset that says nothing about the client under test.
    request_queue_size = 64

    def __init__(self, handler: type[CountingHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: list[tuple[str, Any]] = []  # (path, what the handler kept of the headers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # handlers reset and stall connections on purpose


@contextmanager
def serving(handler: type[CountingHandler], tls: ssl.SSLContext | None = None) -> Iterator[CountingServer]:
    """The server for a block; with `tls`, it speaks https (its `url` still says http)."""
    server = CountingServer(handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
