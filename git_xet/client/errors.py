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
