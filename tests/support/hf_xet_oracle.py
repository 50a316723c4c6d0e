"""Run the official hf-xet client as a conformance oracle, in a subprocess per batch.

A subprocess keeps hf-xet's process-wide state (runtime, caches, config read from the
environment) from leaking between tests; HF_XET_CACHE points into the test's temp dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_RUNNER = r"""
import json, sys, time, hf_xet
jobs = json.load(sys.stdin)
out = {"hashes": [], "uploads": [], "remote_uploads": []}
if jobs["hash"]:
    out["hashes"] = [r.hash for r in hf_xet.hash_files(jobs["hash"])]
for path, store in jobs["upload"]:
    (info,) = hf_xet.upload_files([path], "local://" + store, None, None, None, None)
    out["uploads"].append({"hash": info.hash, "size": info.file_size, "sha256": info.sha256})
token = (jobs.get("token"), int(time.time()) + 3600)
if jobs.get("remote_upload"):
    infos = hf_xet.upload_files(jobs["remote_upload"], jobs["endpoint"], token, None, None, "model", skip_sha256=jobs.get("skip_sha256", False))
    out["remote_uploads"] = [{"hash": i.hash, "size": i.file_size, "sha256": i.sha256} for i in infos]
if jobs.get("remote_download"):
    infos = [hf_xet.PyXetDownloadInfo(dest, h, size) for dest, h, size in jobs["remote_download"]]
    hf_xet.download_files(infos, jobs["endpoint"], token, None, None)
if jobs.get("remote_ranges"):
    session = hf_xet.XetSession()
    group = session.new_download_stream_group(endpoint=jobs["endpoint"], token=jobs["token"], token_expiry_unix_secs=int(time.time()) + 3600)
    for dest, h, size, start, end in jobs["remote_ranges"]:
        with open(dest, "wb") as f:
            for piece in group.download_stream(hf_xet.XetFileInfo(h, size), start, end):
                f.write(piece)
json.dump(out, sys.stdout)
"""


@dataclass(frozen=True)
class LocalStore:
    """What hf-xet wrote to a local:// store for one file."""

    file_hash: str
    sha256: str | None
    xorbs: dict[str, bytes]  # hash string -> stored xorb (with footer)
    shards: list[bytes]  # stored shards (with footer)


def _run(jobs: dict, workdir: Path) -> dict:
    env = dict(os.environ)
    env.update(
        HF_XET_CACHE=str(workdir / "hf-xet-cache"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_XET_CLIENT_RETRY_MAX_ATTEMPTS="1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hf-xet runner failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def remote_upload(paths: list[Path], endpoint: str, token: str, workdir: Path, skip_sha256: bool = False) -> list[dict]:
    """Upload files to a CAS server with hf-xet; returns [{hash, size, sha256}] per file.
    `skip_sha256`: hf-xet leaves the sha256 out of the shard (as huggingface_hub can ask)."""
    jobs = {"hash": [], "upload": [], "remote_upload": [str(p) for p in paths], "endpoint": endpoint, "token": token, "skip_sha256": skip_sha256}
    return _run(jobs, workdir)["remote_uploads"]


def remote_download(files: list[tuple[Path, str, int]], endpoint: str, token: str, workdir: Path) -> None:
    """Download (destination, xet hash, size) triples from a CAS server with hf-xet."""
    jobs = {"hash": [], "upload": [], "remote_download": [[str(d), h, n] for d, h, n in files], "endpoint": endpoint, "token": token}
    _run(jobs, workdir)


def remote_ranges(ranges: list[tuple[Path, str, int, int, int]], endpoint: str, token: str, workdir: Path) -> None:
    """Stream byte ranges [start, end) of files from a CAS server with hf-xet into `dest` files."""
    jobs = {"hash": [], "upload": [], "remote_ranges": [[str(d), h, n, s, e] for d, h, n, s, e in ranges], "endpoint": endpoint, "token": token}
    _run(jobs, workdir)


def hash_files(paths: list[Path], workdir: Path) -> list[str]:
    return _run({"hash": [str(p) for p in paths], "upload": []}, workdir)["hashes"]


def upload_each(paths: list[Path], workdir: Path) -> list[LocalStore]:
    """Upload every file to its own fresh local store (so xorbs are deterministic per file)."""
    stores = [workdir / f"store-{i}" for i in range(len(paths))]
    result = _run({"hash": [], "upload": [[str(p), str(s)] for p, s in zip(paths, stores)]}, workdir)
    out = []
    for info, store in zip(result["uploads"], stores):
        base = store / "xet" / "xorbs"
        xorbs = {}
        if (base / "xorbs").exists():
            for f in (base / "xorbs").iterdir():
                if f.name.startswith("default.") and not f.name.endswith(".tagset"):
                    xorbs[f.name.split(".", 1)[1]] = f.read_bytes()
        shards = [f.read_bytes() for f in sorted((base / "shards").glob("*.mdb"))] if (base / "shards").exists() else []
        out.append(LocalStore(info["hash"], info["sha256"], xorbs, shards))
    return out
