"""The access log: one structured line per request, and the same figures to the metrics."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from .http_guard import BODY_INTO, SEND_FILE, BodySink

log = logging.getLogger("git_xet.server")


class AccessLog:
    """ASGI middleware: one structured line per request; never the query string or headers;
    and the same figures to `observe` (the metrics), with the route's template."""

    def __init__(self, app, observe: Callable[[str, str, int, float, int, int], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = {"status": 0, "bytes_in": 0, "bytes_out": 0}
        # A body taken into a sink (http_guard.BODY_INTO) passes through no message: count it
        # there. (Under our protocol a sink's request has no body in its messages.)
        sinks: list[BodySink] = []
        extensions = scope.get("extensions") or {}
        into = extensions.get(BODY_INTO)
        send_file = extensions.get(SEND_FILE)
        counted: dict[str, object] = {}  # the extensions we wrap, to count the bytes they carry
        if into is not None:

            def counted_into(buffer, limit: int) -> BodySink:
                sinks.append(into(buffer, limit))
                return sinks[-1]

            counted[BODY_INTO] = counted_into
        if send_file is not None:
            # Likewise a body sent from a file (http_guard.SEND_FILE).

            async def counted_send_file(*args) -> int:
                sent = await send_file(*args)
                seen["bytes_out"] += sent
                return sent

            counted[SEND_FILE] = counted_send_file
        if counted:
            scope = {**scope, "extensions": {**extensions, **counted}}

        async def receive_wrapper():
            message = await receive()
            if message["type"] == "http.request":
                seen["bytes_in"] += len(message.get("body", b""))
            return message

        logged = False

        def write_line() -> None:
            nonlocal logged
            if logged:
                return
            logged = True
            seconds = time.perf_counter() - start
            bytes_in = seen["bytes_in"] + sum(sink.received for sink in sinks)
            log.info(
                json.dumps(
                    {
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": seen["status"],
                        "ms": round(1000 * seconds, 1),
                        "bytes_in": bytes_in,  # request and response body sizes
                        "bytes_out": seen["bytes_out"],
                        "client": (scope.get("client") or ["?"])[0],
                    }
                )
            )
            # The router leaves the matched route in the scope: its template bounds the labels.
            self.observe(getattr(scope.get("route"), "path", "unmatched"), scope["method"], seen["status"], seconds, bytes_in, seen["bytes_out"])

        async def send_wrapper(message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["bytes_out"] += len(message.get("body", b""))
                if not message.get("more_body", False):
                    # Logged before the answer's last bytes leave: whoever has read a whole
                    # answer (a test, an operator's script) finds its line in the log.
                    write_line()
            await send(message)

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        except BaseException:
            seen["status"] = seen["status"] or 500  # what the error middleware outside us sends
            raise
        finally:
            write_line()  # an answer cut short, or none at all

