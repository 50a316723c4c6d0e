"""Retries with capped exponential backoff and full jitter (git-lfs never retries for us)."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from .errors import TransferError
from .http_types import TransportError

log = logging.getLogger("git_xet.client")
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0  # seconds; a server asking for longer gets retried sooner


class RetryPolicy(NamedTuple):
    """hf-xet's shape: 5 retries, delays growing x3, each a uniform draw below a capped bound.

    The cap is 10 s, not hf-xet's 30 s: a user waiting on `git push` saw a 24 s draw against a
    server that was back long before; the worst case for all retries is now about 33 s. A
    server's own Retry-After is honoured up to MAX_RETRY_AFTER."""

    max_attempts: int = 6
    base_delay: float = 1.0
    factor: float = 3.0
    max_delay: float = 10.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """Defaults, overridable by GIT_XET_RETRY_MAX_ATTEMPTS and GIT_XET_RETRY_BASE_DELAY."""
        policy = cls()
        try:
            attempts = int(os.environ.get("GIT_XET_RETRY_MAX_ATTEMPTS", policy.max_attempts))
            base = float(os.environ.get("GIT_XET_RETRY_BASE_DELAY", policy.base_delay))
        except ValueError:
            return policy
        return cls(max_attempts=max(1, attempts), base_delay=max(0.0, base), factor=policy.factor, max_delay=policy.max_delay)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        bound = min(self.max_delay, self.base_delay * self.factor**attempt)
        if retry_after is not None:
            return min(MAX_RETRY_AFTER, max(retry_after, 0.0))
        return random.uniform(0, bound)


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, TransferError):
        return exc.retryable
    # Connect/read/write errors, timeouts, a connection dropped mid-body: all transient.
    return isinstance(exc, TransportError)


def _retry_after(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, (int, float)) else None


def _short(exc: BaseException) -> str:
    """The error's first line, for a one-line notice."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def with_retries(what: str, fn: Callable[[], T], policy: RetryPolicy) -> T:
    """Run fn, retrying transient failures; the last error is re-raised with context."""
    for attempt in range(policy.max_attempts):
        try:
            return fn()
        except Exception as exc:  # classified below
            if not is_retryable(exc) or attempt == policy.max_attempts - 1:
                if is_retryable(exc):
                    # Already retried here: callers should not retry it again.
                    raise TransferError(f"{what} failed after {policy.max_attempts} attempts: {exc}") from exc
                raise
            delay = policy.delay(attempt, _retry_after(exc))
            # A notice: the agent shows it on the user's terminal (git-lfs hides our stderr).
            log.warning("%s failed (%s); retry %d/%d in %.1f s", what, _short(exc), attempt + 1, policy.max_attempts - 1, delay, extra={"notice": True})
            time.sleep(delay)
    raise AssertionError("unreachable")
