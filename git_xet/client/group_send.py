"""Group send: the small files of several senders in one upload bundle, like a database's group
commit (issue 44 §2). Transport-agnostic: `post` sends one bundle; who shares a GroupSender
(threads here, a command's agents once a local transport carries it) is the caller's choice.

No timer: a sender whose bundle finds no send in flight sends it at once (alone, as without
grouping); bundles queued while a send is in flight go together in the next one, as many as
fit (core/bundle_merge.fits_with). Each sender is answered only once the server answered the
bundle holding its file, so durability before git-lfs' `complete` is unchanged.

A bundle refused or failed as a whole (quota, a 4xx, retries used up) fails nobody: each of its
senders is told to send its own bundle (SEND_ALONE), as it would have without grouping, and so
gets its own true answer. A file the server registered without its claimed sha256 is refused to
its own sender only, as unless_refused does for a bundle of one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from ..core.errors import XetError
from ..core.bundle_merge import MAX_GROUP_FILES, BundleParts, fits_with, merge_bundles
from ..core.hashes import hash_to_hex
from ..core.http_headers import REFUSED_SHA256
from .errors import TransferError

# What send() answers when the group's bundle did not go through as a whole: send your own.
SEND_ALONE: Final = "send alone"
SENT: Final = "sent"


class _Waiter:
    def __init__(self, parts: BundleParts) -> None:
        self.parts = parts
        self.files = {hash_to_hex(info.file_hash) for info in parts.parsed.files}
        self.answer: str | TransferError | None = None
        self.lead = False
        self.woken = threading.Event()


class GroupSender:
    """Sends the bundles given to send() from any thread, several per request when they queue."""

    def __init__(self, post: Callable[[BundleParts], object], in_flight: int = 1) -> None:
        """`post` sends one bundle and returns the server's JSON answer; any exception it raises
        sends the bundle's files back to their senders (SEND_ALONE). `in_flight`: bundles sent
        at once (the server's cores: with one, the agents wait on each round trip in turn)."""
        self._post = post
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._free = in_flight  # sends that may start now; a sender that takes one leads a send

    def send(self, parts: BundleParts) -> str:
        """SENT once the server accepted the bundle holding `parts`; SEND_ALONE when that bundle
        failed as a whole; TransferError when the server refused this file's sha256 claim."""
        me = _Waiter(parts)
        with self._lock:
            self._queue.append(me)
            if self._free > 0:
                self._free -= 1
                me.lead = True
        while True:
            with self._lock:  # a lead is taken (cleared) under the lock: each is used exactly once
                lead, me.lead = me.lead, False
                answer = me.answer
            if lead:
                self._send_queued()
                continue
            if answer is not None:
                break
            me.woken.wait()
            me.woken.clear()
        if isinstance(answer, TransferError):
            raise answer
        return answer

    def _send_queued(self) -> None:
        """Send what is queued, oldest first (not the senders holding a lead: each sends its
        own), answer its senders, and pass the lead to a queued sender, if any."""
        with self._lock:
            group: list[_Waiter] = []
            for w in list(self._queue):
                if not w.lead and fits_with([g.parts for g in group], w.parts):
                    group.append(w)
                    self._queue.remove(w)
                if len(group) == MAX_GROUP_FILES:
                    break
        if not group:  # all queued are taken by other sends
            with self._lock:
                self._pass_lead()
            return
        answer: object = None
        try:
            answer = self._post(merge_bundles([w.parts for w in group]))
        except XetError:  # the bundle as a whole: each file goes on its own, for its own answer
            answer = None
        finally:  # answered even if `post` raised anything else: no sender waits forever
            self._answer(group, answer)

    def _answer(self, group: list[_Waiter], answer: object) -> None:
        refused = answer.get(REFUSED_SHA256) if isinstance(answer, dict) else None
        refused_files = {str(name) for name in refused} if isinstance(refused, list) else set()
        with self._lock:
            for w in group:
                if not isinstance(answer, dict):
                    w.answer = SEND_ALONE
                elif w.files & refused_files:
                    w.answer = TransferError(
                        "the server refused the shard: its sha256 metadata does not match its content", retryable=False
                    )
                else:
                    w.answer = SENT
                w.woken.set()
            self._pass_lead()

    def _pass_lead(self) -> None:
        """(Under the lock.) The lead just used goes to the oldest queued sender without one,
        or back to the free ones."""
        nxt = next((w for w in self._queue if not w.lead), None)
        if nxt is None:
            self._free += 1
        else:
            nxt.lead = True
            nxt.woken.set()
