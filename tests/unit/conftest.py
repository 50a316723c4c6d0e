"""The unit layer starts no process and opens no socket (issue 44 §7): it stays fast and runs
anywhere, with nothing to wait for and nothing to leak. Every unit test runs with the ways to do
either replaced by a call that fails at once and says where such a test belongs, so a new unit
test that starts git, a server or a forked child fails on its first run instead of slowing the
layer down unnoticed. In-process stand-ins stay allowed: threads, pipes, and socket objects wrapped
around an existing descriptor (asyncio's event loop wakes itself through a socketpair)."""

from __future__ import annotations

import _socket
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

WHERE = "tests/unit starts no process and opens no socket: put a test that needs to in tests/integration/ (issue 44 §7)"


class ForbiddenInUnitTests(AssertionError):
    """Raised where a unit test tried to start a process or open a socket."""


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: object, **kwargs: object) -> Any:
        raise ForbiddenInUnitTests(f"{what} was called: {WHERE}")

    return refused


_C_SOCKET = _socket.socket


class _GuardedSocket(_C_SOCKET):
    """_socket.socket as code that builds sockets from the C module directly sees it (socket.py
    itself calls `_socket.socket.__init__(self, ...)` on its own instances: hence no super())."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) < 4 and kwargs.get("fileno") is None:
            raise ForbiddenInUnitTests(f"_socket.socket() was called: {WHERE}")
        _C_SOCKET.__init__(self, *args, **kwargs)


@pytest.fixture(autouse=True)
def _no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly on a new socket or a new process (undone after each test, so integration tests
    collected in the same session keep them)."""
    real_init = socket.socket.__init__

    def guarded_init(self: socket.socket, family: Any = -1, type: Any = -1, proto: Any = -1, fileno: Any = None) -> None:
        if fileno is None:
            raise ForbiddenInUnitTests(f"socket.socket() was called: {WHERE}")
        real_init(self, family, type, proto, fileno)

    monkeypatch.setattr(socket.socket, "__init__", guarded_init)
    monkeypatch.setattr(_socket, "socket", _GuardedSocket)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("subprocess.Popen"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("multiprocessing's Process.start"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "spawnv", "spawnve", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
