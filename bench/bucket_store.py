"""Serverless bucket store: bytes stored in the bucket for v1 + v2 of a file, and push/clone time.

    python bench/bucket_store.py [--size-mib 1024] [--json OUT]

git-xet pushes v1, then v2 (1% overwritten in ten places plus a 1 KiB insertion near the
start, as in dedup.py), with real git + git-lfs into `s3://BUCKET` on a SeaweedFS started on
127.0.0.1; a second "machine" (another HOME and cache) then clones v2. Stored bytes are the
sizes of every object the bucket lists (xorbs, shards and the small name entries). The
whole-file layout (what lfs-s3 and similar agents store: each version as one object) holds
size(v1) + size(v2) for the same history, which needs no measuring.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, edit_file, machine, timed, write_json, write_random_file

from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.gitenv import make_git_env
from tests.support.seaweed import running_seaweedfs


def _stored(objects: S3ObjectStore) -> dict[str, int]:
    """Bytes stored per top-level key prefix (xorbs, shards, files, lfs, dedup, marker)."""
    out: dict[str, int] = {}
    for key, size in objects.sizes():
        top = key.split("/", 1)[0]
        out[top] = out.get(top, 0) + size
    return out


def run(size_mib: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-bucket-") as tmp:
        base = Path(tmp)
        source = base / "model.bin"
        write_random_file(source, size_mib * MIB, seed=11)
        with running_seaweedfs(base / "seaweedfs") as s3:
            bucket = s3.new_bucket()
            objects = S3ObjectStore(S3Location(bucket), S3Config.from_env(s3.env()))
            a = make_git_env(base / "a")
            a.env.update(s3.env())
            a.git_xet("install", "--standalone", f"s3://{bucket}")
            a.git("init", "-q", "--bare", str(base / "remote.git"))
            work = base / "work"
            a.git("init", "-q", str(work))
            a.git("lfs", "track", "*.bin", cwd=work)
            (work / "model.bin").write_bytes(source.read_bytes())
            a.git("add", ".", cwd=work)
            a.git("commit", "-qm", "v1", cwd=work)
            a.git("remote", "add", "origin", str(base / "remote.git"), cwd=work)
            push = timed(["git", "push", "-q", "origin", "main"], cwd=work, env=a.env, stderr_to=base / "push.stderr")
            after_v1 = _stored(objects)
            edit_file(work / "model.bin", seed=7)
            v2_size = (work / "model.bin").stat().st_size
            a.git("commit", "-qam", "v2", cwd=work)
            push_v2 = timed(["git", "push", "-q", "origin", "main"], cwd=work, env=a.env, stderr_to=base / "push_v2.stderr")
            after_v2 = _stored(objects)

            b = make_git_env(base / "b")  # another machine: its own HOME and cache
            b.env.update(s3.env())
            b.git_xet("install", "--standalone", f"s3://{bucket}")
            clone = timed(["git", "clone", "-q", str(base / "remote.git"), str(base / "clone")], cwd=base, env=b.env, stderr_to=base / "clone.stderr")
            if subprocess.run(["cmp", "-s", str(work / "model.bin"), str(base / "clone" / "model.bin")], check=False).returncode:
                raise RuntimeError("the clone's model.bin differs from what was pushed")
    return {
        "size_mib": size_mib,
        "machine": machine(),
        "v1_bytes": size_mib * MIB,
        "v2_bytes": v2_size,
        "stored_after_v1": after_v1,
        "stored_after_v2": after_v2,
        "whole_file_layout_bytes": size_mib * MIB + v2_size,
        "push_seconds": push["seconds"],
        "push_v2_seconds": push_v2["seconds"],
        "clone_seconds": clone["seconds"],
    }


def print_table(summary: dict) -> None:
    ours = sum(summary["stored_after_v2"].values())
    whole = summary["whole_file_layout_bytes"]
    print(f"bucket store, v1 + v2 of a {summary['size_mib']} MiB file (1% edited in 10 places + 1 KiB inserted); {summary['machine']}")
    print(f"  stored by git-xet:          {ours / MIB:10.1f} MiB  ({100 * ours / whole:.1f}% of whole-file)  {summary['stored_after_v2']}")
    print(f"  whole-file layout (lfs-s3): {whole / MIB:10.1f} MiB")
    print(f"  v2 added:                   {(ours - sum(summary['stored_after_v1'].values())) / MIB:10.2f} MiB")
    size = summary["size_mib"]
    for name in ("push", "push_v2", "clone"):
        seconds = summary[f"{name}_seconds"]
        print(f"  {name:8s} {seconds:7.2f} s  ({size / seconds:.0f} MiB/s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary = run(args.size_mib)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
