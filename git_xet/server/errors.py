"""The server's errors, and the one place any error becomes an HTTP status.

Handlers raise RequestRefused (an HTTP refusal the server decides itself: bad token, body too
large, a grant that does not match) or let the storage layer's errors through; `refusal` turns
any of them into the status, message and stable `code` a client acts on, from the table below.
Every error body is built here too (client/errors.error_from_body reads them all): the JSON
answer `{"error": message[, "code": code]}`, the same inside a streamed NDJSON answer
(error_frame), and the Git LFS batch API's own shape (lfs_error_response).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.errors import XetError
from ..core.http_headers import LFS_MEDIA_TYPE
from ..storage import errors as storage
from ..storage.s3 import S3Error

log = logging.getLogger("git_xet.server")

# Stable, machine-readable reasons sent beside the human message (`code` in an error answer or
# a shard frame). Clients act on the code; the message may change.
MISSING_XORB = "missing_xorb"  # a shard references a xorb the store does not hold
QUOTA_EXCEEDED = "quota_exceeded"  # the push would take the repository past its quota

DISK_FULL = "the server's disk is full; free space or grow its volume, then push again"
OBJECT_STORAGE_DOWN = "the server's object storage is unavailable; try again later"


class ServerError(XetError):
    """Base of the server's own errors."""


class RequestRefused(ServerError):
    """Refuse the current request with an HTTP status and a message the client can act on
    (plus, where a client is expected to react, a stable `code`; and for a 429 or 503, the
    seconds after which to try again, sent as Retry-After)."""

    def __init__(self, status: int, message: str, code: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.retry_after = retry_after


class SecretError(ServerError):
    """The server secret is missing or unusable; the message says what to do."""


class RangeNotSatisfiable(ServerError):
    """The requested range starts at or past the end of the file (HTTP 416)."""


# Error class -> (status, code, message to send instead of the error's own, or None to send
# its own). Looked up along the raised class's MRO, so the most specific entry wins. Only
# errors whose message is safe to show a client belong here; others are logged as 500s (a
# FormatError that reaches a handler is data on disk that no longer parses, not bad input:
# handlers turn a client's malformed input into Rejected or RequestRefused themselves).
STATUSES: dict[type[BaseException], tuple[int, str | None, str | None]] = {
    storage.MissingXorbs: (400, MISSING_XORB, None),
    storage.TooMuchWork: (413, None, None),
    storage.Rejected: (400, None, None),
    storage.Conflict: (409, None, None),
    storage.Damaged: (500, None, None),
    S3Error: (503, None, OBJECT_STORAGE_DOWN),  # its message names the bucket and what is wrong with the server's credentials
    storage.Unavailable: (503, None, None),
    storage.StorageFull: (507, None, DISK_FULL),
    storage.QuotaExceeded: (507, QUOTA_EXCEEDED, None),
    storage.Misconfigured: (500, None, None),
}


def refusal(exc: BaseException) -> RequestRefused | None:
    """The HTTP refusal that answers `exc`, or None for an unexpected error (a bug: a 500)."""
    if isinstance(exc, RequestRefused):
        return exc
    for cls in type(exc).__mro__:
        if cls in STATUSES:
            status, code, message = STATUSES[cls]
            return RequestRefused(status, message or str(exc), code)
    if storage.is_disk_full(exc):  # a write outside the store's own (an upload grant's body)
        return RequestRefused(507, DISK_FULL)
    return None


def retryable(refused: RequestRefused) -> bool:
    """Whether a client may succeed by sending the same request again later."""
    return refused.status >= 500 and refused.status != 507


def error_response(refused: RequestRefused) -> JSONResponse:
    """The JSON answer of a refused request."""
    body = {"error": refused.message} if refused.code is None else {"error": refused.message, "code": refused.code}
    response = JSONResponse(body, status_code=refused.status, headers={"Cache-Control": "no-store"})
    if refused.status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    if refused.retry_after is not None:
        response.headers["Retry-After"] = str(refused.retry_after)
    return response


def lfs_error_response(status: int, message: str) -> JSONResponse:
    """An error of the Git LFS batch API, as git-lfs expects it: `{"message": message}` as
    application/vnd.git-lfs+json; a 401 names Basic auth so git asks its credential helpers."""
    response = JSONResponse({"message": message}, status_code=status, media_type=LFS_MEDIA_TYPE, headers={"Cache-Control": "no-store"})
    if status == 401:
        response.headers["LFS-Authenticate"] = 'Basic realm="git-xet"'
    return response


def error_frame(refused: RequestRefused | None, internal: str = "internal error") -> dict[str, object]:
    """An error inside a streamed NDJSON answer (POST /v2/shards), once its status line has been
    sent: the refusal's message, code and the status it would have had (the client raises the
    same error class as for a refused request), or, for an unexpected error (None), `internal`
    as a retryable message."""
    if refused is None:
        return {"type": "error", "message": internal, "retryable": True}
    frame: dict[str, object] = {"type": "error", "message": refused.message, "retryable": retryable(refused), "status": refused.status}
    if refused.code is not None:
        frame["code"] = refused.code
    return frame


async def _on_error(request: Request, exc: Exception) -> Response:
    refused = refusal(exc)
    if refused is None:
        raise exc  # Starlette's error middleware answers 500 and logs the traceback
    if refused.status >= 500:
        log.error("%s %s: %s", request.method, request.url.path, exc)
    return error_response(refused)


async def _on_unknown_route(request: Request, exc: Exception) -> Response:
    return error_response(RequestRefused(404, "no such route"))


def exception_handlers() -> dict[int | type[Exception], Callable[[Request, Exception], Awaitable[Response]]]:
    """Starlette's exception_handlers for an app whose handlers raise our errors."""
    return {XetError: _on_error, OSError: _on_error, 404: _on_unknown_route}
