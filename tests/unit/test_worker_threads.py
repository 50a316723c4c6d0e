"""server.worker_threads: results, errors, a cancelled caller that waits for its work, and a turn
held until the work ends, not until its caller leaves."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from git_xet.server.worker_threads import in_worker, in_worker_holding


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


def test_a_turn_is_held_until_the_work_ends_whoever_leaves() -> None:
    """Callers cancelled (once, or again and again) while their work runs, or while they wait
    for a turn: never more works run at once than the turn allows, and a caller that left
    before its turn never runs."""

    async def main() -> None:
        turn = asyncio.Semaphore(2)
        release = threading.Event()
        running, peak, ran = [0], [0], []
        lock = threading.Lock()
        both = threading.Event()

        def work(i: int) -> None:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                if running[0] == 2:
                    both.set()
            release.wait(30)
            with lock:
                running[0] -= 1
                ran.append(i)

        first = [asyncio.ensure_future(in_worker_holding(turn, work, i)) for i in range(2)]
        assert await asyncio.to_thread(both.wait, 30)
        for task in first:  # their clients leave mid-work, twice
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
        queued = asyncio.ensure_future(in_worker_holding(turn, work, 2))
        left = asyncio.ensure_future(in_worker_holding(turn, work, 3))
        await asyncio.sleep(0.01)
        assert running[0] == 2 and not queued.done()  # the cancelled ones still hold their turns
        left.cancel()  # leaves while waiting for a turn
        release.set()
        await queued
        await asyncio.gather(*first, left, return_exceptions=True)
        assert peak[0] == 2 and sorted(ran) == [0, 1, 2]

    asyncio.run(main())
