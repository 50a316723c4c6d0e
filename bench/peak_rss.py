"""Peak resident memory of an upload and a download of one large file.

    python bench/peak_rss.py [--size-gib 2] [--store local|server]

Each phase runs in its own process (so the figures do not mix) against a fresh local store
(default) or a `git xet serve` on 127.0.0.1, and reports ru_maxrss of that process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASE = r"""
import json, resource, sys, time
from pathlib import Path
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.client.shard_cache import ShardCache
from git_xet.pipelines.upload import Uploader
from git_xet.pipelines.download import download_to_path
from git_xet.memory import tune_allocator
tune_allocator()  # as the git-xet command does
phase, target, token, path, cache, meta = sys.argv[1:7]
backend = HttpCasBackend(target, StaticToken(token)) if target.startswith("http") else LocalStoreBackend(Path(target))
start = time.perf_counter()
if phase == "upload":
    with Uploader(backend, ShardCache(Path(cache), backend.cache_key)) as up:
        r = up.add_file(path)
        up.finalize()
    Path(meta).write_text(json.dumps({"hash": r.file_hash, "sha256": r.sha256, "size": r.size}))
else:
    info = json.loads(Path(meta).read_text())
    download_to_path(backend, info["hash"], Path(path), size=info["size"], sha256=info["sha256"])
print(json.dumps({"phase": phase, "seconds": time.perf_counter() - start, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--store", choices=["local", "server"], default="local")
    args = parser.parse_args()
    size = int(args.size_gib * 1024**3)
    with tempfile.TemporaryDirectory(prefix="git-xet-rss-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "input.bin"
        with open(src, "wb") as out:
            for left in range(size, 0, -(64 << 20)):
                out.write(os.urandom(min(64 << 20, left)))
        server = None
        token = "-"
        if args.store == "server":
            server = subprocess.Popen([sys.executable, "-m", "git_xet", "serve", "--data", str(tmp_path / "data"), "--port", "0", "--log-level", "warning"], stdout=subprocess.PIPE)
            target = server.stdout.readline().decode().strip()
            token = subprocess.run([sys.executable, "-m", "git_xet", "token", "--data", str(tmp_path / "data")], capture_output=True, text=True, check=True).stdout.strip()
            time.sleep(0.5)
        else:
            target = str(tmp_path / "store")
        try:
            for phase, path in (("upload", src), ("download", tmp_path / "output.bin")):
                out = subprocess.run([sys.executable, "-c", PHASE, phase, target, token, str(path), str(tmp_path / "cache"), str(tmp_path / "meta.json")], capture_output=True, text=True, check=True)
                result = json.loads(out.stdout)
                rate = size / result["seconds"] / 1024**2
                print(f"{phase:<9} {args.size_gib:g} GiB via {args.store}: {result['seconds']:.1f} s ({rate:.0f} MiB/s), peak RSS {result['peak_rss_mib']:.0f} MiB")
            same = subprocess.run(["cmp", str(src), str(tmp_path / "output.bin")]).returncode == 0
            print("round trip byte-exact:", same)
        finally:
            if server:
                server.terminate()
                server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
