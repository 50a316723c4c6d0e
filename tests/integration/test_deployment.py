"""The whole scale-out deployment in one place, as the README's deployment guide sets it up:
two `git xet serve` replicas on a SeaweedFS bucket and a PostgreSQL index behind nginx with
TLS (a private CA made here), upload grants on. Clients: real git + git-lfs with our agent,
hf-xet, huggingface.js, each trusting the CA the way it documents (SSL_CERT_FILE and
http.sslCAInfo; SSL_CERT_FILE for hf-xet's rustls, which reads it through rustls-native-certs;
NODE_EXTRA_CA_CERTS for node).

Wire evidence comes from logs, not from the code under test: nginx's TLS access log and each
replica's request log show who served what; nginx's log in front of the bucket shows the
presigned PUTs and ranged GETs that went straight to the bucket.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from git_xet.agent.routing import WHOLE_DOWNLOAD_BELOW
from git_xet.client.http_backend import DIRECT_UPLOAD_BELOW, HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core.checksums import crc64nvme_reference
from git_xet.core.http_headers import bearer
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.pipelines.upload import Uploader
from tests.support import hf_xet_oracle, hfjs_peer
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.deployment import Deployment, running_deployment
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.postgres_process import Postgres
from tests.support.seaweed import RunningS3

_OBJECT_LINE = re.compile(r"^(\S+) (\S+) (\d{3}) range=(\S*) sent=(\d+) received=(\d+)$")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, seaweed: RunningS3, postgres: Postgres) -> Iterator[Deployment]:
    """One deployment for the module (its tests use distinct data); about 5 s to start."""
    with running_deployment(tmp_path_factory.mktemp("deployment"), seaweed, postgres) as d:
        yield d


def _object_requests(d: Deployment, since: int = 0) -> list[tuple[str, str, int, str, int, int]]:
    """(method, uri, status, range, bytes sent, bytes received) per request to the bucket."""
    out = []
    for line in d.nginx.object_access_log()[since:]:
        m = _OBJECT_LINE.match(line)
        assert m, f"unexpected object access log line: {line!r}"
        method, uri, status, rng, sent, received = m.groups()
        out.append((method, uri, int(status), rng if rng != "-" else "", int(sent), int(received)))
    return out


def _replica_requests(d: Deployment, replica: int) -> list[dict]:
    return [json.loads(line.split(" ", 3)[-1]) for line in d.replicas[replica].log().splitlines() if '"path": ' in line]


def _client(root: Path, d: Deployment) -> GitEnv:
    g = make_git_env(root)
    g.env.update(SSL_CERT_FILE=str(d.nginx.cert), GIT_XET_RETRY_BASE_DELAY="0.5")
    g.git_xet("install", "--standalone", d.nginx.url)
    g.git("config", "--global", "xet.token", d.token("write"))
    g.git("config", "--global", "http.sslCAInfo", str(d.nginx.cert))
    return g


def _fsck(d: Deployment) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "git_xet", "fsck", *d.admin_args()],
        check=False, capture_output=True, text=True, timeout=120, env={**_inherited(), **d.env},
    )  # fmt: skip


def _inherited() -> dict[str, str]:
    """This process's environment without AWS_*: the deployment's own AWS_* take their place."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def test_git_push_and_fresh_clone_through_tls_two_replicas_s3_and_postgres(tmp_path: Path, deployment: Deployment) -> None:
    d = deployment
    files = {"model.bin": random_bytes(7_000_000, 1301), "weights.bin": random_bytes(2_500_000, 1302), "tiny.bin": b"tiny" * 50}
    total = sum(len(v) for v in files.values())
    pusher = _client(tmp_path / "pusher", d)
    work = pusher.lfs_work_tree(files)
    log_start = len(d.nginx.object_access_log())
    replica_start = [len(_replica_requests(d, i)) for i in range(2)]
    pusher.git("push", "-q", "origin", "main", cwd=work)

    # Both replicas served the push (nginx spread it), and the xorb bytes did not go through them:
    # they went to the bucket as presigned PUTs of staged uploads.
    pushed = [_replica_requests(d, i)[replica_start[i] :] for i in range(2)]
    assert all(pushed), [len(p) for p in pushed]
    through_replicas = sum(r["bytes_in"] for p in pushed for r in p)
    assert through_replicas < total // 20, through_replicas
    # Only xorbs too small to be worth a grant's two extra round trips are posted to a replica.
    posted = [r["bytes_in"] for p in pushed for r in p if r["path"].startswith("/v1/xorbs/")]
    assert all(n < DIRECT_UPLOAD_BELOW for n in posted), posted
    paths = [r["path"] for p in pushed for r in p]
    assert any(p.startswith("/v1/xorb-grants/") for p in paths) and any(p.startswith("/v1/xorb-commits/") for p in paths)
    # The clients' presigned PUTs (a replica's own PUT there is a committed grant's empty marker).
    puts = [r for r in _object_requests(d, log_start) if r[0] == "PUT" and f"/{d.bucket}/cas/uploads/" in r[1] and "X-Amz-Signature=" in r[1]]
    assert puts and all(r[2] == 200 for r in puts)
    assert "X-Amz-Signature=" in puts[0][1] and "X-Amz-Credential=" in puts[0][1]
    assert sum(r[5] for r in puts) >= total * 0.95  # random data: the xorbs are about as large as the files
    tls_log = d.nginx.access_log()
    assert "/v1/xorb-grants/" in tls_log and "/shards" in tls_log

    # The store as an admin sees it: every file registered by its sha256, fsck clean.
    store = d.store()
    try:
        for data in files.values():
            assert store.file_by_sha256(hashlib.sha256(data).hexdigest()) is not None
        xorbs_in_bucket = [k for k, _ in d.objects().list("xorbs/")]
        assert xorbs_in_bucket and not any(size for _key, size in d.objects().sizes("uploads/"))  # staged copies emptied at commit
    finally:
        store.close()
    fsck = _fsck(d)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert f"{len(xorbs_in_bucket)} xorbs, " in fsck.stdout and "0 problems, 0 orphaned objects" in fsck.stdout, fsck.stdout

    # A fresh clone (another HOME, no cache) downloads through presigned ranged GETs on the bucket.
    cloner = _client(tmp_path / "cloner", d)
    log_start = len(d.nginx.object_access_log())
    tls_start = len(d.nginx.access_log().splitlines())
    cloner.git("clone", "-q", str(pusher.root / "remote.git"), "clone")
    for name, data in files.items():
        assert (cloner.root / "clone" / name).read_bytes() == data, name
    lfs_fsck = cloner.git("lfs", "fsck", cwd=cloner.root / "clone")
    assert "Git LFS fsck OK" in lfs_fsck.stdout, lfs_fsck.stdout
    gets = [r for r in _object_requests(d, log_start) if r[0] == "GET"]
    assert gets and all(f"/{d.bucket}/cas/xorbs/" in r[1] for r in gets), gets
    assert all(r[2] == 206 and re.fullmatch(r"bytes=\d+-\d+", r[3]) for r in gets), gets
    # The clone's own GETs are presigned; a replica reads (with its credentials) only what it
    # hands over whole: files under WHOLE_DOWNLOAD_BELOW, in one request each.
    presigned = [r for r in gets if "X-Amz-Signature=" in r[1]]
    assert sum(r[4] for r in presigned) >= sum(len(v) for v in files.values() if len(v) >= WHOLE_DOWNLOAD_BELOW) * 0.95
    assert sum(r[4] for r in gets) >= total * 0.95  # every byte came from the bucket
    assert sum(r[4] for r in gets if r not in presigned) < sum(len(v) for v in files.values() if len(v) < WHOLE_DOWNLOAD_BELOW) + 4096
    clone_tls = d.nginx.access_log().splitlines()[tls_start:]
    assert any("/v2/reconstructions/" in line or "/v1/reconstructions/" in line for line in clone_tls)
    assert not any("/v1/xorb-data" in line for line in clone_tls)


