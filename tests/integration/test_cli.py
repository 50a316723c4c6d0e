"""The git-xet command as users run it (a real subprocess of the installed entry point)."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from git_xet.core.hashes import hash_to_hex
from git_xet.pipelines.file_hashing import hash_bytes
from tests.support.datagen import random_bytes


def _git_xet(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("git-xet")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "git_xet", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_hash_command(tmp_path: Path) -> None:
    data = random_bytes(500_000, 5)
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    proc = _git_xet("hash", "--json", "--sha256", str(tmp_path / "a.bin"), str(tmp_path / "empty"))
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first["xet_hash"] == hash_to_hex(hash_bytes(data).file_hash)
    assert first["sha256"] == hashlib.sha256(data).hexdigest()
    assert first["size"] == 500_000
    assert second["xet_hash"] == "0" * 64 and second["chunks"] == 0


def test_hash_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = _git_xet("hash", str(tmp_path / "nope"))
    assert proc.returncode == 1
    assert "nope" in proc.stderr and "No such file" in proc.stderr
    assert proc.stdout == ""


def test_version_reports_native_chunker() -> None:
    proc = _git_xet("version")
    assert proc.returncode == 0
    assert "native C" in proc.stdout


def test_compare_counts_only_changed_chunks(tmp_path: Path) -> None:
    v1 = random_bytes(4_000_000, 21)
    # Overwrite 1000 bytes in the middle and insert 10 bytes near the start: only the chunks
    # around the two edits change (content-defined boundaries resynchronise after each).
    v2 = v1[:100_000] + b"0123456789" + v1[100_000:2_000_000] + bytes(1000) + v1[2_001_000:]
    (tmp_path / "v1").write_bytes(v1)
    (tmp_path / "v2").write_bytes(v2)
    proc = _git_xet("compare", "--json", str(tmp_path / "v1"), str(tmp_path / "v2"))
    assert proc.returncode == 0, proc.stderr
    est = json.loads(proc.stdout)
    assert est["new_size"] == len(v2)
    assert 1 <= est["unique_chunks"] <= 6
    assert est["unique_bytes"] < 0.15 * len(v2)
    same = _git_xet("compare", "--json", str(tmp_path / "v1"), str(tmp_path / "v1"))
    assert json.loads(same.stdout)["unique_bytes"] == 0
