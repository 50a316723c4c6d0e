"""Reachability gc on the serverless bucket store (`git xet gc --bucket`), on a real SeaweedFS.

gc removes the xorbs no shard names (a push that died before its shard) once older than the
grace, and keeps everything a shard names. A push that reuses such a xorb while gc runs (its
upload finds the xorb stored and skips it) runs in a thread beside gc, one object-store call at
a time in an order hypothesis generates (`Turns`); gc is run with every object counting as old
(the strongest adversary: even the push's fresh uploads are candidates). Whatever the order, the
push either succeeds or is refused with MissingXorbsError and succeeds on retrying, every file
reads back byte-exact, no name points at a shard whose xorbs are gone, and the xorbs nobody
reused are gone from the bucket (bytes listed by S3, not by our code)."""

from __future__ import annotations

import hashlib
import io
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.bucket_backend import BucketBackend, create_bucket_store
from git_xet.client.bucket_gc import TRASH, collect_bucket_garbage
from git_xet.client.errors import MissingXorbsError
from git_xet.core import hashes
from git_xet.core.scattered import contiguous
from git_xet.core.shard import parse_shard
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, run_git_xet
from tests.support.seaweed import RunningS3

STATS = {"schedules": 0, "refused_then_retried": 0, "put_back": 0, "removed": 0, "freed_bytes": 0, "kept_files": 0}
OBJECT_CALLS = ("put", "put_new", "read", "read_bounded", "read_tail", "read_range", "exists", "modified", "delete", "list_entries")


class Turns:
    """Threads take turns, one object-store call each, in a generated order: before a call a
    thread waits at the gate; once every live thread is at the gate (or done), the next choice
    picks who goes. No timing: the order is the choices'."""

    def __init__(self, names: list[str], choices: list[int]) -> None:
        self.live = set(names)
        self.choices = list(choices)
        self.waiting: set[str] = set()
        self.go: str | None = None
        self.cond = threading.Condition()

    def _pick(self) -> None:
        if self.go is None and self.waiting and self.waiting == self.live:
            names = sorted(self.waiting)
            self.go = names[(self.choices.pop(0) if self.choices else 0) % len(names)]
            self.cond.notify_all()

    def gate(self, name: str) -> None:
        with self.cond:
            self.waiting.add(name)
            self._pick()
            assert self.cond.wait_for(lambda: self.go == name, timeout=120), "a thread never got its turn"
            self.go = None
            self.waiting.discard(name)

    def leave(self, name: str) -> None:
        with self.cond:
            self.live.discard(name)
            self._pick()

    def wrap(self, objects: S3ObjectStore, name: str) -> S3ObjectStore:
        for call in OBJECT_CALLS:
            real = getattr(objects, call)

            def gated(*args, _real=real, _call=call, **kwargs):
                self.gate(name)
                result = _real(*args, **kwargs)
                return list(result) if _call == "list_entries" else result

            setattr(objects, call, gated)
        return objects


def _objects(s3: RunningS3, bucket: str, prefix: str) -> S3ObjectStore:
    return S3ObjectStore(S3Location(bucket, prefix), S3Config.from_env(s3.env()))


def _pieces(data: bytes) -> tuple[list[tuple[str, bytes]], bytes]:
    """The xorbs and shard a push of `data` writes, built by the real upload pipeline against a
    scratch backend that records them instead of storing."""

    class Recorder(BucketBackend):
        def __init__(self) -> None:
            self.xorbs: list[tuple[str, bytes]] = []
            self.shards: list[bytes] = []

        def check(self) -> None:
            pass

        def query_dedup(self, chunk_hash: bytes):
            return None

        def upload_xorb(self, xorb_hex, body, stream=None):
            verified = verify_xorb(contiguous(body), hashes.hex_to_hash(xorb_hex))
            self.xorbs.append((xorb_hex, bytes(verified.body) + verified.footer().serialize()))  # as a bucket stores it
            return True

        def upload_shard(self, body: bytes, stream_id: str | None = None) -> bool:
            self.shards.append(body)
            return True

    recorder = Recorder()
    with Uploader(recorder) as up:
        up.add_bytes(data)
        up.finalize()
    (shard,) = recorder.shards
    return recorder.xorbs, shard


