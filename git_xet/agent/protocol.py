"""The git-lfs custom transfer protocol (3.x): parsing requests, formatting answers. Pure.

One JSON object per line each way. Requests: init, upload, download, terminate. Answers:
`{}` (or an error) to init; progress and complete events per object. Integers must be JSON
integers; any malformed request gets an error answer and the agent keeps serving.
"""

from __future__ import annotations

import sys

from ..core.errors import XetError  # imports nothing: the agent pays one small module for it before `init`

# Error codes in `complete` events (git-lfs shows the message; the code is informational).
ERR_TRANSFER = 2
ERR_BAD_REQUEST = 32


class ProtocolError(XetError, ValueError):
    """A request line that cannot be acted on; `oid` is set when one could be read."""

    def __init__(self, message: str, oid: str | None = None) -> None:
        super().__init__(message)
        self.oid = oid


# Plain classes: the agent answers `init` before importing anything beyond builtins (even
# collections or dataclasses add ~4-15 ms per agent, and git-lfs starts 8 of them in a row).
class Init:
    __slots__ = ("concurrent_transfers", "operation", "remote")

    def __init__(self, operation: str, remote: str | None, concurrent_transfers: int) -> None:
        self.operation, self.remote, self.concurrent_transfers = operation, remote, concurrent_transfers


class Transfer:
    """One object to move. `path`: the object's file for uploads, None for downloads;
    `action`: the batch API's action object, None in standalone mode."""

    __slots__ = ("action", "oid", "operation", "path", "size")

    def __init__(self, operation: str, oid: str, size: int, path: str | None, action: dict | None) -> None:
        self.operation, self.oid, self.size, self.path, self.action = operation, oid, size, path, action


class Terminate:
    __slots__ = ()


_LOWER_HEX = frozenset("0123456789abcdef")


def _oid(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64 or not _LOWER_HEX.issuperset(value):
        raise ProtocolError("oid must be 64 lowercase hex digits")
    return value


def parse_flat_object(line: str) -> dict | None:
    """Parse a one-level JSON object whose values are strings without escapes, integers,
    booleans or null (what git-lfs sends for init, terminate and most transfers); None for
    anything else, which the json module then decides. Agreeing with json.loads on what it
    accepts is tested; the point is that answering `init` needs no json (and re) import,
    ~20 ms of each agent's start, and git-lfs starts its agents one after another."""
    text = line.strip()
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        return None
    result: dict = {}
    i, end = 1, len(text) - 1

    def skip_space(i: int) -> int:
        while i < end and text[i] in " \t\r\n":
            i += 1
        return i

    def string(i: int) -> tuple[str, int] | None:
        if i >= end or text[i] != '"':
            return None
        close = text.find('"', i + 1, end)
        if close < 0:
            return None
        value = text[i + 1 : close]
        if "\\" in value or any(c < " " for c in value):
            return None
        return value, close + 1

    i = skip_space(i)
    if i == end:
        return result
    while True:
        key = string(i)
        if key is None:
            return None
        name, i = key
        i = skip_space(i)
        if i >= end or text[i] != ":":
            return None
        i = skip_space(i + 1)
        value: str | int | bool | None
        if i < end and text[i] == '"':
            parsed = string(i)
            if parsed is None:
                return None
            value, i = parsed
        else:
            j = i
            while j < end and text[j] not in ", \t\r\n":
                j += 1
            word = text[i:j]
            digits = word[1:] if word.startswith("-") else word
            if word in _LITERALS:
                value = _LITERALS[word]
            elif digits.isdigit() and digits.isascii() and (digits == "0" or digits[0] != "0"):
                value = int(word)
            else:
                return None
            i = j
        result[name] = value
        i = skip_space(i)
        if i == end:
            return result
        if text[i] != ",":
            return None
        i = skip_space(i + 1)


_LITERALS = {"true": True, "false": False, "null": None}


def parse_request(line: str) -> Init | Transfer | Terminate:
    # Once an agent has imported json (its first transfer does), json.loads is the faster way.
    msg = parse_flat_object(line) if "json" not in sys.modules else None
    if msg is None:
        import json

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
    import json

    return json.dumps({"error": {"code": ERR_BAD_REQUEST, "message": message}})


def progress(oid: str, so_far: int, since_last: int) -> str:
    import json

    return json.dumps({"event": "progress", "oid": oid, "bytesSoFar": int(so_far), "bytesSinceLast": int(since_last)})


def complete(oid: str, path: str | None = None) -> str:
    import json

    msg: dict = {"event": "complete", "oid": oid}
    if path is not None:
        msg["path"] = path
    return json.dumps(msg)


def complete_error(oid: str, message: str, code: int = ERR_TRANSFER) -> str:
    import json

    return json.dumps({"event": "complete", "oid": oid, "error": {"code": code, "message": message}})
