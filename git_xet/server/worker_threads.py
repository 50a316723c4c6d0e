"""Blocking work (files, the index, hashing) off the event loop, in one thread pool.

starlette's run_in_threadpool reaches its threads through anyio: a cancel scope, a capacity
limiter and async-library lookups on every call. On uploads of small files that came to about
a tenth of the server's Python time; here each call is one executor hand-off. What anyio
guaranteed is kept: a cancelled caller (a client gone mid-request) still waits for its work to
end, because that work may be reading a pooled receive buffer that must not be handed on first.
"""

from __future__ import annotations

import asyncio
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
    future = asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])  # not abandoned: see the module docstring
        raise
