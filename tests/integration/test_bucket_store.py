"""The serverless bucket store (s3://BUCKET[/PREFIX]) on a real SeaweedFS: its layout, dedup
across machines through the bucket, downloads planned from stored footers and verified, and
end to end with real git + git-lfs: push, a fresh clone on another "machine" (HOME and cache),
a v2 push sending only changed chunks, two concurrent pushers, wrong credentials."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from git_xet.client.bucket_backend import BucketBackend, create_bucket_store
from git_xet.client.errors import TransferError
from git_xet.client.location import LocationError, StoreLocation, parse_store_location
from git_xet.core import hashes
from git_xet.core.shard import parse_shard
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.fault_proxy import FaultPlan, fault_proxy
from tests.support.gitenv import GitEnv, agent_pids, cached_xorbs, make_git_env
from tests.support.seaweed import RunningS3

MIB = 1024 * 1024


def _objects(s3: RunningS3, bucket: str, prefix: str = "team/store", **env: str) -> S3ObjectStore:
    return S3ObjectStore(S3Location(bucket, prefix), S3Config.from_env(s3.env(**env)))


def _bytes_under(objects: S3ObjectStore, prefix: str) -> int:
    return sum(size for _key, size in objects.sizes(prefix))


def _edited(data: bytes, fraction: float, seed: int) -> bytes:
    """`data` with a contiguous `fraction` of it replaced by other random bytes, mid-file."""
    n = int(len(data) * fraction)
    start = len(data) // 2
    return data[:start] + random_bytes(n, seed) + data[start + n :]


# ------------------------------------------------------------------ the backend in process


def test_layout_second_machine_and_dedup_through_the_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket)
    assert create_bucket_store(objects) is True
    assert create_bucket_store(objects) is False  # idempotent
    data = random_bytes(9 * MIB, 41)
    first = BucketBackend(objects, tmp_path / "cache-a")
    with Uploader(first) as up:
        v1 = up.add_bytes(data)
        up.finalize()
    keys = dict(objects.sizes())
    (shard_key,) = [k for k in keys if k.startswith("shards/")]
    shard_id = shard_key.removeprefix("shards/").removesuffix(".mdb")
    shard = parse_shard(objects.read(shard_key))
    assert {f"xorbs/{hashes.hash_to_hex(c.xorb_hash)[:2]}/{hashes.hash_to_hex(c.xorb_hash)}" for c in shard.cas} == {k for k in keys if k.startswith("xorbs/")}
    assert objects.read(f"files/{v1.file_hex}").decode() == shard_id
    assert objects.read(f"lfs/{v1.sha256_hex}").decode() == v1.file_hex
    dedup_keys = [k for k in keys if k.startswith("dedup/")]
    chunk_count = sum(len(c.chunks) for c in shard.cas)
    assert 1 <= len(dedup_keys) < max(2, chunk_count // 20)  # key chunks only, never one per chunk

    # Another machine: no shard cache, no memory of the push.
    other = BucketBackend(_objects(seaweed, bucket), tmp_path / "cache-b")
    assert other.file_for_sha256(hashlib.sha256(data).hexdigest()) == v1.file_hex
    assert other.file_for_sha256("0" * 64) is None
    out = io.BytesIO()
    result = download(other, v1.file_hex, out, sha256_hex=hashlib.sha256(data).hexdigest())
    assert out.getvalue() == data and result.verified_file_hash
    part = io.BytesIO()
    download(other, v1.file_hex, part, byte_range=(1_000_000, 5_000_000))
    assert part.getvalue() == data[1_000_000:5_000_001]

    # Its v2 (1% edited) finds v1 through the bucket's dedup entries and sends about 1%.
    v2_data = _edited(data, 0.01, 42)
    before = _bytes_under(objects, "xorbs/")
    with Uploader(other) as up:
        v2 = up.add_bytes(v2_data)
        up.finalize()
    added = _bytes_under(objects, "xorbs/") - before
    assert added < 0.05 * len(data), added
    assert v2.deduped_bytes > 0.9 * len(data)
    out = io.BytesIO()
    download(BucketBackend(_objects(seaweed, bucket)), v2.file_hex, out, sha256_hex=hashlib.sha256(v2_data).hexdigest())
    assert out.getvalue() == v2_data


def test_a_damaged_or_missing_object_never_passes_as_a_download(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket)
    create_bucket_store(objects)
    data = random_bytes(3 * MIB, 43)
    with Uploader(BucketBackend(objects)) as up:
        v1 = up.add_bytes(data)
        up.finalize()
    (xorb_key,) = [k for k, _ in objects.list("xorbs/")]
    stored = objects.read(xorb_key)
    damaged = bytearray(stored)
    damaged[100] ^= 0xFF  # inside the first chunk's payload; the footer is intact
    objects.put(xorb_key, bytes(damaged))
    with pytest.raises(TransferError):
        download(BucketBackend(objects), v1.file_hex, io.BytesIO())
    objects.put(xorb_key, stored[: len(stored) // 2])  # footer gone
    with pytest.raises(TransferError, match="no valid footer"):
        download(BucketBackend(objects), v1.file_hex, io.BytesIO())
    objects.delete(xorb_key)
    with pytest.raises(TransferError, match="missing"):
        download(BucketBackend(objects), v1.file_hex, io.BytesIO())


def test_a_push_that_died_before_its_shard_exposes_nothing(tmp_path: Path, seaweed: RunningS3) -> None:
    """Xorbs stored, shard not: no name points at the file, and the next push reuses the xorbs."""
    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket)
    create_bucket_store(objects)
    data = random_bytes(3 * MIB, 44)
    backend = BucketBackend(objects)
    with Uploader(backend) as up:
        uploaded = up.add_bytes(data)
        up._close_slot()  # the xorbs go out; finalize (the shard) never runs: the process "died"
        for future in up._uploads:
            future.result()
    assert list(objects.list("xorbs/")) and not list(objects.list("shards/"))
    assert backend.file_for_sha256(uploaded.sha256_hex) is None
    assert not list(objects.list("files/")) and not list(objects.list("lfs/"))
    xorbs_before = dict(objects.sizes("xorbs/"))
    with Uploader(BucketBackend(objects)) as up:
        up.add_bytes(data)
        up.finalize()
        assert up.stats.xorb_bytes_sent == 0  # the stored xorb is found (HEAD), not sent again
    assert dict(objects.sizes("xorbs/")) == xorbs_before


def test_a_bucket_prefix_that_is_not_a_store_is_refused(seaweed: RunningS3) -> None:
    backend = BucketBackend(_objects(seaweed, seaweed.new_bucket()))
    with pytest.raises(TransferError, match="git xet install --standalone s3://"):
        backend.file_for_sha256("0" * 64)


# ------------------------------------------------------------------ real git + git-lfs


def _machine(tmp: Path, name: str, s3: RunningS3, **env: str) -> GitEnv:
    g = make_git_env(tmp / name)
    for key in [k for k in g.env if k.startswith("AWS_")]:
        del g.env[key]
    g.env.update(s3.env(**env))
    return g


def test_git_push_clone_elsewhere_and_v2_through_a_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    store = f"s3://{bucket}/team/store"
    objects = _objects(seaweed, bucket)
    remote = tmp_path / "remote.git"
    a = _machine(tmp_path, "a", seaweed)
    a.git("init", "--bare", str(remote))
    out = a.git_xet("install", "--standalone", store)
    assert f"created a new XET store at {store}" in out.stdout
    files = {"model.bin": random_bytes(12 * MIB, 45), "zeros.bin": bytes(2 * MIB), "notes.txt": b"plain git\n"}
    work = a.lfs_work_tree(files, remote=remote, new_remote=False)
    a.git("push", "origin", "main", cwd=work)
    for name in ("model.bin", "zeros.bin"):
        assert objects.exists(f"lfs/{hashlib.sha256(files[name]).hexdigest()}")

    b = _machine(tmp_path, "b", seaweed)  # another HOME and cache
    assert "using the existing XET store" in b.git_xet("install", "--standalone", store).stdout
    b.git("clone", str(remote), "clone")
    for name, data in files.items():
        assert (b.root / "clone" / name).read_bytes() == data
    assert "Git LFS fsck OK" in b.git("lfs", "fsck", cwd=b.root / "clone").stdout

    v2 = _edited(files["model.bin"], 0.01, 46)
    (work / "model.bin").write_bytes(v2)
    a.git("commit", "-am", "v2", cwd=work)
    before = _bytes_under(objects, "xorbs/")
    a.git("push", "origin", "main", cwd=work)
    assert _bytes_under(objects, "xorbs/") - before < 0.05 * len(v2)
    b.git("pull", cwd=b.root / "clone")
    assert (b.root / "clone" / "model.bin").read_bytes() == v2


def test_two_machines_push_overlapping_content_at_once(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    store = f"s3://{bucket}"
    shared = random_bytes(10 * MIB, 47)
    content = {
        "a": {"shared.bin": shared, "only-a.bin": random_bytes(4 * MIB, 48)},
        "b": {"shared.bin": shared, "only-b.bin": random_bytes(4 * MIB, 49)},
    }
    pushes = {}
    machines = {}
    for name, files in content.items():
        g = machines[name] = _machine(tmp_path, name, seaweed)
        remote = tmp_path / f"{name}.git"
        g.git("init", "--bare", str(remote))
        g.git_xet("install", "--standalone", store)
        pushes[name] = (g, g.lfs_work_tree(files, remote=remote, new_remote=False))
    procs = {name: g.popen("git", "push", "origin", "main", cwd=work) for name, (g, work) in pushes.items()}
    for name, proc in procs.items():
        assert proc.wait(timeout=300) == 0, (machines[name].root / "popen.log").read_text(errors="replace")[-3000:]
    objects = _objects(seaweed, bucket, prefix="")
    assert _bytes_under(objects, "xorbs/") < 1.15 * (len(shared) + 8 * MIB)  # racing writers of one xorb: one copy
    c = _machine(tmp_path, "c", seaweed)
    c.git_xet("install", "--standalone", store)
    for name, files in content.items():
        c.git("clone", str(tmp_path / f"{name}.git"), f"clone-{name}")
        for file, data in files.items():
            assert (c.root / f"clone-{name}" / file).read_bytes() == data


def test_wrong_credentials_give_a_clear_message(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    store = f"s3://{bucket}"
    bad = _machine(tmp_path, "bad", seaweed, AWS_SECRET_ACCESS_KEY="Wr0ngSecretValue")
    refused = bad.git_xet("install", "--standalone", store, check=False)
    assert refused.returncode != 0
    assert "secret key does not match the access key" in refused.stderr and "Wr0ngSecretValue" not in refused.stderr

    g = _machine(tmp_path, "good", seaweed)
    g.git("init", "--bare", str(tmp_path / "remote.git"))
    g.git_xet("install", "--standalone", store)
    work = g.lfs_work_tree({"model.bin": random_bytes(MIB, 50)}, remote=tmp_path / "remote.git", new_remote=False)
    g.env["AWS_ACCESS_KEY_ID"] = "nobody-knows-me"
    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0
    assert "access key is unknown to the store" in push.stderr, push.stderr


@dataclass
class _RecordingPlan(FaultPlan):
    """A FaultPlan that also records every request it sees ("METHOD /path?query")."""

    log: list[str] = field(default_factory=list)

    def decide(self, path: str) -> str | None:
        with self.lock:
            self.log.append(path)
        return super().decide(path)


def test_agent_killed_mid_push_then_the_next_push_resumes(tmp_path: Path, seaweed: RunningS3) -> None:
    bucket = seaweed.new_bucket()
    data = random_bytes(140 * MIB, 51)  # three xorbs
    xorb_puts = f"PUT /{bucket}/xorbs/"
    plan = _RecordingPlan(hold={xorb_puts: 1})
    with fault_proxy(seaweed.endpoint, plan) as proxy:
        g = _machine(tmp_path, "a", seaweed, AWS_ENDPOINT_URL=proxy)
        g.git("init", "--bare", str(tmp_path / "remote.git"))
        g.git_xet("install", "--standalone", f"s3://{bucket}")
        work = g.lfs_work_tree({"model.bin": data}, remote=tmp_path / "remote.git", new_remote=False)
        push = g.popen("git", "push", "origin", "main", cwd=work)
        assert plan.held.wait(timeout=180), "the push never reached its second xorb"
        cache = Path(g.env["GIT_XET_CACHE"])
        deadline = time.monotonic() + 60
        while not cached_xorbs(cache):  # the first xorb recorded as stored (the resume point)
            assert time.monotonic() < deadline, "the first xorb was never recorded as stored"
            time.sleep(0.05)
        agents = agent_pids(g)
        assert agents
        for pid in agents:
            os.kill(pid, signal.SIGKILL)
        assert push.wait(timeout=120) != 0
        objects = _objects(seaweed, bucket, prefix="")
        first = [k for k, _ in objects.list("xorbs/")]
        assert len(first) == 1
        assert not list(objects.list("shards/")) and not list(objects.list("lfs/")) and not list(objects.list("files/"))

        plan.release()
        before = len(plan.log)
        g.git("push", "-q", "origin", "main", cwd=work)
        resent = [p for p in plan.log[before:] if p.startswith(xorb_puts)]
        assert 1 <= len(resent) <= 2 and not any(first[0] in p for p in resent), resent
    assert objects.exists(f"lfs/{hashlib.sha256(data).hexdigest()}")
    c = _machine(tmp_path, "c", seaweed)
    c.git_xet("install", "--standalone", f"s3://{bucket}")
    c.git("clone", str(tmp_path / "remote.git"), "clone")
    assert hashlib.sha256((c.root / "clone" / "model.bin").read_bytes()).digest() == hashlib.sha256(data).digest()


def test_locations_and_doctor(tmp_path: Path, seaweed: RunningS3) -> None:
    assert parse_store_location("s3://team-models/lfs/") == StoreLocation("s3", "s3://team-models/lfs")
    for bad, says in (("s3://x", "bucket name"), ("s3://bucket/../up", "prefix"), ("s4://bucket", "did you mean s3://")):
        with pytest.raises(LocationError, match=says):
            parse_store_location(bad)
    bucket = seaweed.new_bucket()
    g = _machine(tmp_path, "a", seaweed)
    g.git_xet("install", "--standalone", f"s3://{bucket}/p")
    ok = g.git_xet("doctor", check=False)
    assert f"bucket store s3://{bucket}/p" in ok.stdout + ok.stderr
    g.env["AWS_SECRET_ACCESS_KEY"] = "Wr0ngSecretValue"
    bad = g.git_xet("doctor", check=False)
    assert bad.returncode != 0 and "secret key does not match" in bad.stdout + bad.stderr
