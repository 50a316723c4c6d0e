"""Attacks on `git xet serve` and the agent, each against the real server process (or a hostile
LFS server on 127.0.0.1 for the agent): the attack must fail, and nothing stored may change.

What is stored is observed through the server's API and `CasStore` methods, never by reading
the index file. Memory and work bounds are asserted as generous limits on the server process
(/proc/<pid>), never as wall-clock timings.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

from tests.support.http_stub import http_stub
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes, shard, xorb
from git_xet.core.http_headers import bearer
from git_xet.storage.cas_store import CasStore
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.gitenv import make_git_env, run_git_xet
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

MIB = 1024 * 1024
HEADER_TIMEOUT = 2
IDLE_TIMEOUT = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    data = tmp_path_factory.mktemp("adversarial") / "data"
    with running_server(data, "--header-timeout", str(HEADER_TIMEOUT), "--idle-timeout", str(IDLE_TIMEOUT)) as srv:
        yield srv


# ---------------------------------------------------------------- helpers


def _store(srv: RunningServer) -> CasStore:
    return CasStore(srv.data_dir)


def _proc(srv: RunningServer, name: str) -> str:
    return Path(f"/proc/{srv.process.pid}/{name}").read_text()


def _rss(srv: RunningServer) -> int:
    line = next(x for x in _proc(srv, "status").splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _cpu_seconds(srv: RunningServer) -> float:
    fields = _proc(srv, "stat").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _file_info(built: xorb.VerifiedXorb, file_hash: bytes, size: int, sha256: bytes | None) -> shard.FileInfo:
    term = shard.FileTerm(built.xorb_hash, size, 0, len(built.chunk_hashes))
    return shard.FileInfo(file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), sha256)


def _shard(*files: shard.FileInfo) -> bytes:
    return shard.serialize_shard(shard.Shard(tuple(sorted(files, key=lambda f: f.file_hash))), with_footer=False)


def _put(srv: RunningServer, token: str, data: bytes, sha256: bytes | str | None = "real", version: int = 1) -> tuple[httpx.Response, str]:
    """Upload `data` as one xorb and a shard naming it (sha256 "real" = its true sha256);
    returns the shard answer and the file hash."""
    built, digest = single_xorb(data)
    claim = hashlib.sha256(data).digest() if sha256 == "real" else sha256
    with httpx.Client(timeout=60) as client:
        resp = client.post(f"{srv.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token))
        assert resp.status_code == 200, resp.text
        body = _shard(_file_info(built, digest.file_hash, len(data), claim))
        return client.post(f"{srv.url}/v{version}/shards", content=body, headers=bearer(token)), hashes.hash_to_hex(digest.file_hash)


def _v2_result(resp: httpx.Response) -> dict:
    frames = [json.loads(line) for line in resp.text.splitlines() if line]
    assert frames[0]["type"] == "validating"
    return frames[-1]


def _batch(srv: RunningServer, repo: str, operation: str, objects: list[dict], token: str, transfers: tuple[str, ...] = ("xet",)) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/{repo}.git/info/lfs/objects/batch",
        json={"operation": operation, "transfers": list(transfers), "objects": objects},
        headers=bearer(token),
        timeout=30,
    )


# ---------------------------------------------------------------- verified LFS mappings


def test_a_writer_cannot_claim_an_oid_for_other_content(server: RunningServer) -> None:
    """Before: a shard naming the empty file (or any file) with the sha256 of content someone
    will push later made the server answer "already stored", so that push stored nothing."""
    repo = "acme/claims"
    token = server.token("write", repo=repo)
    victim = random_bytes(300_000, 101)
    oid = hashlib.sha256(victim).hexdigest()
    before = _store(server).stats()

    empty = shard.FileInfo(bytes(32), (), (), hashlib.sha256(victim).digest())
    with httpx.Client(timeout=30) as client:
        refused = client.post(f"{server.url}/v2/shards", content=_shard(empty), headers=bearer(token))
    result = _v2_result(refused)
    # The claim is refused; the file itself (its bytes check out) stands under its own sha256.
    assert result["type"] == "result" and result["refused_sha256"] == [bytes(32).hex()]
    other_data = random_bytes(200_000, 102)
    other, other_hex = _put(server, token, other_data, sha256=bytes.fromhex(oid))
    assert other.status_code == 200 and other.json()["refused_sha256"] == [other_hex]

    assert _store(server).file_by_sha256(oid, repo) is None
    assert _store(server).file_by_sha256(hashlib.sha256(b"").hexdigest(), repo).file_hex == bytes(32).hex()
    assert _store(server).file_by_sha256(hashlib.sha256(other_data).hexdigest(), repo).file_hex == other_hex
    upload = _batch(server, repo, "upload", [{"oid": oid, "size": len(victim)}], token).json()
    assert "upload" in upload["objects"][0]["actions"]  # the victim's push still uploads
    after = _store(server).stats()
    assert after["repo_oids"] - before["repo_oids"] == 2  # the two true sha256s, not the victim's


def test_a_reupload_never_remaps_or_clears_an_oid(server: RunningServer, tmp_path: Path) -> None:
    """Before: re-uploading the same bytes with another file hash or no sha256 (hf-xet's
    skip_sha256) replaced the oid's mapping. Now the first verified mapping stays."""
    repo = "default"
    token = server.token("write", repo=repo)
    data = random_bytes(2_000_000, 103)
    oid = hashlib.sha256(data).hexdigest()
    (tmp_path / "f.bin").write_bytes(data)

    # hf-xet without a sha256: accepted, but maps no oid (the server never saw it verified).
    (skipped,) = hf_xet_oracle.remote_upload([tmp_path / "f.bin"], server.url, token, tmp_path / "a", skip_sha256=True)
    assert _store(server).file_by_sha256(oid, repo) is None
    (verified,) = hf_xet_oracle.remote_upload([tmp_path / "f.bin"], server.url, token, tmp_path / "b")
    assert verified["hash"] == skipped["hash"]
    mapped = _store(server).file_by_sha256(oid, repo)
    assert mapped is not None and mapped.file_hex == verified["hash"] and mapped.size == len(data)

    # The same bytes in other chunks (another file hash, true sha256): accepted, mapping kept.
    builder = xorb.XorbBuilder()
    for start in range(0, len(data), 100_000):
        piece = data[start : start + 100_000]
        builder.add(piece, hashes.chunk_hash(piece))
    built = builder.build()
    other_hash = hashes.file_hash(list(built.chunk_hashes), list(built.chunk_sizes))
    assert hashes.hash_to_hex(other_hash) != verified["hash"]
    with httpx.Client(timeout=60) as client:
        client.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token))
        again = client.post(f"{server.url}/v1/shards", content=_shard(_file_info(built, other_hash, len(data), hashlib.sha256(data).digest())), headers=bearer(token))
    assert again.json() == {"result": 1}
    # ... and hf-xet skipping the sha256 again.
    hf_xet_oracle.remote_upload([tmp_path / "f.bin"], server.url, token, tmp_path / "c", skip_sha256=True)

    still = _store(server).file_by_sha256(oid, repo)
    assert still is not None and still.file_hex == verified["hash"]
    down = _batch(server, repo, "download", [{"oid": oid, "size": len(data)}], token).json()
    assert down["objects"][0]["actions"]["download"]["header"]["X-Xet-Hash"] == verified["hash"]


