"""Typed errors of the protocol core.

Parsers raise FormatError (or a subclass) for anything read off the wire that is malformed,
truncated or inconsistent, so callers can turn it into a 4xx or a retry without catching
broad exceptions.
"""


class XetError(Exception):
    """Base class of all git-xet errors."""


class FormatError(XetError, ValueError):
    """Serialized data (xorb, shard, hash string, chunk) is malformed or inconsistent."""


class TruncatedError(FormatError):
    """Serialized data ends before a structure it announces is complete."""


class HashMismatchError(FormatError):
    """Data does not hash to the value it claims."""
