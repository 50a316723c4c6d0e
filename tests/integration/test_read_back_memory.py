"""Reading a stored file back (the server's sha256 check, whole-object downloads) in pieces of
the directory store's read_piece reuses the heap: with the allocator tuned as every git-xet
command tunes it, no piece is a fresh map whose pages all fault in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import os, resource, sys
from pathlib import Path
from git_xet.platform.memory import tune_allocator
tune_allocator()
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.location import create_local_store
from git_xet.pipelines.upload import Uploader
from git_xet.storage.cas_store import CasStore

store = Path(sys.argv[1])
create_local_store(store)
with Uploader(LocalStoreBackend(store), global_dedup=False) as up:
    file_hex = up.add_bytes(os.urandom(64 << 20)).file_hex
    up.finalize()
cas = CasStore(store)
stored = cas.get_file(file_hex)
for _ in cas.iter_file_bytes(stored):  # the heap grows once
    pass
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    for _ in cas.iter_file_bytes(stored):
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_reading_a_stored_file_back_takes_no_page_faults_per_piece(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "store")], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    faults = int(done.stdout.strip())
    # 192 MiB read in fresh maps would fault ~49k pages in; reused heap memory faults none.
    assert faults < 2000, f"{faults} page faults reading 192 MiB back"
