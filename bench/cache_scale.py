"""Shard cache at scale: one agent's cost before its first upload, whatever the cached history.

    python bench/cache_scale.py [--sizes-gib 4,32,128,1024] [--agents 8] [--upload-mib 256] [--json OUT]

Builds a synthetic history through `ShardCache.add` in the uploader's own shape: one shard per
64 MiB xorb of 1024 chunks (the resume point each xorb upload writes), plus one file shard per
16 xorbs repeating their CAS blocks (the shard a finished push records). Only hashes exist, no
data: xorb k's chunk hashes are `random.Random(k).randbytes(32 * 1024)`, so agents can derive
any xorb's chunks to look them up. At each history size it starts fresh agent processes that
open the cache the way an agent does (`Uploader(backend, ShardCache(...))`) and reports:

- open: seconds from before that constructor to after the first index lookup;
- peak RSS of that process (interpreter and imports included), alone and with N agents at once;
- lookup cost (a miss, and a hit on a random cached xorb's chunk) and that the chunks of
  the oldest and the newest xorbs are both found (dedup reaches the whole history);
- with --upload-mib, the upload speed of that many MiB of fresh data (chunk, probe, pack, store
  locally) against the same upload with an empty cache: the index is on the hot path.

Target (issue 14.1): at 1 TiB of history, under 0.3 s and under 150 MiB per agent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, machine, write_json

from git_xet.client.shard_cache import ShardCache
from git_xet.core.shard import CasInfo, FileInfo, FileTerm, Shard

CHUNKS = 1024
CHUNK_BYTES = 64 * 1024
XORB_BYTES = CHUNKS * CHUNK_BYTES  # 64 MiB
XORBS_PER_PUSH = 16
ENDPOINT = "bench://cache-scale"
TARGET_SECONDS, TARGET_RSS_MIB = 0.3, 150

_AGENT = r"""
import json, os, random, resource, sys, time
from pathlib import Path
from git_xet.platform.memory import tune_allocator
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.shard_cache import ShardCache
from git_xet.pipelines.upload import Uploader
tune_allocator()
cache_root, store, xorbs, upload_mib = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
backend = LocalStoreBackend(store)

def chunks_of(k):
    blob = random.Random(k).randbytes(32 * 1024)
    return [blob[i : i + 32] for i in range(0, len(blob), 32)]

