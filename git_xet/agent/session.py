"""What one agent process does with each object. Imported lazily, after `init` is answered.

The HTTP stack (httpx, ~50 ms of imports) is imported only by agents that talk HTTP, and the
local store's (SQLite, the server's storage code) only by agents that use one: git-lfs starts
eight agents per push, on every push."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..client.backend import XetBackend
from ..client.errors import NotFoundError, TransferError
from ..client.shard_cache import ShardCache, default_cache_root
from ..core.hashes import is_hash_hex
from ..pipelines.download import download_to_path
from ..pipelines.upload import Uploader
from .endpoints import ConfigError, configured_endpoint, credential_headers, git_common_dir, git_config, hub_repo, lfs_endpoint, origin, standalone_target
from .progress import Progress
from .protocol import Transfer
from .summary import PushSummary
from .terminal import tell

if TYPE_CHECKING:
    import httpx

    from ..client.tokens import TokenSource

log = logging.getLogger("git_xet.agent")

ATTEMPTS = 3  # git-lfs never retries an agent error, so we do
# Uploads to a standalone server smaller than this do not ask it first whether it has the
# object: the question is a round trip (of three per small file), and a "yes" saves little.
# A file this machine pushed before dedups against the shard cache (no xorb is sent), and a
# xorb the server holds is answered without a write.
ASK_BEFORE_UPLOAD_FROM = 1 << 20


def _existing_store(path: Path) -> Path:
    """The agent never creates a store: only install does (see client/location.py)."""
    from ..client.location import is_local_store

    if not is_local_store(path):
        raise ConfigError(
            f"the XET store {path} does not exist; create it with `git xet install --standalone {path}`, "
            "or fix xet.endpoint if the path is mistyped or its drive is not mounted"
        )
    return path


def _bucket_backend(location: str) -> XetBackend:
    """The bucket store at `location` (botocore is imported only here, for s3:// stores)."""
    from ..client.bucket_backend import BucketBackend, open_bucket_objects
    from ..storage.s3 import S3Error

    try:
        return BucketBackend(open_bucket_objects(location), cache_root=default_cache_root())
    except S3Error as exc:
        raise ConfigError(f"cannot use the XET store {location}: {exc.message}") from None


def _label_cache(directory: Path, key: str) -> None:
    """Name the store in its shard-cache directory (whose name is a hash), for `git xet cache show`."""
    from ..client.location import CACHE_LABEL

    label = directory / CACHE_LABEL
    if not label.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
            label.write_text(key + "\n", encoding="utf-8")
        except OSError as exc:
            log.info("could not label the shard cache %s: %s", directory, exc)


class AgentSession:
    def __init__(self, remote: str | None = None) -> None:
        from ..memory import tune_allocator

        tune_allocator()
        self.remote = remote
        self._http: httpx.Client | None = None
        self._backends: dict[str, XetBackend] = {}
        self._uploaders: dict[str, Uploader] = {}
        self._storage_roots: list[Path] | None = None
        self._summary: PushSummary | None = None

    def _http_client(self) -> httpx.Client:
        if self._http is None:
            from ..client.http_backend import make_http_client

            self._http = make_http_client()
        return self._http

    # ------------------------------------------------------------------ backends

    def _standalone(self, req: Transfer) -> tuple[XetBackend, Callable[[str], str | None]]:
        target = standalone_target()
        key = f"{target.kind}:{target.location}"
        backend = self._backends.get(key)
        if backend is None:
            if target.kind == "local":
                from ..client.local_backend import LocalStoreBackend

                backend = LocalStoreBackend(_existing_store(Path(target.location)))
            elif target.kind == "s3":
                backend = _bucket_backend(target.location)
            else:
                from ..client.http_backend import HttpCasBackend
                from ..client.tokens import StaticToken

                backend = HttpCasBackend(target.location, StaticToken(target.token), http=self._http_client())
            self._backends[key] = backend
        if target.kind == "local":
            from ..client.local_backend import LocalStoreBackend

            assert isinstance(backend, LocalStoreBackend)
            store = backend.store

            def lookup(oid: str) -> str | None:
                found = store.file_by_sha256(oid)
                return found.hash if found else None

        elif target.kind == "s3":
            lookup = backend.file_for_sha256  # type: ignore[attr-defined]
        elif req.operation == "upload" and req.size < ASK_BEFORE_UPLOAD_FROM:

            def lookup(oid: str) -> str | None:
                return None

        else:
            size = req.size

            def lookup(oid: str) -> str | None:
                return self._batch_lookup(target.location, target.token, oid, size)

        return backend, lookup

    def _lfs_batch(self, endpoint: str, operation: str, transfers: list[str], oid: str, size: int, headers: dict[str, str]) -> tuple[str | None, dict]:
        """One-object LFS batch call: (the transfer the server chose, the object's entry, which
        may carry a per-object `error` for the caller to judge)."""
        from ..client.http_backend import status_error
        from ..client.retry import RetryPolicy, with_retries

        def attempt() -> httpx.Response:
            resp = self._http_client().post(
                f"{endpoint}/objects/batch",
                json={"operation": operation, "transfers": transfers, "objects": [{"oid": oid, "size": size}], "hash_algo": "sha256"},
                headers={"Accept": "application/vnd.git-lfs+json", "Content-Type": "application/vnd.git-lfs+json", **headers},
            )
            if resp.status_code != 200:  # 401/403 carry the server's reason; the agent adds the fix
                raise status_error(f"LFS batch request to {endpoint}", resp)  # 429/5xx: retried
            return resp

        # The same retries (and Retry-After) as every CAS call: a busy server answers 429 here too.
        resp = with_retries(f"LFS batch request to {endpoint}", attempt, RetryPolicy.from_env())
        try:
            body = resp.json()
            obj = body["objects"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise TransferError(f"the LFS server {endpoint} answered the batch request with something unexpected", retryable=True) from None
        return body.get("transfer"), obj

    def _batch_lookup(self, server: str, token: str | None, oid: str, size: int) -> str | None:
        """Our server's LFS batch API maps an oid to its XET file hash. `/git-xet.git` is the
        batch API of the repo the token names; an object of another size is not ours."""
        _, obj = self._lfs_batch(f"{server}/git-xet.git/info/lfs", "download", ["xet"], oid, size, {"Authorization": f"Bearer {token}"} if token else {})
        # No download action (e.g. a per-object 404) means the store does not have it.
        return ((obj.get("actions") or {}).get("download") or {}).get("header", {}).get("X-Xet-Hash")

    def _negotiated(self, action: dict) -> XetBackend:
        headers = {k.lower(): v for k, v in (action.get("header") or {}).items()}
        cas = headers.get("x-xet-cas-url")
        if not cas:
            raise ConfigError("the LFS server did not negotiate XET (no X-Xet-Cas-Url); is this remote XET-enabled?")
        key = f"cas:{cas}"
        backend = self._backends.get(key)
        if backend is None:
            from ..client.http_backend import HttpCasBackend
            from ..client.tokens import RefreshingToken, StaticToken

            initial = None
            if headers.get("x-xet-access-token"):
                initial = (headers["x-xet-access-token"], float(headers.get("x-xet-token-expiration") or 0))
            href = action.get("href")
            tokens: TokenSource
            if href and self._may_refresh_at(href):
                tokens = RefreshingToken(href, credential_headers(href), self._http_client(), initial)
            else:
                tokens = StaticToken(initial[0] if initial else None)
            backend = HttpCasBackend(cas, tokens, session_id=headers.get("x-xet-session-id") or str(uuid.uuid4()), http=self._http_client())
            self._backends[key] = backend
        return backend

    def _may_refresh_at(self, href: str) -> bool:
        """Whether to send the user's credential to a token refresh `href`: only to the LFS
        endpoint's own origin. A different origin is refused; when the endpoint is unknown
        here (git-lfs derived it, e.g. from an ssh remote), the batch's token is used as is."""
        try:
            endpoint = lfs_endpoint(self.remote)
        except ConfigError:
            log.warning("cannot tell this remote's LFS endpoint; the CAS token will not be refreshed")
            return False
        if origin(href) != origin(endpoint):
            raise TransferError(
                f"refusing the LFS server's token refresh URL {origin(href)}: it is not the LFS endpoint's origin {origin(endpoint)}; "
                "your credentials are only sent to the LFS server itself"
            )
        return True

    def _own_batch(self, req: Transfer) -> tuple[XetBackend | None, Callable[[str], str | None]]:
        """Standalone toward a Hub-style remote: our own batch call, then XET natively.

        Uploads get the CAS credentials from the batch action. Downloads, which the Hub answers
        with `basic` and a cas-bridge href ending in the XET file hash, are reconstructed from
        the CAS directly with a read token from the repo's refresh route.
        """
        endpoint = lfs_endpoint(self.remote)
        creds = credential_headers(endpoint)
        # Downloads: the Hub answers `basic` with a cas-bridge href whatever is offered; asking
        # for exactly that keeps one path for the Hub and for servers that would offer more.
        transfers = ["xet"] if req.operation == "upload" else ["basic"]
        chosen, obj = self._lfs_batch(endpoint, req.operation, transfers, req.oid, req.size, creds)
        if obj.get("error"):
            raise TransferError(f"the LFS server says: {obj['error'].get('message')}")
        action = (obj.get("actions") or {}).get(req.operation)
        if req.operation == "upload":
            if action is None:  # already stored: nothing to talk to
                return None, lambda oid: oid
            return self._negotiated(action), lambda oid: None
        if action is None:
            raise NotFoundError(f"the LFS server has no download for {req.oid[:12]}")
        if chosen == "xet":
            return self._backend_for(Transfer(req.operation, req.oid, req.size, None, action))
        file_hex = urlsplit(action["href"]).path.rstrip("/").rsplit("/", 1)[-1]
        if not is_hash_hex(file_hex):
            raise TransferError("this LFS server does not serve XET downloads (no XET hash in its download URL)")
        from ..client.http_backend import HttpCasBackend
        from ..client.tokens import RefreshingToken

        hub = hub_repo(endpoint)
        tokens = RefreshingToken(hub.token_route("read"), creds, self._http_client())
        tokens.token()  # learn the CAS URL
        cas = tokens.cas_url or hub.base
        backend = self._backends.get(f"cas:{cas}") or HttpCasBackend(cas, tokens, http=self._http_client())
        self._backends[f"cas:{cas}"] = backend
        return backend, lambda oid: file_hex

    def _backend_for(self, req: Transfer) -> tuple[XetBackend | None, Callable[[str], str | None]]:
        """The store for this object, and how to find an oid's XET hash there (a non-None
        answer for an upload means: already stored). None as the store: nothing to do."""
        if req.action is None:
            if configured_endpoint() is not None:
                return self._standalone(req)
            return self._own_batch(req)
        backend = self._negotiated(req.action)
        header_hash = {k.lower(): v for k, v in (req.action.get("header") or {}).items()}.get("x-xet-hash")
        return backend, lambda oid: header_hash

    # ------------------------------------------------------------------ transfers

    def transfer(self, req: Transfer, progress: Progress) -> str | None:
        """Do one upload or download (retrying transient failures); returns the download path."""
        for attempt in range(ATTEMPTS):
            try:
                if req.operation == "upload":
                    self._upload(req, progress)
                    return None
                return self._download(req, progress)
            except TransferError as exc:
                if not exc.retryable or attempt == ATTEMPTS - 1:
                    raise
                log.warning("%s of %s failed (%s); trying again", req.operation, req.oid[:12], exc, extra={"notice": True})
                time.sleep(1 + attempt)
        raise AssertionError("unreachable")

    def _lfs_storage_roots(self) -> list[Path]:
        """Where git-lfs keeps objects: <git-common-dir>/lfs, and `lfs.storage` when set
        (relative to the git dir, as git-lfs reads it)."""
        if self._storage_roots is None:
            common = git_common_dir()
            roots = [common / "lfs"]
            storage = git_config("lfs.storage")
            if storage:
                roots.append((common / storage).resolve())
            self._storage_roots = roots
        return self._storage_roots

    def _check_upload_source(self, req: Transfer) -> str:
        """git-lfs only ever names objects in its own storage, of the size it announces; any
        other request is refused before a byte is read or sent. Returns the path to read."""
        if req.path is None:  # the protocol parser already refuses an upload without one
            raise TransferError(f"the upload of {req.oid[:12]} names no file")
        path = Path(req.path).resolve()
        roots = self._lfs_storage_roots()
        if not any(path.is_relative_to(root) for root in roots):
            raise TransferError(f"refusing to upload {req.path}: it is outside this repository's LFS storage ({roots[0]})")
        size = path.stat().st_size
        if size != req.size:
            raise TransferError(f"{req.path} is {size} bytes, but the request says {req.size}")
        return req.path

    def _push_summary(self) -> PushSummary:
        if self._summary is None:
            self._summary = PushSummary(git_common_dir() / "xet")
            self._summary.started()
        return self._summary

    def _upload(self, req: Transfer, progress: Progress) -> None:
        source = self._check_upload_source(req)
        totals = self._push_summary().totals
        backend, lookup = self._backend_for(req)
        if backend is None or lookup(req.oid) is not None:
            log.info("%s already stored", req.oid[:12])
            totals.already_stored += 1
            totals.already_stored_bytes += req.size
            return
        key = backend.cache_key
        uploader = self._uploaders.get(key)
        if uploader is None:
            uploader = Uploader(backend, ShardCache(default_cache_root(), key), progress=progress.add)
            self._uploaders[key] = uploader
        uploader.progress = progress.add
        sent_before = uploader.stats.xorb_bytes_sent
        try:
            result = uploader.add_file(source)
            if result.sha256 != req.oid:
                raise TransferError(f"{source} does not match its oid (sha256 {result.sha256[:12]}…); the file changed during the push?")
            # Durable (xorbs, then the shard) before we say complete; after a store reset the
            # file went again, so its figures are the final upload's.
            result = uploader.finalize()[-1]
        except BaseException:
            # Its state may not match the store any more; a fresh one resumes from the cache.
            self._uploaders.pop(key, None)
            uploader.close()
            raise
        log.info("uploaded %s: %d new bytes, %d deduplicated", req.oid[:12], result.new_bytes, result.deduped_bytes)
        _label_cache(ShardCache(default_cache_root(), key).dir, key)  # once it holds shards, never an empty label-only cache
        totals.files += 1
        totals.file_bytes += req.size
        totals.sent_bytes += uploader.stats.xorb_bytes_sent - sent_before
        totals.new_bytes += result.new_bytes
        totals.deduped_bytes += result.deduped_bytes

    def _download(self, req: Transfer, progress: Progress) -> str:
        backend, lookup = self._backend_for(req)
        file_hex = lookup(req.oid)
        if backend is None or file_hex is None:
            raise NotFoundError(f"object {req.oid} is not in the XET store; was it pushed?")
        tmp_dir = git_common_dir() / "lfs" / "tmp"
        dest = tmp_dir / f"{req.oid}.xet-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        umask = os.umask(0)
        os.umask(umask)
        # Not fsynced: git-lfs hashes the file again and moves it into its object store; a crash
        # before then loses a temp file, never an object.
        download_to_path(backend, file_hex, dest, mode=0o644 & ~umask, durable=False, size=req.size, sha256=req.oid, progress=progress.add)
        return str(dest)

    def close(self) -> None:
        for uploader in self._uploaders.values():
            uploader.close()
        if self._summary is not None:
            try:
                line = self._summary.close()
            except OSError as exc:  # the summary is a courtesy; the push itself is done
                log.info("could not record the push summary: %s", exc)
                return
            if line:
                log.info("push summary: %s", line)
                tell(line)
