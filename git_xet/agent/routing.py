"""Which XET store serves an object, and how to find an oid's XET file hash there.

Three ways in (see endpoints.py for the configuration behind each):
- git-lfs negotiated XET with the LFS server: the batch action's headers name the CAS, a token
  and, for downloads, the file hash;
- standalone with a configured store (a directory, a bucket or a `git xet serve`): the store's
  extension answers oid lookups (GitXetExtension.file_for_sha256);
- standalone toward a Hub-style remote (`install --native`): our own LFS batch call, then XET.

Backends are kept per store for the life of the agent process, so their connection pools and
tokens are shared by every object. The HTTP stack is imported only for HTTP stores and the
local store's code only for local ones (git-lfs starts eight agents per push).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..client.backend import GitXetExtension, XetBackend
from ..client.errors import NotFoundError, TransferError
from ..core.hashes import is_hash_hex
from ..core.http_headers import ACCESS_TOKEN, CAS_URL, FILE_HASH, SESSION_ID, TOKEN_EXPIRATION, header_value
from .endpoints import (
    ConfigError,
    StandaloneTarget,
    configured_endpoint,
    credential_headers,
    git_config,
    hub_repo,
    lfs_endpoint,
    origin,
    ssh_remote,
    standalone_target,
)
from .prefetch import WINDOW as PREFETCH_WINDOW
from .prefetch import BatchPrefetch
from .protocol import Transfer

if TYPE_CHECKING:
    from ..client.http_types import HttpClient
    from ..client.ssh_authenticate import SshRemote

    from ..client.tokens import TokenSource

log = logging.getLogger("git_xet.agent")

# Uploads to a standalone server smaller than this do not ask it first whether it has the
# object: the question is a round trip (of three per small file), and a "yes" saves little.
# A file this machine pushed before dedups against the shard cache (no xorb is sent), and a
# xorb the server holds is answered without a write.
ASK_BEFORE_UPLOAD_FROM = 1 << 20
# Downloads from a standalone server smaller than this come whole in one request, instead of
# an oid lookup, a reconstruction and a xorb range: three round trips where git-lfs `basic`
# makes one. Larger files go the XET way (parallel ranges, each chunk verified).
WHOLE_DOWNLOAD_BELOW = 1 << 20

# An oid's XET file hash in the chosen store; None: not there (for an upload: send it).
Lookup = Callable[[str], "str | None"]


# git_xet.client.http_client is httpx (~0.1-0.2 CPU-s to import): the fork server imports it once
# for the command's workers, each of which would otherwise import it again with its first object.
_HTTP_CLIENT = (
    "git_xet.client.backends",
    "git_xet.client.location",
    "git_xet.client.http_backend",
    "git_xet.client.serve_extension",
    "git_xet.client.http_client",
    "git_xet.client.http_auth",
    "git_xet.client.tokens",
    "git_xet.client.lfs_batch",
    "encodings.idna",
)
_LOCAL_CLIENT = ("git_xet.client.backends", "git_xet.client.location", "git_xet.client.local_backend", "git_xet.storage.index_sqlite")


def client_modules() -> tuple[str, ...]:
    """The modules the router's lazy imports below load for this repository's store (bucket
    stores' botocore aside): what fork_server.py imports once, ahead of all of a command's agents.
    (encodings.idna: the socket module's, for the first connection's host name.)"""
    if configured_endpoint() is None:  # a remote that negotiates XET, or the Hub's: HTTP
        return _HTTP_CLIENT
    kind = standalone_target().kind
    return _HTTP_CLIENT if kind == "http" else _LOCAL_CLIENT if kind == "local" else ()


def _check_refresh_origin(href: str, endpoint: str) -> None:
    """The user's credential goes only to the LFS endpoint's own origin: a server cannot send
    us to collect credentials elsewhere."""
    if origin(href) != origin(endpoint):
        raise TransferError(
            f"refusing the LFS server's token refresh URL {origin(href)}: it is not the LFS endpoint's origin {origin(endpoint)}; "
            "your credentials are only sent to the LFS server itself"
        )


class StoreRouter:
    """Chooses the store for each transfer request; holds one backend per store."""

    def __init__(self, remote: str | None) -> None:
        self.remote = remote
        self._http: HttpClient | None = None
        self._backends: dict[str, XetBackend] = {}
        self._target: StandaloneTarget | None = None
        self._endpoint: tuple[str, dict[str, str]] | None = None  # see _own_endpoint
        self._prefetch: dict[str, BatchPrefetch] = {}  # per operation, see _batch_prefetch

    def _standalone_target(self) -> StandaloneTarget:
        """The configured store, read once: the configuration an agent starts with is the one
        git-lfs started it for (and parsing it again for each object was ~5% of a small push)."""
        if self._target is None:
            self._target = standalone_target()
        return self._target

    def where_missing(self) -> str:
        """Where an object that was not found was looked for, for the error: a server's repo is
        named, since tokens for different repos see different objects, and a teammate whose
        token names another repo would otherwise read only "not in the store"."""
        from ..core.token_format import unverified_repo

        target = self._target
        repo = unverified_repo(target.token) if target is not None and target.kind == "http" else None
        if target is None or repo is None:
            return ""
        return (
            f" (looked up in repo '{repo}' of {target.location}, the repo your token is for; if it was pushed "
            "with a token for another repo, get a token for that repo: `git xet token --repo NAME` on the server)"
        )

    def http(self) -> HttpClient:
        if self._http is None:
            from ..client.http_backend import make_http_client

            self._http = make_http_client()
        return self._http

    def route(self, req: Transfer) -> tuple[XetBackend | None, Lookup]:
        """The store for this object, and how to find an oid's XET hash there (a non-None
        answer for an upload means: already stored). None as the store: nothing to do."""
        if req.action is None:
            if configured_endpoint() is not None:
                return self._standalone(req)
            return self._own_batch(req)
        backend = self._negotiated(req.action, req.operation)
        header_hash = header_value(req.action.get("header"), FILE_HASH)
        return backend, lambda oid: header_hash

    def small_object(self, req: Transfer) -> bytes | None:
        """A small download from a standalone `git xet serve`, whole, in one request (its
        core/extension.LFS_OBJECTS), or None: another kind of store, a larger object, or a server
        that does not offer it (then route() as usual). The caller checks the sha256."""
        if req.operation != "download" or req.action is not None or req.size >= WHOLE_DOWNLOAD_BELOW or configured_endpoint() is None:
            return None
        target = self._standalone_target()
        if target.kind != "http":
            return None
        ext = self._standalone_backend(target).extension
        return ext.lfs_object(req.oid, req.size) if ext is not None else None

    def missing(self, objects: list[tuple[str, int]]) -> list[str]:
        """The oids of `objects` ((oid, size) pairs) that the store does not hold, asked as a
        download would ask: the configured store's oid lookup, else (native or Hub-style) the
        remote's LFS batch API, where a missing object comes back with a per-object 404.
        Raises when the store cannot be asked, or answers another per-object error."""
        if configured_endpoint() is not None:
            ext = self._lookups(self._standalone_target())
            return [oid for oid, size in objects if ext.file_for_sha256(oid, size) is None]
        from ..client.lfs_batch import batch_many

        endpoint = lfs_endpoint(self.remote)
        creds = credential_headers(endpoint)
        answers = []
        for start in range(0, len(objects), PREFETCH_WINDOW):  # as many per call as git-lfs asks
            answers += batch_many(self.http(), endpoint, "download", ["basic"], objects[start : start + PREFETCH_WINDOW], creds)
        absent = []
        for (oid, _), answer in zip(objects, answers):
            refusal = answer.error_message()
            if refusal is not None and answer.error_code() != 404:
                raise TransferError(f"the LFS server says about {oid[:12]}: {refusal}")
            if refusal is not None or answer.action("download") is None:
                absent.append(oid)
        return absent

    def _standalone(self, req: Transfer) -> tuple[XetBackend, Lookup]:
        target = self._standalone_target()
        backend = self._standalone_backend(target)
        if target.kind == "http" and req.operation == "upload" and req.size < ASK_BEFORE_UPLOAD_FROM:
            return backend, lambda oid: None
        if target.kind == "s3" and req.operation == "upload":
            # Anyone who can write the bucket can write lfs/<oid>: an upload always goes through
            # dedup (stored chunks cost a lookup, not a transfer) and writes the names it checked.
            return backend, lambda oid: None
        if req.operation == "upload" and backend.extension is None:
            return backend, lambda oid: None  # nothing to ask it: the upload dedups all the same
        found, size = self._lookups(target), req.size
        return backend, lambda oid: found.file_for_sha256(oid, size)

    def _lookups(self, target: StandaloneTarget) -> GitXetExtension:
        """The configured store's extension, which finds an oid's file hash: every store we
        configure offers it (a `git xet serve` that does not is older than its agent)."""
        ext = self._standalone_backend(target).extension
        if ext is None:
            raise ConfigError(
                f"the XET server {target.location} does not list git-xet's extension (GET /git-xet/v1/capabilities), "
                "so the agent cannot find objects there by oid; is it a `git xet serve` older than this agent? upgrade it"
            )
        return ext

    def _standalone_backend(self, target: StandaloneTarget) -> XetBackend:
        key = f"{target.kind}:{target.location}"
        backend = self._backends.get(key)
        if backend is None:
            from ..client.backends import MissingStoreError, open_backend
            from ..client.location import StoreLocation

            tokens = None
            if target.kind == "http":
                from ..client.tokens import StaticToken

                tokens = StaticToken(target.token)
            try:  # the agent never creates a store: only install does (see client/location.py)
                backend = open_backend(StoreLocation(target.kind, target.location), tokens=tokens, http=self.http() if tokens else None)
            except MissingStoreError as exc:
                raise ConfigError(f"{exc}, or fix xet.endpoint if the path is mistyped or its drive is not mounted") from None
            self._backends[key] = backend
        return backend

    def _cas_backend(self, cas: str, tokens: TokenSource, session_id: str | None = None) -> XetBackend:
        """The backend for a CAS an LFS server named (XET alone: see client/backends.py)."""
        from ..client.backends import open_backend
        from ..client.location import StoreLocation

        return open_backend(StoreLocation("cas", cas), tokens=tokens, session_id=session_id, http=self.http())

    def _negotiated(self, action: dict[str, Any], operation: str) -> XetBackend:
        headers = action.get("header")
        cas = header_value(headers, CAS_URL)
        if not cas:
            raise ConfigError(f"the LFS server did not negotiate XET (no {CAS_URL}); is this remote XET-enabled?")
        key = f"cas:{cas}"
        backend = self._backends.get(key)
        if backend is None:
            from ..client.tokens import RefreshingToken, StaticToken

            token = header_value(headers, ACCESS_TOKEN)
            initial = (token, float(header_value(headers, TOKEN_EXPIRATION) or 0)) if token else None
            href = action.get("href")
            credentials = self._refresh_credentials(href, operation) if href else None
            tokens: TokenSource
            if href and credentials is not None:
                tokens = RefreshingToken(href, credentials, self.http(), initial)
            else:
                tokens = StaticToken(initial[0] if initial else None)
            backend = self._cas_backend(cas, tokens, header_value(headers, SESSION_ID))
            self._backends[key] = backend
        return backend

    def _refresh_credentials(self, href: str, operation: str) -> dict[str, str] | Callable[[], dict[str, str]] | None:
        """The credential to send to a token refresh `href`, only if it has the LFS endpoint's
        origin (a different origin is refused): for an SSH remote, git-lfs-authenticate's answer,
        asked again when it expires; otherwise the user's credential for that
        host. None: the endpoint is unknown here, and the batch's token is used as is."""
        ssh = ssh_remote(self.remote, operation)
        if ssh is not None:
            return self._ssh_credentials(ssh, href, operation)
        try:
            endpoint = lfs_endpoint(self.remote)
        except ConfigError:
            log.warning("cannot tell this remote's LFS endpoint; the CAS token will not be refreshed")
            return None
        _check_refresh_origin(href, endpoint)
        return credential_headers(href)

    def _ssh_credentials(self, ssh: SshRemote, href: str, operation: str) -> Callable[[], dict[str, str]]:
        """git-lfs-authenticate's headers for `href`, run as git-lfs runs it (no ssh until a
        token needs renewing; then cached until the answer expires)."""
        import os

        from ..client.ssh_authenticate import SshCredentials, authenticate, ssh_command

        argv = ssh_command(ssh, f"git-lfs-authenticate {ssh.path} {operation}", os.environ, git_config)
        ttl = git_config("lfs.defaulttokenttl") or "0"
        default_ttl = float(ttl) if ttl.isdigit() else 0.0  # git-lfs: for answers that give no expiry
        return SshCredentials(lambda: authenticate(argv, default_ttl=default_ttl), lambda endpoint: _check_refresh_origin(href, endpoint))

    def _own_batch(self, req: Transfer) -> tuple[XetBackend | None, Lookup]:
        """Standalone toward a Hub-style remote: our own batch call, then XET natively.

        Uploads get the CAS credentials from the batch action. Downloads, which the Hub answers
        with `basic` and a cas-bridge href ending in the XET file hash, are reconstructed from
        the CAS directly with a read token from the repo's refresh route.
        """
        endpoint, creds = self._own_endpoint()
        # Downloads: the Hub answers `basic` with a cas-bridge href whatever is offered; asking
        # for exactly that keeps one path for the Hub and for servers that would offer more.
        transfers = ["xet"] if req.operation == "upload" else ["basic"]
        answer = self._batch_prefetch(req.operation, transfers, endpoint, creds).answer(req.oid, req.size)
        refusal = answer.error_message()
        if refusal is not None:
            raise TransferError(f"the LFS server says: {refusal}")
        action = answer.action(req.operation)
        if req.operation == "upload":
            if action is None:  # already stored: nothing to talk to
                return None, lambda oid: oid
            return self._negotiated(action, req.operation), lambda oid: None
        if action is None:
            raise NotFoundError(f"the LFS server has no download for {req.oid[:12]}")
        if answer.transfer == "xet":
            return self.route(Transfer(req.operation, req.oid, req.size, None, action))
        file_hex = urlsplit(action["href"]).path.rstrip("/").rsplit("/", 1)[-1]
        if not is_hash_hex(file_hex):
            raise TransferError("this LFS server does not serve XET downloads (no XET hash in its download URL)")
        from ..client.tokens import RefreshingToken

        hub = hub_repo(endpoint)
        route = hub.token_route("read")
        backend = self._backends.get(f"read:{route}")
        if backend is None:  # one read token per agent, refreshed when it expires, not one per object
            tokens = RefreshingToken(route, creds, self.http())
            tokens.token()  # learn the CAS URL
            cas = tokens.cas_url or hub.base
            backend = self._backends.get(f"cas:{cas}") or self._cas_backend(cas, tokens)
            self._backends[f"cas:{cas}"] = self._backends[f"read:{route}"] = backend
        return backend, lambda oid: file_hex

    def _batch_prefetch(self, operation: str, transfers: list[str], endpoint: str, creds: dict[str, str]) -> BatchPrefetch:
        """Batch answers asked a window of the checkout's pointers at a time (prefetch.py): one
        call per hundred objects, not per object."""
        prefetch = self._prefetch.get(operation)
        if prefetch is None:
            from ..client.lfs_batch import batch_many

            http = self.http()
            prefetch = BatchPrefetch(operation, lambda objects: batch_many(http, endpoint, operation, transfers, objects, creds))
            self._prefetch[operation] = prefetch
        return prefetch

    def _own_endpoint(self) -> tuple[str, dict[str, str]]:
        """The remote's LFS endpoint and the user's credential for it, found once per agent:
        each object of a --native clone looked them up again (git config, and `git credential
        fill` where no token or netrc has one), besides its batch call and a new read token."""
        if self._endpoint is None:
            endpoint = lfs_endpoint(self.remote)
            self._endpoint = (endpoint, credential_headers(endpoint))
        return self._endpoint
