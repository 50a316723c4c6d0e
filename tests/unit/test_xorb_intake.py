"""The server's pool of xorb receive buffers: reused, and bounded when idle."""

from __future__ import annotations

from git_xet.server.xorb_intake import ReceiveBuffers


def test_idle_buffers_are_reused_and_at_most_keep_are_kept() -> None:
    pool = ReceiveBuffers(keep=2, size=1 << 20)
    taken = [pool.take() for _ in range(5)]  # any number may be out at once
    assert len({id(b) for b in taken}) == 5 and all(len(b) == 1 << 20 for b in taken)
    for buffer in taken:
        buffer[:4] = b"used"
        pool.give_back(buffer)
    assert pool.idle == 2
    again = pool.take()
    assert any(again is b for b in taken), "an idle buffer is handed out again"
    again[:3] = b"new"  # still writable after MADV_FREE
    assert bytes(again[:3]) == b"new"

