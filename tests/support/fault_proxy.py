"""A fault-injecting HTTP proxy on 127.0.0.1, in front of the real server.

Fault injection is the one place the brief allows a stand-in: a real server does not fail on
cue. The proxy forwards every request to the upstream server and, per a plan, answers some
itself with an error status, resets the connection (before or after forwarding), stalls
past the client's timeout, or forwards and then cuts the response body.

Two plans: FaultPlan fails the first N requests matching a path (exact counts), FaultRate
fails a random share of all requests (a seeded, reproducible rate).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.support.http_stub import http_stub

import httpx

FAULT_KINDS = ("500", "503", "429", "reset_before", "reset_after", "stall", "truncate")


@dataclass
class FaultPlan:
    """Fail (or delay) the first N requests whose path contains each key, in the given way. `hold`
    lets the first N matching requests through, then stalls the rest for `stall_seconds`
    until `release()`: a transfer frozen at a known point, e.g. to kill a process there."""

    error_503: dict[str, int] = field(default_factory=dict)
    error_429: dict[str, int] = field(default_factory=dict)
    truncate: dict[str, int] = field(default_factory=dict)
    hold: dict[str, int] = field(default_factory=dict)
    delay: dict[str, int] = field(default_factory=dict)  # forwarded, but delay_seconds late
    delay_seconds: float = 0.0
    seen: dict[str, int] = field(default_factory=dict)
    faults_injected: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stall_seconds: float = 60.0
    held: threading.Event = field(default_factory=threading.Event)  # set once a request is held
    # Answer matching requests with these statuses instead of forwarding them, one per request
    # in order (e.g. {"/v1/xorb-uploads/": [403]}: the first grant PUT is refused as expired).
    statuses: dict[str, list[int]] = field(default_factory=dict)

    def release(self) -> None:
        with self.lock:
            self.hold = {}

    def decide(self, path: str) -> str | None:
        with self.lock:
            for key, queue in self.statuses.items():
                if key in path and queue:
                    self.faults_injected += 1
                    return str(queue.pop(0))
            for key, allowed in self.hold.items():
                if key in path:
                    count = self.seen.get("hold" + key, 0)
                    self.seen["hold" + key] = count + 1
                    if count >= allowed:
                        self.held.set()
                        return "stall"
            for kind, table in (("503", self.error_503), ("429", self.error_429), ("truncate", self.truncate), ("delay", self.delay)):
                for key, budget in table.items():
                    if key in path:
                        count = self.seen.get(kind + key, 0)
                        if count < budget:
                            self.seen[kind + key] = count + 1
                            self.faults_injected += 1
                            return kind
        return None


@dataclass
class FaultRate:
    """Fail `rate` of all requests (each kind equally likely), reproducibly for a seed.
    `stall_seconds` should exceed the client's read timeout."""

    rate: float
    seed: int = 0
    kinds: tuple[str, ...] = FAULT_KINDS
    stall_seconds: float = 3.0
    requests: int = 0
    by_kind: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def faults_injected(self) -> int:
        return sum(self.by_kind.values())

    def decide(self, path: str) -> str | None:
        with self.lock:
            self.requests += 1
            if self._rng.random() >= self.rate:
                return None
            kind = self._rng.choice(self.kinds)
            self.by_kind[kind] += 1
            return kind


def _reset(connection: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or a middlebox would."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


@contextmanager
def fault_proxy(upstream: str, plan: FaultPlan | FaultRate) -> Iterator[str]:
    client = httpx.Client(timeout=120)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _send_error(self, status: int) -> None:
            payload = b'{"error":"injected fault"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = plan.decide(f"{self.command} {self.path}")  # keys match paths, or "METHOD /path"
            if fault is not None and fault.isdigit():
                self._send_error(int(fault))
                return
            if fault == "reset_before":
                self.close_connection = True
                _reset(self.connection)
                return
            if fault == "stall":
                time.sleep(plan.stall_seconds)
                self.close_connection = True
                _reset(self.connection)
                return
            if fault == "delay":
                time.sleep(plan.delay_seconds)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "connection")}  # Host kept: signed URLs point back here
            resp = client.request(self.command, upstream + self.path, headers=headers, content=body)
            if fault == "reset_after":  # the server acted on it; the client never hears back
                self.close_connection = True
                _reset(self.connection)
                return
            content = resp.content
            self.send_response(resp.status_code)
            for k, v in resp.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(k, v)
            if self.command == "HEAD":  # the object's length, and no body
                self.send_header("Content-Length", resp.headers.get("content-length", "0"))
                self.end_headers()
                return
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if fault == "truncate":
                self.wfile.write(content[: len(content) // 2])
                self.wfile.flush()
                self.close_connection = True
                _reset(self.connection)
                return
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _handle

    try:
        with http_stub(Handler) as url:
            yield url
    finally:
        client.close()