def test_v2_shard_uploads_report_the_sha256_verification(server: RunningServer) -> None:
    """The long part of registering a shard (hashing its files' bytes) streams progress frames."""
    token = server.token("write", repo="acme/progress")
    data = random_bytes(20 * MIB, 109)
    resp, _ = _put(server, token, data, version=2)
    frames = [json.loads(line) for line in resp.text.splitlines() if line]
    progress = [f for f in frames if f["type"] == "validating" and f["total"] == len(data)]
    assert [f["verified"] for f in progress] == sorted(f["verified"] for f in progress)
    assert progress and progress[-1]["verified"] == len(data)
    assert frames[-1] == {"type": "result", "result": 1}
    assert _store(server).file_by_sha256(hashlib.sha256(data).hexdigest(), "acme/progress") is not None


def test_batch_compares_sizes(server: RunningServer) -> None:
    repo = "acme/sizes"
    token = server.token("write", repo=repo)
    data = random_bytes(150_000, 104)
    oid = hashlib.sha256(data).hexdigest()
    resp, _ = _put(server, token, data)
    assert resp.json() == {"result": 1}
    for operation in ("upload", "download"):
        for size in (len(data) - 1, len(data) + 1, 0):
            (entry,) = _batch(server, repo, operation, [{"oid": oid, "size": size}], token).json()["objects"]
            assert entry["error"]["code"] == 422 and "actions" not in entry, (operation, size)
    (entry,) = _batch(server, repo, "download", [{"oid": oid, "size": len(data)}], token).json()["objects"]
    assert "download" in entry["actions"]


