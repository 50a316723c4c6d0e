"""tests/unit/conftest.py's guard: inside a unit test, starting a process or opening a socket
fails at once with a message that says to move the test to tests/integration/, while what stays in
the process (an asyncio event loop's socketpair, threads) still works."""

from __future__ import annotations

import _socket
import asyncio
import multiprocessing
import os
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.unit.conftest import ForbiddenInUnitTests

ATTEMPTS: dict[str, Callable[[], object]] = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
    "os.fork": lambda: os.fork(),
    "os.system": lambda: os.system("true"),
    "multiprocessing": lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    "socket.socket": lambda: socket.socket(),
    "socket.create_server": lambda: socket.create_server(("127.0.0.1", 0)),
    "socket.create_connection": lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
    "_socket.socket": lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET),
}


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_starting_a_process_or_opening_a_socket_fails_and_says_where_the_test_belongs(name: str) -> None:
    with pytest.raises(ForbiddenInUnitTests, match="tests/integration/"):
        ATTEMPTS[name]()


def test_an_event_loop_and_a_socketpair_still_work() -> None:
    async def answer() -> int:
        return 42

    assert asyncio.run(answer()) == 42
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
