"""The real `git xet serve` process on 127.0.0.1, with hf-xet (the official client) as its client,
plus hostile and malformed requests that must be refused cleanly with storage left consistent."""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from git_xet.core import hashes, shard, xorb
from git_xet.core.http_headers import bearer
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.storage.cas_store import CasStore
from tests.support import hf_xet_oracle
from tests.support.objects import single_xorb, stored_objects
from tests.support.datagen import float32_like, random_bytes
from tests.support.server_process import RunningServer, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("server")
    with running_server(root / "data") as srv:
        yield srv


def _upload_objects(data: bytes) -> tuple[xorb.VerifiedXorb, bytes, bytes]:
    """A one-xorb upload of `data` built with the core: (xorb, shard body, file hash)."""
    built, digest = single_xorb(data)
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    cas = shard.CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes, len(built.body))
    return built, shard.serialize_shard(shard.Shard((info,), (cas,)), with_footer=False), digest.file_hash


def _stored_xorb_bytes(srv: RunningServer) -> int:
    return sum(stored_objects(srv.data_dir).values())


def _snapshot(srv: RunningServer) -> tuple:
    """Everything a client could observe: stored xorbs (files and packed rows) and index rows."""
    xorbs = stored_objects(srv.data_dir)
    store = CasStore(srv.data_dir)
    try:
        return xorbs, store.stats()
    finally:
        store.close()


# ---------------------------------------------------------------- hf-xet as the client


def test_hf_xet_round_trip(server: RunningServer, tmp_path: Path) -> None:
    inputs = {
        "tiny.bin": b"hello xet",
        "random.bin": random_bytes(3_000_000, 1),
        "floats.bin": float32_like(2_000_000, 2),
        "multi-xorb.bin": random_bytes(70_000_000, 3),
    }
    paths = []
    for name, data in inputs.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    token = server.token("write")
    uploaded = hf_xet_oracle.remote_upload(paths, server.url, token, tmp_path / "up")
    for (name, data), info in zip(inputs.items(), uploaded):
        assert info["hash"] == hashes.hash_to_hex(hash_bytes(data).file_hash), name
    read_token = server.token("read")
    targets = [(tmp_path / f"out-{name}", info["hash"], info["size"]) for name, info in zip(inputs, uploaded)]
    hf_xet_oracle.remote_download(targets, server.url, read_token, tmp_path / "down")
    for (name, data), (dest, _, _) in zip(inputs.items(), targets):
        assert dest.read_bytes() == data, name
    # Byte ranges through hf-xet's streaming API (its v2 reconstruction queries carry a Range).
    data = inputs["multi-xorb.bin"]
    (multi,) = [info for name, info in zip(inputs, uploaded) if name == "multi-xorb.bin"]
    spans = [(0, 1), (5, 70_000), (66_000_000, 69_000_123), (len(data) - 7, len(data))]
    targets = [(tmp_path / f"range-{i}", multi["hash"], len(data), s, e) for i, (s, e) in enumerate(spans)]
    hf_xet_oracle.remote_ranges(targets, server.url, read_token, tmp_path / "ranges")
    for (dest, _, _, start, end) in targets:
        assert dest.read_bytes() == data[start:end], (start, end)

    # The sha256 in each shard's metadata maps the LFS oid to the XET file.
    store = CasStore(server.data_dir)
    for data in inputs.values():
        stored = store.file_by_sha256(hashlib.sha256(data).hexdigest())
        assert stored is not None and stored.size == len(data)


def test_hf_xet_dedups_against_an_earlier_upload(server: RunningServer, tmp_path: Path) -> None:
    v1 = random_bytes(20_000_000, 10)
    v2 = v1[:5_000_000] + b"an edit in the middle" + v1[5_000_000:]
    (tmp_path / "v1.bin").write_bytes(v1)
    (tmp_path / "v2.bin").write_bytes(v2)
    token = server.token("write")
    hf_xet_oracle.remote_upload([tmp_path / "v1.bin"], server.url, token, tmp_path / "a")
    before = _stored_xorb_bytes(server)
    # A fresh hf-xet cache: any dedup must come from our global dedup API.
    (info,) = hf_xet_oracle.remote_upload([tmp_path / "v2.bin"], server.url, token, tmp_path / "b")
    sent = _stored_xorb_bytes(server) - before
    assert 0 < sent < 0.05 * len(v2), f"v2 stored {sent} new xorb bytes"
    hf_xet_oracle.remote_download([(tmp_path / "v2.out", info["hash"], len(v2))], server.url, token, tmp_path / "c")
    assert (tmp_path / "v2.out").read_bytes() == v2


