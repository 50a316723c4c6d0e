"""A co-writer of a bucket store lies; an honest `git push` never reports success without its
bytes stored.

Anyone with the bucket's credentials can create any key. Before an honest push (real git +
git-lfs + our agent), a co-writer (a plain botocore client) plants one of the lies the layout
lets them tell: bytes under a xorb key that are not that xorb (junk, a truncated copy, another
xorb), an `lfs/<oid>` naming another file or holding junk, or a dedup shard claiming a stored
xorb holds the new file's chunks. The push then stores the real bytes: a fresh clone on another
machine comes back byte-identical. Planted objects of hundreds of MiB do not make the agent
allocate in proportion."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes, shard
from git_xet.pipelines.upload import GLOBAL_DEDUP_MIN_FILE
from git_xet.storage.s3 import S3Config, make_client
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, agent_peak_rss, make_git_env, record_agent_rss
from tests.support.objects import single_xorb
from tests.support.seaweed import RunningS3

MIB = 1024 * 1024
HYPOTHESIS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _machine(tmp: Path, s3: RunningS3) -> GitEnv:
    g = make_git_env(tmp)
    for key in [k for k in g.env if k.startswith("AWS_")]:
        del g.env[key]
    g.env.update(s3.env())
    return g


def _xorb_key(xorb_hash: bytes) -> str:
    name = hashes.hash_to_hex(xorb_hash)
    return f"xorbs/{name[:2]}/{name}"


class Bucket:
    """A fresh bucket store, its co-writer's client, and an honest pusher."""

    def __init__(self, tmp: Path, s3: RunningS3) -> None:
        self.tmp, self.s3 = tmp, s3
        self.name = s3.new_bucket()
        self.cowriter: Any = make_client(S3Config.from_env(s3.env()))
        self.pusher = _machine(tmp / "pusher", s3)
        self.pusher.git_xet("install", "--standalone", f"s3://{self.name}")

    def plant(self, key: str, body: bytes) -> None:
        self.cowriter.put_object(Bucket=self.name, Key=key, Body=body)

    def read(self, key: str) -> bytes:
        return self.cowriter.get_object(Bucket=self.name, Key=key)["Body"].read()

    def push_and_clone(self, files: dict[str, bytes], repo: str = "repo") -> None:
        """The honest push succeeds and a fresh clone elsewhere is byte-identical."""
        remote = self.tmp / f"{repo}.git"
        self.pusher.git("init", "--bare", str(remote))
        work = self.pusher.lfs_work_tree(files, work=f"work-{repo}", remote=remote, new_remote=False)
        self.pusher.git("push", "origin", "main", cwd=work)
        reader = _machine(self.tmp / f"reader-{repo}", self.s3)
        reader.git_xet("install", "--standalone", f"s3://{self.name}")
        reader.git("clone", str(remote), "clone")
        for name, data in files.items():
            assert hashlib.sha256((reader.root / "clone" / name).read_bytes()).digest() == hashlib.sha256(data).digest(), name


def _fresh(tmp_path: Path) -> Path:
    path = tmp_path / os.urandom(4).hex()  # one per generated example
    path.mkdir()
    return path


def _other_xorb_body(seed: int) -> bytes:
    built, _ = single_xorb(random_bytes(200_000, seed))
    return bytes(built.body) + built.footer().serialize()


