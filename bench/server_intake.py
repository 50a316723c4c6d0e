"""What receiving xorb uploads costs `git xet serve`: CPU seconds and minor page faults per GiB.

    python bench/server_intake.py [--xorbs 8] [--parallel 2] [--repeats 3] [--json OUT]

Builds `--xorbs` xorbs of 64 MiB of random data (stored raw, as model weights mostly are),
then per repeat starts a fresh server on 127.0.0.1 and uploads them as the agent and hf-xet
do to a server keeping objects in its directory (`POST /v1/xorbs`), `--parallel` at a time. Reads the server's CPU (user + sys) and
minor faults from /proc before and after. Page faults count work the kernel does for fresh
memory; unlike CPU seconds they barely move when other jobs share the machine, so they are
the figure to compare between two versions of the server on a busy host.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, machine, median, process_cpu, write_json

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.core.hashes import hash_to_hex
from git_xet.core.xorb import XorbBuilder
from tests.support.server_process import running_server

CHUNK = 64 * 1024


def minor_faults(pid: int) -> int:
    """Minor page faults of a running process so far, from /proc."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def build_xorbs(count: int) -> list[tuple[str, bytes]]:
    rng = random.Random(5)
    out = []
    for _ in range(count):
        builder = XorbBuilder()
        data = rng.randbytes(64 * MIB - MIB)
        for pos in range(0, len(data), CHUNK):
            builder.add(data[pos : pos + CHUNK])
        built = builder.build()
        out.append((hash_to_hex(built.xorb_hash), bytes(built.body)))
    return out


def run(xorbs: int, parallel: int, repeats: int) -> dict:
    bodies = build_xorbs(xorbs)
    gib = sum(len(body) for _, body in bodies) / (1 << 30)
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="git-xet-bench-intake-") as tmp, running_server(Path(tmp) / "data") as srv:
            backend = HttpCasBackend(srv.url, StaticToken(srv.token("write")))
            pid = srv.process.pid
            cpu0, faults0 = process_cpu(pid), minor_faults(pid)
            with ThreadPoolExecutor(parallel) as pool:
                inserted = list(pool.map(backend.upload_xorb, [name for name, _ in bodies], [body for _, body in bodies]))
            cpu, faults = process_cpu(pid) - cpu0, minor_faults(pid) - faults0
            if not all(inserted):
                raise RuntimeError("a fresh server reported a xorb as stored already")
            runs.append({"cpu_s_per_gib": cpu / gib, "minor_faults_per_gib": faults / gib})
            print(f"server CPU {cpu / gib:.2f} s/GiB, minor faults {faults / gib:,.0f} per GiB", flush=True)
    return {
        "xorbs": xorbs,
        "parallel": parallel,
        "repeats": repeats,
        "machine": machine(),
        "cpu_s_per_gib": median([r["cpu_s_per_gib"] for r in runs]),
        "minor_faults_per_gib": median([r["minor_faults_per_gib"] for r in runs]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--xorbs", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary = run(args.xorbs, args.parallel, args.repeats)
    print(f"median of {args.repeats}: server CPU {summary['cpu_s_per_gib']:.2f} s/GiB, minor faults {summary['minor_faults_per_gib']:,.0f} per GiB; {summary['machine']}")
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
