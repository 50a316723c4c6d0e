"""Allocator tuning for long transfers.

glibc raises its mmap threshold each time a large buffer is freed, so later buffers of that
size (our 16-64 MiB xorb bodies and HTTP bodies) come from per-thread arenas and stay
resident after use. Pinning the threshold at 1 MiB and capping arenas at 2 keeps peak RSS of
a multi-GiB transfer a few hundred MiB lower (`bench/git_e2e.py --agent-rss` measures it). No-op where
glibc's mallopt is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_tuned = False


def tune_allocator() -> None:
    global _tuned
    if _tuned or not sys.platform.startswith("linux"):
        return
    _tuned = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 1 << 20)
    mallopt(_M_ARENA_MAX, 2)