def _names_hold(objects: S3ObjectStore) -> None:
    """A bucket fsck: every files/ name points at a stored shard whose xorbs are all stored."""
    stored = {key for key, _ in objects.list("xorbs/")}
    for key, _ in objects.list("files/"):
        shard = parse_shard(objects.read(f"shards/{objects.read(key).decode().strip()}.mdb"))
        for info in shard.files:
            for term in info.terms:
                xorb = hashes.hash_to_hex(term.xorb_hash)
                assert f"xorbs/{xorb[:2]}/{xorb}" in stored, f"{key} needs xorb {xorb}, which gc removed"


def _reads_back(backend: BucketBackend, data: bytes) -> None:
    file_hex = backend.file_for_sha256(hashlib.sha256(data).hexdigest())
    assert file_hex is not None
    out = io.BytesIO()
    download(backend, file_hex, out)
    assert out.getvalue() == data


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    reused=st.integers(1, 3),
    abandoned=st.integers(0, 2),
    choices=st.lists(st.integers(0, 1), min_size=8, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_a_push_reusing_xorbs_under_collection_never_loses_them(tmp_path: Path, seaweed: RunningS3, reused: int, abandoned: int, choices: list[int], seed: int) -> None:
    bucket, prefix = seaweed.new_bucket(), f"s{seed}"
    setup = _objects(seaweed, bucket, prefix)
    create_bucket_store(setup)
    live = random_bytes(300_000, seed)  # pushed before: its xorbs are named, gc keeps them
    with Uploader(BucketBackend(setup)) as up:
        up.add_bytes(live)
        up.finalize()
    # Pushes that died after their xorbs: `reused` of them come again in the racing push.
    contents = [random_bytes(200_000 + 1000 * i, seed + 1 + i) for i in range(reused + abandoned)]
    pieces = [_pieces(c) for c in contents]
    for xorbs, _shard in pieces:
        for xorb_hex, body in xorbs:
            setup.put(f"xorbs/{xorb_hex[:2]}/{xorb_hex}", body)
    before = dict(setup.sizes("xorbs/"))
    left = {f"xorbs/{x[:2]}/{x}" for xorbs, _ in pieces[reused:] for x, _ in xorbs}

    turns = Turns(["gc", "push"], choices)
    gc_objects = turns.wrap(_objects(seaweed, bucket, prefix), "gc")
    push_backend = BucketBackend(turns.wrap(_objects(seaweed, bucket, prefix), "push"))
    reports: list = []
    refusals: list[str] = []
    failures: list[BaseException] = []

    def gc() -> None:
        try:
            reports.append(collect_bucket_garbage(gc_objects, grace_seconds=0, now=time.time() + 10**6))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)
        finally:
            turns.leave("gc")

    def push() -> None:
        try:
            for _attempt in range(8):  # each refusal is for a xorb gc moved: at most one per xorb
                try:
                    for xorbs, shard in pieces[:reused]:
                        for xorb_hex, body in xorbs:
                            push_backend.upload_xorb(xorb_hex, body)
                        push_backend.upload_shard(shard)
                    return
                except MissingXorbsError as exc:
                    refusals.append(str(exc))
            raise AssertionError(f"refused 8 times: {refusals}")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            turns.leave("push")

    threads = [threading.Thread(target=gc), threading.Thread(target=push)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    (report,) = reports
    reader = BucketBackend(_objects(seaweed, bucket, prefix), tmp_path / f"read-{seed}")
    for data in [live, *contents[:reused]]:
        _reads_back(reader, data)
    _names_hold(setup)
    assert not list(setup.list(TRASH))
    after = dict(setup.sizes("xorbs/"))
    assert not left & set(after) and left <= set(report.removed)  # nobody came back for these: gone
    freed = sum(size for key, size in before.items() if key not in after)  # as S3 lists them
    assert freed == sum(before[key] for key in left) and report.freed_bytes >= freed
    STATS["schedules"] += 1
    STATS["refused_then_retried"] += len(refusals)
    STATS["put_back"] += len(report.restored)
    STATS["removed"] += len(report.removed)
    STATS["freed_bytes"] += freed
    STATS["kept_files"] += 1 + reused


def test_gc_between_a_push_check_and_its_shard_refuses_the_push(tmp_path: Path, seaweed: RunningS3) -> None:
    """The window no put-back covers: gc runs whole after the push found its (reused) xorb stored
    and before it writes its shard. The push is refused before it writes any name, and its
    retry stores the xorb again: nothing points at a missing xorb at any time."""
    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket, "window")
    create_bucket_store(objects)
    data = random_bytes(250_000, 5)
    xorbs, shard = _pieces(data)
    for xorb_hex, body in xorbs:
        objects.put(f"xorbs/{xorb_hex[:2]}/{xorb_hex}", body)  # a push that died before its shard
    pusher = _objects(seaweed, bucket, "window")
    real_put_new = pusher.put_new
    ran: list[object] = []

    def gc_first(key: str, *parts: bytes | memoryview) -> bool:
        if key.startswith("shards/") and not ran:
            ran.append(collect_bucket_garbage(_objects(seaweed, bucket, "window"), grace_seconds=0, now=time.time() + 10**6))
        return real_put_new(key, *parts)

    pusher.put_new = gc_first  # type: ignore[method-assign]
    backend = BucketBackend(pusher)
    for xorb_hex, body in xorbs:
        assert backend.upload_xorb(xorb_hex, body) is False  # found stored: reused
    try:
        backend.upload_shard(shard)
        raise AssertionError("the push was not refused, yet gc removed its xorb")
    except MissingXorbsError as exc:
        refusal = str(exc)
    assert ran and "removed" in refusal, refusal
    assert not list(objects.list("files/")) and not list(objects.list("lfs/"))
    for xorb_hex, body in xorbs:
        assert backend.upload_xorb(xorb_hex, body) is True  # the retry writes it anew
    backend.upload_shard(shard)
    _names_hold(objects)
    _reads_back(BucketBackend(_objects(seaweed, bucket, "window"), tmp_path / "reader"), data)