# ---------------------------------------------------------------- per-repo isolation


def test_a_repo_reads_only_its_own_files_and_dedup_reveals_none(server: RunningServer) -> None:
    """Before: the token's repo claim was never checked, so any token read any repo's files."""
    owner, intruder = "team-a/private", "team-b/other"
    a_token, b_token = server.token("write", repo=owner), server.token("write", repo=intruder)
    data = random_bytes(400_000, 105)
    oid = hashlib.sha256(data).hexdigest()
    resp, file_hex = _put(server, a_token, data)
    assert resp.json() == {"result": 1}
    before = _store(server).stats()

    b_cas = _batch(server, intruder, "upload", [{"oid": oid, "size": len(data)}], b_token).json()
    assert "upload" in b_cas["objects"][0]["actions"]  # not "already stored": B must prove it has the bytes
    b_cas_token = b_cas["objects"][0]["actions"]["upload"]["header"]["X-Xet-Access-Token"]
    with httpx.Client(timeout=30) as client:
        for token in (b_token, b_cas_token):
            for version in (1, 2):
                assert client.get(f"{server.url}/v{version}/reconstructions/{file_hex}", headers=bearer(token)).status_code == 404
        assert client.get(f"{server.url}/v1/reconstructions/{file_hex}", headers=bearer(a_token)).status_code == 200
        # The whole-object route answers by oid within the token's repo only, at its path and
        # at the previous release's (server/deprecated.py).
        for route, names_file in (("/git-xet/v1/lfs-objects", "X-Git-Xet-Hash"), ("/v1/lfs-objects", "X-Xet-Hash")):
            for token in (b_token, b_cas_token):
                assert client.get(f"{server.url}{route}/{oid}", headers=bearer(token)).status_code == 404
            assert client.get(f"{server.url}{route}/{oid}").status_code == 401
            assert client.get(f"{server.url}{route}/{oid[:-1]}x", headers=bearer(a_token)).status_code == 400
            mine = client.get(f"{server.url}{route}/{oid}", headers=bearer(a_token))
            assert mine.status_code == 200 and mine.content == data and mine.headers[names_file] == file_hex
        assert _batch(server, owner, "download", [{"oid": oid, "size": len(data)}], b_token).status_code == 403
        (entry,) = _batch(server, intruder, "download", [{"oid": oid, "size": len(data)}], b_token).json()["objects"]
        assert entry["error"]["code"] == 404
        assert client.get(f"{server.url}/api/models/{owner}/xet-read-token/main", headers=bearer(b_token)).status_code == 403
        assert client.get(f"{server.url}/api/models/{owner}/xet-read-token/main", headers=bearer(a_token)).status_code == 200
        # Global dedup still works across repos, with keyed hashes only.
        built, _ = single_xorb(data)
        dedup = client.get(f"{server.url}/v1/chunks/default/{hashes.hash_to_hex(built.chunk_hashes[0])}", headers=bearer(b_token))
        assert dedup.status_code == 200
        answer = shard.parse_shard(dedup.content)
        assert not set(built.chunk_hashes) & {c.chunk_hash for info in answer.cas for c in info.chunks}
    assert _store(server).stats() == before
    assert not _store(server).repo_has_file(intruder, file_hex)

    # B holding the bytes registers the file (its xorb is deduplicated) and may then read it.
    resp, _ = _put(server, b_token, data)
    assert resp.json() == {"result": 1}
    assert _store(server).repo_has_file(intruder, file_hex)
    assert httpx.get(f"{server.url}/v2/reconstructions/{file_hex}", headers=bearer(b_token), timeout=30).status_code == 200


