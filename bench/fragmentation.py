"""What the fragmentation guard buys: the download of a file whose dedup matches are all short.

    python bench/fragmentation.py [--size-mib 128] [--repeats 3] [--json OUT]

v1 is random data; v2 replaces every third chunk of v1 with new data of that chunk's size.
The chunk after each replaced one starts inside the new data (its boundary is content-defined),
so dedup can match only one-chunk runs: terms of 1 and 2 chunks alternate. Both are pushed to a `git xet serve` (v1 first,
through the shard cache), with the guard (hf-xet's rule, pipelines/upload_dedup.py) and without it
(each to its own server); then v2 is downloaded there (median of --repeats). Reported: new
bytes stored, terms in v2's reconstruction, download seconds. The guard trades stored bytes
for fewer, longer ranges to fetch.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import MIB, machine, write_json

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.shard_cache import ShardCache
from git_xet.client.tokens import StaticToken
from git_xet.core.chunking import chunk_boundaries
from git_xet.pipelines import upload_dedup
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.server_process import running_server


def versions(size: int) -> tuple[bytes, bytes]:
    v1 = random_bytes(size, 5)
    ends = chunk_boundaries(v1)
    starts = [0, *ends[:-1]]
    parts = []
    for i, (start, end) in enumerate(zip(starts, ends)):
        parts.append(v1[start:end] if i % 3 != 2 else random_bytes(end - start, 1000 + i))
    return v1, b"".join(parts)


def measure(v1: bytes, v2: bytes, guard: bool, repeats: int, root: Path) -> dict:
    target = upload_dedup.FRAGMENTATION_TARGET
    upload_dedup.FRAGMENTATION_TARGET = target if guard else 0.0
    try:
        with running_server(root / "server" / "data") as server:
            backend = HttpCasBackend(server.url, StaticToken(server.token("write")), extension=True)
            cache = root / "cache"
            for data in (v1, v2):
                with Uploader(backend, ShardCache(cache, backend.cache_key)) as up:
                    result = up.add_bytes(data)
                    up.finalize()
            terms = len(backend.reconstruction(result.file_hex).terms)
            seconds = []
            for _ in range(repeats):
                out = io.BytesIO()
                started = time.perf_counter()
                download(backend, result.file_hex, out)
                seconds.append(time.perf_counter() - started)
                assert out.getvalue() == v2
            backend.close()
    finally:
        upload_dedup.FRAGMENTATION_TARGET = target
    return {"guard": guard, "new_bytes": result.new_bytes, "terms": terms, "download_seconds": statistics.median(seconds), "all_seconds": sorted(seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    v1, v2 = versions(args.size_mib * MIB)
    rows = []
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-fragmentation-") as tmp:
        for guard in (True, False):
            rows.append(measure(v1, v2, guard, args.repeats, Path(tmp) / ("guard" if guard else "no-guard")))
    print(f"v2 of {args.size_mib} MiB, every third chunk of v1 replaced; {machine()}")
    print(f"{'guard':<7}{'new MiB':>9}{'terms':>8}{'download s (median)':>21}")
    for row in rows:
        print(f"{'on' if row['guard'] else 'off':<7}{row['new_bytes'] / MIB:>9.1f}{row['terms']:>8}{row['download_seconds']:>21.2f}")
    write_json(args.json, {"size_mib": args.size_mib, "machine": machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