def test_bucket_gc_command_keeps_named_and_fresh_xorbs(tmp_path: Path, seaweed: RunningS3) -> None:
    """`git xet gc --bucket` with the default grace keeps a fresh unnamed xorb; with a grace of 0
    it removes it (dry run first: lists, removes nothing) and never a named one; a run left
    half-done (a copy under gc-trash/ of a xorb a shard names) is put back by the next run."""
    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket, "cli")
    create_bucket_store(objects)
    data = random_bytes(400_000, 77)
    with Uploader(BucketBackend(objects)) as up:
        up.add_bytes(data)
        up.finalize()
    (orphan_hex, orphan_body), = _pieces(random_bytes(150_000, 78))[0]
    orphan_key = f"xorbs/{orphan_hex[:2]}/{orphan_hex}"
    objects.put(orphan_key, orphan_body)
    named_key = next(key for key, _ in objects.list("xorbs/") if key != orphan_key)
    objects.put(TRASH + named_key, objects.read(named_key))
    objects.delete(named_key)  # as if a gc died after moving it, while a push named it
    env = seaweed.env()
    url = f"s3://{bucket}/cli"
    kept = run_git_xet("gc", "--bucket", url, env=env, timeout=120)
    assert kept.returncode == 0, kept.stderr
    assert objects.exists(orphan_key) and objects.exists(named_key) and not list(objects.list(TRASH))
    dry = run_git_xet("gc", "--bucket", url, "--grace", "0", "--dry-run", env=env, timeout=120)
    assert dry.returncode == 0 and f"would remove: {orphan_key}" in dry.stdout and objects.exists(orphan_key), dry.stdout + dry.stderr
    done = run_git_xet("gc", "--bucket", url, "--grace", "0", env=env, timeout=120)
    assert done.returncode == 0 and f"removed: {orphan_key}" in done.stdout, done.stdout + done.stderr
    assert not objects.exists(orphan_key)
    _reads_back(BucketBackend(objects, tmp_path / "reader"), data)
    both = run_git_xet("gc", "--bucket", url, "--data", str(tmp_path), env=env, timeout=60)
    assert both.returncode == 2 and "one or the other" in both.stderr


