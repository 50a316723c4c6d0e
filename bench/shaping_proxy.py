"""A TCP proxy on 127.0.0.1 that behaves like a slower, farther link: bandwidth and latency.

    python bench/shaping_proxy.py TARGET_PORT [--mbit 100] [--rtt-ms 40] [--max-seconds 3600]

Prints `http://127.0.0.1:<port>` once listening, then forwards every connection to
127.0.0.1:TARGET_PORT. Each direction is one link shared by all connections (as an access
link is): its bytes leave one after another at --mbit, and each piece arrives half the round
trip after it left. A request and its answer therefore cost at least --rtt-ms, and parallel
connections share the bandwidth instead of multiplying it. Reading stops while a direction
has QUEUE_PIECES pieces in flight, so a fast sender is held back by TCP as on a real link.

Loops are bounded: each pump ends at its socket's end of stream (once one direction of a
connection has ended, the other gets DRAIN_SECONDS more), and the whole proxy exits after
--max-seconds whatever happens. It never connects anywhere but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

PIECE = 64 * 1024
QUEUE_PIECES = 64  # per connection and direction: 4 MiB, more than 100 Mbit/s x 40 ms
DRAIN_SECONDS = 120.0  # after one direction of a connection ends, the other's last chance


class Link:
    """One direction of the link: when each piece is delivered."""

    def __init__(self, bytes_per_second: float, one_way_delay: float) -> None:
        self.rate = bytes_per_second
        self.delay = one_way_delay
        self.free_at = 0.0

    def schedule(self, size: int, now: float) -> float:
        """Queue `size` bytes behind what is already on the wire; returns its arrival time."""
        start = max(now, self.free_at)
        self.free_at = start + size / self.rate
        return self.free_at + self.delay


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_PIECES)

    async def receive() -> None:
        try:
            while data := await reader.read(PIECE):
                await queue.put((link.schedule(len(data), loop.time()), data))
        except (ConnectionError, OSError):
            pass
        finally:
            await queue.put((0.0, b""))

    async def deliver() -> None:
        try:
            while True:
                at, data = await queue.get()
                if not data:
                    break
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass

    await asyncio.gather(receive(), deliver())


async def _serve(target_port: int, up: Link, down: Link, max_seconds: float) -> None:
    handlers: set[asyncio.Task] = set()  # asyncio keeps only weak references to tasks

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            handlers.discard(task)
            return
        pumps = [asyncio.ensure_future(_pump(client_reader, server_writer, up)), asyncio.ensure_future(_pump(server_reader, client_writer, down))]
        try:
            _done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pending:  # one side is gone: what the other still sends gets a bounded time
                await asyncio.wait(pending, timeout=DRAIN_SECONDS)
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (client_writer, server_writer):
                w.close()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    async with server:
        try:
            await asyncio.wait_for(server.serve_forever(), timeout=max_seconds)
        except asyncio.TimeoutError:
            print(f"shaping proxy: stopping after {max_seconds} s", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target_port", type=int)
    parser.add_argument("--mbit", type=float, default=100.0, help="bandwidth of each direction, Mbit/s")
    parser.add_argument("--rtt-ms", type=float, default=40.0, help="round-trip time added, ms")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long in any case")
    args = parser.parse_args()
    rate = args.mbit * 1e6 / 8
    one_way = args.rtt_ms / 2000
    asyncio.run(_serve(args.target_port, Link(rate, one_way), Link(rate, one_way), args.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
