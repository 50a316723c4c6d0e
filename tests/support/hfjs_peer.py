"""Run huggingface.js (npm @huggingface/hub) as a real XET peer, in one node subprocess per batch.

Modelled on hf_xet_oracle: JSON jobs on stdin, JSON result on stdout, a bounded timeout. The
package is installed by install/peers.sh (called by install/test.sh) into .cache/hfjs/; when it
or node is missing the helpers raise instead of skipping, saying how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / ".cache" / "hfjs"
RUNNER = Path(__file__).resolve().parent / "peers" / "hfjs_runner.mjs"
TIMEOUT = 300


class PeerMissing(RuntimeError):
    """node or the pinned @huggingface/hub is not installed."""


@dataclass(frozen=True)
class Endpoint:
    """Where the peer talks to: our server's CAS and Hub emulation (one URL) and its tokens."""

    url: str
    write_token: str
    read_token: str
    repo: str = "peer/hfjs"


@dataclass
class Result:
    direct: list[dict] = field(default_factory=list)  # {path, xet_hash, sha256} per uploaded file
    commit: dict | None = None  # {commit_oid, lfs_files: [{path, oid, size, algo}]}
    chunks: dict[str, list[int]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)  # "METHOD /path STATUS" of every request it made


def installed_version() -> str:
    """The installed @huggingface/hub version; PeerMissing says how to install it."""
    manifest = PACKAGE_DIR / "node_modules" / "@huggingface" / "hub" / "package.json"
    if shutil.which("node") is None or not manifest.is_file():
        raise PeerMissing(
            "huggingface.js test peer is not installed (needs node and .cache/hfjs/): run `bash install/test.sh` "
            "(or `bash install/peers.sh`) once"
        )
    return json.loads(manifest.read_text())["version"]


def run(jobs: dict, endpoint: Endpoint | None = None) -> Result:
    """Run one batch of jobs (keys: direct, commit, edit, download, chunk; see the runner's header)."""
    installed_version()
    if endpoint is not None:
        jobs = {
            **jobs,
            "cas_url": endpoint.url,
            "hub_url": endpoint.url,
            "write_token": endpoint.write_token,
            "read_token": endpoint.read_token,
            "user_token": endpoint.write_token,
            "repo": endpoint.repo,
        }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env["HFJS_PACKAGE_DIR"] = str(PACKAGE_DIR)
    proc = subprocess.run(
        ["node", str(RUNNER)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"huggingface.js runner failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    return Result(out["direct"], out["commit"], out["chunks"], out["requests"])


def direct_upload(paths: list[Path], endpoint: Endpoint, block_before_xorb: float = 0.0) -> Result:
    """Upload with its xorb/shard upload code (what commit() runs for XET), given a CAS token.
    `block_before_xorb`: seconds its event loop is blocked before its first xorb POST."""
    return run({"direct": [str(p) for p in paths], "block_before_xorb_ms": round(block_before_xorb * 1000)}, endpoint)


def commit_upload(paths: list[Path], endpoint: Endpoint) -> Result:
    """Upload with commit(): LFS batch and token refresh go to our Hub emulation."""
    return run({"commit": [str(p) for p in paths]}, endpoint)


def download(items: list[tuple[Path, str, int, list[tuple[int, int]]]], endpoint: Endpoint) -> None:
    """Download (dest, xet hash, size, [(start, end) ...]) with its XetBlob.

    The whole file goes to dest, range i (half-open) to dest.with_name(dest.name + f".range{i}").
    """
    jobs = {"download": [{"dest": str(d), "hash": h, "size": n, "ranges": [list(r) for r in ranges]} for d, h, n, ranges in items]}
    run(jobs, endpoint)


def chunk_lengths(paths: list[Path]) -> dict[str, list[int]]:
    """Chunk lengths its chunker cuts for each file (no network)."""
    return run({"chunk": [str(p) for p in paths]}).chunks