def test_git_pushes_racing_gc_processes_on_a_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    """Real `git push` (git-lfs, our agent) into a bucket store while `git xet gc --bucket --grace 0`
    runs again and again in other processes; one file's xorbs were left by a push that died, so
    this push reuses them under collection. A push that still fails is run again (its user
    would): counted. Another machine's clone is byte-exact, every name holds, and the dead
    push's xorbs nobody reused are gone."""
    from tests.support.gitenv import make_git_env

    bucket = seaweed.new_bucket()
    objects = _objects(seaweed, bucket, "git")
    url = f"s3://{bucket}/git"

    def machine(name: str) -> GitEnv:
        g = make_git_env(tmp_path / name)
        for key in [k for k in g.env if k.startswith("AWS_")]:
            del g.env[key]
        g.env.update(seaweed.env())
        g.git_xet("install", "--standalone", url)
        return g

    a = machine("a")
    files = {f"f{i}.bin": random_bytes(1_500_000 + 1000 * i, 60 + i) for i in range(4)}
    dead = random_bytes(600_000, 70)
    for data in (files["f0.bin"], dead):  # pushes that died before their shards
        for xorb_hex, body in _pieces(data)[0]:
            objects.put(f"xorbs/{xorb_hex[:2]}/{xorb_hex}", body)
    dead_keys = {f"xorbs/{x[:2]}/{x}" for x, _ in _pieces(dead)[0]}
    work = a.lfs_work_tree(files)
    stop = threading.Event()
    runs: list[int] = []

    def collect() -> None:
        while not stop.is_set():
            runs.append(run_git_xet("gc", "--bucket", url, "--grace", "0", env=seaweed.env(), timeout=120).returncode)

    collector = threading.Thread(target=collect)
    collector.start()
    reruns = 0
    try:
        while not runs and collector.is_alive():
            stop.wait(0.05)
        for round_ in range(3):  # three pushes, each its own agent process
            if round_:
                for i in range(2):
                    name = f"r{round_}-{i}.bin"
                    files[name] = random_bytes(1_200_000 + 1000 * i, 80 + 10 * round_ + i)
                    (work / name).write_bytes(files[name])
                a.git("add", ".", cwd=work)
                a.git("commit", "-qm", f"round {round_}", cwd=work)
            for attempt in range(3):
                if a.git("push", "origin", "main", cwd=work, check=attempt == 2).returncode == 0:
                    break
                reruns += 1
    finally:
        stop.set()
        collector.join(timeout=300)
    assert runs and set(runs) == {0}, runs
    assert run_git_xet("gc", "--bucket", url, "--grace", "0", env=seaweed.env(), timeout=120).returncode == 0
    _names_hold(objects)
    assert not dead_keys & {key for key, _ in objects.list("xorbs/")}
    b = machine("b")
    b.git("clone", str(a.root / "remote.git"), "clone")
    for name, data in files.items():
        assert (b.root / "clone" / name).read_bytes() == data
    STATS["git_pushes_beside_gc"] = STATS.get("git_pushes_beside_gc", 0) + 3 + reruns
    STATS["git_pushes_rerun"] = STATS.get("git_pushes_rerun", 0) + reruns
    STATS["gc_processes_beside_git"] = STATS.get("gc_processes_beside_git", 0) + len(runs)


def test_zz_print_statistics() -> None:
    """The run's figures for the closing note (`pytest -s tests/integration/test_bucket_gc.py`)."""
    print(f"\nbucket gc interleavings: {STATS}")
