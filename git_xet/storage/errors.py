"""The one exception type the storage and server layers raise to refuse a request."""


class RequestRefused(Exception):
    """Refuse the current request with an HTTP status and a message the client can act on."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
