"""Every URL the server hands out grants no more than the token that asked could read, on a
directory server and on `--objects s3://...` (SeaweedFS, which checks SigV4 signed headers):

- exactly the planned byte range: an adversary holding a valid read token and the URLs of a
  reconstruction gets 403 without Range and with any other range (wider, shifted, shorter, a
  suffix, two ranges), and 206 with exactly the planned bytes with the planned Range; the xorbs
  hold other files of the same push, which none of this reaches;
- no longer than the token: a URL expires with its token (and a bucket URL within
  BUCKET_URL_MAX_TTL, since no revocation list reaches the bucket);
- no longer than the token is not revoked, where the server serves the URL itself (xorb URLs
  of a directory server, the basic-transfer bridge).
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core.http_headers import bearer
from git_xet.core.reconstruction import Reconstruction
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.server.state import BUCKET_URL_MAX_TTL
from git_xet.storage.cas_store import CasStore
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
REPO = "acme/public"


@contextmanager
def serving(mode: str, tmp: Path, request: pytest.FixtureRequest) -> Iterator[tuple[RunningServer, S3ObjectStore | None]]:
    """A server with its objects in a directory or in a fresh SeaweedFS bucket."""
    if mode == "directory":
        with running_server(tmp / "data") as server:
            yield server, None
        return
    s3: RunningS3 = request.getfixturevalue("seaweed")
    bucket = s3.new_bucket()
    with running_server(tmp / "data", "--objects", f"s3://{bucket}/cas", env=s3.env()) as server:
        yield server, S3ObjectStore(S3Location(bucket, "cas"), S3Config.from_env(s3.env()))


def _push(server: RunningServer, files: list[bytes]) -> list[str]:
    """The files in one upload session (so their xorbs hold several files); their file hashes."""
    backend = HttpCasBackend(server.url, StaticToken(server.token("write", repo=REPO)), policy=FAST_RETRY)
    with Uploader(backend, global_dedup=False) as up:
        results = [up.add_bytes(data) for data in files]
        up.finalize()
    return [r.file_hex for r in results]


def _other_ranges(start: int, end: int) -> list[str | None]:
    """Range headers an adversary tries on the URL of [start, end] (None: no Range at all)."""
    out: list[str | None] = [None, f"bytes={start}-", "bytes=0-", f"bytes=-{end - start + 1}", f"bytes={start}-{end},{start}-{end}", f"bytes={start}-{end + 1}"]
    out += [f"bytes={start + 1}-{end + 1}", f"bytes={start}-{end + 1_000_000}"]
    if start:
        out += [f"bytes={start - 1}-{end}", f"bytes={start - 1}-{end - 1}", f"bytes=0-{end}"]
    if end > start:
        out += [f"bytes={start}-{end - 1}", f"bytes={start + 1}-{end}"]
    return out


@pytest.mark.parametrize("mode", ["directory", "s3"])
def test_every_url_serves_exactly_its_planned_range(mode: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Generated files pushed together, then reconstructions of generated ranges of each, v1
    and v2, asked with a read token: each URL serves its planned bytes, and nothing else."""
    with serving(mode, tmp_path, request) as (server, bucket):
        reader = server.token("read", repo=REPO)
        stored = CasStore(server.data_dir, objects=bucket)

        @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
        @given(sizes=st.lists(st.integers(1, 3_000_000), min_size=2, max_size=4), seed=st.integers(0, 2**16), data=st.data())
        def check(sizes: list[int], seed: int, data: st.DataObject) -> None:
            files = [random_bytes(size, seed + i) for i, size in enumerate(sizes)]
            hashes_ = _push(server, files)
            with httpx.Client(timeout=60) as client:
                for file_hex, content in zip(hashes_, files):
                    first = data.draw(st.integers(0, len(content) - 1), "first")
                    last = data.draw(st.integers(first, len(content) - 1), "last")
                    version = data.draw(st.sampled_from([1, 2]), "version")
                    answer = client.get(f"{server.url}/v{version}/reconstructions/{file_hex}", headers={**bearer(reader), "Range": f"bytes={first}-{last}"})
                    assert answer.status_code == 200, answer.text
                    plan = Reconstruction.from_json(answer.json())
                    assert plan.fetches
                    for fetch in plan.fetches:
                        assert fetch.url is not None
                        start, end = fetch.byte_start, fetch.byte_end
                        for other in _other_ranges(start, end):
                            refused = client.get(fetch.url, headers={} if other is None else {"Range": other})
                            assert refused.status_code == 403, (other, refused.status_code, len(refused.content))
                        served = client.get(fetch.url, headers={"Range": f"bytes={start}-{end}"})
                        assert served.status_code == 206
                        assert served.content == stored.read_xorb_range(fetch.xorb, start, end)

        check()


