"""Upload grants end to end against the real server: our client and hf-xet use them where
offered and fall back to POST /v1/xorbs where not; each of the client's fallbacks (PUT 403,
PUT 412, commit 404, grant 200) is driven through a fault proxy; the server refuses PUTs that do
not match their grant, and nothing unverified becomes visible."""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from pathlib import Path

import httpx
import pytest

from git_xet.client.http_backend import DIRECT_UPLOAD_BELOW, HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core.checksums import crc64nvme, crc64nvme_reference
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import MAX_PARALLEL_XORBS, Uploader
from git_xet.core.http_headers import bearer
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.fault_proxy import FaultPlan, fault_proxy
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

# A directory server offers grants only when told to: by default only a bucket's grant saves work
# (test_a_directory_server_offers_no_grants_by_default). These tests prove the flow itself.
GRANTS_HERE = ("--upload-grants", "always")
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
DATA = random_bytes(3_000_000, 21)


def _calls(server: RunningServer, since: int = 0) -> Counter:
    """(method, route kind, status) of each request in the access log after the first `since`."""
    out: Counter = Counter()
    for record in server.requests()[since:]:
        kind = record["path"].split("/")[2] if record["path"].startswith("/v1/") else record["path"]
        out[(record["method"], kind, record["status"])] += 1
    return out


def _round_trip(url: str, token: str, data: bytes) -> str:
    backend = HttpCasBackend(url, StaticToken(token), policy=FAST_RETRY)
    with Uploader(backend, global_dedup=False) as up:
        result = up.add_bytes(data)
        up.finalize()
    out = io.BytesIO()
    download(backend, result.file_hex, out, sha256_hex=hashlib.sha256(data).hexdigest())
    assert out.getvalue() == data
    return result.file_hex


