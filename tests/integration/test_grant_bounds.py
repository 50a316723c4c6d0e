"""Upload grants on `--objects s3://...` (a real SeaweedFS) are single-use, bound to whoever
asked for them, and bounded, against an adversary holding a valid write token: a body of any
other length than granted is refused by the store and stages nothing; a commit with another
token of the same repo is refused and changes nothing; a PUT replayed after the commit stages
nothing; one token's grants and one repo's granted bytes are capped (429 with Retry-After) while
other tokens and repos still get theirs."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.checksums import crc64nvme_reference
from git_xet.core.http_headers import bearer
from git_xet.core.reconstruction import MAX_FETCH_RANGE_BYTES
from git_xet.server.grant_limits import GRANT_BURST, GRANTS_PER_SECOND, STAGED_BYTES_PER_REPO
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

REPO = "acme/grants"


@contextmanager
def s3_server(tmp: Path, s3: RunningS3) -> Iterator[tuple[RunningServer, S3ObjectStore]]:
    """One worker process: the grant bounds are counted per process (see grant_limits)."""
    bucket = s3.new_bucket()
    with running_server(tmp / "data", "--objects", f"s3://{bucket}/cas", "--workers", "1", env=s3.env()) as server:
        yield server, S3ObjectStore(S3Location(bucket, "cas"), S3Config.from_env(s3.env()))


def _grant(server: RunningServer, token: str, xorb_hex: str, length: int, crc: int) -> httpx.Response:
    body = {"length": length, "checksum": {"algo": "crc64nvme", "value": str(crc)}}
    return httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=bearer(token), json=body, timeout=30)


def _commit(server: RunningServer, token: str, xorb_hex: str, grant_id: str) -> int:
    return httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{grant_id}", headers=bearer(token), timeout=60).status_code


def _put(grant: dict, body: bytes) -> int:
    return httpx.request(grant["method"], grant["url"], headers=grant["headers"], content=body, timeout=60).status_code


def _staged_bytes(bucket: S3ObjectStore) -> int:
    return sum(size for _key, size in bucket.sizes("uploads/"))


def _state(bucket: S3ObjectStore) -> dict[str, int]:
    """Everything in the bucket, by key and size (what an attack must leave unchanged)."""
    return dict(bucket.sizes())


def test_a_body_of_another_length_stages_nothing(tmp_path: Path, seaweed: RunningS3) -> None:
    with s3_server(tmp_path, seaweed) as (server, bucket):
        token = server.token("write", repo=REPO)

        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
        @given(granted=st.integers(1, 200_000), sent=st.integers(1, 3_000_000), seed=st.integers(0, 2**16))
        def check(granted: int, sent: int, seed: int) -> None:
            if sent == granted:
                sent += 1
            body = random_bytes(sent, seed)
            xorb_hex = hashlib.sha256(body).hexdigest()  # any xorb name the store does not hold
            before = _state(bucket)
            answer = _grant(server, token, xorb_hex, granted, crc64nvme_reference(body))  # the body's own checksum
            assert answer.status_code == 201, answer.text
            grant = answer.json()
            assert _put(grant, body) == 403
            assert _commit(server, token, xorb_hex, grant["id"]) == 404
            assert _state(bucket) == before

        check()


def test_only_the_token_that_got_a_grant_commits_it_and_only_once(tmp_path: Path, seaweed: RunningS3) -> None:
    built, _ = single_xorb(random_bytes(2_000_000, 61))
    body = bytes(built.body)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    with s3_server(tmp_path, seaweed) as (server, bucket):
        owner = server.minted("write", repo=REPO)
        other = server.token("write", repo=REPO)  # a co-writer of the same repo
        grant = _grant(server, owner["accessToken"], xorb_hex, len(body), crc64nvme_reference(body)).json()
        assert _put(grant, body) == 200
        staged = _state(bucket)
        assert _commit(server, other, xorb_hex, grant["id"]) == 403
        forged = grant["id"][:16] + ("0" if grant["id"][16] != "0" else "1") + grant["id"][17:]
        assert _commit(server, owner["accessToken"], xorb_hex, forged) == 403
        assert _state(bucket) == staged  # nothing committed, nothing removed
        # A CAS token minted from the same user token is the same requester (hf-xet refreshes its token).
        cas = httpx.get(f"{server.url}/api/models/{REPO}/xet-write-token/main", headers=bearer(owner["accessToken"]), timeout=30).json()["accessToken"]
        assert _commit(server, cas, xorb_hex, grant["id"]) == 200
        assert bucket.exists(f"xorbs/{xorb_hex[:2]}/{xorb_hex}") and _staged_bytes(bucket) == 0
        after = _state(bucket)
        assert _put(grant, body) == 412  # replayed after the commit
        assert _commit(server, owner["accessToken"], xorb_hex, grant["id"]) == 200  # the xorb is stored: nothing to do
        assert _state(bucket) == after and _staged_bytes(bucket) == 0


def test_grants_per_token_are_capped_and_other_tokens_still_get_theirs(tmp_path: Path, seaweed: RunningS3) -> None:
    with s3_server(tmp_path, seaweed) as (server, bucket):
        greedy, other = server.token("write", repo=REPO), server.token("write", repo=REPO)
        started = time.monotonic()
        statuses: list[int] = []
        with httpx.Client(timeout=30) as client:
            while not statuses or statuses[-1] == 201:
                xorb_hex = f"{len(statuses):064x}"
                answer = client.post(
                    f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=bearer(greedy), json={"length": 100, "checksum": {"algo": "crc64nvme", "value": "1"}}
                )
                statuses.append(answer.status_code)
                assert len(statuses) <= GRANT_BURST + GRANTS_PER_SECOND * (time.monotonic() - started) + 1, "no limit"
        assert statuses[-1] == 429 and len(statuses) > GRANT_BURST
        assert int(answer.headers["Retry-After"]) >= 1
        assert _grant(server, other, "ab" * 32, 100, 1).status_code == 201
        assert _staged_bytes(bucket) == 0


def test_bytes_granted_per_repo_are_capped(tmp_path: Path, seaweed: RunningS3) -> None:
    with s3_server(tmp_path, seaweed) as (server, _bucket):
        writers = [server.token("write", repo=REPO) for _ in range(2)]
        granted = 0
        n = 0
        while True:
            answer = _grant(server, writers[n % 2], f"{n:064x}", MAX_FETCH_RANGE_BYTES, 1)
            n += 1
            if answer.status_code != 201:
                break
            granted += MAX_FETCH_RANGE_BYTES
            assert granted <= STAGED_BYTES_PER_REPO
        assert answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1
        assert granted > STAGED_BYTES_PER_REPO - MAX_FETCH_RANGE_BYTES
        elsewhere = server.token("write", repo="acme/elsewhere")
        assert _grant(server, elsewhere, "cd" * 32, MAX_FETCH_RANGE_BYTES, 1).status_code == 201


def test_a_refused_grant_request_counts_nothing(tmp_path: Path, seaweed: RunningS3) -> None:
    """Requests refused before a grant (bad body) do not use up the token's allowance."""
    with s3_server(tmp_path, seaweed) as (server, _bucket):
        token = server.token("write", repo=REPO)
        for i in range(GRANT_BURST + 10):
            bad = httpx.post(f"{server.url}/v1/xorb-grants/default/{i:064x}", headers=bearer(token), json={"length": -1}, timeout=30)
            assert bad.status_code == 400
        assert _grant(server, token, "ef" * 32, 1000, 1).status_code == 201
