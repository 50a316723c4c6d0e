"""One file's sha256 metadata never fails the other files of an upload (git-xet issue 41, §3).

hf-xet 1.8.0 uploading a 0-byte file by path writes an all-zero sha256 into its shard; the
server refused that shard, and with it every file hf-xet uploaded in the same call. The real
service takes it as the empty file's sha256. A claim that is really wrong now costs only that
file its oid mapping: the other files are registered, and the answer names the file.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes, shard
from git_xet.core.http_headers import REFUSED_SHA256, bearer
from git_xet.storage.cas_store import CasStore
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("claims") / "data") as srv:
        yield srv


def _oids(srv: RunningServer, repo: str, oids: list[str]) -> dict[str, str | None]:
    """Each oid's file hash in `repo` as the server's index has it (None: not mapped)."""
    store = CasStore(srv.data_dir)
    try:
        return {oid: (found.file_hex if (found := store.file_by_sha256(oid, repo)) else None) for oid in oids}
    finally:
        store.close()


# Sizes of the files of one hf-xet upload: at least one empty file among others of any size
# (up to a few chunks).
UPLOADS = st.lists(st.integers(1, 300_000), max_size=4).flatmap(
    lambda sizes: st.permutations([0, *sizes]).flatmap(lambda order: st.just(list(order)))
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=UPLOADS, seed=st.integers(0, 2**16))
def test_hf_xet_uploads_empty_files_with_the_rest(server: RunningServer, tmp_path_factory: pytest.TempPathFactory, sizes: list[int], seed: int) -> None:
    """Before: hf-xet's upload failed as a whole (the shard refused: "its sha256 metadata 000...
    does not match its content"); now every file, the empty one included, is stored under its
    sha256 and reads back through hf-xet."""
    work = tmp_path_factory.mktemp("upload")
    repo = f"peer/empty-{uuid.uuid4().hex[:8]}"
    token = server.token("write", repo=repo)
    paths = []
    for index, size in enumerate(sizes):
        path = work / f"f{index}.bin"
        path.write_bytes(random_bytes(size, seed + index) if size else b"")
        paths.append(path)
    uploaded = hf_xet_oracle.remote_upload(paths, server.url, token, work / "hf")
    assert [info["size"] for info in uploaded] == sizes
    oids = [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]
    assert EMPTY_SHA256 in oids
    mapped = _oids(server, repo, oids)
    assert mapped == {oid: info["hash"] for oid, info in zip(oids, uploaded)}
    downloads = [(str(work / f"back{index}"), info["hash"], info["size"]) for index, info in enumerate(uploaded)]
    hf_xet_oracle.remote_download(downloads, server.url, server.token("read", repo=repo), work / "hf")
    for path, (dest, _, _) in zip(paths, downloads):
        assert Path(dest).read_bytes() == path.read_bytes()


def _post_xorb(client: httpx.Client, srv: RunningServer, token: str, data: bytes) -> shard.FileInfo:
    """Store `data` as one xorb; its file's FileInfo (no sha256 claim yet)."""
    built, digest = single_xorb(data)
    resp = client.post(f"{srv.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token))
    assert resp.status_code == 200, resp.text
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    return shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), None)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 200_000), min_size=2, max_size=4), wrong=st.integers(0, 3), seed=st.integers(0, 2**16), v2=st.booleans())
def test_a_wrong_claim_costs_only_its_own_oid(server: RunningServer, sizes: list[int], wrong: int, seed: int, v2: bool) -> None:
    """A writer's shard of several files, one claiming another content's sha256 (a victim's,
    to be pushed later): the others are registered, the victim's oid maps to nothing, the
    answer names the file; before, the whole shard was refused."""
    wrong %= len(sizes)
    repo = f"acme/claims-{uuid.uuid4().hex[:8]}"
    token = server.token("write", repo=repo)
    datas = [random_bytes(size, seed + index) for index, size in enumerate(sizes)]
    victim = hashlib.sha256(random_bytes(1000, seed + 99)).hexdigest()
    with httpx.Client(timeout=60) as client:
        infos = [_post_xorb(client, server, token, data) for data in datas]
        claimed = [info._replace(sha256=bytes.fromhex(victim) if i == wrong else hashlib.sha256(data).digest()) for i, (info, data) in enumerate(zip(infos, datas))]
        body = shard.serialize_shard(shard.Shard(tuple(sorted(claimed, key=lambda f: f.file_hash))), with_footer=False)
        resp = client.post(f"{server.url}/{'v2' if v2 else 'v1'}/shards", content=body, headers=bearer(token))
    assert resp.status_code == 200, resp.text
    answer = [line for line in resp.text.splitlines() if line][-1] if v2 else resp.text
    result = json.loads(answer)
    assert result["result"] == 1
    assert result[REFUSED_SHA256] == [hashes.hash_to_hex(infos[wrong].file_hash)]
    truths = [hashlib.sha256(data).hexdigest() for data in datas]
    mapped = _oids(server, repo, [victim, *truths])
    assert mapped[victim] is None
    # Every file is registered under the sha256 the server computed, the wrong claim's too.
    assert [mapped[oid] for oid in truths] == [hashes.hash_to_hex(info.file_hash) for info in infos]
