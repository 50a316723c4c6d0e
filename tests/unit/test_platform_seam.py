"""The platform seam (git_xet/platform/): nothing else in the package imports fcntl or msvcrt or
reads /proc, and GIT_XET_PORTABLE=1 turns each accelerator off at its one switch."""

from __future__ import annotations

import asyncio
import mmap
import re
from pathlib import Path

import pytest

import git_xet
from git_xet.platform import local_sockets, memory, sendfile, switch
from git_xet.platform.locks import held_lock, lock_range, unlock_range

PACKAGE = Path(git_xet.__file__).parent
SEAM = PACKAGE / "platform"
# An import of a platform-only module, or a path under /proc, in code (launch.sh is a shell
# script: its /proc reads are the shell's own fast path, with a fallback to Python).
FORBIDDEN = re.compile(r"^\s*(import|from)\s+(fcntl|msvcrt)\b|[\"']/proc\b|\bfcntl\.|\bmsvcrt\.", re.MULTILINE)


def test_nothing_outside_the_seam_imports_fcntl_msvcrt_or_reads_proc() -> None:
    sources = [p for p in PACKAGE.rglob("*.py") if SEAM not in p.parents]
    assert len(sources) > 50
    found = [f"{p.relative_to(PACKAGE)}: {m.group(0).strip()}" for p in sources for m in FORBIDDEN.finditer(p.read_text())]
    assert found == []


def test_the_pattern_finds_what_it_forbids() -> None:
    for line in ("import fcntl\n", "    from msvcrt import locking\n", 'open(f"/proc/{pid}/stat")\n', "fcntl.flock(fd, 1)\n"):
        assert FORBIDDEN.search(line), line


def test_portable_switch_turns_each_accelerator_off(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.new_event_loop()
    try:
        monkeypatch.delenv(switch.PORTABLE, raising=False)
        assert sendfile.native_sendfile(loop) and local_sockets.available()  # Linux, accelerators on
        monkeypatch.setenv(switch.PORTABLE, "1")
        assert switch.portable()
        assert not sendfile.native_sendfile(loop)
        assert not local_sockets.available()
        buffer = memory.anonymous_buffer(mmap.PAGESIZE)
        buffer.write(b"x")
        memory.free_pages(buffer)  # a no-op: the bytes stay
        assert buffer[:1] == b"x"
        assert not memory.drop_pages(buffer, 0, mmap.PAGESIZE)
        monkeypatch.setenv(switch.PORTABLE, "0")
        assert not switch.portable() and sendfile.native_sendfile(loop)
    finally:
        loop.close()


def test_a_shared_lock_admits_shared_holders_and_refuses_an_exclusive_one(tmp_path: Path) -> None:
    lock = tmp_path / "writers.lock"
    with held_lock(lock, shared=True), held_lock(lock, shared=True), pytest.raises(BlockingIOError), held_lock(lock, wait=False):
        pass
    with held_lock(lock, wait=False):
        pass


def test_range_locks_are_per_range(tmp_path: Path) -> None:
    import os

    fd = os.open(tmp_path / "stripes.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lock_range(fd, 3)
        lock_range(fd, 4)
        unlock_range(fd, 3)
        unlock_range(fd, 4)
    finally:
        os.close(fd)


def test_no_native_switch_leaves_every_c_extension_unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    from git_xet.core import checksums, chunking, compression, hashes

    monkeypatch.setenv("GIT_XET_NO_NATIVE", "1")
    assert chunking._load_native() is None and checksums._load_fast() is None and hashes._load_merge_level() is None
    assert compression._load_histograms() is compression.lane_popcount_histograms_reference
    monkeypatch.setenv("GIT_XET_NO_NATIVE", "0")
    assert chunking._load_native() is not None and checksums._load_fast() is not None  # built by install/test.sh
