"""Retries with capped exponential backoff and full jitter (git-lfs never retries for us),
drawn from one budget per store.

An agent makes many calls at once (dedup queries, xorb uploads, range fetches). When the
store goes away, each used to retry on its own: a push against a killed server waited ~144 s
and printed ~60 lines, one call's five retries after another's. Now every call to one store
shares one `Outage` (a backend holds it, and an agent keeps one backend per store): it starts at the first failure, ends at the next success, and
once it has lasted `budget_seconds` (35 s by default) no call waits any longer; a store that
the process has never reached fails after `unreached_seconds` (a wrong port or host should not
cost half a minute). Retry notices are shown once per outage and then at most every few
seconds, whichever calls fail. The last error says what to check (client/diagnosis.py).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from .diagnosis import diagnose
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
    budget_seconds: float = 35.0  # how long the process's calls retry through one outage, in all
    unreached_seconds: float = 5.0  # the same, for a store this process has never reached

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """Defaults, overridable by GIT_XET_RETRY_MAX_ATTEMPTS, GIT_XET_RETRY_BASE_DELAY and
        GIT_XET_RETRY_MAX_SECONDS (the budget of one outage)."""
        policy = cls()
        try:
            attempts = int(os.environ.get("GIT_XET_RETRY_MAX_ATTEMPTS", policy.max_attempts))
            base = float(os.environ.get("GIT_XET_RETRY_BASE_DELAY", policy.base_delay))
            budget = float(os.environ.get("GIT_XET_RETRY_MAX_SECONDS", policy.budget_seconds))
        except ValueError:
            return policy
        return policy._replace(max_attempts=max(1, attempts), base_delay=max(0.0, base), budget_seconds=max(0.0, budget))

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        # (the exponent is capped: 3.0**1000 overflows a float, and GIT_XET_RETRY_MAX_ATTEMPTS may be large)
        bound = min(self.max_delay, self.base_delay * self.factor ** min(attempt, 64))
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


class Outage:
    """How long the store has been failing this process's calls, shared by all of them.

    An outage starts at a failure and ends at the next success. A failure more than
    `STALE_AFTER` seconds after the previous one starts a new outage: calls that gave up long
    ago do not count against a fresh failure."""

    STALE_AFTER = 60.0
    NOTICE_EVERY = 5.0  # seconds between retry notices within one outage

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._last_failure = 0.0
        self._last_notice: float | None = None
        self.reached = False  # has any call of this process had an answer from the store?

    def succeeded(self) -> None:
        with self._lock:
            self.reached = True
            self._started = None

    def failed(self) -> float:
        """Record a failure; how long the current outage has lasted (0 for a new one)."""
        with self._lock:
            now = self._clock()
            if self._started is None or now - self._last_failure > self.STALE_AFTER:
                self._started, self._last_notice = now, None
            self._last_failure = now
            return now - self._started

    def notice_due(self) -> bool:
        """Whether a retry notice should be shown now (once per outage, then every few seconds)."""
        with self._lock:
            now = self._clock()
            if self._last_notice is not None and now - self._last_notice < self.NOTICE_EVERY:
                return False
            self._last_notice = now
            return True


def _gave_up(what: str, exc: BaseException, attempts: int, lasted: float, store: str | None) -> TransferError:
    advice = diagnose(exc, store or "the store")
    tail = f"; {advice}" if advice else ""
    return TransferError(f"{what} failed after {attempts} attempts over {lasted:.0f} s: {_short(exc)}{tail}")


def with_retries(what: str, fn: Callable[[], T], policy: RetryPolicy, outage: Outage | None = None, store: str | None = None) -> T:
    """Run fn, retrying transient failures while this call has attempts left and the store's
    `outage` (one of this call's own when None) has budget left; the last error is re-raised
    with what to check. `store` (its URL) names the store in that advice."""
    outage = outage or Outage()
    attempt = 0
    while True:
        try:
            result = fn()
        except Exception as exc:  # classified below
            answered = isinstance(exc, TransferError) and exc.status is not None
            if answered:
                outage.reached = True  # it answered, if only with a 503
            if not is_retryable(exc):
                if answered:
                    outage.succeeded()  # a refusal ends an outage: the store is there
                raise
            attempt += 1
            lasted = outage.failed()
            budget = policy.budget_seconds if outage.reached else min(policy.budget_seconds, policy.unreached_seconds)
            if attempt >= policy.max_attempts or lasted >= budget:
                # Already retried here: callers should not retry it again.
                raise _gave_up(what, exc, attempt, lasted, store) from exc
            delay = min(policy.delay(attempt - 1, _retry_after(exc)), budget - lasted)
            if outage.notice_due():
                # A notice: the agent shows it on the user's terminal (git-lfs hides our stderr).
                log.warning("%s failed (%s); retry %d/%d in %.1f s", what, _short(exc), attempt, policy.max_attempts - 1, delay, extra={"notice": True})
            time.sleep(delay)
        else:
            outage.succeeded()
            return result
