"""`git xet doctor` (alias `env`): show the configuration and check it, with a fix per problem."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

from ..core.http_headers import bearer
from ..platform.gitcmd import run_git
from .lfs_keys import PREFIX, direction_problem, miscased_keys

if TYPE_CHECKING:
    from ..client.http_types import Response


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    fix: str = ""


def _config(key: str) -> str | None:
    return run_git("config", "--get", key).value()


def checks() -> Iterator[Check]:
    from ..version import __version__
    from ..core.chunking import NATIVE_AVAILABLE
    from ..core.native import native_disabled

    yield Check(True, f"git-xet {__version__}")
    if native_disabled():  # asked for: not a fault
        yield Check(True, "pure-Python chunker (GIT_XET_NO_NATIVE is set: slow, a few MB/s)")
    else:
        yield Check(NATIVE_AVAILABLE, "native C chunker" if NATIVE_AVAILABLE else "pure-Python chunker (slow)", "reinstall with gcc and Python headers available")

    lfs = run_git("lfs", "version")
    if not lfs.ok:
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
        args = _config("lfs.customtransfer.xet.args") or ""
        yield Check(_agent_runnable(agent, args), f"transfer agent: {agent} {args}".strip(), "run `git xet install` again")
        direction = direction_problem()
        if direction is not None:
            yield Check(False, direction, f"run `git config --unset-all {PREFIX}direction`, then `git xet install`")
    for key in miscased_keys():
        yield Check(False, f"{key} is not read by git-lfs 3.7 and later (they read {PREFIX}* in lowercase only)", f"run `git config --unset-all {key}`, then `git xet install`")

    standalone = _config("lfs.standalonetransferagent")
    endpoint = os.environ.get("GIT_XET_ENDPOINT") or _config("xet.endpoint")
    native = _native_urls()
    if standalone == "xet" or endpoint:
        yield from _check_endpoint(endpoint)
    for url in native:
        yield from _check_native(url)
    if not (standalone == "xet" or endpoint or native):
        yield Check(True, "mode: server-negotiated (the LFS server must offer XET, as the Hugging Face Hub does)")

    from ..client.shard_cache import default_cache_root

    root = default_cache_root()
    size = sum(p.stat().st_size for p in root.rglob("index.sqlite*")) if root.is_dir() else 0
    yield Check(True, f"shard cache: {root} ({size / 2**20:.1f} MiB)")


def _agent_runnable(path: str, args: str) -> bool:
    """The registered command exists, and so does every file its arguments name by absolute
    path (launch.sh and the agent it starts): a removed environment leaves both dangling."""
    try:
        words = shlex.split(args)
    except ValueError:  # unbalanced quotes: git-lfs's shell could not run it either
        return False
    named = [Path(word) for word in words if word.startswith("/")]
    return (Path(path).exists() or shutil.which(path) is not None) and all(p.exists() for p in named)


def _native_urls() -> list[str]:
    """URLs given to `git xet install --native` (lfs.<url>/.standalonetransferagent=xet)."""
    proc = run_git("config", "--get-regexp", r"^lfs\..*\.standalonetransferagent$")
    urls = []
    for line in proc.stdout.splitlines() if proc.ok else []:
        key, _, value = line.partition(" ")
        url = key[len("lfs.") : -len(".standalonetransferagent")]
        if value.strip() == "xet" and ".git-xet.invalid/" not in url:
            urls.append(url.rstrip("/"))
    return urls


def _refused(what: str, resp) -> str:
    """A refusal with the server's own explanation, as its error body gives it."""
    from ..client.errors import error_from_body

    reason = error_from_body(resp.content).message
    return f"{what} refused (HTTP {resp.status_code}{': ' + reason if reason else ''})"