# ---------------------------------------------------------------- reconstruction API


def _fetch_range(client: httpx.Client, server: RunningServer, file_hex: str, token: str, header: str | None, version: int, length: int) -> tuple[int, bytes]:
    """Download like a client: query, fetch each signed range, decode, skip the offset, truncate."""
    headers = bearer(token) | ({"Range": header} if header else {})
    resp = client.get(f"{server.url}/v{version}/reconstructions/{file_hex}", headers=headers)
    if resp.status_code != 200:
        return resp.status_code, b""
    body = resp.json()
    out = bytearray()
    for term in body["terms"]:
        if version == 1:
            (entry,) = [e for e in body["fetch_info"][term["hash"]] if e["range"]["start"] <= term["range"]["start"] and term["range"]["end"] <= e["range"]["end"]]
            first_chunk, url, (b0, b1) = entry["range"]["start"], entry["url"], (entry["url_range"]["start"], entry["url_range"]["end"])
        else:
            (entry,) = [e for e in body["xorbs"][term["hash"]] if e["ranges"][0]["chunks"]["start"] <= term["range"]["start"] < e["ranges"][0]["chunks"]["end"]]
            first_chunk, url = entry["ranges"][0]["chunks"]["start"], entry["url"]
            b0, b1 = entry["ranges"][0]["bytes"]["start"], entry["ranges"][0]["bytes"]["end"]
        data = client.get(url, headers={"Range": f"bytes={b0}-{b1}"})  # no bearer token
        assert data.status_code == 206
        records, _ = xorb.parse_chunk_records(data.content)
        for index in range(term["range"]["start"], term["range"]["end"]):
            out += xorb.decode_chunk(data.content, records[index - first_chunk])
    start = body["offset_into_first_range"]
    assert len(out) - start >= length  # the server returned whole chunks covering the range
    return 200, bytes(out[start : start + length])


@pytest.mark.parametrize("version", [1, 2])
def test_byte_ranges_inclusive_and_416(server: RunningServer, version: int) -> None:
    data = random_bytes(1_500_000, 20 + version) + bytes(500_000)
    built, body, file_hash = _upload_objects(data)
    token = server.token("write")
    file_hex = hashes.hash_to_hex(file_hash)
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token)).status_code == 200
        assert client.post(f"{server.url}/v1/shards", content=body, headers=bearer(token)).json() == {"result": 1}
        for header, expected in [
            (None, data),
            ("bytes=0-0", data[:1]),
            ("bytes=100000-100099", data[100000:100100]),
            ("bytes=131000-1200000", data[131000:1200001]),
            (f"bytes={len(data) - 10}-{len(data) + 1000}", data[-10:]),
            ("bytes=-5", data[-5:]),
        ]:
            status, got = _fetch_range(client, server, file_hex, token, header, version, len(expected))
            assert status == 200 and got == expected, header
        assert client.get(f"{server.url}/v{version}/reconstructions/{file_hex}", headers=bearer(token) | {"Range": f"bytes={len(data)}-{len(data) + 5}"}).status_code == 416
        assert client.get(f"{server.url}/v{version}/reconstructions/{'0' * 63}1", headers=bearer(token)).status_code == 404


