"""`git xet hash` and `git xet compare`: what git-xet would store for local files, computed here
(nothing is uploaded): their XET hashes as hf-xet computes them, and how much of a new version
an upload after the old one would send.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..core.hashes import hash_to_hex
from ..pipelines.dedup_estimate import estimate_upload
from ..pipelines.file_hashing import hash_file

if TYPE_CHECKING:
    import argparse


def cmd_hash(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            digest = hash_file(path, with_sha256=args.sha256)
        except OSError as exc:
            print(f"git-xet hash: {path}: {exc.strerror or exc}", file=sys.stderr)
            status = 1
            continue
        record = {"path": path, "xet_hash": hash_to_hex(digest.file_hash), "size": digest.size, "chunks": len(digest.chunk_hashes)}
        if digest.sha256 is not None:
            record["sha256"] = digest.sha256.hex()
        if args.json:
            print(json.dumps(record))
        else:
            extra = f"  sha256={record['sha256']}" if "sha256" in record else ""
            print(f"{record['xet_hash']}  {path}  ({digest.size} bytes, {record['chunks']} chunks){extra}")
    return status


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        old, new = hash_file(args.old), hash_file(args.new)
    except OSError as exc:
        print(f"git-xet compare: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    est = estimate_upload(old, new)
    if args.json:
        print(json.dumps({"new_size": est.new_size, "new_chunks": est.new_chunks, "unique_chunks": est.unique_chunks, "unique_bytes": est.unique_bytes}))
    else:
        print(
            f"{args.new}: {est.new_size} bytes in {est.new_chunks} chunks; {est.unique_chunks} chunks "
            f"({est.unique_bytes} bytes, {100 * est.unique_fraction:.2f}%) are not in {args.old} "
            f"and would be uploaded after it"
        )
    return 0
