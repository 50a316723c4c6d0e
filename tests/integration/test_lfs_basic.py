"""`basic` transfers on a repo's LFS endpoint, as a stock git-lfs (or an attacker with a valid
token) makes them: the bridge's Range answers, PUTs that are not the object they name, and the
server's memory while a large object arrives. Our server on 127.0.0.1, requests by httpx."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import h11
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server

REPO = "acme/models"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("basic") / "data", "--workers", "1") as srv:
        yield srv


def batch(srv: RunningServer, operation: str, oid: str, size: int, token: str, transfers: list[str] | None = None) -> dict:
    resp = httpx.post(
        f"{srv.url}/{REPO}.git/info/lfs/objects/batch",
        json={"operation": operation, "transfers": transfers or ["basic"], "objects": [{"oid": oid, "size": size}]},
        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.git-lfs+json"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["objects"][0]


def put_basic(srv: RunningServer, data: bytes, oid: str | None = None) -> httpx.Response:
    """What git-lfs does for a basic upload: ask the batch API, PUT to its action."""
    oid = oid or hashlib.sha256(data).hexdigest()
    entry = batch(srv, "upload", oid, len(data), srv.token("write", repo=REPO))
    action = entry["actions"]["upload"]
    return httpx.put(action["href"], content=data, headers=action.get("header", {}), timeout=120)


def state(srv: RunningServer) -> dict[str, int]:
    """Everything stored: objects by key and size, and the index's counts."""
    store = CasStore(srv.data_dir)
    try:
        return {**stored_objects(srv.data_dir), **{f"index:{table}": rows for table, rows in store.stats().items()}}
    finally:
        store.close()


def test_a_basic_upload_is_stored_as_xet_and_served_back(server: RunningServer) -> None:
    data = random_bytes(3_000_000, 451)
    oid = hashlib.sha256(data).hexdigest()
    assert put_basic(server, data).status_code == 200
    reader = server.token("read", repo=REPO)
    assert "actions" not in batch(server, "upload", oid, len(data), server.token("write", repo=REPO))  # now there
    xet = batch(server, "download", oid, len(data), reader, ["basic", "xet"])["actions"]["download"]
    assert xet["header"]["X-Xet-Hash"]  # a XET file: the agent reconstructs it natively
    href = batch(server, "download", oid, len(data), reader)["actions"]["download"]["href"]
    assert httpx.get(href, timeout=60).content == data


@pytest.fixture(scope="module")
def bridged(server: RunningServer) -> tuple[bytes, str]:
    """A stored file of several xorbs' worth of chunks, and its bridge URL."""
    data = random_bytes(5_000_001, 452)
    assert put_basic(server, data).status_code == 200
    entry = batch(server, "download", hashlib.sha256(data).hexdigest(), len(data), server.token("read", repo=REPO))
    return data, entry["actions"]["download"]["href"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=st.sampled_from(["a-b", "a-", "-n"]), a=st.integers(0, 5_200_000), b=st.integers(0, 5_200_000))
def test_the_bridge_serves_ranges_as_sliced_bytes(bridged: tuple[bytes, str], form: str, a: int, b: int) -> None:
    data, href = bridged
    size = len(data)
    if form == "a-b":
        a, b = min(a, b), max(a, b)
        header, first, last = f"bytes={a}-{b}", a, min(b, size - 1)
    elif form == "a-":
        header, first, last = f"bytes={a}-", a, size - 1
    else:
        n = max(a, 1)
        header, first, last = f"bytes=-{n}", max(0, size - n), size - 1
    got = httpx.get(href, headers={"Range": header}, timeout=60)
    if first >= size:
        assert got.status_code == 416 and got.headers["Content-Range"] == f"bytes */{size}"
        return
    assert got.status_code == 206, (header, got.status_code)
    assert got.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
    assert got.content == data[first : last + 1]


def test_without_range_the_bridge_serves_the_whole_file(bridged: tuple[bytes, str]) -> None:
    data, href = bridged
    whole = httpx.get(href, timeout=60)
    assert whole.status_code == 200 and whole.content == data and whole.headers["Accept-Ranges"] == "bytes"
    several = httpx.get(href, headers={"Range": "bytes=0-1,5-6"}, timeout=60)  # not served: RFC 9110 lets us send it all
    assert several.status_code == 200 and several.content == data


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.sampled_from([1, 70_000, 1_500_000]), flip=st.integers(0, 1 << 30), seed=st.integers(0, 1 << 16))
def test_bytes_that_are_not_the_object_are_refused_and_nothing_is_stored(server: RunningServer, size: int, flip: int, seed: int) -> None:
    """An attacker with a write token claims an oid (say, a teammate's next model) and sends
    other bytes: refused, nothing stored, and the oid stays absent for everyone."""
    honest = random_bytes(size, seed)
    oid = hashlib.sha256(honest).hexdigest()
    forged = bytearray(honest)
    forged[flip % size] ^= 0x01
    before = state(server)
    refused = put_basic(server, bytes(forged), oid)
    assert refused.status_code == 422 and oid in refused.json()["message"]
    assert state(server) == before
    assert batch(server, "download", oid, size, server.token("read", repo=REPO))["error"]["code"] == 404
    assert list((server.data_dir / "lfs-uploads").iterdir()) == []  # the temp file is gone too


