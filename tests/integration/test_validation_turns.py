"""git-xet issue 42 §8 against the real server: clients that send a shard whose validation is
long (the sha256 of a large file) and hang up mid-validation, many at once, must not run more
validations at once than MAX_CONCURRENT_VALIDATIONS: the turn is held until the validation
ends, not until its client leaves. Observed through the server's log line as each validation
starts (how many run, counted by the validations themselves), never through timing; later
honest clients succeed."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes, shard
from git_xet.core.http_headers import bearer
from git_xet.server.shard_intake import MAX_CONCURRENT_VALIDATIONS
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

MIB = 1 << 20
RUNNING = re.compile(r"shard validations running: (\d+)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("turns") / "data", "--workers", "1") as srv:
        yield srv


@pytest.fixture(scope="module")
def stored(server: RunningServer):  # type: ignore[no-untyped-def]
    """One 32 MiB xorb, stored: what the shards' files repeat."""
    built, digest = single_xorb(random_bytes(32 * MIB, 42))
    resp = httpx.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(server.token()), timeout=60)
    assert resp.status_code == 200, resp.text
    return built, digest


def _long_shard(stored, repeats: int, claim: bytes) -> bytes:  # type: ignore[no-untyped-def]
    """A file that is the stored xorb `repeats` times (a long sha256, within the work budget)."""
    built, digest = stored
    chunks = len(built.chunk_hashes)
    terms = tuple(shard.FileTerm(built.xorb_hash, sum(digest.chunk_sizes), 0, chunks) for _ in range(repeats))
    file_hash = hashes.file_hash(list(digest.chunk_hashes) * repeats, list(digest.chunk_sizes) * repeats)
    info = shard.FileInfo(file_hash, terms, tuple(hashes.verification_hash(built.chunk_hashes) for _ in terms), claim)
    return shard.serialize_shard(shard.Shard((info,)), with_footer=False)


def _send_and_hang_up(srv: RunningServer, token: str, body: bytes) -> None:
    """POST /v2/shards, read until the validation reports progress, then close the socket."""
    url = urlsplit(srv.url)
    head = (
        f"POST /v2/shards HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {len(body)}\r\nContent-Type: application/octet-stream\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
        sock.sendall(head + body)
        seen = b""
        while b'"verified": 0' not in seen:  # the first frame: validation is under way or queued
            piece = sock.recv(65536)
            if not piece:
                return
            seen += piece
    # closed here, mid-validation


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(clients=st.integers(4, 8), repeats=st.integers(4, 12), seed=st.integers(0, 2**16))
def test_clients_that_hang_up_do_not_lift_the_bound(server: RunningServer, stored, clients: int, repeats: int, seed: int) -> None:  # type: ignore[no-untyped-def]
    token = server.token()
    before = len(RUNNING.findall(server.log()))
    # Distinct files (a validated one is not hashed again), each claiming a wrong sha256: the
    # whole file is hashed before the claim is refused.
    bodies = [_long_shard(stored, repeats + i, hashlib.sha256(f"{seed}:{i}".encode()).digest()) for i in range(clients)]
    threads = [threading.Thread(target=_send_and_hang_up, args=(server, token, body)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    # An honest client afterwards: its validation waits for a turn behind every validation still
    # queued (turns are given in order), and succeeds.
    data_hash = hashlib.sha256()
    for _ in range(2):
        data_hash.update(random_bytes(32 * MIB, 42))
    honest = _long_shard(stored, 2, data_hash.digest())
    resp = httpx.post(f"{server.url}/v2/shards", content=honest, headers=bearer(token), timeout=300)
    assert resp.status_code == 200 and '"result"' in resp.text.splitlines()[-1], resp.text
    # Then every validation that started has ended; each logged how many ran as it started.
    started = len(RUNNING.findall(server.log()))
    log = server.log_once_it_has("shard validation ended", started, timeout=300)
    counts = [int(n) for n in RUNNING.findall(log)[before:]]
    assert len(counts) >= 3 and max(counts) <= MAX_CONCURRENT_VALIDATIONS, counts  # the honest one and at least two that hung up
