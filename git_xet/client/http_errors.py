"""A refused HTTP call as the client error its status and body stand for."""

from __future__ import annotations

import httpx

from .errors import TransferError, error_from_body, for_status
from .retry import RETRYABLE_STATUS


def status_error(what: str, resp: httpx.Response) -> TransferError:
    """The client error for a refused request: its class from the status and the server's
    stable `code` (errors.for_status), its message from the server's error body
    (errors.error_from_body), and the server's Retry-After (honoured by client/retry.py)."""
    body = error_from_body(resp.content)
    message = f"{what}: HTTP {resp.status_code}{': ' + body.message if body.message else ''}"
    value = resp.headers.get("retry-after", "")
    retry_after = float(value) if value.replace(".", "", 1).isdigit() else None
    error_class = for_status(resp.status_code, body.code, body.message)
    return error_class(message, retryable=resp.status_code in RETRYABLE_STATUS, status=resp.status_code, code=body.code, retry_after=retry_after)