start = time.perf_counter()
up = Uploader(backend, ShardCache(cache_root, "bench://cache-scale"), global_dedup=False)
up._index.probe(bytes(32))  # the first lookup: pages the index in
opened = time.perf_counter() - start
out = {"open_seconds": opened, "rss_after_open_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if xorbs:
    rng = random.Random(f"misses {os.getpid()}")  # not an int seed: those name the cached xorbs
    misses = [rng.randbytes(32) for _ in range(5000)]
    t = time.perf_counter()
    assert all(up._index.probe(h) is None for h in misses)
    out["probe_miss_us"] = (time.perf_counter() - t) / len(misses) * 1e6
    hits = []
    for k in rng.sample(range(xorbs), min(xorbs, 200)):
        hits += rng.sample(chunks_of(k), 20)
    t = time.perf_counter()
    found = sum(up._index.probe(h) is not None for h in hits)
    out["probe_hit_us"] = (time.perf_counter() - t) / len(hits) * 1e6
    out["hits_found"] = f"{found}/{len(hits)}"
    for name, k in (("oldest", 0), ("newest", xorbs - 1)):
        ok = all((f := up._index.probe(h)) is not None and f[1] == i for i, h in enumerate(chunks_of(k)))
        out[f"{name}_xorb_found"] = ok
if upload_mib:
    rng = random.Random(f"upload {os.getpid()}")  # data new to every store and cache
    data = b"".join(rng.randbytes(1 << 20) for _ in range(upload_mib))
    t = time.perf_counter()
    up.add_bytes(data)
    up.finalize()
    out["upload_seconds"] = time.perf_counter() - t
up.close()
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def _xorb(k: int) -> CasInfo:
    blob = random.Random(k).randbytes(32 * CHUNKS)
    hashes = [blob[i : i + 32] for i in range(0, len(blob), 32)]
    return CasInfo.from_chunks(random.Random(-1 - k).randbytes(32), hashes, [CHUNK_BYTES] * CHUNKS, XORB_BYTES)


def _push_shard(first: int, infos: list[CasInfo]) -> Shard:
    terms = tuple(FileTerm(info.xorb_hash, XORB_BYTES, 0, CHUNKS) for info in infos)
    return Shard(files=(FileInfo(random.Random(f"file{first}").randbytes(32), terms),), cas=tuple(infos))


class History:
    """The synthetic history, grown in place from one size to the next."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = ShardCache(root, ENDPOINT, max_bytes=1 << 50)  # measure growth, not the cap
        self.xorbs = 0
        self.build_seconds = 0.0

    def grow_to(self, xorbs: int) -> None:
        start = time.perf_counter()
        pending: list[CasInfo] = []
        for k in range(self.xorbs, xorbs):
            info = _xorb(k)
            self.cache.add(Shard(cas=(info,)))  # the resume point of each uploaded xorb
            pending.append(info)
            if len(pending) == XORBS_PER_PUSH:
                self.cache.add(_push_shard(k, pending))  # the push's own shard
                pending = []
        self.xorbs = xorbs
        self.build_seconds += time.perf_counter() - start

    def disk_mib(self) -> float:
        return sum(p.stat().st_size for p in self.cache.dir.iterdir()) / MIB


def _agents(cache_root: Path, work: Path, xorbs: int, count: int, upload_mib: int = 0) -> list[dict]:
    procs = []
    for n in range(count):
        store = work / f"store-{n}"
        shutil.rmtree(store, ignore_errors=True)
        procs.append(subprocess.Popen([sys.executable, "-c", _AGENT, str(cache_root), str(store), str(xorbs), str(upload_mib)], stdout=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode:
            raise RuntimeError("an agent process failed")
        results.append(json.loads(out))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-gib", default="4,32,128,1024", help="history sizes to measure, ascending")
    parser.add_argument("--agents", type=int, default=8, help="agents opening the cache at once")
    parser.add_argument("--upload-mib", type=int, default=256, help="fresh data uploaded with the smallest and largest history (0: skip)")
    parser.add_argument("--dir", type=Path, help="where to build (default: a temp dir, removed after)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_gib.split(",")]
    work = Path(tempfile.mkdtemp(prefix="cache-scale-", dir=args.dir))
    rows = []
    try:
        history = History(work / "cache")
        print(f"machine: {machine()}")
        print(f"{'history':>9} {'xorbs':>6} {'build s':>8} {'cache MiB':>9} {'open s':>7} {'RSS MiB':>8} {f'{args.agents} agents: open s':>18} {'RSS MiB':>8} {'miss us':>8} {'hit us':>7} {'oldest+newest':>13}")
        for gib in sizes:
            xorbs = gib * 1024**3 // XORB_BYTES
            history.grow_to(xorbs)
            (one,) = _agents(history.root, work, xorbs, 1)
            many = _agents(history.root, work, xorbs, args.agents)
            row = {
                "history_gib": gib,
                "xorbs": xorbs,
                "build_seconds": history.build_seconds,
                "cache_mib": history.disk_mib(),
                "open_seconds": one["open_seconds"],
                "peak_rss_mib": one["rss_after_open_mib"],
                "agents": args.agents,
                "agents_max_open_seconds": max(a["open_seconds"] for a in many),
                "agents_max_rss_mib": max(a["rss_after_open_mib"] for a in many),
                "probe_miss_us": one["probe_miss_us"],
                "probe_hit_us": one["probe_hit_us"],
                "hits_found": one["hits_found"],
                "oldest_and_newest_found": one["oldest_xorb_found"] and one["newest_xorb_found"],
            }
            rows.append(row)
            label = f"{gib} GiB" if gib < 1024 else f"{gib / 1024:g} TiB"
            print(
                f"{label:>9} {xorbs:>6} {row['build_seconds']:>8.1f} {row['cache_mib']:>9.0f} {row['open_seconds']:>7.3f} {row['peak_rss_mib']:>8.0f}"
                f" {row['agents_max_open_seconds']:>18.3f} {row['agents_max_rss_mib']:>8.0f} {row['probe_miss_us']:>8.1f} {row['probe_hit_us']:>7.1f}"
                f" {'yes' if row['oldest_and_newest_found'] else 'NO':>13}",
                flush=True,
            )
        upload = {}
        if args.upload_mib:
            # Alternating runs, median of five each: the index sits on the upload's hot path.
            # The build's dirty pages are flushed first, or their writeback taxes the uploads.
            os.sync()
            full, empty = [], []
            for n in range(5):
                ShardCache(work / f"empty-cache-{n}", ENDPOINT).open().close()  # exists, holds nothing
                empty.append(_agents(work / f"empty-cache-{n}", work, 0, 1, args.upload_mib)[0])
                full.append(_agents(history.root, work, history.xorbs, 1, args.upload_mib)[0])
            upload = {
                "mib": args.upload_mib,
                "history_gib": sizes[-1],
                "seconds": statistics.median(r["upload_seconds"] for r in full),
                "seconds_empty_cache": statistics.median(r["upload_seconds"] for r in empty),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in full),
                "peak_rss_mib_empty_cache": max(r["peak_rss_mib"] for r in empty),
            }
            print(
                f"upload of {args.upload_mib} MiB of new data (median of 5): {upload['seconds']:.2f} s with {sizes[-1]} GiB cached,"
                f" {upload['seconds_empty_cache']:.2f} s with an empty cache (ratio {upload['seconds'] / upload['seconds_empty_cache']:.2f});"
                f" peak RSS {upload['peak_rss_mib']:.0f} vs {upload['peak_rss_mib_empty_cache']:.0f} MiB"
            )
        met = all(r["agents_max_open_seconds"] < TARGET_SECONDS and r["agents_max_rss_mib"] < TARGET_RSS_MIB and r["oldest_and_newest_found"] for r in rows)
        print(f"target at every size: open < {TARGET_SECONDS} s and RSS < {TARGET_RSS_MIB} MiB per agent, oldest and newest found: {'met' if met else 'NOT met'}")
        write_json(
            args.json,
            {"machine": machine(), "rows": rows, "upload": upload, "target": {"open_seconds": TARGET_SECONDS, "rss_mib": TARGET_RSS_MIB}, "met": met},
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
