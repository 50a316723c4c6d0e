"""GroupSender (client/group_send.py): whatever the interleaving, every sender gets exactly its
own answer, each file goes to the server in exactly one accepted bundle or back to its sender,
and no bundle outgrows core/bundle_merge's bounds. `post` is a stand-in for the server (the
faults it raises cannot be made on demand with a real one); the threads are real."""

from __future__ import annotations

import hashlib
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.errors import TransferError
from git_xet.client.group_send import SEND_ALONE, SENT, GroupSender
from git_xet.core.bundle_merge import MAX_GROUP_FILES, BundleParts
from git_xet.core.hashes import hash_to_hex
from git_xet.core.http_headers import REFUSED_SHA256
from git_xet.core.shard import parse_shard
from tests.support.objects import bundle_parts


def _parts(data: bytes) -> tuple[BundleParts, str]:
    xorbs, shard = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    parsed = parse_shard(shard)
    return BundleParts.of(xorbs, shard, parsed), hash_to_hex(parsed.files[0].file_hash)


@settings(max_examples=30, deadline=None)
@given(
    files=st.lists(st.binary(min_size=1, max_size=500), min_size=1, max_size=24, unique=True),
    fates=st.lists(st.sampled_from(["ok", "fail", "refuse"]), min_size=24, max_size=24),
    in_flight=st.integers(1, 3),
)
def test_every_sender_gets_its_own_answer(files: list[bytes], fates: list[str], in_flight: int) -> None:
    made = [_parts(f) for f in files]
    fate_of_file = {file_hex: fates[i] for i, (_, file_hex) in enumerate(made)}
    sent: list[set[str]] = []  # the files of each bundle the server accepted
    gate = threading.Lock()

    posting = [0, 0]  # posts under way now, most at once

    def post(bundle: BundleParts) -> object:
        with gate:
            posting[0] += 1
            posting[1] = max(posting)
        try:
            threading.Event().wait(0.001)  # overlap with other posts, when there may be some
            names = {hash_to_hex(info.file_hash) for info in parse_shard(bundle.shard).files}
            assert len(names) <= MAX_GROUP_FILES
            if any(fate_of_file[n] == "fail" for n in names):
                raise TransferError("quota", status=413)
            with gate:
                sent.append(names)
            return {"result": 1, REFUSED_SHA256: sorted(n for n in names if fate_of_file[n] == "refuse")}
        finally:
            with gate:
                posting[0] -= 1

    sender = GroupSender(post, in_flight=in_flight)
    answers: dict[str, object] = {}
    start = threading.Barrier(len(made))

    def one(parts: BundleParts, file_hex: str) -> None:
        start.wait(timeout=30)
        try:
            answers[file_hex] = sender.send(parts)
        except TransferError:
            answers[file_hex] = "refused"

    threads = [threading.Thread(target=one, args=m) for m in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)  # nobody waits forever
    assert posting[1] <= in_flight
    accepted = [n for names in sent for n in names]
    assert len(accepted) == len(set(accepted))  # no file in two accepted bundles
    for _, file_hex in made:
        answer = answers[file_hex]
        if answer == SEND_ALONE:  # its bundle failed as a whole: never accepted with it
            assert file_hex not in accepted
        else:
            assert file_hex in accepted
            assert fate_of_file[file_hex] == ("refuse" if answer == "refused" else "ok")
            assert answer in (SENT, "refused")
        assert fate_of_file[file_hex] != "fail" or answer == SEND_ALONE


def test_one_sender_alone_sends_at_once() -> None:
    parts, _ = _parts(b"a small file")
    posted: list[BundleParts] = []
    sender = GroupSender(lambda bundle: posted.append(bundle) or {"result": 1})
    assert sender.send(parts) == SENT
    assert posted == [parts]


def test_senders_queued_behind_a_send_go_in_one_bundle() -> None:
    first, _ = _parts(b"first")
    queued = [_parts(bytes([i]) * 100)[0] for i in range(5)]
    in_flight, release = threading.Event(), threading.Event()
    bundles: list[int] = []

    def post(bundle: BundleParts) -> object:
        bundles.append(len(parse_shard(bundle.shard).files))
        if len(bundles) == 1:
            in_flight.set()
            assert release.wait(timeout=30)
        return {"result": 1}

    sender = GroupSender(post)
    lead = threading.Thread(target=sender.send, args=(first,))
    lead.start()
    assert in_flight.wait(timeout=30)
    followers = [threading.Thread(target=sender.send, args=(p,)) for p in queued]
    for t in followers:
        t.start()
    for _ in range(3000):  # until all are queued behind the send in flight (bounded: 30 s)
        if len(sender._queue) == len(queued):
            break
        threading.Event().wait(0.01)
    release.set()
    for t in [lead, *followers]:
        t.join(timeout=30)
    assert bundles == [1, len(queued)]


def test_a_failed_bundle_sends_each_file_back() -> None:
    parts, _ = _parts(b"x")

    def post(bundle: BundleParts) -> object:
        raise TransferError("over quota", status=413)

    assert GroupSender(post).send(parts) == SEND_ALONE


def test_a_refused_claim_is_its_senders_error() -> None:
    parts, file_hex = _parts(b"y")
    with pytest.raises(TransferError):
        GroupSender(lambda bundle: {"result": 1, REFUSED_SHA256: [file_hex]}).send(parts)


def test_a_bug_in_post_leaves_the_sender_usable() -> None:
    parts, _ = _parts(b"z")
    calls: list[int] = []

    def post(bundle: BundleParts) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return {"result": 1}

    sender = GroupSender(post)
    with pytest.raises(RuntimeError):
        sender.send(parts)
    assert sender.send(parts) == SENT  # not stuck behind a send that never ended
