"""`git xet doctor` (alias `env`): show the configuration and check it, with a fix per problem."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    fix: str = ""


def _run(*args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _config(key: str) -> str | None:
    proc = _run("git", "config", "--get", key)
    return proc.stdout.strip() if proc and proc.returncode == 0 and proc.stdout.strip() else None


def checks() -> Iterator[Check]:
    from .. import __version__
    from ..core.chunking import NATIVE_AVAILABLE

    yield Check(True, f"git-xet {__version__}")
    yield Check(NATIVE_AVAILABLE, "native C chunker" if NATIVE_AVAILABLE else "pure-Python chunker (slow)", "reinstall with gcc and Python headers available")

    lfs = _run("git", "lfs", "version")
    if lfs is None or lfs.returncode != 0:
        yield Check(False, "git-lfs not found", "install git-lfs (Debian/Ubuntu: apt-get install git-lfs)")
        return
    match = re.search(r"git-lfs/(\d+)\.(\d+)\.(\d+)", lfs.stdout)
    new_enough = bool(match and int(match.group(1)) >= 3)
    yield Check(new_enough, lfs.stdout.strip(), "git-lfs 3.0 or newer is needed")
    yield Check(_config("filter.lfs.process") is not None, "git-lfs filters installed", "run `git lfs install`")

    agent = _config("lfs.customtransfer.xet.path")
    if agent is None:
        yield Check(False, "transfer agent not registered", "run `git xet install`")
    else:
        runnable = Path(agent).exists() or shutil.which(agent) is not None
        yield Check(runnable, f"transfer agent: {agent} {_config('lfs.customtransfer.xet.args') or ''}".strip(), "run `git xet install` again")

    standalone = _config("lfs.standalonetransferagent")
    endpoint = os.environ.get("GIT_XET_ENDPOINT") or _config("xet.endpoint")
    if standalone == "xet" or endpoint:
        yield from _check_endpoint(endpoint)
    else:
        yield Check(True, "mode: server-negotiated (the LFS server must offer XET, as the Hugging Face Hub does)")

    from ..client.shard_cache import default_cache_root

    root = default_cache_root()
    size = sum(p.stat().st_size for p in root.rglob("*.mdb")) if root.is_dir() else 0
    yield Check(True, f"shard cache: {root} ({size / 2**20:.1f} MiB)")


def _check_endpoint(endpoint: str | None) -> Iterator[Check]:
    if not endpoint:
        yield Check(False, "standalone mode without a store", "run `git xet install --standalone <directory or URL>`")
        return
    if not endpoint.startswith(("http://", "https://")):
        path = Path(endpoint.removeprefix("file://")).expanduser()
        parent = path if path.exists() else path.parent
        writable = parent.exists() and os.access(parent, os.W_OK)
        yield Check(writable, f"mode: standalone, local store {path}", f"create {parent} or make it writable")
        return
    import httpx

    try:
        health = httpx.get(endpoint.rstrip("/") + "/health", timeout=10)
        reachable = health.status_code == 200
    except httpx.HTTPError as exc:
        yield Check(False, f"mode: standalone, server {endpoint} unreachable ({exc})", "start it (`git xet serve`) or fix xet.endpoint")
        return
    yield Check(reachable, f"mode: standalone, server {endpoint}", "is this a `git xet serve` URL?")
    token = os.environ.get("GIT_XET_TOKEN") or _config("xet.token")
    if not token:
        yield Check(False, "no access token", "mint one with `git xet token --data DIR` on the server and `git config xet.token ...`")
        return
    probe = httpx.get(f"{endpoint.rstrip('/')}/v1/reconstructions/{'0' * 64}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    valid = probe.status_code in (200, 404)
    yield Check(valid, "access token accepted" if valid else f"access token refused (HTTP {probe.status_code})", "mint a new token and set `git config xet.token`")
