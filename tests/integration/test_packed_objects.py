"""Writers of the directory store in several processes (the agents of a push into a local store)
create a packed key once (tests/unit/test_packed_objects.py has the in-process properties)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from git_xet.storage.objects import DirectoryObjectStore

_RACER = """
import sys
from git_xet.storage.objects import DirectoryObjectStore
store = DirectoryObjectStore(sys.argv[1])
sys.stdin.readline()  # all start together
print(store.put_new("xorbs/aa/raced", sys.argv[2].encode() * 1000))
"""


def test_writers_in_several_processes_create_a_packed_key_once(tmp_path: Path) -> None:
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path), str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(6)]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    results = [racer.communicate(timeout=60)[0].strip() for racer in racers]
    assert sorted(results) == ["False"] * 5 + ["True"]
    store = DirectoryObjectStore(tmp_path)
    assert store.read("xorbs/aa/raced") == str(results.index("True")).encode() * 1000
    store.close()
