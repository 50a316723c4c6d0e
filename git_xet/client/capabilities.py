"""What a `git xet serve` offers of our extension (core/extension.py), asked once per store.

One GET, the first time a backend needs to know, then kept for the backend's life (an agent
process keeps one backend per store, so an agent asks once): no route of ours is tried for a
404. A server that does not know the request (the Hub's CAS, an older `git xet serve`) answers
404, and is then used through the XET API alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..core.extension import CAPABILITIES, Capabilities
from .errors import TransferError
from .http_types import Response

log = logging.getLogger("git_xet.client")

# One authenticated GET of a path with retries, accepting these statuses (HttpCasBackend.request).
Get = Callable[[str, tuple[int, ...]], Response]


class ServerCapabilities:
    """A store's capabilities, asked at most once: `asked` False (a CAS that is not a `git xet
    serve`, such as the Hub's) means none, without asking."""

    def __init__(self, get: Get, asked: bool) -> None:
        self._get = get
        self._asked = not asked  # nothing to ask: known to offer nothing
        self._known: Capabilities | None = None
        self._lock = threading.Lock()

    def get(self) -> Capabilities | None:
        """The server's capabilities, or None when it offers no extension of ours (asked now if
        not yet: a transfer's threads wait for one answer). An answer that does not parse counts
        as none; a failed request raises, as the transfer it was asked for would have."""
        with self._lock:
            if not self._asked:
                self._known = self._ask()
                self._asked = True
            return self._known

    def _ask(self) -> Capabilities | None:
        resp = self._get(CAPABILITIES, (200, 404))
        if resp.status_code == 404:
            log.info("the server offers nothing beyond the XET API; using it alone")
            return None
        try:
            return Capabilities.listed_in(resp.json())
        except ValueError:
            raise TransferError("the server answered the capabilities request with something unexpected", retryable=True) from None
