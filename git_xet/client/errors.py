"""Errors a backend raises; pipelines and the agent turn them into messages that say what to do."""

from ..core.errors import XetError


class TransferError(XetError):
    """A backend operation failed. `retryable` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class NotFoundError(TransferError):
    """The store does not know this file."""


class RangeNotSatisfiableError(TransferError):
    """The requested byte range starts at or past the end of the file (HTTP 416)."""


class UrlExpiredError(TransferError):
    """A signed xorb URL was refused (expired or revoked): query the reconstruction again."""


class MissingXorbsError(TransferError):
    """The store refused a shard because it does not hold xorbs the shard references.

    After an upload that deduplicated against the local shard cache this means the store lost
    data this machine remembers it holding (reset, or restored from an older backup): the
    upload pipeline then forgets that store's cache and re-uploads what is missing.
    """


# Messages of stores that refuse missing xorbs without a `code` (git-xet servers before it).
_MISSING_XORB_MESSAGES = ("which was never uploaded", "references missing xorb")


def refuses_missing_xorbs(code: object, message: object) -> bool:
    """Whether a store's refusal (its `code`, else its message) says xorbs are missing."""
    if code is not None:
        return code == "missing_xorb"
    return isinstance(message, str) and any(m in message for m in _MISSING_XORB_MESSAGES)