def test_signed_urls_are_bound_to_range_and_expiry(server: RunningServer) -> None:
    data = random_bytes(400_000, 30)
    built, body, file_hash = _upload_objects(data)
    token = server.token("write")
    with httpx.Client(timeout=30) as client:
        client.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token))
        client.post(f"{server.url}/v1/shards", content=body, headers=bearer(token))
        recon = client.get(f"{server.url}/v1/reconstructions/{hashes.hash_to_hex(file_hash)}", headers=bearer(token)).json()
        (entry,) = recon["fetch_info"][hashes.hash_to_hex(built.xorb_hash)]
        url, b0, b1 = entry["url"], entry["url_range"]["start"], entry["url_range"]["end"]
        assert b1 == len(built.body) - 1  # inclusive end
        assert client.get(url, headers={"Range": f"bytes={b0}-{b1}"}).content == built.body
        assert client.get(url, headers={"Range": f"bytes={b0}-{b1 - 1}"}).status_code == 403
        assert client.get(url).status_code == 403
        query = parse_qs(urlparse(url).query)
        forged = url.replace(f"r={query['r'][0]}", f"r={b0}-{b1 - 1}")
        assert client.get(forged, headers={"Range": f"bytes={b0}-{b1 - 1}"}).status_code == 403
        expired = url.replace(f"exp={query['exp'][0]}", f"exp={int(time.time()) - 10}")
        assert client.get(expired, headers={"Range": f"bytes={b0}-{b1}"}).status_code == 403


# ---------------------------------------------------------------- hostile input


def test_auth_is_required_and_scoped(server: RunningServer) -> None:
    built, body, _ = _upload_objects(random_bytes(50_000, 40))
    url = f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}"
    before = _snapshot(server)
    with httpx.Client(timeout=30) as client:
        assert client.post(url, content=built.body).status_code == 401
        assert client.post(url, content=built.body, headers=bearer("xet1.garbage.sig")).status_code == 401
        assert client.post(url, content=built.body, headers=bearer(server.token("write", ttl=-5))).status_code == 401
        assert client.post(url, content=built.body, headers=bearer(server.token("read"))).status_code == 403
        assert client.post(f"{server.url}/v1/shards", content=body, headers=bearer(server.token("read"))).status_code == 403
    assert _snapshot(server) == before
    assert server.token("write") not in server.log()


def test_bad_xorbs_are_refused_without_a_trace(server: RunningServer) -> None:
    built, _, _ = _upload_objects(random_bytes(300_000, 50))
    token = server.token("write")
    name = hashes.hash_to_hex(built.xorb_hash)
    before = _snapshot(server)
    with httpx.Client(timeout=30) as client:
        wrong_name = client.post(f"{server.url}/v1/xorbs/default/{'1' * 64}", content=built.body, headers=bearer(token))
        assert wrong_name.status_code == 400 and "does not match" in wrong_name.json()["error"]
        truncated = client.post(f"{server.url}/v1/xorbs/default/{name}", content=built.body[:-100], headers=bearer(token))
        assert truncated.status_code == 400
        assert client.post(f"{server.url}/v1/xorbs/default/{name}", content=b"not a xorb", headers=bearer(token)).status_code == 400
        for path in ["../../etc/passwd", "..%2F..%2Fsecret", "a" * 63 + "/", "g" * 64]:
            resp = client.post(f"{server.url}/v1/xorbs/default/{path}", content=built.body, headers=bearer(token))
            assert resp.status_code in (400, 404), path
        too_big = client.post(f"{server.url}/v1/shards", content=b"\0" * (65 * 1024 * 1024), headers=bearer(token))
        assert too_big.status_code == 413
    assert _snapshot(server) == before


