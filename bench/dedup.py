"""Dedup: bytes sent for v2 of a file after v1 was pushed, by git-xet, hf-xet and git-lfs.

    python bench/dedup.py [--size-mib 1024] [--json OUT]

v2 is v1 with 1% overwritten in ten places plus a 1 KiB insertion near the start (which
shifts everything after it). git-xet and git-lfs push v1 then v2 with `git push` (our agent
to `git xet serve`; stock `basic` transfers to a plain LFS server); hf-xet uploads v1 then
v2 to a `git xet serve` with one HF_XET_CACHE. Bytes are request bodies the server received.
Target: git-xet <= hf-xet, and <= 3% of the file.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, RequestLog, edit_file, machine, write_json, write_random_file
from git_e2e import run_tool

from tests.support import hf_xet_oracle
from tests.support.server_process import running_server


def hf_xet_v2_bytes(root: Path, v1: Path, v2: Path) -> int:
    with running_server(root / "server" / "data") as srv:
        log = RequestLog(srv.data_dir.parent / "server.log")
        token = srv.token("write")
        hf_xet_oracle.remote_upload([v1], srv.url, token, root)
        log.mark()
        hf_xet_oracle.remote_upload([v2], srv.url, token, root)  # same workdir: same HF_XET_CACHE
        return log.since_mark()[0]


def run(size_mib: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-dedup-") as tmp:
        base = Path(tmp)
        v1 = base / "model.bin"
        write_random_file(v1, size_mib * MIB, seed=11)
        sent = {}
        for tool in ("git-xet", "git-lfs"):
            root = base / tool
            sent[tool] = run_tool(tool, root, [v1], clones=0)["push_v2"][0]["bytes_in"]
            shutil.rmtree(root, ignore_errors=True)
        v2 = base / "v2" / "model.bin"
        v2.parent.mkdir()
        shutil.copyfile(v1, v2)
        edit_file(v2, seed=7)  # the same edit run_tool makes
        sent["hf-xet"] = hf_xet_v2_bytes(base / "hf-xet", v1, v2)
    return {"size_mib": size_mib, "machine": machine(), "v2_bytes_sent": sent}


def print_table(summary: dict) -> None:
    size = summary["size_mib"] * MIB
    sent = summary["v2_bytes_sent"]
    print(f"v2 of a {summary['size_mib']} MiB file (1% edited in 10 places + 1 KiB inserted); {summary['machine']}")
    print(f"{'tool':<9}{'MiB sent':>10}{'% of file':>11}")
    for tool in ("git-xet", "hf-xet", "git-lfs"):
        print(f"{tool:<9}{sent[tool] / MIB:>10.2f}{100 * sent[tool] / size:>10.2f}%")
    print(f"git-xet / hf-xet bytes: {sent['git-xet'] / sent['hf-xet']:.2f} (target <= 1.0); git-xet sent {100 * sent['git-xet'] / size:.2f}% of the file (target <= 3%)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary = run(args.size_mib)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