# ---------------------------------------------------------------- token kinds, expiry, revocation


def test_cas_tokens_cannot_mint_tokens_nor_outlive_their_parent(server: RunningServer) -> None:
    """Before: any token, even a 15-minute CAS token from a pasted trace, minted fresh ones forever."""
    repo = "acme/expiry"
    user = server.minted(repo=repo, ttl=120)
    resp = _batch(server, repo, "upload", [{"oid": "e" * 64, "size": 10}], user["accessToken"])
    header = resp.json()["objects"][0]["actions"]["upload"]["header"]
    cas_token, cas_exp = header["X-Xet-Access-Token"], int(header["X-Xet-Token-Expiration"])
    assert cas_exp <= user["exp"]  # the server's CAS lifetime is 900 s; the parent's 120 s wins
    with httpx.Client(timeout=30) as client:
        refreshed = client.get(f"{server.url}/api/models/{repo}/xet-write-token/main", headers=bearer(user["accessToken"]))
        assert refreshed.status_code == 200 and refreshed.json()["exp"] <= user["exp"]
        for route in ("xet-write-token", "xet-read-token"):
            refused = client.get(f"{server.url}/api/models/{repo}/{route}/main", headers=bearer(cas_token))
            assert refused.status_code == 401 and "user token" in refused.json()["error"]
        assert _batch(server, repo, "download", [{"oid": "e" * 64, "size": 10}], cas_token).status_code == 401
        basic = "Basic " + base64.b64encode(f"user:{cas_token}".encode()).decode()
        assert client.get(f"{server.url}/api/models/{repo}/xet-read-token/main", headers={"Authorization": basic}).status_code == 401


def test_revoking_a_user_token_kills_it_and_its_cas_tokens(server: RunningServer) -> None:
    repo = "acme/revoke"
    user = server.minted(repo=repo)
    with httpx.Client(timeout=30) as client:
        cas = client.get(f"{server.url}/api/models/{repo}/xet-read-token/main", headers=bearer(user["accessToken"])).json()["accessToken"]
        probe = f"{server.url}/v1/reconstructions/{'0' * 64}"
        assert client.get(probe, headers=bearer(cas)).status_code == 404  # accepted, file unknown
        other = server.token("read", repo=repo)
        run_git_xet("token", "--data", str(server.data_dir), "--revoke", user["accessToken"], timeout=60, check=True)
        assert user["id"] in _store(server).revoked_token_ids()
        deadline = time.monotonic() + 20
        while client.get(probe, headers=bearer(cas)).status_code != 401:
            assert time.monotonic() < deadline, "the revoked token's CAS token still works"
            time.sleep(0.2)
        assert client.get(probe, headers=bearer(user["accessToken"])).status_code == 401
        assert client.get(f"{server.url}/api/models/{repo}/xet-read-token/main", headers=bearer(user["accessToken"])).status_code == 401
        assert client.get(probe, headers=bearer(other)).status_code == 404  # other tokens are unaffected


# ---------------------------------------------------------------- bounded work per request