def test_body_cut_short_is_refused(server: RunningServer) -> None:
    built, _, _ = _upload_objects(random_bytes(200_000, 55))
    name = hashes.hash_to_hex(built.xorb_hash)
    before = _snapshot(server)
    host, port = urlparse(server.url).hostname, urlparse(server.url).port
    request = (
        f"POST /v1/xorbs/default/{name} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {server.token('write')}\r\n"
        f"Content-Length: {len(built.body)}\r\n\r\n"
    ).encode() + built.body[: len(built.body) // 2]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)  # the client dies mid-body
        sock.settimeout(10)
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass
    time.sleep(0.3)
    assert _snapshot(server) == before


def test_shards_with_missing_xorbs_or_wrong_verification_are_refused_atomically(server: RunningServer) -> None:
    token = server.token("write")
    good_xorb, _, _ = _upload_objects(random_bytes(300_000, 60))
    _missing_xorb, missing_shard, _ = _upload_objects(random_bytes(300_000, 61))
    data = random_bytes(300_000, 60)
    digest = hash_bytes(data)
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(good_xorb.xorb_hash)}", content=good_xorb.body, headers=bearer(token)).status_code == 200
        before = _snapshot(server)
        resp = client.post(f"{server.url}/v1/shards", content=missing_shard, headers=bearer(token))
        assert resp.status_code == 400 and "never uploaded" in resp.json()["error"]
        # A shard with one valid file and one whose verification hash is wrong: nothing registers.
        term = shard.FileTerm(good_xorb.xorb_hash, len(data), 0, len(good_xorb.chunk_hashes))
        good = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(good_xorb.chunk_hashes),), hashlib.sha256(data).digest())
        bad = shard.FileInfo(bytes(range(32)), (term,), (bytes(32),), None)
        body = shard.serialize_shard(shard.Shard((good, bad)), with_footer=False)
        resp = client.post(f"{server.url}/v2/shards", content=body, headers=bearer(token))
        frames = [line for line in resp.text.splitlines() if line]
        assert '"type": "error"' in frames[-1] and "verification" in frames[-1]
        assert _snapshot(server) == before
        assert client.post(f"{server.url}/v1/shards", content=b"garbage", headers=bearer(token)).status_code == 400
        # The valid file alone registers, and a repeat is answered result 0.
        body = shard.serialize_shard(shard.Shard((good,)), with_footer=False)
        assert client.post(f"{server.url}/v1/shards", content=body, headers=bearer(token)).json() == {"result": 1}
        assert client.post(f"{server.url}/v1/shards", content=body, headers=bearer(token)).json() == {"result": 0}


def test_global_dedup_answer_is_a_keyed_shard_with_footer(server: RunningServer) -> None:
    token = server.token("write")
    data = random_bytes(600_000, 70)
    built, body, _ = _upload_objects(data)
    with httpx.Client(timeout=30) as client:
        client.post(f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token))
        client.post(f"{server.url}/v1/shards", content=body, headers=bearer(token))
        first_chunk = hashes.hash_to_hex(built.chunk_hashes[0])
        for namespace in ("default", "default-merkledb"):
            resp = client.get(f"{server.url}/v1/chunks/{namespace}/{first_chunk}", headers=bearer(token))
            assert resp.status_code == 200
            answer = shard.parse_shard(resp.content)
            key = answer.chunk_hash_key
            assert key is not None and answer.footer.key_expiry > time.time()
            (cas,) = answer.cas
            assert cas.xorb_hash == built.xorb_hash
            assert [c.chunk_hash for c in cas.chunks] == [hashes.hmac_chunk_hash(h, key) for h in built.chunk_hashes]
            assert built.chunk_hashes[0] not in [c.chunk_hash for c in cas.chunks]  # never raw hashes
        assert client.get(f"{server.url}/v1/chunks/default/{'2' * 64}", headers=bearer(token)).status_code == 404
        assert client.post(f"{server.url}/v1/telemetry", content=b"{}").status_code == 200


def test_graceful_shutdown_on_sigterm(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as srv:
        srv.process.terminate()
        # uvicorn drains, logs completion, then re-raises the signal (as systemd expects).
        assert srv.process.wait(timeout=20) in (0, -15)
        assert "Finished server process" in srv.log()


def test_object_keys_cannot_escape_the_store(tmp_path: Path) -> None:
    from git_xet.storage.objects import DirectoryObjectStore

    objects = DirectoryObjectStore(tmp_path)
    for key in ["../x", "a/../../x", "/etc/passwd", "a//b", "", "a/./b", "x y"]:
        with pytest.raises(ValueError):
            objects.put(key, b"data")
    objects.put("xorbs/ab/abcd", b"0123456789")
    assert objects.read_range("xorbs/ab/abcd", 2, 4) == b"234"
