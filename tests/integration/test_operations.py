"""/metrics, /ready and the admin page (issue 46 §3, §4), against the real server with its
default two workers, on both index kinds; the page in Debian's chromium through Playwright."""

from __future__ import annotations

import re
import secrets
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.postgres_process import Postgres
from tests.support.server_process import RunningServer, running_server

ADMIN = secrets.token_hex(16)
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


def _scrape(server: RunningServer) -> dict[str, float]:
    return server.metrics(ADMIN)


def _total(values: dict[str, float], prefix: str, **labels: str) -> float:
    """The sum of the samples of `prefix` whose labels include `labels`."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for name, v in values.items() if name.split("{")[0] == prefix and all(w in name for w in wanted))


def _lock(server: RunningServer, repo: str, path: str, token: str) -> str:
    """Take a Git LFS lock as the user of `token`; its id."""
    answer = httpx.post(f"{server.url}/{repo}.git/info/lfs/locks", json={"path": path}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["lock"]["id"])


def _push(server: RunningServer, files: list[bytes], repo: str = "default") -> None:
    backend = HttpCasBackend(server.url, StaticToken(server.token("write", repo=repo)), policy=FAST_RETRY)
    with Uploader(backend, global_dedup=False) as up:
        for data in files:
            up.add_bytes(data)
        up.finalize()


@pytest.mark.parametrize("seed", [1, 2])
def test_metrics_move_by_what_a_push_did(tmp_path: Path, index_args: list[str], seed: int) -> None:
    files = [random_bytes(50_000 + 70_001 * i * seed, seed * 100 + i) for i in range(3 + seed)]
    with running_server(tmp_path / "data", *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        before = _scrape(server)
        during: list[dict[str, float]] = []
        scraper = threading.Thread(target=lambda: during.append(_scrape(server)))
        scraper.start()
        _push(server, files)
        scraper.join(timeout=60)
        after = _scrape(server)
    assert during, "a scrape during the push answered"
    stored = after["git_xet_stored_bytes"] - before["git_xet_stored_bytes"]
    assert stored > 0
    assert after["git_xet_xorbs_stored"] > before["git_xet_xorbs_stored"]
    assert after["git_xet_shards_stored"] >= before["git_xet_shards_stored"] + 1
    assert after["git_xet_logical_bytes"] - before["git_xet_logical_bytes"] == sum(map(len, files))
    # Every stored xorb byte arrived in a request body (xorb uploads or upload bundles).
    received = _total(after, "git_xet_http_received_bytes_total") - _total(before, "git_xet_http_received_bytes_total")
    assert received >= stored
    shard_posts = sum(_total(after, "git_xet_http_requests_total", route=r, status="200") for r in ("/v1/shards", "/v2/shards", "/git-xet/v1/upload-bundles"))
    assert shard_posts >= 1
    assert _total(after, "git_xet_http_request_duration_seconds_count") > _total(before, "git_xet_http_request_duration_seconds_count")
    # The scrapes themselves are counted, under their route's template, by every worker together.
    assert _total(after, "git_xet_http_requests_total", route="/metrics", status="200") >= 2


def test_metrics_and_admin_refuse_strangers(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        user_token = server.token("write")
        for headers in ({}, {"Authorization": f"Bearer {user_token}"}, {"Authorization": f"Bearer {ADMIN[:-1]}x"}):
            for path in ("/metrics", "/admin/api/summary"):
                assert httpx.get(server.url + path, headers=headers, timeout=10).status_code == 401
            assert httpx.get(server.url + "/admin", headers=headers, timeout=10).status_code == 401
        revoked_before = httpx.get(f"{server.url}/admin/api/summary", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).json()["revoked_tokens"]
        # A user token cannot revoke (or sign in): nothing changes.
        answer = httpx.post(f"{server.url}/admin/revoke", data={"token": user_token, "csrf": "x"}, headers={"Authorization": f"Bearer {user_token}"}, timeout=10)
        assert answer.status_code == 401
        assert httpx.get(f"{server.url}/admin/api/summary", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).json()["revoked_tokens"] == revoked_before
        # Nor force an unlock of another user's lock through the page's form; nor can the admin's
        # browser be made to post one from another site (no page value): the lock stays.
        lock_id = _lock(server, "default", "held.bin", server.token("write"))
        form = {"repo": "default", "id": lock_id, "csrf": "x"}
        assert httpx.post(f"{server.url}/admin/unlock", data=form, headers={"Authorization": f"Bearer {user_token}"}, timeout=10).status_code == 401
        assert httpx.post(f"{server.url}/admin/unlock", data=form, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).status_code == 403
        summary = httpx.get(f"{server.url}/admin/api/summary", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).json()
        assert [lock["id"] for lock in summary["locks"]] == [lock_id]
    with running_server(tmp_path / "off") as server:  # no admin token configured: off
        assert httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).status_code == 403


def test_ready_fails_while_the_index_database_is_down(tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_XET_SERVER_SECRET", secrets.token_hex(32))
    url = postgres.create_database(f"ready_{secrets.token_hex(4)}")
    with running_server(tmp_path / "data", "--index", url) as server:
        assert httpx.get(f"{server.url}/ready", timeout=30).json() == {"status": "ready"}
        postgres.stop()
        try:
            answer = httpx.get(f"{server.url}/ready", timeout=30)
            assert answer.status_code == 503 and answer.json()["failing"] == ["index"]
        finally:
            postgres.start()
        # Ready again once the index reconnects (a broken pooled connection may fail one check).
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/ready", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "still not ready 30 s after the database came back"
            time.sleep(0.5)


def test_ready_fails_while_the_object_directory_cannot_be_read(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as server:
        _push(server, [random_bytes(3_000_000, 7)])  # big enough for a xorb file of its own (small ones are packed)
        xorbs = tmp_path / "data" / "xorbs"
        assert httpx.get(f"{server.url}/ready", timeout=30).status_code == 200
        # As root no mode makes a directory unreadable: a file where the directory was does.
        xorbs.rename(tmp_path / "moved")
        xorbs.write_bytes(b"")
        answer = httpx.get(f"{server.url}/ready", timeout=30)
        assert answer.status_code == 503 and answer.json()["failing"] == ["objects"]
        xorbs.unlink()
        (tmp_path / "moved").rename(xorbs)
        assert httpx.get(f"{server.url}/ready", timeout=30).status_code == 200


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (install/services.sh)")
def test_admin_page_in_a_browser(tmp_path: Path, index_args: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    with running_server(tmp_path / "data", *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        shared = random_bytes(300_000, 11)
        _push(server, [shared, random_bytes(90_000, 12)], repo="team/alpha")
        _push(server, [shared], repo="team/beta")
        lock_holder = server.token("write", repo="team/alpha")
        lock_ids = [_lock(server, "team/alpha", path, lock_holder) for path in ("art/hero.psd", "art/map.psd")]
        quota = httpx.post(f"{server.url}/admin/api/repos/quota", json={"repo": "team/alpha", "max_bytes": 10**9}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert quota.status_code == 200
        victim = server.token("read", repo="team/beta")
        victim_id = httpx.get(f"{server.url}/v1/reconstructions/{'0' * 64}", headers={"Authorization": f"Bearer {victim}"}, timeout=10)
        assert victim_id.status_code == 404  # accepted: the file is simply not there
        api = httpx.get(f"{server.url}/admin/api/summary", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                assert page.goto(f"{server.url}/admin").status == 401
                page.fill("input[name=token]", "wrong-wrong-wrong-wrong")
                page.click("form button")
                assert "not the admin token" in page.inner_text("#problem")
                page.fill("input[name=token]", ADMIN)
                page.click("form button")
                page.wait_for_selector("#repos")
                for usage in api["repos"]:
                    row = page.locator(f'tr[data-repo="{usage["repo"]}"]')
                    assert row.locator(".files").inner_text() == str(usage["files"])
                    assert row.locator(".logical").get_attribute("data-value") == str(usage["logical_bytes"])
                    assert row.locator(".ratio").inner_text() == f"{usage['dedup_ratio']:.2f}"
                assert {u["repo"] for u in api["repos"]} == {"team/alpha", "team/beta"}
                stored = page.locator("#totals td[data-value]").nth(2).get_attribute("data-value")
                assert stored == str(api["totals"]["stored_bytes"])
                assert page.locator("#pushes tr").count() == 1 + len(api["pushes"]) >= 3
                assert page.locator("#storage-chart polyline").count() == 1
                page.screenshot(path=str(tmp_path / "admin.png"), full_page=True)
                # Locks: the page lists what the API lists; a forced unlock releases exactly one.
                listed = httpx.get(f"{server.url}/admin/api/locks", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()["locks"]
                assert sorted(page.locator("#locks tr[data-lock]").evaluate_all("rows => rows.map(r => r.dataset.lock)")) == sorted(x["id"] for x in listed) == sorted(lock_ids)
                assert page.locator('tr[data-repo="team/alpha"] .quota').get_attribute("data-value") == str(10**9)
                page.locator(f'tr[data-lock="{lock_ids[0]}"] button').click()
                page.wait_for_selector("#done")
                assert "unlocked art/hero.psd in team/alpha" in page.inner_text("#done")
                assert [x["id"] for x in httpx.get(f"{server.url}/team/alpha.git/info/lfs/locks", headers={"Authorization": f"Bearer {lock_holder}"}, timeout=30).json()["locks"]] == [lock_ids[1]]
                assert page.locator("#locks tr[data-lock]").count() == 1
                page.fill("#revoke input[name=token]", victim)
                page.click("#revoke button")
                page.wait_for_selector("#done")
                revoked_id = re.sub(r"^revoked ", "", page.inner_text("#done"))
                assert revoked_id in page.inner_text("#revoked")
            finally:
                browser.close()
        # Servers re-read the revocation list at most once a second (REVOCATION_CACHE_SECONDS).
        deadline = time.monotonic() + 10
        while (refused := httpx.get(f"{server.url}/v1/reconstructions/{'0' * 64}", headers={"Authorization": f"Bearer {victim}"}, timeout=10)).status_code != 401:
            assert time.monotonic() < deadline, "the revoked token is still accepted"
            time.sleep(0.1)
        assert "revoked" in refused.text
