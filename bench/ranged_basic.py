"""Upstream's design for git-xet downloads, as a clone baseline: no XET on the client, each LFS
object fetched from the `basic` download URL of the LFS batch API with up to 8 parallel ranged
GETs of at least 16 MiB each (the one download design hf-xet's git-xet proposes; issue 41 §5).

    python bench/ranged_basic.py --url URL --token TOKEN --remote REMOTE.git --dest DIR

Clones REMOTE.git into DIR without LFS smudge (GIT_LFS_SKIP_SMUDGE=1, pointer files only), asks
`git xet serve`'s LFS endpoint (URL/git-xet.git/info/lfs, the standalone repo) for a basic
download of every pointer's object, fetches each in its ranges into the working-tree file, and
checks its sha256 as git-lfs would. bench/git_e2e.py times it beside our native clone. It
flatters the baseline slightly: the objects go straight into the working tree, without git-lfs's
copy out of .git/lfs/objects.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

PARALLEL = 8
MIN_PART = 16 << 20
READ_PIECE = 1 << 20


def parts(size: int, parallel: int = PARALLEL, min_part: int = MIN_PART) -> list[tuple[int, int]]:
    """Inclusive byte ranges covering `size` bytes: up to `parallel` of at least `min_part`."""
    if size == 0:
        return []
    n = max(1, min(parallel, size // min_part))
    step = -(-size // n)
    return [(start, min(size, start + step) - 1) for start in range(0, size, step)]


def pointers(work: Path) -> dict[Path, tuple[str, int]]:
    """The LFS pointer files of a checkout made without smudge, by path: (oid, size)."""
    out = {}
    for name in subprocess.run(["git", "ls-files", "-z"], cwd=work, capture_output=True, check=True).stdout.decode().split("\0"):
        path = work / name
        if not name or path.stat().st_size > 1024:
            continue
        fields = dict(line.split(" ", 1) for line in path.read_text(errors="replace").splitlines() if " " in line)
        if fields.get("version", "").startswith("https://git-lfs") and fields.get("oid", "").startswith("sha256:"):
            out[path] = (fields["oid"].removeprefix("sha256:"), int(fields["size"]))
    return out


def fetch(client: httpx.Client, href: str, headers: dict[str, str], path: Path, first: int, last: int) -> None:
    with client.stream("GET", href, headers={**headers, "Range": f"bytes={first}-{last}"}) as response:
        response.raise_for_status()
        fd = os.open(path, os.O_WRONLY)
        try:
            offset = first
            for piece in response.iter_bytes(READ_PIECE):
                os.pwrite(fd, piece, offset)
                offset += len(piece)
        finally:
            os.close(fd)
    if offset != last + 1:
        raise RuntimeError(f"{path.name}: range {first}-{last} came back with {offset - first} bytes")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(READ_PIECE):
            digest.update(piece)
    return digest.hexdigest()


def download(url: str, token: str, objects: dict[Path, tuple[str, int]]) -> int:
    """Fetch every object into its path in ranged parts, PARALLEL requests at a time; returns
    the bytes fetched. Raises when an object's sha256 is not its oid."""
    auth = {"Authorization": f"Bearer {token}"}
    body = {"operation": "download", "transfers": ["basic"], "objects": [{"oid": oid, "size": size} for oid, size in objects.values()]}
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=PARALLEL)) as client:
        batch = client.post(f"{url}/git-xet.git/info/lfs/objects/batch", json=body, headers={**auth, "Accept": "application/vnd.git-lfs+json"})
        batch.raise_for_status()
        actions = {o["oid"]: o["actions"]["download"] for o in batch.json()["objects"]}
        jobs = []
        for path, (oid, size) in objects.items():
            with open(path, "wb") as f:
                f.truncate(size)
            action = actions[oid]
            jobs += [(action["href"], action.get("header", {}), path, first, last) for first, last in parts(size)]
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(lambda job: fetch(client, *job), jobs))
    for path, (oid, _) in objects.items():
        if sha256_of(path) != oid:
            raise RuntimeError(f"{path.name}: downloaded bytes do not hash to its oid")
    return sum(size for _, size in objects.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the `git xet serve` URL")
    parser.add_argument("--token", required=True, help="a read token of the server")
    parser.add_argument("--remote", required=True, type=Path)
    parser.add_argument("--dest", required=True, type=Path)
    args = parser.parse_args()
    env = {**os.environ, "GIT_LFS_SKIP_SMUDGE": "1"}
    subprocess.run(["git", "clone", "-q", str(args.remote), str(args.dest)], env=env, check=True)
    download(args.url, args.token, pointers(args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
