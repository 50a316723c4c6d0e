"""What one agent process does with each object. Imported lazily, after `init` is answered.

Which store serves an object is routing.py's job; this module moves the object. The HTTP
client (client/http_client.py, httpx) is imported only by agents that talk HTTP, and the local
store's (SQLite, the server's storage code) only by agents that use one (see routing.py):
git-lfs starts eight agents per push, on every push."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..client.errors import NotFoundError, TransferError
from ..platform.files import atomic_output, atomic_write
from ..platform.resolve import realpath_below
from .endpoints import git_common_dir, git_config
from .progress import Progress
from .protocol import Transfer
from .routing import StoreRouter, client_modules
from .summary import PushSummary
from .terminal import tell

if TYPE_CHECKING:
    from ..client.backend import XetBackend
    from ..pipelines.upload import Uploader
    from .group_link import CommandGroup

log = logging.getLogger("git_xet.agent")

ATTEMPTS = 3  # git-lfs never retries an agent error, so we do
# Objects whose shards go into the shard cache together (one SQLite write transaction instead
# of one per object: pipelines/upload.py, Uploader._record), and at the agent's end. Other
# agents of the push see them that much later: what they can dedup against among one push's
# small files is little, and the store has every object whatever the cache says.
RECORD_BATCH = 64


def _label_cache(directory: Path, key: str) -> None:
    """Name the store in its shard-cache directory (whose name is a hash), for `git xet cache show`."""
    from ..client.location import CACHE_LABEL

    label = directory / CACHE_LABEL
    if not label.exists():
        try:
            atomic_write(label, (key + "\n").encode("utf-8"), mode=0o600)  # in the (private) cache directory
        except OSError as exc:
            log.info("could not label the shard cache %s: %s", directory, exc)


def _not_its_oid(source: str, actual_sha256: str) -> TransferError:
    return TransferError(f"{source} does not match its oid (sha256 {actual_sha256[:12]}…); the file changed during the push, or the LFS object is damaged (`git lfs fsck` checks them)")


def _sha256_of_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def prepare(operation: str) -> None:
    """Import and read, ahead of a first object of `operation`, what it would: the operation's
    pipeline, the store's client code, git's configuration and the repository's directory (all
    cached for the process). Nothing that holds a connection, a thread or an open database:
    the fork server runs this once, then forks a worker per agent from it (fork_server.py)."""
    __import__("git_xet.platform.memory")
    __import__("git_xet.pipelines.upload" if operation == "upload" else "git_xet.pipelines.download")
    modules = client_modules()
    for module in modules:
        __import__(module)
    if operation == "upload":  # what _upload imports with a first object
        from ..client.shard_cache import default_cache_root

        default_cache_root()  # (platformdirs)
        if "git_xet.client.serve_extension" in modules:
            __import__("git_xet.agent.group_link")
    else:  # the clone's summary, at the agent's end (an upload's path loads them anyway)
        __import__("git_xet.platform.locks")
        __import__("git_xet.platform.private_paths")
    git_common_dir()


class AgentSession:
    def __init__(self, remote: str | None = None) -> None:
        from ..platform.memory import tune_allocator

        tune_allocator()
        self.router = StoreRouter(remote)
        self._uploaders: dict[str, Uploader] = {}
        self._labelled: set[str] = set()  # stores whose shard-cache directory this process has labelled
        self._storage_roots: tuple[str, ...] | None = None
        self._summaries: dict[str, PushSummary] = {}  # by operation: a push's, a clone's
        self._groups: list[CommandGroup] = []  # shared senders this agent joined (group_link.py)

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

    def _lfs_storage_roots(self) -> tuple[str, ...]:
        """Where git-lfs keeps objects, each resolved and ending in a separator:
        <git-common-dir>/lfs, and `lfs.storage` when set (relative to the git dir, as git-lfs
        reads it)."""
        if self._storage_roots is None:
            common = git_common_dir()
            roots = [common / "lfs"]
            storage = git_config("lfs.storage")
            if storage:
                roots.append(common / storage)
            self._storage_roots = tuple(os.path.join(os.path.realpath(root), "") for root in roots)
        return self._storage_roots

    def _check_upload_source(self, req: Transfer) -> str:
        """git-lfs only ever names objects in its own storage, of the size it announces; any
        other request is refused before a byte is read or sent. Returns the path to read.
        (String paths, not pathlib: this runs once per object, a thousand times in a push of
        a thousand small files.)"""
        if req.path is None:  # the protocol parser already refuses an upload without one
            raise TransferError(f"the upload of {req.oid[:12]} names no file")
        roots = self._lfs_storage_roots()
        path, found = realpath_below(req.path, roots)
        if not path.startswith(roots):
            raise TransferError(f"refusing to upload {req.path}: it is outside this repository's LFS storage ({roots[0].rstrip(os.sep)})")
        size = (found or os.stat(path)).st_size
        if size != req.size:
            raise TransferError(f"{req.path} is {size} bytes, but the request says {req.size}")
        return req.path

    def _summary(self, operation: str) -> PushSummary:
        summary = self._summaries.get(operation)
        if summary is None:
            summary = self._summaries[operation] = PushSummary(git_common_dir() / "xet", operation)
            summary.started()
        return summary

    def _upload(self, req: Transfer, progress: Progress) -> None:
        from ..client.shard_cache import ShardCache, default_cache_root  # SQLite: ~5 ms a clone's agents skip
        from ..pipelines.upload import Uploader  # an agent of a clone never uploads

        source = self._check_upload_source(req)
        totals = self._summary("upload").totals
        backend, lookup = self.router.route(req)
        if backend is None or lookup(req.oid) is not None:
            log.info("%s already stored", req.oid[:12])
            totals.already_stored += 1
            totals.already_stored_bytes += req.size
            return
        key = backend.cache_key
        uploader = self._uploaders.get(key)
        if uploader is None:
            uploader = Uploader(backend, ShardCache(default_cache_root(), key), progress=progress.add, record_batch=RECORD_BATCH)
            self._uploaders[key] = uploader
            self._share_sender(backend)
        uploader.progress = progress.add
        sent_before = uploader.stats.xorb_bytes_sent
        try:
            try:
                result = uploader.add_file(source, sha256_hex=req.oid)
                if result.sha256_hex != req.oid:
                    raise _not_its_oid(source, result.sha256_hex)
                # Durable (xorbs, then the shard) before we say complete; after a store reset the
                # file went again, so its figures are the final upload's.
                result = uploader.finalize()[-1]
            except TransferError as exc:
                # A store that checks oids refused it, or something else did: say which.
                if not exc.retryable and (ext := backend.extension) is not None and ext.checks_sha256_claims and (actual := _sha256_of_file(source)) != req.oid:
                    raise _not_its_oid(source, actual) from None
                raise
        except BaseException:
            # Its state may not match the store any more; a fresh one resumes from the cache.
            self._uploaders.pop(key, None)
            uploader.close()
            raise
        log.info("uploaded %s: %d new bytes, %d deduplicated", req.oid[:12], result.new_bytes, result.deduped_bytes)
        if key not in self._labelled:  # once it holds shards, never an empty label-only cache
            _label_cache(ShardCache(default_cache_root(), key).dir, key)
            self._labelled.add(key)
        totals.files += 1
        totals.file_bytes += req.size
        totals.sent_bytes += uploader.stats.xorb_bytes_sent - sent_before
        totals.new_bytes += result.new_bytes
        totals.deduped_bytes += result.deduped_bytes

    def _download(self, req: Transfer, progress: Progress) -> str:
        from ..pipelines.download import IntegrityError, download_to_path  # an agent of a push never downloads

        tmp_dir = git_common_dir() / "lfs" / "tmp"
        dest = tmp_dir / f"{req.oid}.xet-{os.getpid()}-{os.urandom(4).hex()}"
        umask = os.umask(0)
        os.umask(umask)
        whole = self.router.small_object(req)
        if whole is not None:
            if hashlib.sha256(whole).hexdigest() != req.oid.lower():
                raise IntegrityError(f"the server sent {req.oid[:12]} with other content (its sha256 differs)", retryable=True)
            with atomic_output(dest, mode=0o644 & ~umask, durable=False) as out:  # as download_to_path writes
                out.write(whole)
            progress.add(len(whole))
            self._downloaded(req.size, len(whole))
            return str(dest)
        backend, lookup = self.router.route(req)
        file_hex = lookup(req.oid)
        if backend is None or file_hex is None:
            raise NotFoundError(f"object {req.oid} is not in the XET store{self.router.where_missing()}; was it pushed?")
        # Not fsynced: git-lfs hashes the file (tq/custom.go checks every agent download's sha256
        # against its oid) and moves it into its object store; a crash before then loses a temp
        # file, never an object. For the same reason the sha256 is not computed here as well: the
        # bytes are checked against the XET file hash, and git-lfs checks the oid mapping.
        result = download_to_path(backend, file_hex, dest, mode=0o644 & ~umask, durable=False, size=req.size, progress=progress.add)
        self._downloaded(req.size, result.bytes_fetched)
        return str(dest)

    def _downloaded(self, size: int, fetched: int) -> None:
        totals = self._summary("download").totals
        totals.files += 1
        totals.file_bytes += size
        totals.sent_bytes += fetched

    def _share_sender(self, backend: XetBackend) -> None:
        """Send this store's small files through the sender this command's agents share, where
        it is a `git xet serve` taking upload bundles and the platform has one (group_link.py)."""
        ext = backend.extension
        # (looked up, not imported: a local store's agent never loads the HTTP client)
        serve_extension = sys.modules.get("git_xet.client.serve_extension")
        if serve_extension is not None and isinstance(ext, serve_extension.ServeExtension):
            from .group_link import attach

            group = attach(ext)
            if group is not None:
                self._groups.append(group)

    def close(self) -> None:
        for uploader in self._uploaders.values():
            uploader.close()
        for group in self._groups:  # the sender this agent runs answers the others first
            group.close()
        for operation, summary in self._summaries.items():
            try:
                line = summary.close()
            except OSError as exc:  # the summary is a courtesy; the transfer itself is done
                log.info("could not record the %s summary: %s", operation, exc)
                continue
            if line:
                log.info("%s summary: %s", operation, line)
                tell(line)
