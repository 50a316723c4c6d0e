"""GroupSender (client/group_send.py) against a real `git xet serve`: eight senders' small files
go in fewer upload bundles than files, every file is stored under its own oid, and a file
claiming a wrong sha256 fails only its own sender (issue 44 §2). Threads stand in for a
command's agents: the transport between agents is not part of this."""

from __future__ import annotations

import hashlib
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.client.group_send import SEND_ALONE, SENT, GroupSender
from git_xet.core.bundle_merge import BundleParts
from git_xet.core.extension import UPLOAD_BUNDLES
from git_xet.core.hashes import hash_to_hex
from git_xet.core.http_headers import bearer
from git_xet.core.shard import parse_shard
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.objects import bundle_parts
from tests.support.server_process import RunningServer, running_server

SENDERS = 8
FILES_EACH = 15
ADMIN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("groupsend") / "data", env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as srv:
        yield srv


def _parts(data: bytes) -> BundleParts:
    xorbs, shard = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    return BundleParts.of(xorbs, shard)


def _poster(server: RunningServer, token: str) -> Callable[[BundleParts], object]:
    """ServeExtension.post_bundle of a real HttpCasBackend (what an agent's sender posts with)."""
    backend = HttpCasBackend(server.url, StaticToken(token), extension=True, policy=RetryPolicy(max_attempts=1))
    ext = backend.extension
    assert ext is not None

    def post(parts: BundleParts) -> object:
        return ext.post_bundle(parts.xorbs, parts.shard)

    return post


def test_a_group_over_quota_sends_each_file_back_for_its_own_answer(server: RunningServer) -> None:
    """Quota 1500 bytes, files of 600: the first alone is stored; the three queued behind it
    (1800 bytes together) are refused as one bundle, so each is sent alone, and the first of
    them still fits: 2 files stored, as without grouping (the group's refusal would leave 1)."""
    repo = f"acme/groupquota-{uuid.uuid4().hex[:8]}"
    resp = httpx.post(f"{server.url}/admin/api/repos/quota", json={"repo": repo, "max_bytes": 1500}, headers=bearer(ADMIN), timeout=60)
    assert resp.status_code == 200, resp.text
    datas = [random_bytes(600, 9100 + i) for i in range(4)]
    in_flight, release = threading.Event(), threading.Event()
    direct = _poster(server, server.token("write", repo=repo))
    sizes: list[int] = []

    def post(parts: BundleParts) -> object:
        sizes.append(len(parse_shard(parts.shard).files))
        if len(sizes) == 1:  # hold the first send until the others queue behind it
            in_flight.set()
            assert release.wait(timeout=30)
        return direct(parts)

    sender = GroupSender(post)
    answers: dict[int, str] = {}
    alone = threading.Lock()  # the fallbacks one at a time: which of them fits is then certain

    def agent(i: int) -> None:
        answer = sender.send(_parts(datas[i]))
        if answer == SEND_ALONE:
            with alone:
                try:
                    direct(_parts(datas[i]))
                    answer = "alone: stored"
                except TransferError:
                    answer = "alone: refused"
        answers[i] = answer

    first = threading.Thread(target=agent, args=(0,))
    first.start()
    assert in_flight.wait(timeout=30)
    rest = [threading.Thread(target=agent, args=(i,)) for i in (1, 2, 3)]
    for t in rest:
        t.start()
    for _ in range(3000):  # until the three are queued (bounded: 30 s)
        if len(sender._queue) == 3:
            break
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *rest]:
        t.join(timeout=60)
    assert sizes == [1, 3]
    assert answers[0] == SENT
    assert sorted(answers[i] for i in (1, 2, 3)) == ["alone: refused", "alone: refused", "alone: stored"]
    store = CasStore(server.data_dir)
    try:
        stored = [store.file_by_sha256(hashlib.sha256(d).hexdigest(), repo) is not None for d in datas]
    finally:
        store.close()
    assert sum(stored) == 2 and stored[0]


def test_senders_share_bundles_and_keep_their_own_answers(server: RunningServer) -> None:
    repo = f"acme/groupsend-{uuid.uuid4().hex[:8]}"
    datas = [random_bytes(1 + (i * 37) % 3000, 7000 + i) for i in range(SENDERS * FILES_EACH)]
    wrong = {i for i in range(len(datas)) if i % 17 == 5}  # each claims another content's sha256
    claims = [hashlib.sha256(d + b"!" if i in wrong else d).digest() for i, d in enumerate(datas)]
    before = len(server.requests())

    sender = GroupSender(_poster(server, server.token("write", repo=repo)))
    answers: dict[int, object] = {}

    def agent(first: int) -> None:
        for i in range(first, len(datas), SENDERS):
            xorbs, shard = bundle_parts([datas[i]], True, [claims[i]])
            parts = BundleParts.of(xorbs, shard)
            try:
                answers[i] = sender.send(parts)
            except TransferError:
                answers[i] = "refused"

    agents = [threading.Thread(target=agent, args=(n,)) for n in range(SENDERS)]
    for t in agents:
        t.start()
    for t in agents:
        t.join(timeout=120)

    assert {i for i, a in answers.items() if a == "refused"} == wrong
    assert all(answers[i] == SENT for i in range(len(datas)) if i not in wrong)
    assert SEND_ALONE not in answers.values()
    bundles = [r for r in server.requests()[before:] if r["path"] == UPLOAD_BUNDLES]
    assert len(bundles) < len(datas)
    print(f"{len(datas)} files in {len(bundles)} upload bundles")
    store = CasStore(server.data_dir)
    try:
        for i, data in enumerate(datas):
            # Every file registered under the sha256 the server computed, a wrong claim's too
            # (test_shard_claims.py), and never under a wrong claim.
            found = store.file_by_sha256(hashlib.sha256(data).hexdigest(), repo)
            assert found is not None and found.file_hex == hash_to_hex(parse_shard(bundle_parts([data], True, [None])[1]).files[0].file_hash)
            if i in wrong:
                assert store.file_by_sha256(claims[i].hex(), repo) is None
    finally:
        store.close()
