"""Push a dataset's versions in order with git-xet and with hf-xet, each to its own `git xet
serve`, and measure what each push added: the new chunk bytes (uncompressed sizes of the xorbs
the server did not hold before) and the bytes sent (request bodies the server logged).

Both are counted on the server, the same way for both clients, so neither client's own
report is trusted. git-xet pushes as its agent does (an Uploader per push over HTTP with the
store's shard cache, global dedup on); hf-xet keeps one HF_XET_CACHE across its pushes. git-lfs
is not run: a basic transfer sends each new version's object whole (bench/dedup.py measures it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.shard_cache import ShardCache
from git_xet.client.tokens import StaticToken
from git_xet.core.xorb import parse_xorb
from git_xet.pipelines.upload import Uploader
from git_xet.storage.cas_store import CasStore
from tests.support import hf_xet_oracle
from tests.support.real_shaped import Version
from tests.support.server_process import RunningServer, running_server

TOOLS = ("git-xet", "hf-xet")


@dataclass(frozen=True)
class Push:
    version: str
    size: int  # the version's bytes (what git-lfs sends)
    new_bytes: int  # uncompressed bytes of the chunks the push added to the store
    sent_bytes: int  # request bodies: xorbs and shards


def _request_bytes_in(server: RunningServer) -> int:
    return sum(r["bytes_in"] for r in server.requests() if "bytes_in" in r and "/info/lfs/" not in r["path"])


def _xorb_bytes(store: CasStore) -> dict[str, int]:
    """Every stored xorb and its chunks' uncompressed size."""
    return {key: parse_xorb(store.objects.read(key)).uncompressed_size for key, _ in store.objects.list("xorbs/")}


def _push_git_xet(server: RunningServer, path: Path, cache: Path, token: str) -> None:
    backend = HttpCasBackend(server.url, StaticToken(token), extension=True)
    try:
        with Uploader(backend, ShardCache(cache, backend.cache_key)) as up:
            up.add_file(path)
            up.finalize()
    finally:
        backend.close()


def push_versions(tool: str, versions: Sequence[Version], workdir: Path) -> list[Push]:
    """Push every version with `tool` to a fresh server; what each push added and sent."""
    import time

    workdir.mkdir(parents=True, exist_ok=True)
    pushes = []
    with running_server(workdir / "server" / "data") as server:
        token = server.token("write")
        store = CasStore(server.data_dir)
        seen = _xorb_bytes(store)
        sent = _request_bytes_in(server)
        for n, version in enumerate(versions):
            path = workdir / f"v{n}.bin"
            path.write_bytes(version.data)
            if tool == "git-xet":
                _push_git_xet(server, path, workdir / "git-xet-cache", token)
            else:
                hf_xet_oracle.remote_upload([path], server.url, token, workdir / "hf-xet")
            time.sleep(0.3)  # a request's log line is written just after its response
            now = _xorb_bytes(store)
            logged = _request_bytes_in(server)
            pushes.append(Push(version.name, len(version.data), sum(v for k, v in now.items() if k not in seen), logged - sent))
            seen, sent = now, logged
            path.unlink()
    return pushes