def test_crc64nvme_matches_its_reference_and_check_value() -> None:
    assert crc64nvme is not None, "the C extension is not built"
    assert crc64nvme_reference(b"123456789") == 0xAE8B14860A799888  # the catalogue's check value
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 65536 + 3):
        data = random_bytes(n, n)
        assert crc64nvme(data) == crc64nvme_reference(data)
        assert crc64nvme(data[n // 3 :], crc64nvme(data[: n // 3])) == crc64nvme(data)  # resumable


def test_our_client_uses_grants_where_offered_and_posts_where_not(tmp_path: Path) -> None:
    with running_server(tmp_path / "grants" / "data", *GRANTS_HERE) as server:
        _round_trip(server.url, server.token(), DATA)
        calls = _calls(server)
        assert calls[("POST", "xorb-grants", 201)] == 1
        assert calls[("PUT", "xorb-uploads", 200)] == 1
        assert calls[("POST", "xorb-commits", 200)] == 1
        assert not any(kind == "xorbs" for _m, kind, _s in calls)
        # The same xorb again (no cache): the grant answers 200 and nothing is sent.
        before = len(server.requests())
        _round_trip(server.url, server.token(), DATA)
        calls = _calls(server, before)
        assert calls[("POST", "xorb-grants", 200)] == 1 and not any(kind == "xorb-uploads" for _m, kind, _s in calls)
    with running_server(tmp_path / "plain" / "data", "--no-upload-grants") as server:
        _round_trip(server.url, server.token(), DATA + random_bytes(70_000_000, 22))  # two xorbs
        calls = _calls(server)
        # Asked by each upload already under way when the first 404 came back, then remembered.
        assert 1 <= calls[("POST", "xorb-grants", 404)] <= MAX_PARALLEL_XORBS
        assert calls[("POST", "xorbs", 200)] == 2


def test_a_directory_server_offers_no_grants_by_default(tmp_path: Path) -> None:
    """Its grant's PUT would come back to it: two more requests and a CRC-64 on each side per
    xorb than a POST. Our client and hf-xet both take the 404 and POST."""
    source = tmp_path / "model.bin"
    source.write_bytes(DATA)
    with running_server(tmp_path / "ours" / "data") as server:
        _round_trip(server.url, server.token(), DATA)
        calls = _calls(server)
        assert calls[("POST", "xorb-grants", 404)] == 1 and calls[("POST", "xorbs", 200)] == 1
        assert not any(kind in ("xorb-uploads", "xorb-commits") for _m, kind, _s in calls)
    with running_server(tmp_path / "hf" / "data") as server:
        (uploaded,) = hf_xet_oracle.remote_upload([source], server.url, server.token(), tmp_path / "hf-cache")
        calls = _calls(server)
        assert calls[("POST", "xorb-grants", 404)] >= 1 and calls[("POST", "xorbs", 200)] == 1
        assert not any(kind in ("xorb-uploads", "xorb-commits") for _m, kind, _s in calls)
        out = io.BytesIO()
        download(HttpCasBackend(server.url, StaticToken(server.token("read"))), uploaded["hash"], out, sha256_hex=hashlib.sha256(DATA).hexdigest())
        assert out.getvalue() == DATA


def test_hf_xet_uploads_through_our_grants(tmp_path: Path) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(DATA)
    with running_server(tmp_path / "data", *GRANTS_HERE) as server:
        token = server.token()
        (uploaded,) = hf_xet_oracle.remote_upload([source], server.url, token, tmp_path / "hf")
        calls = _calls(server)
        assert calls[("PUT", "xorb-uploads", 200)] == 1 and calls[("POST", "xorb-commits", 200)] == 1
        assert not any(kind == "xorbs" for _m, kind, _s in calls)
        out = io.BytesIO()
        download(HttpCasBackend(server.url, StaticToken(token)), uploaded["hash"], out)
        assert out.getvalue() == DATA


@pytest.mark.parametrize(
    ("statuses", "grants"),
    [
        ({"/v1/xorb-uploads/": [403]}, 2),  # grant expired before the PUT: a new grant
        ({"/v1/xorb-uploads/": [403, 403]}, 3),
        ({"/v1/xorb-commits/": [404]}, 2),  # the commit saw nothing: a new grant (answered 200)
        ({"/v1/xorb-uploads/": [503, 503]}, 1),  # transient: the PUT itself is retried
    ],
)
def test_each_grant_fallback(tmp_path: Path, statuses: dict[str, list[int]], grants: int) -> None:
    with running_server(tmp_path / "data", *GRANTS_HERE) as server:
        plan = FaultPlan(statuses={k: list(v) for k, v in statuses.items()})
        with fault_proxy(server.url, plan) as proxy:
            _round_trip(proxy, server.token(), DATA)
        assert plan.faults_injected == sum(len(v) for v in statuses.values())
        assert sum(n for (m, kind, _s), n in _calls(server).items() if kind == "xorb-grants") == grants


def test_three_lost_grants_fail_the_upload_with_a_message(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", *GRANTS_HERE) as server:
        plan = FaultPlan(statuses={"/v1/xorb-uploads/": [403, 403, 403]})
        with fault_proxy(server.url, plan) as proxy:
            backend = HttpCasBackend(proxy, StaticToken(server.token()), policy=FAST_RETRY)
            built, _ = single_xorb(DATA)
            with pytest.raises(Exception, match="3 upload grants went unused"):
                backend.upload_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)


def test_puts_that_do_not_match_their_grant_are_refused(tmp_path: Path) -> None:
    built, _ = single_xorb(DATA)
    body = bytes(built.body)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    assert crc64nvme is not None
    with running_server(tmp_path / "data", *GRANTS_HERE) as server:
        auth = bearer(server.token())

        def grant(length: int, crc: int) -> dict:
            resp = httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth, json={"length": length, "checksum": {"algo": "crc64nvme", "value": str(crc)}})
            assert resp.status_code == 201, resp.text
            return resp.json()

        def put(g: dict, content: bytes) -> httpx.Response:
            return httpx.request(g["method"], g["url"], headers=g["headers"], content=content)

        tampered = bytearray(body)
        tampered[-1] ^= 1
        assert put(grant(len(body), crc64nvme(body)), bytes(tampered)).status_code == 400  # BadDigest
        g = grant(len(body), crc64nvme(bytes(tampered)))
        assert put(g, bytes(tampered)).status_code == 400  # right checksum, but not the xorb it names
        assert put(grant(len(body), crc64nvme(body)), body[:-1]).status_code == 400  # short
        forged = grant(len(body), crc64nvme(body))
        assert put({**forged, "url": forged["url"].replace("length=", "length=1")}, body).status_code == 403
        assert httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{g['id']}", headers=auth).status_code == 404
        # Nothing above stored anything; a good PUT does, and a second one is 412.
        good = grant(len(body), crc64nvme(body))
        assert put(good, body).status_code == 200
        assert put(good, body).status_code == 412
        assert httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{good['id']}", headers=auth).status_code == 200
        assert httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth, json={"length": len(body), "checksum": {"algo": "crc64nvme", "value": "1"}}).status_code == 200


def test_small_xorbs_are_posted_directly_even_where_grants_are_offered(tmp_path: Path) -> None:
    """A grant's two extra round trips are not worth it below DIRECT_UPLOAD_BELOW bytes."""
    small = random_bytes(DIRECT_UPLOAD_BELOW // 2, 23)
    with running_server(tmp_path / "data", *GRANTS_HERE) as server:
        _round_trip(server.url, server.token(), small)
        calls = _calls(server)
        assert calls[("POST", "xorbs", 200)] == 1
        assert not any(kind in ("xorb-grants", "xorb-uploads", "xorb-commits") for _m, kind, _s in calls)
