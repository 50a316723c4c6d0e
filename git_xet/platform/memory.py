"""Memory: allocator tuning, anonymous maps and giving pages back (each Linux's where it
exists, a plain default elsewhere and with GIT_XET_PORTABLE=1).

Allocator tuning for long transfers.

glibc raises its mmap threshold each time a large buffer is freed, so later buffers of that
size (our 16-64 MiB xorb bodies and HTTP bodies) come from per-thread arenas and stay
resident after use. Pinning the threshold at 1 MiB and capping arenas at 2 keeps peak RSS of
a multi-GiB transfer a few hundred MiB lower (`bench/git_e2e.py --agent-rss` measures it). No-op where
glibc's mallopt is absent.

Pinning the mmap threshold also freezes the trim threshold at its 128 KiB default, and the
HTTP stacks allocate and free a 256 KiB buffer per socket read: the heap grew by a read,
shrank on its free and grew again on the next, faulting in every page anew (a server
receiving xorbs took more page faults than the pages it received). An 8 MiB trim threshold
keeps that much free heap mapped: 5x fewer faults per uploaded byte, ~8 MiB more resident.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading

from .switch import portable

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_tuned = False


def tune_allocator() -> None:
    global _tuned
    if _tuned or not sys.platform.startswith("linux") or portable():
        return
    _tuned = True
    try:
        # glibc's soname directly: find_library runs `ldconfig -p` (a subprocess every agent
        # paid; git-lfs starts eight of them), so it is only the fallback.
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            from ctypes.util import find_library  # subprocess, tempfile, shutil: only for this fallback

            libc = ctypes.CDLL(find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 1 << 20)
    mallopt(_M_TRIM_THRESHOLD, 8 << 20)
    mallopt(_M_ARENA_MAX, 2)


def anonymous_buffer(size: int) -> mmap.mmap:
    """A private anonymous map of `size` bytes, for a large buffer that is reused.

    Not mmap.mmap(-1, size)'s default, a shared map: shared anonymous memory is shmem, whose
    pages cost ~40% more to fault in (six 64 MiB maps written whole: 0.32 s shared, 0.23 s
    private on the reference machine), and MADV_FREE does not apply to it. Where mmap has no
    such flags (Windows) or with GIT_XET_PORTABLE=1: the default anonymous map."""
    if portable() or not hasattr(mmap, "MAP_PRIVATE"):
        return mmap.mmap(-1, size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def free_pages(buffer: mmap.mmap) -> None:
    """Let the kernel take `buffer`'s pages back when it needs memory, keeping the map
    (MADV_FREE: a reused buffer costs no new faults unless they were taken). A no-op where that
    is missing (a kernel before 4.5, not Linux) or with GIT_XET_PORTABLE=1: the pages stay."""
    if portable() or not hasattr(mmap, "MADV_FREE"):
        return
    try:
        buffer.madvise(mmap.MADV_FREE)
    except OSError:
        pass


def drop_pages(mapped: mmap.mmap, start: int, length: int) -> bool:
    """Drop the pages of [start, start + length) of a file's read-only map from this process's
    resident set (MADV_DONTNEED; they stay in the page cache). False where that is missing or
    with GIT_XET_PORTABLE=1: they then stay resident until the map is closed."""
    if portable() or not hasattr(mapped, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    mapped.madvise(mmap.MADV_DONTNEED, start, length)
    return True


class WindowPool:
    """Reusable anonymous maps for large, short-lived buffers (downloaded xorb ranges).

    A fresh 64 MiB buffer per range costs a download about a fifth of its CPU: glibc maps
    every allocation above the 1 MiB threshold anew, and each of its 16384 pages is then
    faulted in, zeroed and finally unmapped. A recycled map's pages are already there.

    `take(size)` hands out a view of `size` bytes of a map (fresh or spare); `give_back(view)`
    returns the map to the spares if nothing still looks into it (a map with live views
    refuses to be resized, which is the test), else leaves it to the garbage collector. At
    most `max_spare` maps are kept: that, plus what is in use, bounds the memory held.
    """

    def __init__(self, capacity: int, max_spare: int = 2) -> None:
        self.capacity = capacity
        self.max_spare = max_spare
        self._spare: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self.maps_made = 0  # how many maps were ever created: recycling keeps it small

    def take(self, size: int) -> memoryview:
        if not 0 <= size <= self.capacity:
            raise ValueError(f"a pooled window holds at most {self.capacity} bytes, not {size}")
        with self._lock:
            buffer = self._spare.pop() if self._spare else None
        if buffer is None:
            buffer = anonymous_buffer(self.capacity)
            with self._lock:
                self.maps_made += 1
        return memoryview(buffer)[:size]

    def give_back(self, view: memoryview) -> bool:
        """True if the window's map is now a spare. A pooled `view` is released either way."""
        buffer = view.obj
        if not isinstance(buffer, mmap.mmap) or len(buffer) != self.capacity:
            return False
        view.release()
        try:
            buffer.resize(self.capacity)  # BufferError while any view of it is alive
        except (BufferError, OSError, SystemError):
            return False
        with self._lock:
            if len(self._spare) >= self.max_spare:
                return False
            self._spare.append(buffer)
        return True


_xorb_range_windows: WindowPool | None = None
_pool_lock = threading.Lock()


def xorb_range_windows() -> WindowPool:
    """The process's pool for downloaded xorb ranges (filled by the HTTP backend, given back
    by the download pipeline); made on first use, so importing this module stays cheap."""
    global _xorb_range_windows
    if _xorb_range_windows is None:
        from ..core.xorb import MAX_XORB_BODY_BYTES

        with _pool_lock:
            if _xorb_range_windows is None:
                _xorb_range_windows = WindowPool(MAX_XORB_BODY_BYTES)
    return _xorb_range_windows

