"""server.worker_threads.in_worker: results, errors, and a cancelled caller that waits for its work."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from git_xet.server.worker_threads import in_worker


def test_result_and_exception_come_back_from_a_worker_thread() -> None:
    async def main() -> None:
        name = await in_worker(lambda: threading.current_thread().name)
        assert name != threading.current_thread().name and name.startswith("git-xet-worker")
        assert await in_worker(pow, 2, 10) == 1024
        with pytest.raises(ZeroDivisionError):
            await in_worker(lambda: 1 / 0)

    asyncio.run(main())


def test_a_cancelled_caller_returns_only_once_its_work_has_ended() -> None:
    """A handler cancelled while its worker reads a pooled buffer must not hand the buffer on
    before the worker is done with it."""
    ended: list[float] = []

    def slow() -> None:
        time.sleep(0.3)
        ended.append(time.monotonic())

    async def main() -> None:
        task = asyncio.ensure_future(in_worker(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended, "the caller came back while its work still ran"

    asyncio.run(main())