@pytest.mark.parametrize("mode", ["negotiated", "native"])
def test_hub_style_modes_through_tls_two_replicas_s3_and_postgres(tmp_path: Path, deployment: Deployment, mode: str) -> None:
    """The other two ways our agent meets a server, through the same deployment: git-lfs's
    own batch call negotiating XET with the replicas' Hub-style LFS API (`git xet install`),
    and our agent making the batch calls itself (`--native`). Uploads go through grants
    straight to the bucket, downloads are XET reconstructions from it; the user's token never
    reaches a log."""
    d = deployment
    repo = f"acme/{mode}"
    user_token = d.token("write", repo=repo)
    g = make_git_env(tmp_path)
    g.env.update(SSL_CERT_FILE=str(d.nginx.cert), GIT_XET_RETRY_BASE_DELAY="0.5")
    # git-lfs makes the batch calls here: git-lfs 3.3 takes a private CA from GIT_SSL_CAINFO
    # (it refused this one with http.sslCAInfo or SSL_CERT_FILE alone).
    g.env["GIT_SSL_CAINFO"] = str(d.nginx.cert)
    g.git_xet("install", *(["--native", d.nginx.url] if mode == "native" else []))
    g.git("config", "--global", "http.sslCAInfo", str(d.nginx.cert))
    g.use_credentials(user_token)
    g.git("config", "--global", "lfs.url", f"{d.nginx.url}/{repo}.git/info/lfs")
    files = {"model.bin": random_bytes(6_000_000, 1341 + len(mode)), "notes.bin": random_bytes(30_000, 1343 + len(mode))}
    tls_start = len(d.nginx.access_log().splitlines())
    work = g.lfs_work_tree(files)
    g.git("push", "-q", "origin", "main", cwd=work)
    pushed = "\n".join(d.nginx.access_log().splitlines()[tls_start:])
    assert f"/{repo}.git/info/lfs/objects/batch" in pushed
    assert "/v1/xorb-grants/" in pushed and "/v1/xorb-commits/" in pushed
    tls_start = len(d.nginx.access_log().splitlines())
    g.git("clone", "-q", "remote.git", "clone")
    for name, data in files.items():
        assert (g.root / "clone" / name).read_bytes() == data, name
    cloned = "\n".join(d.nginx.access_log().splitlines()[tls_start:])
    assert "/v2/reconstructions/" in cloned and "/xet-bridge-us/" not in cloned
    logs = d.nginx.access_log() + "".join(r.log() for r in d.replicas) + g.agent_log()
    assert user_token not in logs


