"""The Git LFS batch API, one object at a time: how the agent asks an LFS server where an object
goes (or comes from) when git-lfs did not ask for it (standalone mode toward a Hub-style remote,
and oid lookups in a `git xet serve`).

Calls are retried like every CAS call (429 with Retry-After, 5xx, dropped connections), so a
busy server is waited for instead of failing the push.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.http_headers import FILE_HASH, LFS_MEDIA_TYPE, header_value
from .errors import TransferError
from .http_errors import status_error
from .retry import Outage, RetryPolicy, with_retries
from .http_types import HttpClient, Response

MAX_BATCH_ANSWER_BYTES = 1 << 20  # per object asked; a larger answer is refused unread


class BatchObject(NamedTuple):
    """One object's entry of a batch answer, and the transfer the server chose for the batch."""

    transfer: str | None
    entry: dict[str, Any]

    def error_message(self) -> str | None:
        """The server's per-object refusal (e.g. "object not found"), None when there is none."""
        error = self.entry.get("error")
        if not error:
            return None
        return str(error.get("message") if isinstance(error, dict) else error)

    def error_code(self) -> int | None:
        """The per-object error's code (404: the server does not hold it), None without one."""
        error = self.entry.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return code if isinstance(code, int) else None

    def action(self, operation: str) -> dict[str, Any] | None:
        """The object's `upload` or `download` action; None when the server offers none (an
        upload the server already holds, a download it does not)."""
        action = (self.entry.get("actions") or {}).get(operation)
        return action if isinstance(action, dict) else None

    def xet_file_hash(self) -> str | None:
        """The XET file hash an `xet` download action names, None without one."""
        action = self.action("download")
        return header_value(action.get("header"), FILE_HASH) if action else None


def batch_one(
    http: HttpClient,
    endpoint: str,
    operation: str,
    transfers: list[str],
    oid: str,
    size: int,
    headers: dict[str, str],
    policy: RetryPolicy | None = None,
    outage: Outage | None = None,
) -> BatchObject:
    """POST one object to `{endpoint}/objects/batch` (see batch_many)."""
    return batch_many(http, endpoint, operation, transfers, [(oid, size)], headers, policy, outage)[0]


def batch_many(
    http: HttpClient,
    endpoint: str,
    operation: str,
    transfers: list[str],
    objects: Sequence[tuple[str, int]],
    headers: dict[str, str],
    policy: RetryPolicy | None = None,
    outage: Outage | None = None,
) -> list[BatchObject]:
    """POST (oid, size) `objects` to `{endpoint}/objects/batch` in one call; their answers in
    the same order (an object the server left out gets a per-object error). A refused call
    raises the client error for its status (http_errors.status_error) with the server's reason
    (401/403: the caller adds the fix); a per-object error is left in the answer for the caller
    to judge. `outage`: the retry budget this call draws on (client/retry.py; its own when None)."""
    what = f"LFS batch request to {endpoint}"

    def attempt() -> Response:
        resp = http.request(
            "POST",
            f"{endpoint}/objects/batch",
            json={"operation": operation, "transfers": transfers, "objects": [{"oid": o, "size": n} for o, n in objects], "hash_algo": "sha256"},
            headers={"Accept": LFS_MEDIA_TYPE, "Content-Type": LFS_MEDIA_TYPE, **headers},
            limit=MAX_BATCH_ANSWER_BYTES * len(objects),
        )
        if resp.status_code != 200:
            raise status_error(what, resp)  # 429/5xx: retried
        return resp

    resp = with_retries(what, attempt, policy or RetryPolicy.from_env(), outage, endpoint)
    try:
        body = resp.json()
        listed = body["objects"]
        if len(objects) == 1 and len(listed) == 1 and isinstance(listed[0], dict):
            return [BatchObject(body.get("transfer"), listed[0])]  # one object: its answer, however it names it
        entries = {entry["oid"]: entry for entry in listed if isinstance(entry, dict)}
    except (ValueError, KeyError, IndexError, TypeError):
        raise TransferError(f"the LFS server {endpoint} answered the batch request with something unexpected", retryable=True) from None
    left_out = {"error": {"message": "the LFS server's batch answer left this object out"}}
    return [BatchObject(body.get("transfer"), entries.get(oid, left_out)) for oid, _ in objects]
