"""An ASGI app served by a real uvicorn, in a thread, on 127.0.0.1, with our HTTP protocol
(server/http_guard.py): for tests that drive the protocol's extensions with raw sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from git_xet.server.http_guard import guarded_protocol


@contextmanager
def guarded_uvicorn(app, header_timeout: float = 10.0, max_header_bytes: int = 64 * 1024) -> Iterator[int]:
    """Serve `app` for the block; yields its port. Startup is waited for (bounded), and the
    server is stopped and its thread joined on the way out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="critical", http=guarded_protocol(header_timeout, max_header_bytes), timeout_keep_alive=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=15)