@pytest.mark.parametrize("mode", ["directory", "s3"])
def test_no_url_outlives_its_token(mode: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    data = random_bytes(300_000, 5)
    with serving(mode, tmp_path, request) as (server, bucket):
        (file_hex,) = _push(server, [data])
        with httpx.Client(timeout=60) as client:
            long_lived = server.token("read", ttl=30 * 24 * 3600, repo=REPO)
            (fetch,) = Reconstruction.from_json(client.get(f"{server.url}/v2/reconstructions/{file_hex}", headers=bearer(long_lived)).json()).fetches
            assert fetch.url is not None
            query = parse_qs(urlsplit(fetch.url).query)
            if bucket is not None:  # no revocation list reaches the bucket: its URLs are short
                assert int(query["X-Amz-Expires"][0]) <= BUCKET_URL_MAX_TTL
            short = server.minted("read", ttl=4, repo=REPO)
            (fetch,) = Reconstruction.from_json(client.get(f"{server.url}/v2/reconstructions/{file_hex}", headers=bearer(short["accessToken"])).json()).fetches
            assert fetch.url is not None
            query = parse_qs(urlsplit(fetch.url).query)
            if bucket is not None:
                assert int(query["X-Amz-Expires"][0]) <= 4
            else:
                assert int(query["exp"][0]) <= short["exp"]
            exact = {"Range": f"bytes={fetch.byte_start}-{fetch.byte_end}"}
            assert client.get(fetch.url, headers=exact).status_code == 206
            deadline = time.monotonic() + 30
            while client.get(fetch.url, headers=exact).status_code != 403:
                assert time.monotonic() < deadline, "a URL outlived its token by 25 s"
                time.sleep(0.5)


def test_revoking_a_token_stops_the_urls_it_was_given(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Xorb URLs of a directory server and bridge URLs: the server serves them itself, so it
    refuses them once their token is revoked (another token's URLs keep working)."""
    data = random_bytes(200_000, 6)
    with serving("directory", tmp_path, request) as (server, _):
        (file_hex,) = _push(server, [data])
        oid = hashlib.sha256(data).hexdigest()
        with httpx.Client(timeout=60) as client:

            def urls(token: str) -> list[tuple[str, dict[str, str]]]:
                plan = Reconstruction.from_json(client.get(f"{server.url}/v1/reconstructions/{file_hex}", headers=bearer(token)).json())
                batch = {"operation": "download", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]}
                answer = client.post(f"{server.url}/{REPO}.git/info/lfs/objects/batch", json=batch, headers=bearer(token))
                bridge = answer.json()["objects"][0]["actions"]["download"]["href"]
                return [(f.url or "", {"Range": f"bytes={f.byte_start}-{f.byte_end}"}) for f in plan.fetches] + [(bridge, {})]

            revoked, kept = server.token("read", repo=REPO), server.token("read", repo=REPO)
            doomed, others = urls(revoked), urls(kept)
            assert all(client.get(url, headers=h).status_code in (200, 206) for url, h in doomed + others)
            run_git_xet("token", "--data", str(server.data_dir), "--revoke", revoked, timeout=60, check=True)
            deadline = time.monotonic() + 20
            while any(client.get(url, headers=h).status_code != 403 for url, h in doomed):
                assert time.monotonic() < deadline, "a revoked token's URLs still work after 20 s"
                time.sleep(0.2)
            assert all(client.get(url, headers=h).status_code in (200, 206) for url, h in others)
            out = io.BytesIO()
            download(HttpCasBackend(server.url, StaticToken(kept), policy=FAST_RETRY), file_hex, out, sha256_hex=oid)
            assert out.getvalue() == data
