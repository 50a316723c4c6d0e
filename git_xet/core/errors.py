"""XetError, the base of every git-xet error, and the protocol core's own errors.

XetError lives here, on the ground floor, so that every layer derives from it by importing
downward; the package root re-exports it on first use (`git_xet.XetError`). This module imports
nothing, so the transfer agent pays one small module for it before answering `init`.

Every exception class in git_xet derives from XetError (tests/integration/test_error_tree.py checks it),
so `except git_xet.XetError` catches whatever git-xet raises on purpose. Each layer has its own
branch, and a layer translates the errors of the one below at its boundary:

    core/errors.py      FormatError: serialized data (xorb, shard, hash string) is malformed
    storage/errors.py   StorageError: rejected, conflict, damaged, unavailable, full (no HTTP)
    client/errors.py    TransferError: what any backend raises; the local and bucket backends
                        translate storage errors into the class the HTTP backend raises for
                        the same refusal; client/http_types.py's TransportError: a connection
                        failed (retried, then reported as a TransferError)
    server/errors.py    RequestRefused, and the one table from error class to HTTP status
    agent/, commands/   ProtocolError, ConfigError, GitError, MigrationError

Parsers raise FormatError (or a subclass) for anything read off the wire that is malformed,
truncated or inconsistent, so callers can turn it into a 4xx or a retry without catching
broad exceptions. Where callers rely on a builtin, a class also derives from it (FormatError
and LocationError are ValueErrors).
"""


class XetError(Exception):
    """Base class of all git-xet errors: `except git_xet.XetError` catches whatever git-xet
    raises on purpose."""


class FormatError(XetError, ValueError):
    """Serialized data (xorb, shard, hash string, chunk) is malformed or inconsistent."""


class TruncatedError(FormatError):
    """Serialized data ends before a structure it announces is complete."""


class HashMismatchError(FormatError):
    """Data does not hash to the value it claims."""
