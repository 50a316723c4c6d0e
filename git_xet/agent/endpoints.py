"""Which XET store an object goes to, and how to reach it.

Standalone mode (the batch API is skipped; `action` is null): the store named by
$GIT_XET_ENDPOINT or `git config xet.endpoint` — a directory (a serverless local store) or
the URL of a `git xet serve`, with $GIT_XET_TOKEN or `xet.token`.

Server-negotiated mode (Hugging Face Hub style): the batch action's headers carry the CAS URL
and a short-lived token; its href is the route that renews that token with the user's
credential ($HF_TOKEN, else `git credential fill`, else ~/.netrc).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


class ConfigError(Exception):
    """The agent is not configured well enough to transfer; the message says what to run."""


def git_config(key: str) -> str | None:
    try:
        out = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value or None


def git_common_dir() -> Path:
    out = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0:
        raise ConfigError("not inside a git repository (git rev-parse --git-common-dir failed)")
    return Path(out.stdout.strip()).resolve()


@dataclass(frozen=True)
class StandaloneTarget:
    kind: str  # "local" or "http"
    location: str
    token: str | None


def configured_endpoint() -> tuple[str, str] | None:
    """(the store location as written, where it was written), or None when unset."""
    env = os.environ.get("GIT_XET_ENDPOINT")
    if env:
        return env, "$GIT_XET_ENDPOINT"
    value = git_config("xet.endpoint")
    return (value, "xet.endpoint") if value else None


def auth_fix() -> str:
    """What to do about refused credentials, for the mode in use."""
    if configured_endpoint() is not None:  # standalone: a `git xet serve` and its own tokens
        return (
            "mint a token on the server with `git xet token --data <its data directory> --scope write` "
            "and store it with `git config --global xet.token <token>` (or set $GIT_XET_TOKEN)"
        )
    return "set $HF_TOKEN to a token with write access, or store your credentials with `git credential approve`"


def standalone_target() -> StandaloneTarget:
    from ..client.location import LocationError, parse_store_location

    configured = configured_endpoint()
    if configured is None:
        raise ConfigError(
            "no XET store is configured for this repository; run `git xet install --standalone <directory or https URL>` "
            "or set `git config xet.endpoint ...`"
        )
    text, source = configured
    try:
        where = parse_store_location(text)
    except LocationError as exc:
        raise ConfigError(f"{source} is not usable: {exc}; fix it with `git xet install --standalone ...`") from None
    if where.kind == "http":
        return StandaloneTarget("http", where.location, os.environ.get("GIT_XET_TOKEN") or git_config("xet.token"))
    return StandaloneTarget("local", where.location, None)


def lfs_endpoint(remote: str | None) -> str:
    """The LFS endpoint git-lfs uses for `remote` (remote.<r>.lfsurl, lfs.url, or derived)."""
    remote = remote or "origin"
    explicit = git_config(f"remote.{remote}.lfsurl") or git_config("lfs.url")
    if explicit:
        return explicit.rstrip("/")
    url = git_config(f"remote.{remote}.url")
    if not url or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"remote '{remote}' is not an https remote and no XET store is configured; "
            "run `git xet install --standalone <directory or URL>`"
        )
    url = url.rstrip("/")
    return (url if url.endswith(".git") else url + ".git") + "/info/lfs"


@dataclass(frozen=True)
class HubRepo:
    """Where a Hub-style server's XET token routes are, derived from its LFS endpoint."""

    base: str
    kind: str  # models, datasets or spaces
    repo: str

    def token_route(self, mode: str, rev: str = "main") -> str:
        return f"{self.base}/api/{self.kind}/{self.repo}/xet-{mode}-token/{rev}"


def hub_repo(endpoint: str) -> HubRepo:
    parts = urlsplit(endpoint)
    path = parts.path.removesuffix("/info/lfs").removesuffix(".git").strip("/")
    kind = "models"
    for prefix in ("datasets", "spaces"):
        if path.startswith(prefix + "/"):
            kind, path = prefix, path[len(prefix) + 1 :]
    return HubRepo(f"{parts.scheme}://{parts.netloc}", kind, path)


def credential_headers(url: str) -> dict[str, str]:
    """The user's credential for the Hub (or our Hub emulation), as request headers."""
    token = os.environ.get("HF_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    parts = urlsplit(url)
    if parts.password:
        return {"Authorization": f"Bearer {parts.password}"}
    query = f"protocol={parts.scheme}\nhost={parts.netloc}\npath={parts.path.lstrip('/')}\n\n"
    try:
        out = subprocess.run(
            ["git", "credential", "fill"],
            input=query,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=dict(os.environ, GIT_TERMINAL_PROMPT="0"),
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if out.returncode == 0 and fields.get("password"):
        import base64

        basic = base64.b64encode(f"{fields.get('username', '')}:{fields['password']}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}  # httpx falls back to ~/.netrc
