"""Run a producer a few items ahead of its consumer, in a thread of its own.

Two stages that each spend their time in C code releasing the GIL (a file read or a gearhash
scan, then a hash) run at the speed of the slower one instead of the sum of both. The queue
between them holds at most `depth` items, so memory stays bounded whatever the producer's
length.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar, cast

T = TypeVar("T")

_END = object()  # the producer is exhausted


class _Raised:
    """What the producer raised, passed on to the consumer."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def readahead(items: Iterable[T], depth: int, name: str) -> Iterator[T]:
    """`items`, in order, iterated in a thread named `name` at most `depth` items ahead.

    An exception from `items` is raised in the consumer, after the items before it. When the
    consumer stops early (break, an exception, close), the producer stops at its next item and
    the thread has ended before this generator returns: nothing keeps running behind it.
    What the producer keeps per thread (a database connection) is opened afresh in that thread.
    """
    handoff: queue.Queue[object] = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                handoff.put(item)
            handoff.put(_END)
        except BaseException as exc:  # noqa: BLE001 - raised again in the consumer
            handoff.put(_Raised(exc))

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield cast(T, item)
    finally:
        stop.set()
        while worker.is_alive():  # drain, so that a producer blocked on a full queue sees `stop`
            try:
                handoff.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()
