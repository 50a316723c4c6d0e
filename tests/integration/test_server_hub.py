"""The server's Hub emulation: LFS batch API, XET token routes and the basic-download bridge."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import httpx
import pytest

from git_xet.core.http_headers import bearer
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.server_process import RunningServer, running_server


REPO = "acme/model"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with running_server(tmp_path_factory.mktemp("hub") / "data") as srv:
        yield srv


def _batch(server: RunningServer, operation: str, objects: list[dict], token: str, transfers: list[str], basic: bool = False) -> httpx.Response:
    auth = "Basic " + base64.b64encode(f"user:{token}".encode()).decode() if basic else f"Bearer {token}"
    return httpx.post(
        f"{server.url}/acme/model.git/info/lfs/objects/batch",
        json={"operation": operation, "transfers": transfers, "objects": objects, "hash_algo": "sha256"},
        headers={"Authorization": auth, "Accept": "application/vnd.git-lfs+json"},
        timeout=30,
    )


def test_upload_negotiation_token_refresh_and_download_bridge(server: RunningServer, tmp_path: Path) -> None:
    data = random_bytes(2_500_000, 1)
    oid = hashlib.sha256(data).hexdigest()
    user = server.token("write", ttl=3600, repo=REPO)
    obj = [{"oid": oid, "size": len(data)}]

    resp = _batch(server, "upload", obj, user, ["basic", "xet"], basic=True)
    assert resp.status_code == 200
    body = resp.json()
    assert body["transfer"] == "xet"
    action = body["objects"][0]["actions"]["upload"]
    headers = action["header"]
    assert set(headers) >= {"X-Xet-Cas-Url", "X-Xet-Access-Token", "X-Xet-Token-Expiration", "X-Xet-Session-Id"}
    assert int(headers["X-Xet-Token-Expiration"]) > 0
    assert action["href"].endswith("/api/models/acme/model/xet-write-token/main")

    refreshed = httpx.get(action["href"], headers=bearer(user), timeout=30)
    assert refreshed.status_code == 200
    info = refreshed.json()
    assert set(info) == {"casUrl", "exp", "accessToken"} and refreshed.headers["X-Xet-Access-Token"] == info["accessToken"]
    assert httpx.get(action["href"], timeout=30).status_code == 401
    assert httpx.get(action["href"], headers=bearer(server.token('read', repo=REPO)), timeout=30).status_code == 403

    # What upstream git-xet does with those headers: upload with hf-xet to the CAS URL.
    (tmp_path / "f.bin").write_bytes(data)
    (uploaded,) = hf_xet_oracle.remote_upload([tmp_path / "f.bin"], headers["X-Xet-Cas-Url"], headers["X-Xet-Access-Token"], tmp_path / "hf")
    assert uploaded["sha256"] == oid

    # Now stored: offered again, it gets no action.
    again = _batch(server, "upload", obj, user, ["basic", "xet"]).json()
    assert "actions" not in again["objects"][0]

    reader = server.token("read", repo=REPO)
    xet_dl = _batch(server, "download", obj, reader, ["basic", "xet"]).json()
    assert xet_dl["transfer"] == "xet"
    assert xet_dl["objects"][0]["actions"]["download"]["header"]["X-Xet-Hash"] == uploaded["hash"]

    basic_dl = _batch(server, "download", obj, reader, ["basic"]).json()
    assert basic_dl["transfer"] == "basic"
    href = basic_dl["objects"][0]["actions"]["download"]["href"]
    got = httpx.get(href, timeout=60)
    assert got.status_code == 200 and got.content == data
    assert httpx.get(href.replace("sig=", "sig=x"), timeout=30).status_code == 403


def test_batch_refusals(server: RunningServer) -> None:
    obj = [{"oid": "a" * 64, "size": 10}]
    basic = _batch(server, "upload", obj, server.token("write", repo=REPO), ["basic"]).json()  # a stock git-lfs: PUT the object
    assert basic["transfer"] == "basic" and "/acme/model.git/info/lfs/basic/" in basic["objects"][0]["actions"]["upload"]["href"]
    unauth = _batch(server, "upload", obj, "nope", ["xet"])
    assert unauth.status_code == 401 and "LFS-Authenticate" in unauth.headers
    assert _batch(server, "upload", obj, server.token("read", repo=REPO), ["xet"]).status_code == 403
    missing = _batch(server, "download", obj, server.token("read", repo=REPO), ["xet"]).json()
    assert missing["objects"][0]["error"]["code"] == 404
    bad = _batch(server, "upload", [{"oid": "../etc", "size": 1}], server.token("write", repo=REPO), ["xet"]).json()
    assert bad["objects"][0]["error"]["code"] == 422
    garbage = httpx.post(f"{server.url}/acme/model.git/info/lfs/objects/batch", content=b"{", headers=bearer(server.token('write', repo=REPO)), timeout=30)
    assert garbage.status_code == 422
