"""http_io.body_parts: its bounds (size, and time waiting for the client) with one timer per body.

The request is a real Starlette Request over an ASGI `receive` that the test paces, so the
timings are the client's (sleeps before a part) or the handler's (sleeps between parts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from starlette.requests import Request

from git_xet.server.errors import RequestRefused
from git_xet.server.http_io import body_parts

IDLE = 0.2


def _request(parts: list[bytes], client_delays: list[float], content_length: int | None = None, stalls: bool = False) -> Request:
    """A POST whose i-th part arrives client_delays[i] seconds after it is asked for; with
    `stalls`, the last part says more is coming and nothing more ever comes."""
    pending = list(zip(parts, client_delays))

    async def receive() -> dict:
        if not pending:
            await asyncio.sleep(3600)  # a client that stopped sending
        part, delay = pending.pop(0)
        await asyncio.sleep(delay)
        return {"type": "http.request", "body": part, "more_body": bool(pending) or stalls}

    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    return Request(scope, receive)


async def _collect(request: Request, limit: int, between: float = 0.0) -> list[bytes]:
    got = []
    async for part in body_parts(request, limit, IDLE):
        got.append(part)
        await asyncio.sleep(between)  # the handler's own work between parts
    return got


def _run(make: Callable[[], Awaitable[list[bytes]]]) -> list[bytes]:
    async def main() -> list[bytes]:
        return await make()

    return asyncio.run(main())


def test_parts_slower_in_total_than_the_idle_timeout_are_received() -> None:
    parts = [bytes([i]) * 100 for i in range(6)]
    request = _request(parts, [IDLE / 3] * 6, content_length=600)  # 2x IDLE in all, each part in time
    assert _run(lambda: _collect(request, 1000)) == parts


def test_a_handler_busy_between_parts_is_not_the_clients_delay() -> None:
    parts = [b"a" * 10, b"b" * 10, b"c" * 10]
    request = _request(parts, [0.0, 0.0, 0.0], content_length=30)
    assert _run(lambda: _collect(request, 100, between=IDLE * 2)) == parts


def test_a_stalled_client_is_refused_408_after_the_idle_timeout() -> None:
    request = _request([b"x" * 10], [0.0], content_length=1000, stalls=True)

    async def timed() -> list[bytes]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(RequestRefused) as refused:
            await _collect(request, 10_000)
        assert refused.value.status == 408
        assert IDLE <= loop.time() - start < IDLE + 5  # bounded: refused, not left waiting
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        assert cancelling is None or cancelling() == 0  # the watchdog's cancel was consumed
        return []

    _run(timed)


def test_a_first_part_late_by_more_than_the_idle_timeout_is_refused() -> None:
    request = _request([b"x"], [IDLE * 3], stalls=True)
    with pytest.raises(RequestRefused) as refused:
        _run(lambda: _collect(request, 100))
    assert refused.value.status == 408


def test_an_outside_cancel_is_not_turned_into_a_408() -> None:
    request = _request([b"x"], [3600.0])

    async def cancelled() -> list[bytes]:
        task = asyncio.ensure_future(_collect(request, 100))
        await asyncio.sleep(IDLE / 4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return []

    _run(cancelled)


@pytest.mark.parametrize(("declared", "sizes", "status"), [(None, [60, 50], 413), (200, [60], 413), (50, [20, 20], 400)])
def test_size_bounds(declared: int | None, sizes: list[int], status: int) -> None:
    """Over the limit (declared or counted) is 413; shorter than declared is 400."""
    request = _request([b"z" * n for n in sizes], [0.0] * len(sizes), content_length=declared)
    with pytest.raises(RequestRefused) as refused:
        _run(lambda: _collect(request, 100))
    assert refused.value.status == status