@HYPOTHESIS
@given(lie=st.sampled_from(["junk", "truncated", "other xorb", "empty"]), size=st.integers(1, 3 * MIB), seed=st.integers(0, 1000))
def test_a_planted_xorb_key_is_replaced_by_the_real_xorb(tmp_path: Path, seaweed: RunningS3, lie: str, size: int, seed: int) -> None:
    b = Bucket(_fresh(tmp_path), seaweed)
    data = random_bytes(size, seed)
    built, _ = single_xorb(data)  # the one xorb the push of this one file stores
    real = bytes(built.body) + built.footer().serialize()
    planted = {"junk": random_bytes(1 + seed * 997 % (2 * MIB), seed + 1), "truncated": real[: len(real) // 2], "other xorb": _other_xorb_body(seed + 2), "empty": b""}[lie]
    key = _xorb_key(built.xorb_hash)
    b.plant(key, planted)
    b.push_and_clone({"model.bin": data})
    assert b.read(key) != planted  # the lie was in the push's way, and is gone


@HYPOTHESIS
@given(lie=st.sampled_from(["another file", "junk", "not a hash"]), size=st.integers(1, 2 * MIB), seed=st.integers(0, 1000))
def test_a_planted_lfs_name_does_not_skip_the_upload(tmp_path: Path, seaweed: RunningS3, lie: str, size: int, seed: int) -> None:
    b = Bucket(_fresh(tmp_path), seaweed)
    data = random_bytes(size, seed)
    if lie == "another file":  # a real file of the bucket: the reader would get the wrong bytes
        decoy = random_bytes(1000, seed + 1)
        b.push_and_clone({"decoy.bin": decoy}, repo="decoy")
        value = b.read(f"lfs/{hashlib.sha256(decoy).hexdigest()}")
    else:
        value = {"junk": random_bytes(1 + seed % 5000, seed + 2), "not a hash": b"../../" + b"f" * 58}[lie]
    oid = hashlib.sha256(data).hexdigest()
    b.plant(f"lfs/{oid}", value)
    b.push_and_clone({"model.bin": data})
    assert b.read(f"lfs/{oid}").decode() == hashes.hash_to_hex(single_xorb(data)[1].file_hash)


@HYPOTHESIS
@given(size=st.integers(GLOBAL_DEDUP_MIN_FILE, 3 * MIB), seed=st.integers(0, 1000), prefix=st.integers(1, 40))
def test_a_lying_dedup_shard_is_not_used(tmp_path: Path, seaweed: RunningS3, size: int, seed: int, prefix: int) -> None:
    """The co-writer stores a real xorb (of other bytes) and a shard claiming that xorb holds
    the new file's first chunks, under the dedup entry of the file's first chunk (which the
    uploader asks about for a file of at least GLOBAL_DEDUP_MIN_FILE bytes)."""
    b = Bucket(_fresh(tmp_path), seaweed)
    data = random_bytes(size, seed)
    decoy, _ = single_xorb(random_bytes(size, seed + 1))
    b.plant(_xorb_key(decoy.xorb_hash), bytes(decoy.body) + decoy.footer().serialize())
    _, digest = single_xorb(data)
    n = min(prefix, len(digest.chunk_hashes))
    claimed, start = [], 0
    for chunk_hash, chunk_size in list(zip(digest.chunk_hashes, digest.chunk_sizes))[:n]:
        claimed.append(shard.CasChunk(chunk_hash, start, chunk_size))
        start += chunk_size + 8
    body = shard.serialize_shard(shard.Shard(cas=(shard.CasInfo(decoy.xorb_hash, tuple(claimed), start),)), with_footer=False)
    shard_id = hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body))
    b.plant(f"shards/{shard_id}.mdb", body)
    b.plant(f"dedup/{hashes.hash_to_hex(digest.chunk_hashes[0])}", shard_id.encode())
    b.push_and_clone({"model.bin": data})


def test_planted_objects_of_hundreds_of_mib_do_not_grow_the_agent(tmp_path: Path, seaweed: RunningS3) -> None:
    """300 MiB under the push's xorb key, its lfs/ name and its first chunk's dedup entry: the
    agent reads none of it whole (peak RSS of each agent process, measured by getrusage of the
    wrapper's child, stays far below the junk's size) and the push stores the real bytes."""
    b = Bucket(tmp_path, seaweed)
    rss = tmp_path / "rss.txt"
    record_agent_rss(b.pusher, rss)
    data = random_bytes(2 * MIB, 77)
    built, digest = single_xorb(data)
    junk = os.urandom(300 * MIB)
    for key in (_xorb_key(built.xorb_hash), f"lfs/{hashlib.sha256(data).hexdigest()}", f"dedup/{hashes.hash_to_hex(digest.chunk_hashes[0])}"):
        b.plant(key, junk)
    del junk
    b.push_and_clone({"model.bin": data})
    peaks = agent_peak_rss(rss)
    assert peaks and max(peaks) < 150, peaks  # MiB; 300 MiB of junk under each key


@pytest.mark.parametrize("key", ["files", "shards"])
def test_a_reader_does_not_allocate_for_a_huge_name_or_shard(tmp_path: Path, seaweed: RunningS3, key: str) -> None:
    """A clone whose files/ entry, or the shard it names, is 300 MiB of junk fails with a clear
    message, its agent's peak RSS far below the junk's size."""
    b = Bucket(tmp_path, seaweed)
    data = random_bytes(MIB, 78)
    remote = tmp_path / "remote.git"
    b.pusher.git("init", "--bare", str(remote))
    work = b.pusher.lfs_work_tree({"model.bin": data}, remote=remote, new_remote=False)
    b.pusher.git("push", "origin", "main", cwd=work)
    file_hex = b.read(f"lfs/{hashlib.sha256(data).hexdigest()}").decode()
    shard_id = b.read(f"files/{file_hex}").decode()
    junk = os.urandom(300 * MIB)
    if key == "files":
        b.plant(f"files/{file_hex}", junk)
    else:
        b.plant(f"shards/{shard_id}.mdb", junk)
    del junk
    reader = _machine(tmp_path / "reader", seaweed)
    reader.git_xet("install", "--standalone", f"s3://{b.name}")
    rss = tmp_path / "rss.txt"
    record_agent_rss(reader, rss)
    reader.env["GIT_LFS_SKIP_SMUDGE"] = "1"
    reader.git("clone", str(remote), "clone")
    pulled = reader.git("lfs", "pull", cwd=reader.root / "clone", check=False)
    assert pulled.returncode != 0 and "damaged" in pulled.stderr, pulled.stderr
    peaks = agent_peak_rss(rss)
    assert peaks and max(peaks) < 150, peaks
