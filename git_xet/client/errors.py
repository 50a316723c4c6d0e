"""The client layer's errors: what a backend raises, whichever store is behind it.

Every backend raises the same class for the same case: the HTTP backend picks it from the
server's status and `code`, the local and bucket backends translate the storage layer's
errors (`from_storage_error`). Pipelines and the agent turn them into messages that say what
to do.

    TransferError               base (a XetError); `retryable` says whether trying again may help
      NotFoundError             the store does not know this file
      RangeNotSatisfiableError  a byte range starts past the end of the file
      UrlExpiredError           a signed xorb URL was refused: query the reconstruction again
      RejectedError             the store refused what we sent as invalid: sending it again cannot help
        MissingXorbsError       a shard references xorbs the store does not hold
      ConflictError             the upload raced a change of the store (gc): upload it again
      StoreDamagedError         the store lost or corrupted data it promises to hold
      StoreUnavailableError     the store cannot be reached now (retryable)
      StoreFullError            the store has no space left
"""

from __future__ import annotations

import json
from typing import NamedTuple, TYPE_CHECKING

from ..core.errors import XetError

if TYPE_CHECKING:
    from ..storage.errors import StorageError


class TransferError(XetError):
    """A backend operation failed. `retryable` says whether trying again may help; over HTTP,
    `status` is the server's answer and `code` its stable reason (when it sent one), and
    `retry_after` the seconds it asked us to wait."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.code = code
        self.retry_after = retry_after


class NotFoundError(TransferError):
    """The store does not know this file."""


class RangeNotSatisfiableError(TransferError):
    """The requested byte range starts at or past the end of the file."""


class UrlExpiredError(TransferError):
    """A signed xorb URL was refused (expired or revoked): query the reconstruction again."""


class RejectedError(TransferError):
    """The store refused an upload or a query as invalid, inconsistent or too costly to check:
    sending the same again cannot help."""


class MissingXorbsError(RejectedError):
    """The store refused a shard because it does not hold xorbs the shard references.

    After an upload that deduplicated against the local shard cache this means the store lost
    data this machine remembers it holding (reset, or restored from an older backup): the
    upload pipeline then forgets that store's cache and re-uploads what is missing.
    """


class ConflictError(TransferError):
    """The upload contradicts a change the store made meanwhile (gc collected a xorb it uses):
    upload it again."""


class StoreDamagedError(TransferError):
    """The store is missing or holds corrupt data it claims to have: its operator must repair it."""


class StoreUnavailableError(TransferError):
    """A part of the store cannot be reached right now: try again later."""

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None, code: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, retryable=retryable, status=status, code=code, retry_after=retry_after)


class StoreFullError(TransferError):
    """The store has no space left, or the repository reached its quota: the message says which."""


def from_storage_error(exc: StorageError, where: str) -> TransferError:
    """The client error for a storage error of an in-process store at `where`: the class the
    HTTP backend raises for the same refusal from a server (see server/errors.py)."""
    from ..storage import errors as storage

    message = exc.message
    if isinstance(exc, storage.MissingXorbs):
        return MissingXorbsError(message)
    if isinstance(exc, storage.Rejected):
        return RejectedError(message)
    if isinstance(exc, storage.Conflict):
        return ConflictError(message)
    if isinstance(exc, storage.Damaged):
        return StoreDamagedError(f"the store {where} is damaged: {message}")
    if isinstance(exc, storage.Unavailable):
        return StoreUnavailableError(message, retryable=getattr(exc, "transient", True))
    if isinstance(exc, (storage.StorageFull, storage.QuotaExceeded)):
        return StoreFullError(message)
    return TransferError(message)


# Client error class for a server's HTTP status (the table server/errors.py answers with).
_BY_STATUS: dict[int, type[TransferError]] = {
    400: RejectedError,
    404: NotFoundError,
    409: ConflictError,
    413: RejectedError,
    416: RangeNotSatisfiableError,
    503: StoreUnavailableError,
    507: StoreFullError,
}


def for_status(status: int, code: str | None, message: str) -> type[TransferError]:
    """The client error class for a server's refusal (its status, stable `code` and message)."""
    if status == 400 and refuses_missing_xorbs(code, message):
        return MissingXorbsError
    return _BY_STATUS.get(status, TransferError)


# Messages of stores that refuse missing xorbs without a `code` (git-xet servers before it).
_MISSING_XORB_MESSAGES = ("which was never uploaded", "references missing xorb")


def refuses_missing_xorbs(code: object, message: object) -> bool:
    """Whether a store's refusal (its `code`, else its message) says xorbs are missing."""
    if code is not None:
        return code == "missing_xorb"
    return isinstance(message, str) and any(m in message for m in _MISSING_XORB_MESSAGES)


class ErrorBody(NamedTuple):
    """What a server's error answer says: its explanation, and its stable reason code if any."""

    message: str
    code: str | None = None


def error_from_body(content: bytes | str, *, limit: int = 200) -> ErrorBody:
    """The one reader of error bodies. A `git xet serve` or CAS answer is `{"error": message,
    "code"?: reason}`, a Git LFS answer `{"message": message}`, an NDJSON shard frame
    `{"type": "error", "message", "code"?}`; anything else (a proxy's HTML page) is kept as
    text, cut to `limit` characters, since it goes into one line of an error."""
    try:
        answer = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        answer = None
    if not isinstance(answer, dict):
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
        return ErrorBody(text.strip()[:limit])
    message = answer.get("error") or answer.get("message") or ""
    code = answer.get("code")
    return ErrorBody(str(message), code if isinstance(code, str) else None)