def _raw_request(srv: RunningServer, head: bytes, body_bytes: int = 0, piece: bytes = b"x" * 65536) -> tuple[bytes, int]:
    """Send `head`, then up to `body_bytes` more while the server lets us: (the status line,
    or b"" if the server reset the connection; how many of those bytes were sent)."""
    parts = urlsplit(srv.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        try:
            while sent < body_bytes:
                sock.sendall(piece)
                sent += len(piece)
        except OSError:
            pass  # the server answered and closed: what we want
        sock.settimeout(30)
        try:
            return sock.recv(65536).split(b"\r\n", 1)[0], sent
        except OSError:
            return b"", sent


def test_strangers_cannot_make_the_batch_route_read_a_body(server: RunningServer) -> None:
    """Before: a 40 MiB body without credentials took the server to 1.07 GB and stalled it 4 s."""
    baseline = _rss(server)
    path = "/acme/model.git/info/lfs/objects/batch"
    size = 40 * MIB
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
    statuses = []
    threads = [threading.Thread(target=lambda: statuses.append(_raw_request(server, head, size)[0])) for _ in range(4)]
    for t in threads:
        t.start()
    health = httpx.get(f"{server.url}/health", timeout=30)
    for t in threads:
        t.join(timeout=120)
    assert health.status_code == 200
    assert all(b" 401 " in s for s in statuses), statuses
    token = server.token("write", repo="acme/model")
    authed = head.replace(b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {token}\r\n".encode())
    assert b" 413 " in _raw_request(server, authed, size)[0]
    chunked = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    assert b" 413 " in _raw_request(server, chunked, size, piece=b"10000\r\n" + b"[" * 65536 + b"\r\n")[0]
    assert _rss(server) - baseline < 64 * MIB


def test_batch_object_count_is_capped(server: RunningServer) -> None:
    token = server.token("read", repo="acme/model")
    many = [{"oid": f"{i:064x}", "size": 1} for i in range(1001)]
    assert _batch(server, "acme/model", "download", many, token).status_code == 413


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["operation", "objects", "transfers", "oid", "size", "x"]), inner, max_size=4),
    max_leaves=12,
)
_objects = st.lists(
    st.fixed_dictionaries({"oid": st.one_of(st.text(max_size=70), st.just("a" * 64), st.integers()), "size": _json}) | _json,
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        _json.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries({"operation": st.sampled_from(["upload", "download", "x"]), "objects": _objects, "transfers": _json}).map(
            lambda v: json.dumps(v).encode()
        ),
        st.binary(max_size=64),
    )
)
def test_malformed_batch_bodies_get_422_never_500(server: RunningServer, body: bytes) -> None:
    """Before: malformed bodies (e.g. an object that is not a JSON object) gave 500 and a traceback."""
    if server.url not in _TOKENS:  # one `git xet token` process per server, not one per example
        _TOKENS[server.url] = server.token("write", repo="acme/model")
    token = _TOKENS[server.url]
    resp = httpx.post(f"{server.url}/acme/model.git/info/lfs/objects/batch", content=body, headers=bearer(token), timeout=30)
    assert resp.status_code in (200, 413, 422), (resp.status_code, resp.text)
    assert isinstance(resp.json().get("objects" if resp.status_code == 200 else "message"), (list, str))


_TOKENS: dict[str, str] = {}