def _check_endpoint(endpoint: str | None) -> Iterator[Check]:
    from ..client.location import LocationError, is_local_store, parse_store_location

    if not endpoint:
        yield Check(False, "standalone mode without a store", "run `git xet install --standalone <directory or URL>`")
        return
    try:
        where = parse_store_location(endpoint)
    except LocationError as exc:
        yield Check(False, f"xet.endpoint is not a store location: {exc}", "run `git xet install --standalone <https URL or absolute directory>`")
        return
    if where.kind == "local":
        path = Path(where.location)
        if not is_local_store(path):
            yield Check(False, f"mode: standalone, but the directory store {path} does not exist (pushes will fail)", f"run `git xet install --standalone {path}`, or fix xet.endpoint")
            return
        index = path / "index.sqlite"
        writable = os.access(path, os.W_OK) and (not index.exists() or os.access(index, os.W_OK))
        yield Check(writable, f"mode: standalone, local store {path} (a directory)", f"make {path} writable for you")
        return
    if where.kind == "s3":
        yield _check_bucket(where.location)
        return
    yield from _check_server(where.location)


def _check_bucket(location: str) -> Check:
    """A bucket store: reachable with these credentials, and marked as a store."""
    from ..client.bucket_backend import BucketBackend, open_bucket_objects
    from ..client.errors import TransferError
    from ..storage.s3 import S3Error

    try:
        BucketBackend(open_bucket_objects(location)).check()
    except (TransferError, S3Error) as exc:
        return Check(False, f"mode: standalone, bucket store {location}: {getattr(exc, 'message', None) or exc}", "fix the AWS_* settings or run `git xet install --standalone " + location + "`")
    return Check(True, f"mode: standalone, bucket store {location}")


def _ask(method: str, url: str, seconds: float, headers: dict[str, str] | None = None, *, json: object = None, body: bytes | None = None) -> Response:
    """One request through the client's own HTTP stack (client/http_client.py: the agent's
    TLS trust, proxy and error mapping), its answer read (at most 1 MiB), with one timeout."""
    from ..client.http_backend import make_http_client
    from ..client.http_types import Timeouts

    with make_http_client(Timeouts(seconds, seconds, seconds)) as http:
        return http.request(method, url, headers=headers, json=json, body=body, limit=1 << 20)


def server_health(url: str) -> Check:
    """Does `url` answer like `git xet serve` (GET /health)? Doctor's check, and `git xet
    install --standalone URL`'s: a wrong port is found at install, not at the first push."""
    from ..core.errors import XetError

    try:
        health = _ask("GET", url + "/health", 10)
    except XetError as exc:
        from ..client.diagnosis import diagnose

        # The same advice a failed push gives (an untrusted certificate is not a stopped server).
        fix = diagnose(exc, url) or "start it (`git xet serve`) or fix xet.endpoint"
        return Check(False, f"mode: standalone, server {url} unreachable ({exc})", fix)
    try:
        ours = health.status_code == 200 and health.json() == {"status": "ok"}
    except ValueError:
        ours = False
    if not ours:
        return Check(False, f"mode: standalone, but {url} does not answer like `git xet serve` (GET /health: HTTP {health.status_code})", "give the URL `git xet serve` printed (or its public URL)")
    return Check(True, f"mode: standalone, server {url}")


def _check_server(url: str) -> Iterator[Check]:
    health = server_health(url)
    yield health
    if not health.ok:
        return
    from ..agent.endpoints import ConfigError, sendable_store_token

    fix = f"mint one on the server with `git xet token --data DIR --scope write --repo REPO` and store it with `git config --global xet.{url}.token ...`"
    try:
        token, source = sendable_store_token(url)
    except ConfigError as exc:
        yield Check(False, str(exc), fix)
        return
    if not token:
        yield Check(False, f"no access token for {url}", fix)
        return
    yield Check(True, f"access token for {url} from {source}")
    auth = bearer(token)
    read = _ask("GET", f"{url}/v1/reconstructions/{'0' * 64}", 10, auth)
    if read.status_code in (401, 403):
        yield Check(False, _refused("access token", read), fix)
        return
    # An empty shard is refused (400) after the write scope is checked, so this stores nothing.
    write = _ask("POST", f"{url}/v1/shards", 10, auth, body=b"")
    if write.status_code in (401, 403):
        yield Check(False, f"access token allows reading only: pushes will fail ({_refused('write', write)})", fix)
        return
    from ..core.token_format import unverified_repo

    repo = unverified_repo(token)
    named = f" (repo '{repo}')" if repo else ""
    yield Check(read.status_code == 404 and write.status_code in (200, 400), f"access token{named} accepted for reading and pushing", fix)
    if repo:
        yield from _check_objects_in_repo(url, auth, repo)


