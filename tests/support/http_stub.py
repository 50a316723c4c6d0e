"""A throwaway HTTP server on loopback for a test: a handler class in, its URL out, stopped
(shut down, socket closed, thread joined) when the block ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # stubs reset and stall connections on purpose; a failed write is expected


@contextmanager
def http_stub(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
