"""The public Python API behind `git_xet.open_store` and `git_xet.hash_file` (the package root
re-exports them lazily: see git_xet/__init__.py).

A thin layer over the client backends and the pipelines: the location string is parsed by
the same parser as `git xet install --standalone` (client/location.py), uploads go through
the same Uploader (dedup against the per-store shard cache) and downloads through the same
verified download as the agent. Everything that holds a resource is a context manager.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..client.backend import XetBackend
from ..client.location import LocationError, StoreLocation, parse_store_location
from ..client.shard_cache import ShardCache, default_cache_root
from ..core.hashes import hash_to_hex
from .download import DownloadResult, download_to_path
from .file_hashing import hash_file as _hash_file
from .upload import UploadedFile, Uploader

StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class HashedFile:
    """A file's XET hash and sha256 (its Git LFS oid), both as lowercase text, and its size.
    (As everywhere in git-xet, `*_hex` names hold text; core.hashes says why.)"""

    file_hex: str
    sha256_hex: str
    size: int


def hash_file(path: StrPath) -> HashedFile:
    """The XET file hash, sha256 and size of a file, computed locally (nothing is uploaded):
    what an upload of it would return as `file_hex` and `sha256_hex`."""
    digest = _hash_file(path, with_sha256=True)
    assert digest.sha256 is not None
    return HashedFile(hash_to_hex(digest.file_hash), digest.sha256.hex(), digest.size)


class Store:
    """An open XET store. Use it as a context manager (or call close()): closing releases its
    HTTP connections or its index.

    Do not create it directly; use `git_xet.open_store`.
    """

    def __init__(self, location: StoreLocation, backend: XetBackend, close: Callable[[], None], cache_root: Path) -> None:
        self.location = location
        self.backend = backend  # the client backend, for the pipelines' lower-level functions
        self._close = close
        self._cache_root = cache_root

    def __repr__(self) -> str:
        return f"<git_xet.Store {self.location.kind} {self.location}>"  # never a token

    def uploader(self, *, global_dedup: bool = True) -> Uploader:
        """An Uploader for many files in one session (a context manager): `add_file` each,
        then `finalize()` once, which makes them durable in the store and returns them."""
        return Uploader(self.backend, ShardCache(self._cache_root, self.backend.cache_key), global_dedup=global_dedup)

    def upload(self, paths: Iterable[StrPath]) -> list[UploadedFile]:
        """Upload files (deduplicated against what the store holds) and make them durable: each
        result has the file's `file_hex`, `sha256_hex`, `size`, and how many bytes were new."""
        with self.uploader() as up:
            for path in paths:
                up.add_file(path)
            return up.finalize()

    def download(self, file_hex: str, dest: StrPath, *, sha256_hex: str | None = None) -> DownloadResult:
        """Download a file by its XET hash to `dest`, all or nothing: the bytes are checked
        against the file hash (and `sha256_hex`, when given) before `dest` appears."""
        return download_to_path(self.backend, file_hex, Path(dest), sha256_hex=sha256_hex)

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def open_store(location: str, *, token: str | None = None, create: bool = False, cache_dir: StrPath | None = None) -> Store:
    """Open the XET store at `location`, written as for `git xet install --standalone`:

    - a directory (absolute path, `~/...` or `file:///...`): a serverless store;
      `create=True` makes an empty directory one;
    - `https://...` (or `http://...`): a `git xet serve`, with `token` (default: $GIT_XET_TOKEN);
    - `s3://BUCKET[/PREFIX]`: a bucket store (credentials from the AWS environment);
      `create=True` writes its marker.

    `cache_dir`: where the shard cache that lets uploads skip what the store already holds is
    kept (default: $GIT_XET_CACHE or the platform cache directory). Raises LocationError for a
    location that is not one of these forms, TransferError when the store cannot be opened.
    """
    from ..client.backends import MissingStoreError, open_backend

    where = parse_store_location(location)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    tokens = None
    if where.kind == "http":
        from ..client.tokens import StaticToken

        tokens = StaticToken(token if token is not None else os.environ.get("GIT_XET_TOKEN"))
    try:
        backend = open_backend(where, tokens=tokens, cache_root=cache_root, create=create)
    except MissingStoreError as exc:
        raise LocationError(f"{exc}, or pass create=True to make it one") from None
    return Store(where, backend, backend.close, cache_root)