SAMPLED_OBJECTS = 100  # how many of HEAD's LFS objects doctor looks up (one batch request)


def _check_objects_in_repo(url: str, auth: dict[str, str], repo: str) -> Iterator[Check]:
    """Inside a clone: are the LFS objects of the branch's upstream (what teammates pushed) in
    the repo the token names? Tokens for different repos push into different namespaces, so a
    teammate holding a token for another repo sees a working store and a push that succeeds,
    and the next clone misses objects. Objects only committed here are not asked about."""
    import json

    upstream = run_git("rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    if not upstream.ok or not upstream.stdout.strip():
        return
    pushed = upstream.stdout.strip()
    listed = run_git("lfs", "ls-files", "--json", pushed)
    try:
        files = json.loads(listed.stdout or "{}").get("files") or [] if listed.ok else []
    except ValueError:
        files = []
    objects = [{"oid": f["oid"], "size": f["size"]} for f in files if isinstance(f, dict) and "oid" in f and "size" in f][:SAMPLED_OBJECTS]
    if not objects:
        return
    answer = _ask(
        "POST",
        f"{url}/git-xet.git/info/lfs/objects/batch",
        30,
        {**auth, "Accept": "application/vnd.git-lfs+json"},
        json={"operation": "download", "transfers": ["xet"], "objects": objects},
    )
    if answer.status_code != 200:
        yield Check(False, _refused(f"looking up this repository's LFS objects in repo '{repo}'", answer))
        return
    missing = sum(1 for entry in answer.json().get("objects", []) if not isinstance(entry, dict) or "actions" not in entry)
    yield Check(
        missing == 0,
        f"{len(objects) - missing} of {len(objects)} LFS objects of {pushed} are in repo '{repo}'",
        "the others were pushed to another repo, or not pushed: ask whoever pushed them which repo their token names "
        "(`git xet doctor` shows it) and get a token for that repo (`git xet token --repo NAME`), or push them with `git lfs push --all origin`",
    )


def _check_native(url: str) -> Iterator[Check]:
    """`--native URL`: our own batch calls with the user's Hub credentials."""
    from ..core.errors import XetError
    from ..agent.endpoints import ConfigError, credential_headers, hub_repo, lfs_endpoint

    yield Check(True, f"mode: native XET for LFS endpoints under {url}")
    headers = credential_headers(url)
    hf_token = os.environ.get("HF_TOKEN")  # sent only to the Hub endpoint (see credential_headers)
    source = "$HF_TOKEN" if hf_token and headers == bearer(hf_token) else "git credentials" if headers else None
    if source is None:
        yield Check(False, f"no credentials for {url}", "set HF_TOKEN, or store them with `git credential approve`")
        return
    try:
        endpoint = lfs_endpoint(None)
    except ConfigError:
        endpoint = None
    if endpoint is None or not endpoint.startswith(url):
        yield Check(True, f"credentials for {url} from {source} (checked against a repository only when doctor runs inside one whose remote is there)")
        return
    route = hub_repo(endpoint).token_route("write")
    try:
        resp = _ask("GET", route, 15, credential_headers(endpoint))
    except XetError as exc:
        yield Check(False, f"{url} unreachable ({exc})", "check the URL and your network or proxy")
        return
    if resp.status_code == 200:
        yield Check(True, f"credentials from {source} allow pushing to {endpoint}")
    else:
        yield Check(False, _refused(f"credentials from {source} for pushing to {endpoint}:", resp), "use a token with write access to this repository (HF_TOKEN or `git credential approve`)")
