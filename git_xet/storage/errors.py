"""The one exception type the storage and server layers raise to refuse a request."""

# Stable, machine-readable reasons sent beside the human message (`code` in an error answer
# or shard frame). Clients act on the code; the message may change.
MISSING_XORB = "missing_xorb"  # a shard references a xorb the store does not hold


class RequestRefused(Exception):
    """Refuse the current request with an HTTP status and a message the client can act on
    (plus, where a client is expected to react, a stable `code`)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
