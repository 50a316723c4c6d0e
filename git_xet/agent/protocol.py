"""The git-lfs custom transfer protocol (3.x): parsing requests, formatting answers. Pure.

One JSON object per line each way. Requests: init, upload, download, terminate. Answers:
`{}` (or an error) to init; progress and complete events per object. Integers must be JSON
integers; any malformed request gets an error answer and the agent keeps serving.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Error codes in `complete` events (git-lfs shows the message; the code is informational).
ERR_TRANSFER = 2
ERR_BAD_REQUEST = 32


class ProtocolError(ValueError):
    """A request line that cannot be acted on; `oid` is set when one could be read."""

    def __init__(self, message: str, oid: str | None = None) -> None:
        super().__init__(message)
        self.oid = oid


@dataclass(frozen=True)
class Init:
    operation: str
    remote: str | None
    concurrent_transfers: int


@dataclass(frozen=True)
class Transfer:
    operation: str  # "upload" or "download"
    oid: str
    size: int
    path: str | None  # uploads: the object's file; downloads: none
    action: dict | None  # None in standalone mode


@dataclass(frozen=True)
class Terminate:
    pass


def _oid(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ProtocolError("oid must be 64 lowercase hex digits")
    return value


def parse_request(line: str) -> Init | Transfer | Terminate:
    try:
        msg = json.loads(line)
    except ValueError:
        raise ProtocolError("request is not JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError("request is not a JSON object")
    event = msg.get("event")
    if event == "init":
        op = msg.get("operation")
        if op not in ("upload", "download"):
            raise ProtocolError(f"init: unknown operation {op!r}")
        n = msg.get("concurrenttransfers", 1)
        return Init(op, msg.get("remote") if isinstance(msg.get("remote"), str) else None, n if isinstance(n, int) else 1)
    if event == "terminate":
        return Terminate()
    if event in ("upload", "download"):
        oid_raw = msg.get("oid")
        oid = oid_raw if isinstance(oid_raw, str) else None
        try:
            oid = _oid(oid_raw)
            size = msg.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ProtocolError("size must be a non-negative integer", oid)
            path = msg.get("path")
            if event == "upload" and not isinstance(path, str):
                raise ProtocolError("upload needs the object's path", oid)
            action = msg.get("action")
            if action is not None and not isinstance(action, dict):
                raise ProtocolError("action must be an object or null", oid)
        except ProtocolError as exc:
            raise ProtocolError(str(exc), oid) from None
        return Transfer(event, oid, size, path if event == "upload" else None, action)
    raise ProtocolError(f"unknown event {event!r}")


def init_ok() -> str:
    return "{}"


def init_error(message: str) -> str:
    return json.dumps({"error": {"code": ERR_BAD_REQUEST, "message": message}})


def progress(oid: str, so_far: int, since_last: int) -> str:
    return json.dumps({"event": "progress", "oid": oid, "bytesSoFar": int(so_far), "bytesSinceLast": int(since_last)})


def complete(oid: str, path: str | None = None) -> str:
    msg: dict = {"event": "complete", "oid": oid}
    if path is not None:
        msg["path"] = path
    return json.dumps(msg)


def complete_error(oid: str, message: str, code: int = ERR_TRANSFER) -> str:
    return json.dumps({"event": "complete", "oid": oid, "error": {"code": code, "message": message}})
