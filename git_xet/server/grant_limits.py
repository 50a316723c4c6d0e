"""Bounds on upload grants: how many one token may ask for, and how many bytes a repo may have
granted and not yet committed.

A grant is cheap to ask for (one small POST) and each lets its holder stage up to its signed
length in the bucket, where the bytes stay until their commit or the abandoned-upload collector.
Unbounded, one write token could stage terabytes in minutes. So each token (user token id: a
CAS token counts as its parent) draws grants from a token bucket (GRANTS_PER_SECOND, at most
GRANT_BURST at once), and each repo may have at most STAGED_BYTES_PER_REPO granted and not yet
committed; a grant is released by its commit, else held until its staged object is certainly
collected. Beyond either: 429 with Retry-After, on which hf-xet and our client wait and retry.

The counts live in this process: each worker (`--workers N`; one by default) and each replica
keeps its own, so a server's bound is these figures times its worker processes (a fleet-wide
bound needs a shared counter, e.g. in the index).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import RequestRefused

# A 64 MiB xorb per grant: 8 grants a second is 512 MiB/s per token, more than a push sustains.
GRANTS_PER_SECOND = 8.0
GRANT_BURST = 128
STAGED_BYTES_PER_REPO = 4 * 1024**3  # 64 full-size xorbs in flight per repo


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class _Repo:
    total: int = 0
    # grant id -> (bytes, when the hold ends), in the order granted (so in order of ending).
    held: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)


class GrantLimits:
    """Thread-safe; `clock` is monotonic seconds (tests pass their own)."""

    def __init__(
        self,
        hold_seconds: float,
        rate: float = GRANTS_PER_SECOND,
        burst: int = GRANT_BURST,
        repo_bytes: int = STAGED_BYTES_PER_REPO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hold_seconds = hold_seconds
        self.rate = rate
        self.burst = burst
        self.repo_bytes = repo_bytes
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, _Bucket] = {}
        self._repos: dict[str, _Repo] = {}
        self._repo_of: dict[str, str] = {}

    def reserve(self, token_id: str, repo: str, grant_id: str, length: int) -> None:
        """Count a new grant of `length` bytes, or refuse it (429, Retry-After) and count nothing."""
        with self._lock:
            now = self.clock()
            bucket = self._refill(token_id, now)
            if bucket.tokens < 1:
                wait = math.ceil((1 - bucket.tokens) / self.rate)
                raise RequestRefused(429, f"too many upload grants for this token; retry in {wait} s", retry_after=wait)
            held = self._expire(repo, now)
            if held.total + length > self.repo_bytes:
                wait = math.ceil(max(1.0, next(iter(held.held.values()))[1] - now)) if held.held else 1
                raise RequestRefused(
                    429, f"this repo has {held.total} bytes granted and not yet committed; commit them or retry in {wait} s", retry_after=wait
                )
            bucket.tokens -= 1
            held.held[grant_id] = (length, now + self.hold_seconds)
            held.total += length
            self._repo_of[grant_id] = repo

    def release(self, grant_id: str) -> None:
        """A grant was committed (or refused at commit): its bytes no longer count."""
        with self._lock:
            repo = self._repo_of.pop(grant_id, None)
            held = self._repos.get(repo) if repo is not None else None
            if held is not None and grant_id in held.held:
                held.total -= held.held.pop(grant_id)[0]

    def _refill(self, token_id: str, now: float) -> _Bucket:
        bucket = self._tokens.get(token_id)
        if bucket is None:
            if len(self._tokens) > 10_000:  # forget tokens whose bucket is full again: they are as new
                full_after = self.burst / self.rate
                self._tokens = {k: b for k, b in self._tokens.items() if now - b.updated < full_after}
            bucket = self._tokens[token_id] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        return bucket

    def _expire(self, repo: str, now: float) -> _Repo:
        held = self._repos.setdefault(repo, _Repo())
        while held.held:
            grant_id, (length, until) = next(iter(held.held.items()))
            if until > now:
                break
            del held.held[grant_id]
            self._repo_of.pop(grant_id, None)
            held.total -= length
        return held
