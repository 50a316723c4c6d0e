"""Which XET store an object goes to, and how to reach it.

Standalone mode (the batch API is skipped; `action` is null): the store named by
$GIT_XET_ENDPOINT or `git config xet.endpoint` — a directory (a serverless local store) or
the URL of a `git xet serve`, with the token configured for that store (store_token).

Server-negotiated mode (Hugging Face Hub style): the batch action's headers carry the CAS URL
and a short-lived token; its href is the route that renews that token with the user's
credential, looked up for that URL's host only (see credential_headers). The href must have the
LFS endpoint's origin: a server cannot send us to collect credentials elsewhere.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from ..core.errors import XetError
from ..core.http_headers import bearer
from ..platform.gitcmd import config_list_scoped, run_git

if TYPE_CHECKING:
    from ..client.ssh_authenticate import SshRemote


class ConfigError(XetError):
    """The agent is not configured well enough to transfer; the message says what to run."""


def _canonical(key: str) -> str:
    """git's spelling of a config key: section and variable lower-cased, subsection kept."""
    section, _, rest = key.partition(".")
    middle, _, variable = rest.rpartition(".")
    return f"{section.lower()}.{middle + '.' if middle else ''}{variable.lower()}"


class ConfigSnapshot(NamedTuple):
    """The git config visible here: effective values (later wins, as for `git config --get`)
    and every (scope, key, value) entry, for settings that belong to one scope's other keys."""

    values: dict[str, str]
    scoped: list[tuple[str, str, str]]


def read_config_snapshot(cwd: Path | str | None = None) -> ConfigSnapshot:
    """Every git config value visible in `cwd` (`git config --show-scope --list -z`)."""
    values: dict[str, str] = {}
    scoped = []
    for scope, key, value in config_list_scoped(cwd):
        canonical = _canonical(key)
        values[canonical] = value
        scoped.append((scope, canonical, value))
    return ConfigSnapshot(values, scoped)


@functools.cache
def _config_snapshot() -> ConfigSnapshot:
    """The config, read once per process.

    The agent asks for several keys per object; one `git` process each cost milliseconds per
    object, times thousands of objects. Nothing changes the config during one git-lfs command.
    """
    return read_config_snapshot()


def git_config(key: str) -> str | None:
    """The value of `key` in this repository's git config, or None when unset or empty."""
    return _config_snapshot().values.get(_canonical(key)) or None


@functools.cache
def git_common_dir() -> Path:
    common = run_git("rev-parse", "--git-common-dir").value()
    if common is None:
        raise ConfigError("not inside a git repository (git rev-parse --git-common-dir failed)")
    return Path(common).resolve()


class StandaloneTarget(NamedTuple):
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
    configured = configured_endpoint()
    if configured is not None:  # standalone: a `git xet serve` and its own tokens
        return (
            "mint a token on the server with `git xet token --data <its data directory> --scope write --repo <repo>` "
            f"(the repo your teammates push to: tokens for different repos see different objects) and {_store_it(configured[0])}"
        )
    return "set $HF_TOKEN to a token with write access, or store your credentials with `git credential approve`"


def _store_it(location: str) -> str:
    """How to configure a token for the store at `location` only."""
    return f"store it for that store with `git config --global xet.{location.rstrip('/')}.token <token>`"


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
        return StandaloneTarget("http", where.location, sendable_store_token(where.location).token)
    return StandaloneTarget(where.kind, where.location, None)  # "local" or "s3"


class StoreToken(NamedTuple):
    """The token for one store and where it was configured (never the token in `source`)."""

    token: str | None
    source: str


def sendable_store_token(location: str, config: ConfigSnapshot | None = None) -> StoreToken:
    """store_token, refused (ConfigError) when it would travel over plain http off this machine."""
    from ..client.token_policy import may_send_credentials, plain_http_refusal

    found = store_token(location, config)
    if found.token and not may_send_credentials(location):
        raise ConfigError(plain_http_refusal(location, found.source))
    return found


def store_token(location: str, config: ConfigSnapshot | None = None) -> StoreToken:
    """The token the user configured for the `git xet serve` at `location`, and only for it.

    A store's URL can come from a repository (`git xet clone` reads its `.xetconfig`), so a
    token is bound to the store it was configured with, as git's credentials are to a host:
    1. $GIT_XET_TOKEN, when $GIT_XET_ENDPOINT names this store;
    2. `xet.<url>.token` whose URL is this store or a path prefix of it (the longest wins);
    3. `xet.token` of a config scope (global, system, ...) whose own `xet.endpoint` is this store
       (`git xet install --global --standalone URL` + `git config --global xet.token ...`);
    4. a git credential helper's password for this store's protocol, host and path (never
       prompting), when the URL may carry credentials at all.
    Otherwise none: a repository naming some other store gets no token of the user's.
    """
    config = config or _config_snapshot()
    want = _store_key(location)
    env_token, env_store = os.environ.get("GIT_XET_TOKEN"), os.environ.get("GIT_XET_ENDPOINT")
    if env_token and env_store and _store_key(env_store) == want:
        return StoreToken(env_token, "$GIT_XET_TOKEN")
    best: tuple[int, str, str] | None = None
    prefixes = _prefixes(want)
    for _scope, key, value in config.scoped:
        url = _token_key_url(key)
        matched = _store_key(url) if url is not None and value else None
        if matched is not None and matched in prefixes and (best is None or len(matched) >= best[0]):  # the longest; at a tie, git's last
            best = (len(matched), value, f"xet.{url}.token")
    if best is not None:
        return StoreToken(best[1], best[2])
    endpoints: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for scope, key, value in config.scoped:
        if key == "xet.endpoint":
            endpoints[scope] = value
        elif key == "xet.token":
            tokens[scope] = value
    for scope in reversed(list(tokens)):  # the last scope git read (local over global) first
        if tokens[scope] and scope in endpoints and _store_key(endpoints[scope]) == want:
            return StoreToken(tokens[scope], f"xet.token with xet.endpoint in the {scope} config")
    from ..client.token_policy import may_send_credentials

    if may_send_credentials(location):
        parts = urlsplit(location)
        found = _git_credential(parts.scheme, parts.netloc.rpartition("@")[2], parts.path)
        if found is not None:
            return StoreToken(found[1], "your git credential helper")
    return StoreToken(None, f"no token is configured for {location}; if it needs one, {_store_it(location)}")


