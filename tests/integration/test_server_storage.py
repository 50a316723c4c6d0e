"""The server's data directory over its life: a full disk is reported as such (HTTP 507, the
real status in the access log, no retries), a second server on the same directory is refused,
and temp files of writers killed mid-write are removed at start, but never a live writer's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

MIB = 1 << 20


def _tmpfs_wrapper(size_mib: int) -> tuple[str, ...]:
    """Run the server in its own mount namespace with its data directory on a small tmpfs
    (a real full disk; the mount vanishes with the process). Needs root, or user namespaces."""
    script = 'mount -t tmpfs -o size="$0" tmpfs "$1" && shift && exec "$@"'
    userns = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    assert shutil.which("unshare"), "unshare (util-linux) is needed to give the server a small disk"
    return ("unshare", *userns, "--mount", "sh", "-c", script, f"{size_mib}m")


def _upload_statuses(server: RunningServer, count: int) -> list[int]:
    """Statuses of the xorb uploads (POSTs) in the access log, once `count` are there (a request's line is
    written just after its response went out: wait for it, boundedly)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in server.log().splitlines() if '"path": "/v1/xorbs/' in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return [json.loads(line.split(" ", 3)[-1])["status"] for line in lines]
        time.sleep(0.05)


def test_a_full_disk_answers_507_and_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_XET_SERVER_SECRET", "a-test-secret-of-enough-length")
    data = tmp_path / "data"
    data.mkdir()
    wrapper = (*_tmpfs_wrapper(6), str(data))  # $1 of the script: where to mount
    with running_server(data, wrapper=wrapper) as server:
        backend = HttpCasBackend(server.url, StaticToken(server.token("write")))
        stored, status = [], None
        for seed in range(10):
            built, _ = single_xorb(random_bytes(2 * MIB, seed))
            xorb_hex = hashes.hash_to_hex(built.xorb_hash)
            try:
                backend.upload_xorb(xorb_hex, built.body)
                stored.append(xorb_hex)
            except TransferError as exc:
                status, message = exc.status, str(exc)
                break
        assert status == 507, "the 6 MiB disk never filled"
        assert "disk is full" in message and "failed after" not in message  # said once, not retried
        assert 1 <= len(stored) <= 3
        assert _upload_statuses(server, len(stored) + 1) == [200] * len(stored) + [507]
        # What was stored before the disk filled is still whole.
        assert httpx.get(server.url + "/health").status_code == 200


def test_a_second_server_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as first:
        second = run_git_xet("serve", "--data", str(tmp_path / "data"), "--port", "0", timeout=60)
        assert second.returncode == 1
        assert f"in use by another git-xet server (pid {first.process.pid})" in second.stderr
        assert httpx.get(first.url + "/health").status_code == 200  # the first one is unharmed


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from git_xet.platform.files import atomic_output
    from git_xet.storage.objects import DirectoryObjectStore
    store = DirectoryObjectStore(Path(sys.argv[1]))
    with store._writing(), atomic_output(Path(sys.argv[1]) / "xorbs" / "ab" / ("ab" * 32)) as out:
        out.write(b"half a xorb")
        out.flush()
        print("writing", flush=True)
        time.sleep(600)
    """
)


def _temp_files(data: Path) -> list[Path]:
    return list(data.rglob(".*.tmp"))


def test_temp_files_of_killed_writers_are_removed_at_start_but_not_live_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_server(data):
        pass  # a data directory with its index and secret
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(data)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        assert len(_temp_files(data)) == 1
        with running_server(data):  # a writer is live: its temp file stays
            assert len(_temp_files(data)) == 1
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)
    assert len(_temp_files(data)) == 1  # a killed writer leaves its temp file
    with running_server(data) as server:
        assert _temp_files(data) == []
        assert "removed 1 temp files" in server.log()