def test_a_tiny_shard_with_huge_fanout_is_refused_before_any_chunk_work(server: RunningServer) -> None:
    """Before: a 75 KiB shard naming one xorb of 8192 chunks 780 times cost
    seconds of CPU and hundreds of MiB before it was refused (6.4M chunk references: within the
    absolute per-shard cap of 8M, so only the budget for repeated references stops it early)."""
    token = server.token("write", repo="acme/fanout")
    builder = xorb.XorbBuilder()
    for i in range(8192):
        piece = i.to_bytes(4, "little")
        builder.add(piece, hashes.chunk_hash(piece))
    built = builder.build()
    assert httpx.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token), timeout=60).status_code == 200
    term = shard.FileTerm(built.xorb_hash, sum(built.chunk_sizes), 0, 8192)
    verification = hashes.verification_hash(built.chunk_hashes)
    info = shard.FileInfo(bytes(range(32)), (term,) * 780, (verification,) * 780, None)
    body = _shard(info)
    assert len(body) < 80 * 1024
    before = _store(server).stats()
    cpu, rss = _cpu_seconds(server), _rss(server)
    for version in (1, 2):
        resp = httpx.post(f"{server.url}/v{version}/shards", content=body, headers=bearer(token), timeout=120)
        message = resp.json()["error"] if version == 1 else _v2_result(resp)["message"]
        assert "more than once" in message
    assert _cpu_seconds(server) - cpu < 3.0  # two refusals; was 16 s for one
    assert _rss(server) - rss < 100 * MIB
    assert _store(server).stats() == before


def test_slow_and_huge_headers_lock_nobody_out(server: RunningServer) -> None:
    """Before: 300 half-open sockets locked every client out; a 200 MiB header was read whole."""
    parts = urlsplit(server.url)
    baseline = _rss(server)
    socks = []
    try:
        for _ in range(300):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(sock)
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        # Each half-open socket is answered 408 and closed after the header deadline.
        for sock in socks:
            sock.settimeout(HEADER_TIMEOUT + 30)
            assert sock.recv(1024).startswith(b"HTTP/1.1 408")
    finally:
        for sock in socks:
            sock.close()
    huge = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: "
    status, sent = _raw_request(server, huge, 32 * MIB, piece=b"a" * 65536)
    assert b" 431 " in status or sent < 32 * MIB  # refused early (a reset may beat the 431 to us)
    assert _rss(server) - baseline < 64 * MIB


