"""The admin HTTP API (server/admin_api.py, issue 46 §1, §2): docs/operations.md's curl block run
word for word against the real server on both index kinds, its answers checked against the
commands' and the store's; and every route refused to whoever lacks the admin token (no token,
a user's write token, a near miss, the admin page's cookie), with nothing stored changed."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import httpx

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.docs_blocks import run_block
from tests.support.gitenv import make_git_env, run_git_xet
from tests.support.server_process import RunningServer, running_server

ADMIN = secrets.token_hex(16)
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
ROUTES = [
    ("GET", "/admin/api/usage", None),
    ("POST", "/admin/api/repos/delete", {"repo": "acme/models"}),
    ("POST", "/admin/api/repos/prune", {"repo": "acme/models", "drop": ["0" * 64]}),
    ("POST", "/admin/api/repos/restore", {"repo": "acme/old"}),
    ("GET", "/admin/api/quotas", None),
    ("POST", "/admin/api/repos/quota", {"repo": "acme/models", "max_bytes": 0}),
    ("GET", "/admin/api/locks", None),
    ("POST", "/admin/api/locks/unlock", {"repo": "acme/models", "id": "LOCK"}),
    ("GET", "/admin/api/tokens", None),
    ("POST", "/admin/api/tokens/revoke", {"id": "TOKEN"}),
]


def _push(server: RunningServer, files: list[bytes], repo: str) -> None:
    backend = HttpCasBackend(server.url, StaticToken(server.token("write", repo=repo)), policy=FAST_RETRY)
    with Uploader(backend, global_dedup=False) as up:
        for data in files:
            up.add_bytes(data)
        up.finalize()


def _get(server: RunningServer, path: str) -> dict:
    answer = httpx.get(server.url + path, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _post(server: RunningServer, path: str, body: dict, token: str = ADMIN) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _lock(server: RunningServer, repo: str, path: str, token: str) -> str:
    answer = httpx.post(f"{server.url}/{repo}.git/info/lfs/locks", json={"path": path}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["lock"]["id"])


def _state(server: RunningServer) -> str:
    """Everything the API can change, as the admin reads it."""
    return json.dumps([_get(server, p) for p in ("/admin/api/usage", "/admin/api/quotas", "/admin/api/locks", "/admin/api/tokens")], sort_keys=True)


def test_the_docs_curl_block_does_what_the_commands_do(tmp_path: Path, index_args: list[str]) -> None:
    kept, dropped, old = (random_bytes(120_000 + i, 60 + i) for i in range(3))
    data = tmp_path / "data"
    with running_server(data, *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        _push(server, [kept, dropped], "acme/models")
        _push(server, [old], "acme/old")
        alice = server.token("write", repo="acme/models")
        lock_id = _lock(server, "acme/models", "art/hero.psd", alice)
        genv = make_git_env(tmp_path / "env")
        genv.env["GIT_XET_ADMIN_TOKEN"] = ADMIN
        run_block("operations.md", "admin-api", {"https://xet.example.com": server.url}, cwd=genv.root, env=genv.env)
        # usage as `git xet usage --json` gives it (run before the block's delete: same figures for acme/models)
        command = json.loads(run_git_xet("usage", "--data", str(data), *index_args, "--json", "--repo", "acme/models", timeout=120, check=True).stdout)
        assert json.loads((genv.root / "usage.json").read_text()) == command
        assert command["repos"][0]["files"] == 2 and command["repos"][0]["logical_bytes"] == len(kept) + len(dropped)
        assert _get(server, "/admin/api/quotas") == {"quotas": [{"repo": "acme/models", "max_bytes": 53687091200, "logical_bytes": len(kept) + len(dropped)}]}
        assert [r["files"] for r in _get(server, "/admin/api/usage?repo=acme/old")["repos"]] == [1]  # deleted, then restored
        locks = json.loads((genv.root / "locks.json").read_text())["locks"]
        assert [(x["id"], x["repo"], x["path"]) for x in locks] == [(lock_id, "acme/models", "art/hero.psd")]

        # prune by a keep list, then a forced unlock and a revocation
        pruned = _post(server, "/admin/api/repos/prune", {"repo": "acme/models", "keep": [hashlib.sha256(kept).hexdigest()]})
        assert pruned.json() == {"repo": "acme/models", "files": 1}
        assert _get(server, "/admin/api/usage?repo=acme/models")["repos"][0]["logical_bytes"] == len(kept)
        unlocked = _post(server, "/admin/api/locks/unlock", {"repo": "acme/models", "id": lock_id})
        assert unlocked.status_code == 200 and unlocked.json()["path"] == "art/hero.psd"
        assert _get(server, "/admin/api/locks") == {"locks": []}
        assert _post(server, "/admin/api/locks/unlock", {"repo": "acme/models", "id": lock_id}).status_code == 404
        assert _post(server, "/admin/api/tokens/revoke", {"token": alice[:-2] + "xx"}).status_code == 422  # not one it signed
        revoked = _post(server, "/admin/api/tokens/revoke", {"token": alice})
        assert revoked.status_code == 200
        assert revoked.json()["id"] in {t["id"] for t in _get(server, "/admin/api/tokens")["revoked"]}


def test_every_route_refuses_whoever_lacks_the_admin_token(tmp_path: Path) -> None:
    """An attacker with a user's write token (or none, or one character off the admin token, or
    the admin page's cookie name with a guessed value) gets 401 from every route, and the store,
    its quotas, locks and revocation list are as they were."""
    with running_server(tmp_path / "data", env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        _push(server, [random_bytes(90_000, 5)], "acme/models")
        _push(server, [random_bytes(80_000, 6)], "acme/old")
        user = server.token("write", repo="acme/models")
        lock_id = _lock(server, "acme/models", "a.bin", user)
        assert _post(server, "/admin/api/repos/quota", {"repo": "acme/models", "max_bytes": 10**9}).status_code == 200
        before = _state(server)
        strangers: list[dict[str, str]] = [{}, {"Authorization": f"Bearer {user}"}, {"Authorization": f"Bearer {ADMIN[:-1]}x"}, {"Authorization": f"Basic {ADMIN}"}]
        for headers in strangers:
            for method, path, body in ROUTES:
                body = json.loads(json.dumps(body).replace("LOCK", lock_id).replace("TOKEN", "abc123")) if body else None
                answer = httpx.request(method, server.url + path, json=body, headers=headers, timeout=30)
                assert answer.status_code == 401, (headers, path, answer.text)
        cookie = httpx.Client(base_url=server.url, cookies={"git_xet_admin": "0" * 64}, timeout=30)
        for method, path, body in ROUTES:
            assert cookie.request(method, path, json=body).status_code == 401, path
        assert _state(server) == before
    with running_server(tmp_path / "off") as server:  # no admin token configured: the API is off
        assert httpx.get(f"{server.url}/admin/api/usage", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).status_code == 403
