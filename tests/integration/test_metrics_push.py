"""/metrics after a real `git push` through the agent to the real server (two workers, both
index kinds): each counter moved by exactly what the push did, read independently of the
metrics code: requests per route and bytes received from the server's access log, xorbs and
their bytes from the objects in the store, logical bytes from the files pushed.

Run as a script, it prints such a scrape (the lines that moved), for an operator's notes:
    .venv/bin/python -m tests.integration.test_metrics_push
"""

from __future__ import annotations

import re
import secrets
import sys
import tempfile
from pathlib import Path


from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server

ADMIN = secrets.token_hex(16)
REPO = "acme/models"
SHOWN = re.compile(r"^git_xet_(http_requests_total|http_received_bytes_total|xorbs_stored|shards_stored|stored_bytes|logical_bytes|dedup_saved_bytes|upload_grants_total)\b")


def scrape(server: RunningServer) -> dict[str, float]:
    """Every sample of /metrics: its name with labels -> value."""
    return server.metrics(ADMIN)


def _labels(sample: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', sample))


def _matches(template: str, path: str) -> bool:
    """Whether Starlette's route `template` matches `path` ({name} one segment, {name:path} any)."""
    pattern = re.sub(r"\\\{\w+(:path)?\\\}", lambda m: ".+" if m.group(1) else "[^/]+", re.escape(template))
    return re.fullmatch(pattern, path) is not None


def git_push(root: Path, server: RunningServer, files: dict[str, bytes]) -> None:
    """A user with the agent installed pushes `files` (as LFS objects) to REPO's endpoint."""
    g: GitEnv = make_git_env(root)
    g.git("lfs", "install", "--skip-repo")
    g.git_xet("install")
    token = server.token("write", repo=REPO)
    g.use_credentials(token)
    tree = g.lfs_work_tree(files)
    g.git("config", "lfs.url", f"{server.url}/{REPO}.git/info/lfs", cwd=tree)
    g.git("push", "-q", "origin", "main", cwd=tree)


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The samples whose value changed (new ones included), by how much."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def test_a_git_push_moves_the_counters_by_what_it_did(tmp_path: Path, index_args: list[str]) -> None:
    files = {f"f{i}.bin": random_bytes(size, 90 + i) for i, size in enumerate((40_000, 700_000, 3_000_000))}
    data = tmp_path / "data"
    with running_server(data, *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        objects_before = stored_objects(data)
        before = scrape(server)
        logged_before = len(server.requests())
        git_push(tmp_path / "user", server, files)
        requests = server.requests()[logged_before - 1 :]  # from the first scrape on (counted after its answer)
        after = scrape(server)
        objects_after = stored_objects(data)
    delta = moved(before, after)
    new_objects = {k: n for k, n in objects_after.items() if k not in objects_before}
    assert delta["git_xet_xorbs_stored"] == len(new_objects) >= 1
    assert delta["git_xet_stored_bytes"] == sum(new_objects.values())
    assert delta["git_xet_logical_bytes"] == sum(map(len, files.values()))
    assert delta["git_xet_shards_stored"] >= 1
    # Bytes in: every request body the access log recorded, to the byte.
    received = sum(v for k, v in delta.items() if k.startswith("git_xet_http_received_bytes_total"))
    assert received == sum(r["bytes_in"] for r in requests) >= sum(new_objects.values())
    # Requests by route and status: as many as the access log has for each.
    counted = {k: v for k, v in delta.items() if k.startswith("git_xet_http_requests_total")}
    assert sum(counted.values()) == len(requests)
    for sample, n in counted.items():
        labels = _labels(sample)
        logged = [r for r in requests if r["method"] == labels["method"] and str(r["status"]) == labels["status"] and _matches(labels["route"], r["path"])]
        assert n == len(logged), (sample, n, len(logged))
    routes = {_labels(k)["route"] for k in counted}
    assert routes & {"/v1/xorbs/{prefix}/{xorb}", "/v1/xorbs-and-shard", "/v1/xorb-grants/{prefix}/{xorb}"}, routes


def main() -> int:
    """Push three files with git through a fresh server and print the scrape lines that moved."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {f"f{i}.bin": random_bytes(size, 90 + i) for i, size in enumerate((40_000, 700_000, 3_000_000))}
        with running_server(root / "data", env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
            before = scrape(server)
            git_push(root / "user", server, files)
            after = scrape(server)
        print(f"# a git push of {len(files)} files, {sum(map(len, files.values()))} bytes, to {REPO}: the samples that moved")
        for sample, change in sorted(moved(before, after).items()):
            if SHOWN.match(sample):
                print(f"{sample} {after[sample]:.0f}  (+{change:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
