"""Upstream's design for git-xet downloads, as a clone baseline: a git-lfs custom transfer agent
with no XET in it, fetching each LFS object from the `basic` download URL of the LFS batch API
with up to 8 parallel ranged GETs of at least 16 MiB each (the one download design hf-xet's
git-xet proposes; issue 41 §5).

    git clone $(python bench/ranged_basic_agent.py ...)   # see clone_command()

git-lfs runs it as a standalone agent (`lfs.customtransfer.ranged.*`,
`lfs.standalonetransferagent=ranged`; started through ranged_basic_agent.sh, which answers
`init` as our launcher does), exactly where it runs ours: for each download request
the agent asks `git xet serve`'s LFS endpoint (URL/git-xet.git/info/lfs, the standalone repo)
for the object's basic href, fetches its ranges into a temp file under .git/lfs/tmp, checks its
sha256 and answers with the path; git-lfs then re-hashes it, moves it into .git/lfs/objects and
checks it out, as it does after our agent. So `git clone` with this agent pays every cost ours
pays outside the transfer itself, and bench/git_e2e.py and bench/wan.py time the two side by
side. Self-contained (httpx and the standard library) so that nothing of git_xet is measured.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import httpx

NAME = "ranged"
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


def clone_command(url: str, token_file: Path, remote: Path, dest: Path) -> list[str]:
    """`git clone` of `remote` into `dest` with this agent as git-lfs's standalone agent for
    `url` (a `git xet serve` URL; `token_file` holds a read token). `-c` outranks the global
    config that points git-lfs at our agent."""
    here = Path(__file__).resolve()
    args = f"{here.with_suffix('.sh')} {sys.executable} {here} --url {url} --token-file {token_file}"
    keys = {
        f"lfs.customtransfer.{NAME}.path": "sh",
        f"lfs.customtransfer.{NAME}.args": args,
        f"lfs.customtransfer.{NAME}.concurrent": "true",
        f"lfs.customtransfer.{NAME}.direction": "download",
        "lfs.standalonetransferagent": NAME,
    }
    config = [arg for key, value in keys.items() for arg in ("-c", f"{key}={value}")]
    return ["git", *config, "clone", "-q", str(remote), str(dest)]


class Agent:
    """One git-lfs worker: one object at a time, each in up to PARALLEL ranged GETs. httpx is
    imported with the first download, as our agent imports its pipelines: git-lfs starts its
    workers one after another, each once the one before has answered `init`, and most of them
    get no object in a clone of a few files."""

    def __init__(self, url: str, token: str, out: TextIO, transport: httpx.BaseTransport | None = None) -> None:
        self.transport = transport  # tests serve the LFS endpoint in-process
        self.batch_url = f"{url}/git-xet.git/info/lfs/objects/batch"
        self.auth = {"Authorization": f"Bearer {token}"}
        self.out = out
        self.lock = threading.RLock()
        self._client: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.tmp_dir: Path | None = None
        self.min_part = MIN_PART

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=PARALLEL), transport=self.transport)
        return self._client

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(PARALLEL)
        return self._pool

    def send(self, message: dict) -> None:
        with self.lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def temp_dir(self) -> Path:
        """.git/lfs/tmp: git-lfs renames the answered file into its store, so same filesystem."""
        if self.tmp_dir is None:
            common = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True, check=True).stdout.strip()
            self.tmp_dir = Path(common).resolve() / "lfs" / "tmp"
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        return self.tmp_dir

    def download(self, oid: str, size: int) -> str:
        self.send({"event": "progress", "oid": oid, "bytesSoFar": min(1, size), "bytesSinceLast": min(1, size)})  # git-lfs holds its other workers until then
        body = {"operation": "download", "transfers": ["basic"], "objects": [{"oid": oid, "size": size}]}
        batch = self.client.post(self.batch_url, json=body, headers={**self.auth, "Accept": "application/vnd.git-lfs+json"})
        batch.raise_for_status()
        obj = batch.json()["objects"][0]
        if "error" in obj:
            raise RuntimeError(f"batch API: {obj['error'].get('message')}")
        action = obj["actions"]["download"]
        fd, name = tempfile.mkstemp(prefix=f"{oid}.ranged-", dir=self.temp_dir())
        try:
            os.ftruncate(fd, size)
            counts = {"written": 0, "reported": min(1, size)}
            jobs = [self.pool.submit(self.fetch, action["href"], action.get("header", {}), fd, first, last, oid, counts) for first, last in parts(size, min_part=self.min_part)]
            for job in jobs:
                job.result()
            if sha256_of(fd) != oid:
                raise RuntimeError("the downloaded bytes do not hash to the oid")
        except BaseException:
            os.close(fd)
            os.unlink(name)
            raise
        os.close(fd)
        return name

    def fetch(self, href: str, headers: dict[str, str], fd: int, first: int, last: int, oid: str, counts: dict[str, int]) -> None:
        """One range into its place in `fd`, as it arrives; progress (`counts`: this object's
        bytes written and reported) each READ_PIECE and at the range's end."""
        offset = first
        with self.client.stream("GET", href, headers={**headers, "Range": f"bytes={first}-{last}"}) as response:
            if response.status_code != 206:
                raise RuntimeError(f"range {first}-{last}: HTTP {response.status_code}, not 206")
            for piece in response.iter_raw():
                if offset + len(piece) > last + 1:
                    raise RuntimeError(f"range {first}-{last} came back longer")
                os.pwrite(fd, piece, offset)
                offset += len(piece)
                self.progress(oid, counts, len(piece), offset == last + 1)
        if offset != last + 1:
            raise RuntimeError(f"range {first}-{last} came back with {offset - first} bytes")

    def progress(self, oid: str, counts: dict[str, int], written: int, flush: bool) -> None:
        with self.lock:  # reentrant: reports leave in the order they were counted
            counts["written"] += written
            now, before = counts["written"], counts["reported"]
            if now > before and (now - before >= READ_PIECE or flush):
                counts["reported"] = now
                self.send({"event": "progress", "oid": oid, "bytesSoFar": now, "bytesSinceLast": now - before})

    def serve(self, lines: Iterable[str]) -> None:
        for line in lines:
            msg = json.loads(line)
            event = msg.get("event")
            if event == "init":
                self.send({})
            elif event == "terminate":
                break
            elif event == "download":
                try:
                    path = self.download(msg["oid"], msg["size"])
                except Exception as exc:  # noqa: BLE001 - every failure is an error answer to git-lfs, which goes on
                    self.send({"event": "complete", "oid": msg["oid"], "error": {"code": 2, "message": f"ranged basic: {exc}"}})
                else:
                    self.send({"event": "complete", "oid": msg["oid"], "path": path})
            else:
                self.send({"event": "complete", "oid": msg.get("oid"), "error": {"code": 32, "message": f"ranged basic: cannot {event}"}})
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._client is not None:
            self._client.close()


def sha256_of(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while piece := os.pread(fd, READ_PIECE, offset):
        digest.update(piece)
        offset += len(piece)
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the `git xet serve` URL")
    parser.add_argument("--token-file", required=True, type=Path, help="a file holding a read token of the server")
    args = parser.parse_args()
    first = os.environ.pop("RANGED_FIRST_REQUEST", None)  # the launcher answered `init`
    lines = itertools.chain([first], sys.stdin) if first is not None else sys.stdin
    Agent(args.url, args.token_file.read_text().strip(), sys.stdout).serve(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
