"""Blocking work (files, the index, hashing) off the event loop, in one thread pool.

starlette's run_in_threadpool reaches its threads through anyio: a cancel scope, a capacity
limiter and async-library lookups on every call. On uploads of small files that came to about
a tenth of the server's Python time; here each call is one executor hand-off. What anyio
guaranteed is kept: a cancelled caller (a client gone mid-request) still waits for its work to
end, because that work may be reading a pooled receive buffer that must not be handed on first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

# As many as anyio's default limiter allowed: work waiting on fsyncs overlaps.
MAX_WORKERS = 40

T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="git-xet-worker")


async def in_worker(fn: Callable[..., T], *args: object) -> T:
    """fn(*args) in a worker thread; its result or its exception."""
    return await _outlived(asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args)))


async def in_worker_holding(turn: asyncio.Semaphore, fn: Callable[..., T], *args: object) -> T:
    """fn(*args) in a worker thread once it has one of `turn`'s places, which it keeps until
    fn returns: a bound on work holds until the work ends, not until its caller leaves (a
    client that hangs up, a response generator closed early). A caller cancelled while
    waiting for a place leaves without running fn."""
    await turn.acquire()
    try:
        future = asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args))
    except BaseException:
        turn.release()
        raise
    future.add_done_callback(lambda _: turn.release())
    return await _outlived(future)


async def _outlived(future: asyncio.Future[T]) -> T:
    """The work's result; a cancelled caller still waits for the work to end (see the module
    docstring), however often it is cancelled meanwhile."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # nobody is left to take it: not "never retrieved" in the log
        raise