def _token_key_url(key: str) -> str | None:
    """The URL of a canonical `xet.<url>.token` key, or None for any other key."""
    if not (key.startswith("xet.") and key.endswith(".token")):
        return None
    url = key[len("xet.") : -len(".token")]
    return url if url.lower().startswith(("https://", "http://")) else None


def _store_key(url: str) -> str:
    """A store URL compared as git compares credential URLs: origin (scheme, host, port;
    lower-cased, no default port, no user info) and path, without a trailing slash."""
    return origin(url) + urlsplit(url).path.rstrip("/")


def _prefixes(key: str) -> set[str]:
    """`key` and each of its path prefixes at a `/` boundary (the origin alone included)."""
    base = origin(key)
    parts = key[len(base) :].split("/")
    return {base + "/".join(parts[:n]) for n in range(1, len(parts) + 1)} | {base}


def lfs_config(key: str) -> str | None:
    """A git-lfs setting: git config first, then the repository's .lfsconfig (as git-lfs reads it)."""
    value = git_config(key)
    if value:
        return value
    return run_git("config", "--file", ".lfsconfig", "--get", key).value()


def lfs_endpoint(remote: str | None) -> str:
    """The LFS endpoint git-lfs uses for `remote` (remote.<r>.lfsurl, lfs.url, or derived)."""
    remote = remote or "origin"
    explicit = lfs_config(f"remote.{remote}.lfsurl") or lfs_config("lfs.url")
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


def ssh_remote(remote: str | None, operation: str) -> SshRemote | None:
    """Where git-lfs runs git-lfs-authenticate for `remote`, as git-lfs picks it: an ssh
    remote.<r>.lfsurl or lfs.url, else (no LFS URL set) the remote's pushurl for uploads or its
    url; None when the LFS endpoint is not reached over SSH."""
    from ..client.ssh_authenticate import parse_ssh_remote

    remote = remote or "origin"
    explicit = lfs_config(f"remote.{remote}.lfsurl") or lfs_config("lfs.url")
    if explicit:
        return parse_ssh_remote(explicit)
    url = (operation == "upload" and git_config(f"remote.{remote}.pushurl")) or git_config(f"remote.{remote}.url")
    return parse_ssh_remote(url) if url else None


def origin(url: str) -> str:
    """scheme://host[:port] of a URL, lowercased, without credentials or a default port."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


def hub_endpoint() -> str:
    """Where the Hugging Face Hub is: $HF_ENDPOINT, else https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


class HubRepo(NamedTuple):
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
    """The user's credential for `url`'s host, as request headers; {} if there is none.

    `$HF_TOKEN` goes only to the Hub endpoint, and only over https: a repo whose .lfsconfig
    names another LFS server must not receive it. Every other host gets what the user stored
    for that host: a password in the URL itself, `~/.netrc` ($NETRC), or `git credential fill`
    (as git-lfs does), never prompting; nothing over plain http except to loopback.
    """
    from ..client.token_policy import may_send_credentials

    if not may_send_credentials(url):  # plain http off this machine: readable on every hop
        return {}
    parts = urlsplit(url)
    token = os.environ.get("HF_TOKEN")
    if token and parts.scheme == "https" and origin(url) == origin(hub_endpoint()):
        return bearer(token)
    if parts.password:
        return bearer(parts.password)
    found = _netrc_login(parts.hostname or "") or _git_credential(parts.scheme, parts.netloc.rpartition("@")[2], parts.path)
    if found is None:
        return {}
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{found[0]}:{found[1]}".encode()).decode()}


def _netrc_login(host: str) -> tuple[str, str] | None:
    import netrc

    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if not entry or not entry[2]:
        return None
    return entry[0] or "", entry[2]


def _git_credential(scheme: str, host: str, path: str) -> tuple[str, str] | None:
    query = f"protocol={scheme}\nhost={host}\npath={path.lstrip('/')}\n\n"
    out = run_git("credential", "fill", input=query, timeout=30, env=dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS="", GCM_INTERACTIVE="never"))
    fields = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if out.returncode == 0 and fields.get("password"):
        return fields.get("username", ""), fields["password"]
    return None
