"""`git xet serve --workers N`: worker processes on one port and one data directory, against
the real server (one process without the option). They serve pushes together, all stop with the server, a worker that dies
takes the server down (so a service manager restarts it), and workers die with their parent."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.postgres_process import Postgres
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
FILES = [random_bytes(3_000 + 997 * i, 600 + i) for i in range(48)]


def _workers(server: RunningServer) -> list[int]:
    pid = server.process.pid
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.05)


def _push_and_read_back(server: RunningServer, files: list[bytes]) -> None:
    """Eight clients pushing small files at once (as git-lfs's agents do), then each file read
    back through a fresh client: every worker's writes are every worker's reads."""
    token = server.token("write")

    def push(share: list[int]) -> dict[int, str]:
        backend = HttpCasBackend(server.url, StaticToken(token), policy=FAST_RETRY, extension=True)
        pushed = {}
        with Uploader(backend, global_dedup=False) as up:
            for i in share:
                pushed[i] = up.add_bytes(files[i]).file_hex
                up.finalize()
        return pushed

    file_hexes: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for share in [pool.submit(push, list(range(k, len(files), 8))) for k in range(8)]:
            file_hexes.update(share.result(timeout=120))
    reader = HttpCasBackend(server.url, StaticToken(server.token("read")), policy=FAST_RETRY)
    for i, data in enumerate(files):
        out = io.BytesIO()
        download(reader, file_hexes[i], out, sha256_hex=hashlib.sha256(data).hexdigest())
        assert out.getvalue() == data


def test_workers_share_the_port_and_the_store(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", "--workers", "2") as server:
        workers = _workers(server)
        assert len(workers) == 2
        # New connections go to whichever worker accepts first: within a bounded number of
        # them, each worker has served some (its CPU moved).
        before = {pid: _cpu_ticks(pid) for pid in workers}
        for _ in range(3000):
            assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
            if all(_cpu_ticks(pid) > before[pid] for pid in workers):
                break
        else:
            raise AssertionError("one worker served none of 3000 connections")
        _push_and_read_back(server, FILES)
    # running_server's exit sent SIGTERM to the server: its workers stopped with it.
    assert server.process.returncode is not None
    for pid in workers:
        _wait_until(lambda pid=pid: not _alive(pid), 10, f"worker {pid} stopped")


def test_workers_on_a_postgresql_index(tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker opens its own connections to the shared index after the fork."""
    monkeypatch.setenv("GIT_XET_SERVER_SECRET", secrets.token_hex(32))  # the server's and `git xet token`'s
    url = postgres.create_database(f"workers_{secrets.token_hex(4)}")
    with running_server(tmp_path / "data", "--workers", "2", "--index", url) as server:
        assert len(_workers(server)) == 2
        _push_and_read_back(server, FILES)


def test_a_worker_that_dies_stops_the_server(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", "--workers", "2") as server:
        killed, other = _workers(server)
        os.kill(killed, signal.SIGKILL)
        assert server.process.wait(timeout=30) == 1
        _wait_until(lambda: not _alive(other), 10, "the other worker stopped")
        assert f"server worker {killed} exited (killed by signal 9); stopping the others" in server.log()


def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", "--workers", "2") as server:
        workers = _workers(server)
        server.process.kill()
        server.process.wait(timeout=10)
        for pid in workers:
            _wait_until(lambda pid=pid: not _alive(pid), 15, f"worker {pid} exited after its parent")
    # The port and the data directory are free again: a new server takes the directory.
    with running_server(tmp_path / "data") as again:
        assert httpx.get(f"{again.url}/health", timeout=10).status_code == 200


def test_one_process_serves_by_default(tmp_path: Path) -> None:
    """Without --workers the server is one process: its upload streams, grant counts and metrics
    are the whole server's (server/workers.py)."""
    with running_server(tmp_path / "data") as server:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        assert _workers(server) == []


def test_workers_must_be_at_least_one(tmp_path: Path) -> None:
    refused = run_git_xet("serve", "--data", str(tmp_path / "data"), "--port", "0", "--workers", "0", timeout=60)
    assert refused.returncode == 2 and "--workers: 0: at least 1" in refused.stderr
