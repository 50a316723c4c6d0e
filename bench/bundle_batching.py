"""The server's CPU per small file when an upload bundle carries k of them: what batching
several of a push's small files into one request (a change to the agent and its wire use, not
to the server, which takes such bundles today) would save the server.

    python bench/bundle_batching.py [--files 320] [--per-bundle 1,4,8,16] [--json OUT]

`--files` random files of 4-64 KiB, the same for every k; for each k a fresh `git xet serve`
and one client posting the bundles (one xorb of k files' chunks and their shard, each file
claiming its sha256) one after another, as an agent does. The server's user and sys CPU from
/proc over all but a first, warming bundle, per file. Our agent sends k = 1 (git-lfs hands
each agent one object at a time); git-lfs's basic server spends ~0.5-0.7 ms of CPU per object.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, process_times, write_json

from git_xet.core import extension as names
from git_xet.core import hashes
from git_xet.core.upload_bundle import pack_bundle
from tests.support.objects import bundle_parts
from tests.support.server_process import running_server

KIB = 1024


def bundles(files: list[bytes], per_bundle: int) -> list[bytes]:
    """The upload bundles of `files`, `per_bundle` files each."""
    out = []
    for i in range(0, len(files), per_bundle):
        group = files[i : i + per_bundle]
        xorbs, shard = bundle_parts(group, True, [hashlib.sha256(f).digest() for f in group])
        out.append(pack_bundle([(hashes.hex_to_hash(x), body) for x, body in xorbs], shard))
    return out


def server_cpu_per_file(files: list[bytes], per_bundle: int) -> dict[str, float]:
    """User and sys CPU milliseconds of a fresh server per file, after a first bundle."""
    posted = bundles(files, per_bundle)
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-bundles-") as tmp, running_server(Path(tmp) / "data") as srv:
        headers = {"Authorization": f"Bearer {srv.token('write')}"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=120) as client:
            client.post(names.UPLOAD_BUNDLES, content=posted[0]).raise_for_status()
            before = process_times(srv.process.pid)
            for body in posted[1:]:
                client.post(names.UPLOAD_BUNDLES, content=body).raise_for_status()
            after = process_times(srv.process.pid)
    counted = len(files) - min(per_bundle, len(files))
    return {"user_ms": (after[0] - before[0]) * 1000 / counted, "sys_ms": (after[1] - before[1]) * 1000 / counted, "requests": len(posted) - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=320)
    parser.add_argument("--per-bundle", default="1,4,8,16", help="files per bundle, comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(0)
    files = [rng.randbytes(rng.randint(4 * KIB, 64 * KIB)) for _ in range(args.files)]
    results = {}
    print(f"{args.files} files of 4-64 KiB through `git xet serve`, by files per upload bundle; {machine()}")
    print(f"{'files/bundle':>12}{'requests':>10}{'server CPU ms/file, user + sys':>34}")
    for k in (int(v) for v in args.per_bundle.split(",")):
        measured = results[k] = server_cpu_per_file(files, k)
        print(f"{k:>12}{measured['requests']:>10.0f}{measured['user_ms']:>26.2f} + {measured['sys_ms']:.2f}")
    write_json(args.json, {"files": args.files, "machine": machine(), "per_bundle": results})


if __name__ == "__main__":
    main()