def test_a_forged_body_larger_than_a_xorb_stores_no_xorb(server: RunningServer) -> None:
    """Past 64 MiB the chunker sends full xorbs while it reads: the oid is checked before it
    starts, so a forged large body leaves no orphaned xorb behind either."""
    honest = random_bytes(70 << 20, 455)
    oid = hashlib.sha256(honest).hexdigest()
    forged = bytearray(honest)
    forged[-1] ^= 0x80
    before = state(server)
    assert put_basic(server, bytes(forged), oid).status_code == 422
    assert state(server) == before


def test_a_token_for_another_repo_or_read_only_cannot_put(server: RunningServer) -> None:
    data = random_bytes(10_000, 453)
    oid = hashlib.sha256(data).hexdigest()
    href = f"{server.url}/{REPO}.git/info/lfs/basic/{oid}"
    before = state(server)
    other = httpx.put(href, content=data, headers={"Authorization": f"Bearer {server.token('write', repo='acme/other')}"}, timeout=30)
    reader = httpx.put(href, content=data, headers={"Authorization": f"Bearer {server.token('read', repo=REPO)}"}, timeout=30)
    nobody = httpx.put(href, content=data, timeout=30)
    assert (other.status_code, reader.status_code, nobody.status_code) == (403, 403, 401)
    assert state(server) == before
    assert batch(server, "download", oid, len(data), server.token("read", repo=REPO))["error"]["code"] == 404


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_huge_basic_upload_does_not_grow_server_memory_with_its_size(tmp_path: Path) -> None:
    """768 MiB PUT to a one-process server: its peak RSS grows by a bounded amount (a spool to
    disk, chunking with two 64 MiB xorb buffers), far less than the object."""
    size, piece = 768 << 20, 1 << 20

    def pieces() -> Iterator[bytes]:
        rng = random.Random(454)
        for _ in range(size // piece):
            yield rng.randbytes(piece)

    sha = hashlib.sha256()
    for part in pieces():
        sha.update(part)
    oid = sha.hexdigest()
    with running_server(tmp_path / "data", "--workers", "1") as srv:
        entry = batch(srv, "upload", oid, size, srv.token("write", repo=REPO))
        action = entry["actions"]["upload"]
        baseline = _peak_rss_mib(srv.process.pid)
        put = httpx.put(action["href"], content=pieces(), headers={**action["header"], "Content-Length": str(size)}, timeout=600)
        assert put.status_code == 200, put.text
        grown = _peak_rss_mib(srv.process.pid) - baseline
        assert batch(srv, "download", oid, size, srv.token("read", repo=REPO))["actions"]["download"]
    assert grown < 320, f"the server's peak RSS grew by {grown:.0f} MiB for a {size >> 20} MiB upload"


def test_a_spool_left_by_a_killed_server_is_removed_by_the_next_one(tmp_path: Path) -> None:
    """kill -9 mid-upload leaves the spool (as large as what arrived); the next server on the
    data directory removes it. A spool another live server holds is left alone."""
    import fcntl
    import os
    import signal
    import threading
    import time

    from git_xet.server.basic_uploads import UPLOAD_DIR, remove_abandoned_spools

    data = tmp_path / "data"
    release = threading.Event()

    def stalled() -> Iterator[bytes]:
        yield b"x" * (4 << 20)
        release.wait(60)

    with running_server(data, "--workers", "1") as srv:
        action = batch(srv, "upload", "ab" * 32, 8 << 20, srv.token("write", repo=REPO))["actions"]["upload"]
        errors: list[Exception] = []

        def upload() -> None:
            try:
                httpx.put(action["href"], content=stalled(), headers={**action["header"], "Content-Length": str(8 << 20)}, timeout=60)
            except (httpx.HTTPError, h11.LocalProtocolError) as exc:  # the server dies under it
                errors.append(exc)

        sender = threading.Thread(target=upload)
        sender.start()
        spools = data / UPLOAD_DIR
        deadline = time.monotonic() + 30
        while sum(p.stat().st_size for p in spools.glob("basic-*.part")) < 4 << 20:
            assert time.monotonic() < deadline, "the upload never reached the spool"
            time.sleep(0.05)
        os.kill(srv.process.pid, signal.SIGKILL)
        srv.process.wait(timeout=30)
        release.set()
        sender.join(timeout=60)
    assert errors, "the upload to a killed server should have failed"
    assert len(list(spools.glob("basic-*.part"))) == 1

    live = spools / "basic-live.part"
    live.write_bytes(b"y")
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a live upload of another server holds it
        with running_server(data, "--workers", "1"):
            assert [p.name for p in spools.glob("basic-*.part")] == ["basic-live.part"]
    assert remove_abandoned_spools(spools) == 1 and not list(spools.iterdir())
