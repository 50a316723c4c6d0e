"""memory.anonymous_buffer across a fork: the child's writes land in its own copy (the unit
layer's tests/unit/test_anonymous_buffer.py checks the map itself without starting a process)."""

from __future__ import annotations

import os

from git_xet.platform.memory import anonymous_buffer


def test_a_forked_child_writes_its_own_copy() -> None:
    buffer = anonymous_buffer(1 << 20)
    buffer[:4] = b"mine"
    pid = os.fork()
    if pid == 0:
        buffer[:4] = b"kids"
        os._exit(0)
    os.waitpid(pid, 0)
    assert buffer[:4] == b"mine"  # a shared map would read "kids"
