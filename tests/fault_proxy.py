"""A fault-injecting HTTP proxy on 127.0.0.1, in front of the real server.

Fault injection is the one place the brief allows a stand-in: a real server does not fail on
cue. The proxy forwards every request to the upstream server and, per a deterministic plan,
answers some of them itself with 503/429, or forwards them and then cuts the response body.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


@dataclass
class FaultPlan:
    """Fail the first `fail_first` requests whose path contains each key, in the given way."""

    error_503: dict[str, int] = field(default_factory=dict)
    error_429: dict[str, int] = field(default_factory=dict)
    truncate: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    faults_injected: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, path: str) -> str | None:
        with self.lock:
            for kind, table in (("503", self.error_503), ("429", self.error_429), ("truncate", self.truncate)):
                for key, budget in table.items():
                    if key in path:
                        count = self.seen.get(kind + key, 0)
                        if count < budget:
                            self.seen[kind + key] = count + 1
                            self.faults_injected += 1
                            return kind
        return None


@contextmanager
def fault_proxy(upstream: str, plan: FaultPlan) -> Iterator[str]:
    client = httpx.Client(timeout=60)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = plan.decide(self.path)
            if fault in ("503", "429"):
                payload = b'{"error":"injected fault"}'
                self.send_response(int(fault))
                self.send_header("Content-Length", str(len(payload)))
                if fault == "429":
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(payload)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "connection")}  # Host kept: signed URLs point back here
            resp = client.request(self.command, upstream + self.path, headers=headers, content=body)
            content = resp.content
            self.send_response(resp.status_code)
            for k, v in resp.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if fault == "truncate":
                self.wfile.write(content[: len(content) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        client.close()
