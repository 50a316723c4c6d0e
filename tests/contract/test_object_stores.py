"""The ObjectStore contract, run against the directory store and the S3 store (on a real
SeaweedFS), and what only the S3 store offers: presigned PUTs whose checksum and
`If-None-Match: *` are signed in, presigned ranged GETs, delete and list."""

from __future__ import annotations

import io
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core.checksums import crc64nvme, crc64nvme_header, crc64nvme_reference
from git_xet.storage.objects import DirectoryObjectStore, ObjectStore
from git_xet.storage.s3 import MIN_COPY_PART_BYTES, READ_STEP, PartsBody, S3Config, S3Error, S3Location, S3ObjectStore, parse_s3_url
from tests.support.datagen import random_bytes
from tests.support.seaweed import RunningS3


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "directory":
        yield DirectoryObjectStore(tmp_path / "objects")
    else:
        s3: RunningS3 = request.getfixturevalue("seaweed")
        yield S3ObjectStore(S3Location(s3.new_bucket(), "some/prefix"), S3Config.from_env(s3.env()))


@pytest.fixture
def s3_store(seaweed: RunningS3) -> S3ObjectStore:
    return S3ObjectStore(S3Location(seaweed.new_bucket(), "pre"), S3Config.from_env(seaweed.env()))


def test_put_read_exists_and_missing(store: ObjectStore) -> None:
    body = random_bytes(100_003, 1)
    assert not store.exists("xorbs/ab/k1")
    store.put("xorbs/ab/k1", body[:5], memoryview(body)[5:])
    assert store.exists("xorbs/ab/k1")
    assert store.read("xorbs/ab/k1") == body
    store.put("xorbs/ab/k1", b"replaced")
    assert store.read("xorbs/ab/k1") == b"replaced"
    with pytest.raises(FileNotFoundError):
        store.read("xorbs/ab/missing")


@pytest.mark.parametrize("size", [10, 200_000])  # a packed row and a file, in a directory store
def test_modified_is_the_listed_time_and_none_when_absent(store: ObjectStore, size: int) -> None:
    """What gc reads again before a removal: the same time the listing gives, None when absent."""
    assert store.modified("xorbs/ab/k2") is None
    before = time.time()
    store.put("xorbs/ab/k2", random_bytes(size, 2))
    (listed,) = [mtime for key, mtime in store.list("xorbs/") if key == "xorbs/ab/k2"]
    modified = store.modified("xorbs/ab/k2")
    assert modified == pytest.approx(listed, abs=1.0) and modified > before - 5  # S3 keeps whole seconds in listings
    store.delete("xorbs/ab/k2")
    assert store.modified("xorbs/ab/k2") is None


def test_put_new_creates_once(store: ObjectStore) -> None:
    assert store.put_new("shards/x.mdb", b"first") is True
    assert store.put_new("shards/x.mdb", b"second") is False
    assert store.read("shards/x.mdb") == b"first"


def test_racing_put_new_has_exactly_one_winner(store: ObjectStore) -> None:
    bodies = [random_bytes(50_000, 100 + i) for i in range(6)]
    results: list[bool] = [False] * len(bodies)
    start = threading.Barrier(len(bodies))

    def write(i: int) -> None:
        start.wait(timeout=30)
        results[i] = store.put_new("race/key", bodies[i])

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results.count(True) == 1
    assert store.read("race/key") == bodies[results.index(True)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([10, 70_000, 200_000]), st.booleans()), min_size=1, max_size=8), seed=st.integers(0, 2**16))
def test_put_new_many_does_what_put_new_of_each_does(store: ObjectStore, plan: list[tuple[int, int, bool]], seed: int) -> None:
    """Keys stored before or not, repeated within the batch, small (a directory store's packed
    rows, written in one transaction) and large: the same answers and the same objects as
    put_new of each, in order."""
    prefix = f"many/{uuid.uuid4().hex}"  # (the store lives across examples)
    items = [(f"{prefix}/k{key}", (random_bytes(size, seed + i)[:3], random_bytes(size, seed + i)[3:])) for i, (key, size, _) in enumerate(plan)]
    expected: dict[str, bytes] = {}
    for (key, _, before), (name, _parts) in zip(plan, items):
        if before and name not in expected:  # stored before the batch
            expected[name] = b"before" + bytes([key])
            store.put(name, expected[name])
    answers = []
    for name, parts in items:  # what put_new of each would answer, in order
        answers.append(name not in expected)
        expected.setdefault(name, b"".join(parts))
    assert store.put_new_many(items) == answers
    assert {name: store.read(name) for name in expected} == expected


