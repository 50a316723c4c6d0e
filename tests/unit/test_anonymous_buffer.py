"""memory.anonymous_buffer: private anonymous memory (not mmap's default shared, shmem-backed map)."""

from __future__ import annotations

import mmap

import pytest

from git_xet.platform.memory import anonymous_buffer


def test_buffers_are_private_anonymous_memory() -> None:
    buffer = anonymous_buffer(4 << 20)
    buffer[:5] = b"hello"
    buffer.madvise(mmap.MADV_FREE)  # the kernel refuses MADV_FREE on shared memory (EINVAL)
    with pytest.raises(OSError):
        mmap.mmap(-1, 4 << 20).madvise(mmap.MADV_FREE)  # which is what mmap(-1, n) gives
