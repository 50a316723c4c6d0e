"""Chunk + hash throughput: git-xet vs hf_xet.hash_files on the same file, in the same run.

    python bench/chunk_hash.py [--size-mib 1024] [--repeats 3] [--json OUT]

Generates a random file (page-cache warm for both tools), times each tool `repeats` times in
alternating order, checks both produce the same file hash, and prints medians and the ratio
(git-xet throughput / hf-xet throughput; >= 1.0 means we are at least as fast).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _make_file(path: Path, size: int) -> None:
    block = 64 * 1024 * 1024
    with open(path, "wb") as out:
        left = size
        while left:
            out.write(os.urandom(min(block, left)))
            left -= min(block, left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="git-xet-bench-") as tmp:
        os.environ["HF_XET_CACHE"] = str(Path(tmp) / "hf-xet-cache")
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        import hf_xet

        from git_xet.core.chunking import NATIVE_AVAILABLE
        from git_xet.core.hashes import hash_to_hex
        from git_xet.pipelines.file_hashing import hash_file

        path = Path(tmp) / "data.bin"
        size = args.size_mib * 1024 * 1024
        _make_file(path, size)
        path.read_bytes()  # warm the page cache for both tools

        def ours() -> str:
            return hash_to_hex(hash_file(path).file_hash)

        def theirs() -> str:
            return hf_xet.hash_files([str(path)])[0].hash

        timings: dict[str, list[float]] = {"git-xet": [], "hf-xet": []}
        results: dict[str, str] = {}
        for i in range(args.repeats):
            order = [("git-xet", ours), ("hf-xet", theirs)]
            if i % 2:
                order.reverse()
            for name, fn in order:
                start = time.perf_counter()
                results[name] = fn()
                timings[name].append(time.perf_counter() - start)
        if results["git-xet"] != results["hf-xet"]:
            print(f"MISMATCH: git-xet {results['git-xet']} != hf-xet {results['hf-xet']}", file=sys.stderr)
            return 1

    mib = size / (1024 * 1024)
    medians = {name: statistics.median(t) for name, t in timings.items()}
    rates = {name: mib / t for name, t in medians.items()}
    ratio = rates["git-xet"] / rates["hf-xet"]
    print(f"chunk+hash {args.size_mib} MiB, median of {args.repeats}, {os.cpu_count()} cores, C chunker={NATIVE_AVAILABLE}")
    print(f"{'tool':<10}{'seconds':>10}{'MiB/s':>10}")
    for name in ("git-xet", "hf-xet"):
        print(f"{name:<10}{medians[name]:>10.3f}{rates[name]:>10.0f}")
    print(f"ratio git-xet/hf-xet throughput: {ratio:.2f}x (target >= 1.00x)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"size_mib": args.size_mib, "repeats": args.repeats, "seconds": medians, "mib_per_s": rates, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