OBJECT = random_bytes(70_001, 7)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.integers(0, len(OBJECT) + 10), length=st.integers(1, len(OBJECT) + 10))
def test_read_range_matches_slicing(store: ObjectStore, start: int, length: int) -> None:
    if not store.exists("ranged"):
        store.put("ranged", OBJECT)
    end = start + length - 1
    assert store.read_range("ranged", start, end) == OBJECT[start : end + 1]


def test_unsafe_or_bad_locations_are_refused() -> None:
    with pytest.raises(ValueError):
        DirectoryObjectStore(Path("/nonexistent")).read("../etc/passwd")
    assert parse_s3_url("s3://bucket-1/team/models/") == S3Location("bucket-1", "team/models")
    assert parse_s3_url("s3://bucket-1") == S3Location("bucket-1", "")
    for bad in ("s3://", "s3://a", "http://bucket/x", "s3://bucket/../x", "s3://bucket/a//b", "s3://b?x/y"):
        with pytest.raises(ValueError):
            parse_s3_url(bad)


# ---------------------------------------------------------------- S3 only


@pytest.mark.parametrize("size", [0, 5, 4096, 70_001])
def test_read_tail(s3_store: S3ObjectStore, size: int) -> None:
    body = random_bytes(size, size)
    s3_store.put("tailed", body)
    for length in (1, 4, 4096, 100_000):
        tail, total = s3_store.read_tail("tailed", length)
        assert total == size
        assert tail == body[-length:] if size else tail == b""


def test_copy_new_appends_a_tail_inside_the_store_and_creates_once(s3_store: S3ObjectStore) -> None:
    source = random_bytes(MIN_COPY_PART_BYTES + 12_345, 71)
    s3_store.put("uploads/x/g", source)
    assert s3_store.copy_new("uploads/x/g", "xorbs/x", b"first tail")
    assert s3_store.read("xorbs/x") == source + b"first tail"
    assert not s3_store.copy_new("uploads/x/g", "xorbs/x", b"second tail")  # exists: left as it was
    assert s3_store.read("xorbs/x") == source + b"first tail"
    with pytest.raises(FileNotFoundError):
        s3_store.copy_new("uploads/none/g", "xorbs/y", b"tail")
    assert not s3_store.exists("xorbs/y")
    # Nothing half-done stays behind: the refused and failed copies aborted their uploads.
    assert not s3_store.client.list_multipart_uploads(Bucket=s3_store.bucket).get("Uploads")


@pytest.mark.parametrize("size", [0, 1, READ_STEP - 1, READ_STEP, 3 * READ_STEP + 17])
def test_read_into_fills_the_buffer_and_reports_progress(s3_store: S3ObjectStore, size: int) -> None:
    body = random_bytes(size, size + 1)
    s3_store.put("whole", body)
    buffer = bytearray(size + 100)
    seen: list[int] = []
    assert s3_store.read_into("whole", buffer, progress=seen.append) == size
    assert bytes(buffer[:size]) == body
    assert seen == [min(step, size) for step in range(READ_STEP, size + READ_STEP, READ_STEP)] if size else seen == []
    if size:
        with pytest.raises(S3Error, match="more than"):
            s3_store.read_into("whole", bytearray(size - 1))
    with pytest.raises(FileNotFoundError):
        s3_store.read_into("absent", buffer)


