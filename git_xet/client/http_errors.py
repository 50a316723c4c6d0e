"""A refused HTTP call (or a shard's refused sha256 claims) as the client error it stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.http_headers import REFUSED_SHA256
from .errors import TransferError, error_from_body, for_status
from .retry import RETRYABLE_STATUS

if TYPE_CHECKING:
    from .http_types import Response


def status_error(what: str, resp: Response) -> TransferError:
    """The client error for a refused request: its class from the status and the server's
    stable `code` (errors.for_status), its message from the server's error body
    (errors.error_from_body), and the server's Retry-After (honoured by client/retry.py).
    The answer's body must have been read (Response.read)."""
    return refusal_error(what, resp.status_code, resp.content, resp.headers.get("retry-after", ""))


def refusal_error(what: str, status: int, content: bytes, retry_after_header: str) -> TransferError:
    """status_error from an answer's parts."""
    body = error_from_body(content)
    message = f"{what}: HTTP {status}{': ' + body.message if body.message else ''}"
    retry_after = float(retry_after_header) if retry_after_header.replace(".", "", 1).isdigit() else None
    error_class = for_status(status, body.code, body.message)
    return error_class(message, retryable=status in RETRYABLE_STATUS, status=status, code=body.code, retry_after=retry_after)


def unless_refused(answer: object, inserted: bool) -> bool:
    """A shard answer's `inserted`, unless the server registered some of its files without the
    sha256 claimed for them (core/http_headers.REFUSED_SHA256): our shards claim the oid
    git-lfs gave, so the object git-lfs asked for is not stored under that oid (the file
    changed while it was read, or git-lfs' oid is not its content's)."""
    refused = answer.get(REFUSED_SHA256) if isinstance(answer, dict) else None
    if refused:
        files = ", ".join(str(name)[:12] for name in refused[:5]) if isinstance(refused, list) else "?"
        raise TransferError(f"the server refused the shard: file {files}: its sha256 metadata does not match its content", retryable=False)
    return inserted
