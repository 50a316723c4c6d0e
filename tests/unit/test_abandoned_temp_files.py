"""DirectoryObjectStore.remove_abandoned_temp_files (run at server start): the temp files of
writers that died mid-write go, stored objects stay, and nothing goes while a write holds the
writers' lock."""

from __future__ import annotations

from pathlib import Path

from git_xet.platform.files import TEMP_SUFFIX
from git_xet.platform.locks import held_lock
from git_xet.storage.objects import WRITERS_LOCK, DirectoryObjectStore


def _store_with_leftovers(root: Path) -> tuple[DirectoryObjectStore, list[Path]]:
    store = DirectoryObjectStore(root)
    store.put("xorbs/ab/stored", b"kept")
    leftovers = [root / "xorbs" / "ab" / f".stored.1234{TEMP_SUFFIX}", root / "xorbs" / "cd" / f".other.5678{TEMP_SUFFIX}"]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half written")
    return store, leftovers


def test_leftover_temp_files_go_and_objects_stay(tmp_path: Path) -> None:
    store, leftovers = _store_with_leftovers(tmp_path)
    assert store.remove_abandoned_temp_files() == len(leftovers)
    assert not any(path.exists() for path in leftovers)
    assert store.read("xorbs/ab/stored") == b"kept"
    assert store.remove_abandoned_temp_files() == 0


def test_nothing_goes_while_a_writer_holds_the_lock_and_all_goes_after(tmp_path: Path) -> None:
    store, leftovers = _store_with_leftovers(tmp_path)
    with held_lock(tmp_path / WRITERS_LOCK, shared=True, mode=0o644):  # as a write in progress holds it
        assert store.remove_abandoned_temp_files() == 0
        assert all(path.exists() for path in leftovers)
    assert store.remove_abandoned_temp_files() == len(leftovers)  # the sweep released its own lock attempt too