def test_delete_and_list(s3_store: S3ObjectStore) -> None:
    keys = {f"xorbs/{i:02x}/k{i}": random_bytes(10 + i, i) for i in range(12)}
    for key, body in keys.items():
        s3_store.put(key, body)
    s3_store.put("shards/s.mdb", b"shard")
    assert dict(s3_store.sizes("xorbs/")) == {k: len(v) for k, v in keys.items()}
    listed = dict(s3_store.list())
    assert sorted(listed) == sorted([*keys, "shards/s.mdb"])
    # list() is the ObjectStore protocol's (key, last-modified time): gc's grace period reads it.
    assert all(abs(modified - time.time()) < 600 for modified in listed.values()), listed
    s3_store.delete("xorbs/00/k0")
    s3_store.delete("xorbs/00/k0")  # absent: no error
    assert not s3_store.exists("xorbs/00/k0")
    assert len(list(s3_store.list("xorbs/"))) == len(keys) - 1


def _signed_headers(url: str) -> list[str]:
    return url.lower().split("x-amz-signedheaders=")[1].split("&")[0].replace("%3b", ";").split(";")


def test_presigned_put_is_bound_to_its_checksum_and_creates_once(s3_store: S3ObjectStore) -> None:
    body = random_bytes(200_000, 3)
    crc = crc64nvme(body) if crc64nvme else crc64nvme_reference(body)
    url, headers = s3_store.presign_put_new("staging/a", len(body), crc, 60)
    assert {"x-amz-checksum-crc64nvme", "content-length", "if-none-match"} <= set(_signed_headers(url))
    tampered = bytearray(body)
    tampered[1000] ^= 1
    refused = httpx.put(url, content=bytes(tampered), headers=headers)
    assert refused.status_code == 400 and "BadDigest" in refused.text
    assert not s3_store.exists("staging/a")
    unsigned = httpx.put(url, content=body, headers={**headers, "x-amz-meta-extra": "1"})
    assert unsigned.status_code == 403
    stripped = httpx.put(url, content=body, headers={"If-None-Match": "*"})  # checksum header dropped
    assert stripped.status_code == 403
    assert not s3_store.exists("staging/a")
    assert httpx.put(url, content=body, headers=headers).status_code == 200
    assert s3_store.read("staging/a") == body
    assert httpx.put(url, content=body, headers=headers).status_code == 412


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(length=st.integers(1, 300_000), extra=st.integers(-299_999, 5_000_000).filter(lambda n: n != 0))
def test_presigned_put_takes_only_its_signed_length(s3_store: S3ObjectStore, length: int, extra: int) -> None:
    """A body of any other length than the grant's is refused, whatever its checksum: a
    100-byte grant cannot stage 200 MiB (the checksum alone bound only the content)."""
    other = random_bytes(max(1, length + extra), length)
    crc = crc64nvme_reference(random_bytes(length, length))
    url, headers = s3_store.presign_put_new(f"staging/len{length}", length, crc, 60)
    own_crc = {**headers, "x-amz-checksum-crc64nvme": crc64nvme_header(crc64nvme_reference(other))}
    for sent in (headers, own_crc):
        assert httpx.put(url, content=other, headers=sent).status_code == 403
    streamed = httpx.put(url, content=iter([other]), headers=headers)  # chunked: no Content-Length at all
    assert streamed.status_code in (403, 411)
    assert not s3_store.exists(f"staging/len{length}")