def test_hf_xet_uploads_and_downloads_through_tls_to_the_replicas(
    tmp_path: Path, deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    data = random_bytes(5_000_000, 1311)
    source = tmp_path / "model.bin"
    source.write_bytes(data)
    ours = hash_bytes(data, with_sha256=True)
    # hf-xet's rustls takes its roots from rustls-native-certs, which reads SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(d.nginx.cert))
    token = d.token("write")
    log_start = len(d.nginx.object_access_log())
    replica_start = [len(_replica_requests(d, i)) for i in range(2)]
    (uploaded,) = hf_xet_oracle.remote_upload([source], d.nginx.url, token, tmp_path / "hf-up")
    assert uploaded["hash"] == hashes.hash_to_hex(ours.file_hash)
    assert uploaded["sha256"] == hashlib.sha256(data).hexdigest()
    served = [r for i in range(2) for r in _replica_requests(d, i)[replica_start[i] :]]
    grants = [r for r in served if r["path"].startswith("/v1/xorb-grants/") and r["status"] == 201]
    commits = [r for r in served if r["path"].startswith("/v1/xorb-commits/") and r["status"] == 200]
    assert grants and len(commits) == len(grants), [(r["path"], r["status"]) for r in served]
    assert not any(r["path"].startswith("/v1/xorbs/") for r in served)
    # The clients' presigned PUTs (a replica's own PUT there is a committed grant's empty marker).
    puts = [r for r in _object_requests(d, log_start) if r[0] == "PUT" and f"/{d.bucket}/cas/uploads/" in r[1] and "X-Amz-Signature=" in r[1]]
    assert len(puts) == len(grants) and all(r[2] == 200 for r in puts), puts
    assert sum(r[5] for r in puts) >= len(data) * 0.95  # the xorb's bytes, straight to the bucket

    log_start = len(d.nginx.object_access_log())
    dest = tmp_path / "hf-out.bin"
    hf_xet_oracle.remote_download([(dest, uploaded["hash"], len(data))], d.nginx.url, d.token("read"), tmp_path / "hf-down")
    assert dest.read_bytes() == data
    gets = [r for r in _object_requests(d, log_start) if r[0] == "GET"]
    assert gets and all(r[2] == 206 and r[3].startswith("bytes=") for r in gets), gets


def test_huggingface_js_downloads_through_tls_from_the_bucket(tmp_path: Path, deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    d = deployment
    data = random_bytes(3_000_000, 1321)
    source = tmp_path / "js-source.bin"
    source.write_bytes(data)
    monkeypatch.setenv("SSL_CERT_FILE", str(d.nginx.cert))
    (uploaded,) = hf_xet_oracle.remote_upload([source], d.nginx.url, d.token("write"), tmp_path / "hf")
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(d.nginx.cert))  # node's documented way to add a CA
    dest = tmp_path / "js"
    dest.mkdir()
    ranges = [(0, 1), (1_000_000, 2_500_001)]
    log_start = len(d.nginx.object_access_log())
    # The runner only lets the peer reach 127.0.0.1: the certificate names that address too.
    endpoint = hfjs_peer.Endpoint(f"https://127.0.0.1:{d.nginx.port}", d.token("write"), d.token("read"))
    tls_start = len(d.nginx.access_log().splitlines())
    hfjs_peer.download([(dest / "f", uploaded["hash"], len(data), ranges)], endpoint)
    assert (dest / "f").read_bytes() == data
    for i, (start, end) in enumerate(ranges):
        assert (dest / f"f.range{i}").read_bytes() == data[start:end]
    gets = [r for r in _object_requests(d, log_start) if r[0] == "GET"]
    assert gets and all(r[2] == 206 for r in gets), gets
    assert any("/v2/reconstructions/" in line for line in d.nginx.access_log().splitlines()[tls_start:])


def _admin(d: Deployment, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "git_xet", command, *d.admin_args(), *args],
        check=False, capture_output=True, text=True, timeout=120, env={**_inherited(), **d.env},
    )  # fmt: skip