def test_stalled_uploads_and_non_reading_downloads_are_dropped(server: RunningServer) -> None:
    """Before: a stalled upload or a client that stopped reading pinned its buffers forever."""
    repo = "acme/stall"
    token = server.token("write", repo=repo)
    parts = urlsplit(server.url)
    head = f"POST /v1/xorbs/default/{'1' * 64} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {MIB}\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head.encode() + b"x" * 1000)  # ... and nothing more
        sock.settimeout(IDLE_TIMEOUT + 30)
        assert sock.recv(1024).startswith(b"HTTP/1.1 408")

    data = random_bytes(24 * MIB, 106)
    resp, _ = _put(server, token, data)
    assert resp.json() == {"result": 1}
    oid = hashlib.sha256(data).hexdigest()
    href = _batch(server, repo, "download", [{"oid": oid, "size": len(data)}], token, ("basic",)).json()["objects"][0]["actions"]["download"]["href"]
    target = urlsplit(href)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((parts.hostname, parts.port))
        sock.sendall(f"GET {target.path}?{target.query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        log = server.log_once_it_has('"path": "/xet-bridge-us/', timeout=IDLE_TIMEOUT + 60)  # the server gives up: its access log says so
    (line,) = [json.loads(x.split(" ", 3)[-1]) for x in log.splitlines() if '"path": "/xet-bridge-us/' in x]
    assert line["bytes_out"] < len(data)


# ---------------------------------------------------------------- medium and low


def test_a_data_directory_from_before_repos_is_migrated(tmp_path: Path) -> None:
    """Its files become repo `default`'s, its (unverified) oids that repo's oids; nothing is
    lost, nothing counts as verified, and a new claim cannot replace a migrated mapping."""
    import sqlite3

    data = random_bytes(120_000, 110)
    built, digest = single_xorb(data)
    body = _shard(_file_info(built, digest.file_hash, len(data), hashlib.sha256(data).digest()))
    legacy = CasStore(tmp_path / "v0")
    legacy.put_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
    legacy.register_shard(body)
    file_hex, oid = hashes.hash_to_hex(digest.file_hash), hashlib.sha256(data).hexdigest()
    del legacy
    # Rewrite the index into the version-0 shape (one namespace, claimed sha256 in `files`).
    with sqlite3.connect(tmp_path / "v0" / "index.sqlite") as db:
        db.execute("UPDATE files SET sha256 = ?", (oid,))
        for table in ("repo_files", "repo_oids", "repo_shards", "revoked_tokens"):
            db.execute(f"DROP TABLE {table}")
        db.execute("PRAGMA user_version = 0")
    migrated = CasStore(tmp_path / "v0")
    assert migrated.repo_has_file("default", file_hex)
    mapped = migrated.file_by_sha256(oid)
    assert mapped is not None and mapped.file_hex == file_hex
    assert migrated.stats()["repo_shards"] == 1 and not migrated.register_shard(body)


def test_data_directory_is_private(server: RunningServer) -> None:
    resp, _ = _put(server, server.token("write"), random_bytes(50_000, 107))
    assert resp.status_code == 200
    paths = [server.data_dir, *server.data_dir.rglob("*")]
    assert len(paths) > 5
    for path in paths:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_an_empty_secret_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret").write_bytes(b"\n")
    env = {k: v for k, v in os.environ.items() if k != "GIT_XET_SERVER_SECRET"}
    for args in (["serve", "--port", "0"], ["token"]):
        out = run_git_xet(*args, "--data", str(data), timeout=60, env=env)
        assert out.returncode == 1 and "Delete the file" in out.stderr and not out.stdout.strip(), out


def test_off_loopback_the_public_url_is_required(tmp_path: Path) -> None:
    # It refuses before binding: no socket is opened.
    out = run_git_xet("serve", "--data", str(tmp_path / "d"), "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert out.returncode == 2 and "--public-url" in out.stderr and not out.stdout


def test_bridge_and_xorb_url_signatures_are_not_interchangeable(server: RunningServer) -> None:
    repo = "acme/bridge"
    token = server.token("write", repo=repo)
    data = random_bytes(100_000, 108)
    _resp, file_hex = _put(server, token, data)
    oid = hashlib.sha256(data).hexdigest()
    href = _batch(server, repo, "download", [{"oid": oid, "size": len(data)}], token, ("basic",)).json()["objects"][0]["actions"]["download"]["href"]
    bridge = urlsplit(href)
    query = dict(p.split("=", 1) for p in bridge.query.split("&"))
    with httpx.Client(timeout=30) as client:
        assert client.get(href).content == data
        # The bridge's signature replayed as a xorb URL for the same hash...
        forged = f"{server.url}/v1/xorb-data/{file_hex}?r=0-0&exp={query['exp']}&t={query['t']}&sig={query['sig']}"
        assert client.get(forged, headers={"Range": "bytes=0-0"}).status_code == 403
        # ... or for another repo.
        assert client.get(href.replace(f"/{repo}/", "/acme/elsewhere/")).status_code == 403
        # A xorb URL's signature replayed as a bridge URL.
        recon = client.get(f"{server.url}/v1/reconstructions/{file_hex}", headers=bearer(token)).json()
        (entry,) = next(iter(recon["fetch_info"].values()))
        xorb_query = dict(p.split("=", 1) for p in urlsplit(entry["url"]).query.split("&"))
        assert client.get(f"{server.url}{bridge.path}?exp={xorb_query['exp']}&t={xorb_query['t']}&sig={xorb_query['sig']}").status_code == 403


# ---------------------------------------------------------------- the agent's credentials


class _Recorder(BaseHTTPRequestHandler):
    """A hostile LFS server: answers batch requests with a refresh href on another origin."""

    seen: ClassVar[list[tuple[str, str, dict]]]  # one list per subclass, shared by its handler instances
    thief_url: str

    def log_message(self, *args) -> None:  # quiet
        pass

    def _record(self) -> None:
        type(self).seen.append((self.command, self.path, dict(self.headers)))

    def do_GET(self) -> None:
        self._record()
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self._record()
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        host = f"http://{self.headers['Host']}"
        objects = [
            {
                "oid": o["oid"],
                "size": o["size"],
                "actions": {
                    "download": {
                        "href": f"{type(self).thief_url}/api/models/x/y/xet-read-token/main",
                        "header": {"X-Xet-Cas-Url": host, "X-Xet-Access-Token": "cas-token", "X-Xet-Token-Expiration": "1"},
                    }
                },
            }
            for o in request.get("objects", [])
        ]
        body = json.dumps({"transfer": "xet", "objects": objects}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.git-lfs+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_agent_sends_hf_token_only_to_the_hub_and_refuses_foreign_refresh_urls(tmp_path: Path) -> None:
    """Before: cloning a repo whose .lfsconfig named a hostile LFS server sent `Bearer $HF_TOKEN`
    to whatever host its batch answer named, over plain http."""
    secret = "hf_adversarial_test_secret"

    class Thief(_Recorder):
        seen: ClassVar[list[tuple[str, str, dict]]] = []

    class Hostile(_Recorder):
        seen: ClassVar[list[tuple[str, str, dict]]] = []

    g = make_git_env(tmp_path)
    g.env.update(HF_TOKEN=secret, GIT_XET_RETRY_MAX_ATTEMPTS="1")
    with http_stub(Thief) as thief, http_stub(Hostile) as hostile:
        Hostile.thief_url = thief
        g.git_xet("install")  # negotiated mode: the LFS server's batch answer drives the agent
        g.git("init", "--bare", "remote.git")
        g.git("clone", "remote.git", "work")
        work = g.root / "work"
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{'ab' * 32}\nsize 12\n"
        (work / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
        (work / ".lfsconfig").write_text(f'[lfs]\n\turl = "{hostile}/evil.git/info/lfs"\n')
        (work / "model.bin").write_text(pointer)
        g.env["GIT_LFS_SKIP_PUSH"] = "1"
        g.git("add", ".", cwd=work)
        g.git("commit", "-m", "pointer", cwd=work)
        g.git("push", "origin", "main", cwd=work)
        del g.env["GIT_LFS_SKIP_PUSH"]
        clone = g.git("clone", "remote.git", "victim", check=False)
    assert Hostile.seen, "git-lfs never asked the hostile LFS server (the attack did not run)"
    assert Thief.seen == [], "the agent followed a refresh URL to another origin"
    for _, _, headers in Hostile.seen:
        assert secret not in json.dumps(headers)
    assert clone.returncode != 0 or not (g.root / "victim" / "model.bin").exists() or (g.root / "victim" / "model.bin").read_text() == pointer
    assert "refusing the LFS server's token refresh URL" in clone.stderr + g.agent_log()


def test_hf_token_goes_only_to_the_hub_endpoint_over_https(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from git_xet.agent.endpoints import credential_headers

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert credential_headers("https://huggingface.co/api/models/a/b/xet-read-token/main") == {"Authorization": "Bearer hf_secret"}
    for url in ("http://huggingface.co/x", "https://huggingface.co.evil.test/x", "http://127.0.0.1:9/x", "https://evil.test/x"):
        assert credential_headers(url) == {}, url
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.internal.test")
    assert credential_headers("https://hub.internal.test/x") == {"Authorization": "Bearer hf_secret"}
    assert credential_headers("https://huggingface.co/x") == {}
    # Other hosts: their own entry in ~/.netrc (the documented fallback), never another host's.
    (tmp_path / "netrc").write_text("machine lfs.internal.test login alice password s3cret\n")
    (tmp_path / "netrc").chmod(0o600)
    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert credential_headers("https://lfs.internal.test/repo.git/info/lfs") == {"Authorization": expected}
    assert credential_headers("https://other.internal.test/repo.git/info/lfs") == {}