def test_presigned_put_expires(s3_store: S3ObjectStore) -> None:
    body = b"expiring body"
    url, headers = s3_store.presign_put_new("staging/b", len(body), crc64nvme_reference(body), 1)
    time.sleep(2.2)
    assert httpx.put(url, content=body, headers=headers).status_code == 403
    assert not s3_store.exists("staging/b")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_presigned_get_serves_exactly_its_signed_range(s3_store: S3ObjectStore, data: st.DataObject) -> None:
    """The URL of one range serves that range and nothing else: no Range, a wider, shifted,
    shorter or suffix range, two ranges, or a tampered signature are all refused."""
    s3_store.put("xorbs/aa/x", OBJECT)
    size = len(OBJECT)
    start = data.draw(st.integers(0, size - 1), "start")
    end = data.draw(st.integers(start, size - 1), "end")
    url = s3_store.presign_range("xorbs/aa/x", start, end, 60)
    assert "range" in _signed_headers(url)
    exact = httpx.get(url, headers={"Range": f"bytes={start}-{end}"})
    assert exact.status_code == 206 and exact.content == OBJECT[start : end + 1]
    others = [f"bytes={start}-", "bytes=0-", f"bytes=-{end - start + 1}", f"bytes={start}-{end},{start}-{end}", f"bytes={start}-{end + 1}", f"bytes={start + 1}-{end + 1}"]
    if start:
        others += [f"bytes={start - 1}-{end}", f"bytes={start - 1}-{end - 1}"]
    if end > start:
        others += [f"bytes={start}-{end - 1}", f"bytes={start + 1}-{end}"]
    assert httpx.get(url).status_code == 403  # the whole object
    for other in others:
        assert httpx.get(url, headers={"Range": other}).status_code == 403, other
    assert httpx.get(url.replace("X-Amz-Signature=", "X-Amz-Signature=0"), headers={"Range": f"bytes={start}-{end}"}).status_code == 403


def test_presigned_get_expires(s3_store: S3ObjectStore) -> None:
    s3_store.put("xorbs/aa/y", OBJECT)
    url = s3_store.presign_range("xorbs/aa/y", 0, 99, 1)
    time.sleep(2.2)
    assert httpx.get(url, headers={"Range": "bytes=0-99"}).status_code == 403


def test_wrong_credentials_say_which(seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    wrong_secret = S3ObjectStore(S3Location(bucket), S3Config.from_env(seaweed.env(AWS_SECRET_ACCESS_KEY="not-the-secret")))
    with pytest.raises(S3Error, match="secret key does not match"):
        wrong_secret.put("k", b"v")
    wrong_key = S3ObjectStore(S3Location(bucket), S3Config.from_env(seaweed.env(AWS_ACCESS_KEY_ID="nobody")))
    with pytest.raises(S3Error, match="access key is unknown"):
        wrong_key.read("k")
    with pytest.raises(S3Error, match="credentials are wrong"):  # a HEAD answer has no error code
        wrong_key.exists("k")
    missing = S3ObjectStore(S3Location("no-such-bucket-here"), S3Config.from_env(seaweed.env()))
    with pytest.raises(S3Error, match="does not exist"):
        missing.put("k", b"v")


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.binary(max_size=300), max_size=5),
    steps=st.lists(st.tuples(st.sampled_from(["read", "seek_set", "seek_cur", "seek_end"]), st.integers(-400, 400)), max_size=12),
)
def test_parts_body_reads_and_seeks_as_the_joined_bytes(parts: list[bytes], steps: list[tuple[str, int]]) -> None:
    """PartsBody (the join-free PUT body) against io.BytesIO of the joined parts, step by step."""
    joined = b"".join(parts)
    body, model = PartsBody(tuple(memoryview(p) for p in parts)), io.BytesIO(joined)
    assert len(body) == len(joined)
    for op, n in steps:
        if op == "read":
            assert body.read(n if n >= 0 else -1) == model.read(n if n >= 0 else -1)
        else:
            whence = {"seek_set": io.SEEK_SET, "seek_cur": io.SEEK_CUR, "seek_end": io.SEEK_END}[op]
            target = {io.SEEK_SET: 0, io.SEEK_CUR: model.tell(), io.SEEK_END: len(joined)}[whence] + n
            model.seek(min(max(target, 0), len(joined)))  # PartsBody clamps into [0, size]
            assert body.seek(n, whence) == model.tell()
        assert body.tell() == model.tell()
    body.seek(0)
    assert body.read() == joined


def test_a_put_of_parts_makes_no_joined_copy(s3_store: S3ObjectStore) -> None:
    """A commit stores body + footer: the PUT streams the parts (a bound with a wide margin:
    a joined copy alone would be 16 MiB)."""
    body, footer = random_bytes(16 * 1024 * 1024, 7), random_bytes(5000, 8)
    tracemalloc.start()
    try:
        assert s3_store.put_new("xorbs/aa/parts", body, memoryview(footer))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak
    assert s3_store.read("xorbs/aa/parts") == body + footer