def test_fsck_and_gc_on_the_bucket_and_postgres(tmp_path: Path, deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsck reads the bucket's objects (a flipped byte is a problem), lists what nothing indexes
    as orphans (a xorb whose push died; an upload grant's PUT never committed), and gc removes
    them only once they are older than the grace period; a commit after that is a 404."""
    d = deployment
    objects = d.objects()
    monkeypatch.setenv("SSL_CERT_FILE", str(d.nginx.cert))
    before = {k for k, _ in objects.list("xorbs/")}
    backend = HttpCasBackend(d.nginx.url, StaticToken(d.token("write")))
    with Uploader(backend, global_dedup=False) as up:
        up.add_bytes(random_bytes(3_000_000, 1331))
        up.finalize()
    (xorb_key,) = {k for k, _ in objects.list("xorbs/")} - before
    markers = {k for k, _ in objects.list("uploads/")}  # committed grants' empty markers: fsck lists none, gc removes them
    name = secrets.token_hex(32)
    orphan = f"xorbs/{name[:2]}/{name}"
    objects.put(orphan, b"written by a push that never registered its shard")
    # A grant whose PUT came (through the bucket's front, as a client's does) but whose commit never did.
    built, _ = single_xorb(random_bytes(2_000_000, 1332))
    abandoned = hashes.hash_to_hex(built.xorb_hash)
    auth = bearer(d.token("write"))
    tls = ssl.create_default_context(cafile=str(d.nginx.cert))
    checksum = {"algo": "crc64nvme", "value": str(crc64nvme_reference(bytes(built.body)))}
    grant = httpx.post(f"{d.nginx.url}/v1/xorb-grants/default/{abandoned}", headers=auth, json={"length": len(built.body), "checksum": checksum}, verify=tls)
    assert grant.status_code == 201, grant.text
    assert httpx.put(grant.json()["url"], headers=grant.json()["headers"], content=bytes(built.body)).status_code == 200
    (staged,) = {k for k, _ in objects.list("uploads/")} - markers
    try:
        report = _fsck(d)
        assert report.returncode == 0 and f"orphan: {orphan}" in report.stdout and f"orphan: {staged}" in report.stdout, report.stdout + report.stderr
        assert "0 problems, 2 orphaned objects" in report.stdout, report.stdout
        kept = _admin(d, "gc", "--grace", "3600")  # written just now: kept
        assert kept.returncode == 0 and "git-xet gc: 0 orphaned" in kept.stdout, kept.stdout + kept.stderr
        assert objects.exists(orphan) and objects.exists(staged)
        gone = _admin(d, "gc", "--grace", "0")
        assert gone.returncode == 0 and f"removed: {orphan}" in gone.stdout and f"removed: {staged}" in gone.stdout, gone.stdout
        assert f"git-xet gc: {2 + len(markers)} orphaned" in gone.stdout, gone.stdout
        assert not objects.exists(orphan) and not objects.exists(staged) and objects.exists(xorb_key)
        late = httpx.post(f"{d.nginx.url}/v1/xorb-commits/default/{abandoned}/grant/{grant.json()['id']}", headers=auth, verify=tls)
        assert late.status_code == 404  # nothing visible: the client asks for a new grant
        store = d.store()
        try:
            assert store.xorb_layout(abandoned) is None
        finally:
            store.close()
    finally:
        objects.delete(orphan)
        objects.delete(staged)

    original = objects.read(xorb_key)
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x01
    objects.put(xorb_key, bytes(flipped))
    try:
        broken = _fsck(d)
        assert broken.returncode == 1, broken.stdout
        (problem,) = [line for line in broken.stdout.splitlines() if line.startswith("error: ")]
        assert xorb_key.rsplit("/", 1)[-1] in problem
    finally:
        objects.put(xorb_key, original)  # the module's other tests share this deployment
    assert _fsck(d).returncode == 0
