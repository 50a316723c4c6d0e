"""The `git-xet` command (also reachable as `git xet ...`).

Subcommands import what they need lazily: git-lfs spawns many agent processes, so start-up
must stay cheap for all of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_version(_args: argparse.Namespace) -> int:
    from . import __version__
    from .core.chunking import NATIVE_AVAILABLE

    print(f"git-xet {__version__} (chunker: {'native C' if NATIVE_AVAILABLE else 'pure Python, slow'})")
    return 0


def _cmd_hash(args: argparse.Namespace) -> int:
    from .core.hashes import hash_to_hex
    from .pipelines.file_hashing import hash_file

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


def _cmd_compare(args: argparse.Namespace) -> int:
    from .pipelines.dedup_estimate import estimate_upload
    from .pipelines.file_hashing import hash_file

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


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .server.run import serve
    except ImportError as exc:
        print(f"git-xet serve: the server needs extra packages ({exc.name}); install with: pip install 'git-xet[server]'", file=sys.stderr)
        return 1
    return serve(args.data, args.host, args.port, args.public_url, args.url_ttl, args.log_level)


def _cmd_token(args: argparse.Namespace) -> int:
    from .server.auth import Signer, load_or_create_secret

    token, exp = Signer(load_or_create_secret(args.data)).mint(args.scope, args.ttl, args.repo)
    if args.json:
        print(json.dumps({"accessToken": token, "exp": exp}))
    else:
        print(token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="git-xet", description="XET storage for Git LFS.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    version = sub.add_parser("version", help="print the version and whether the C chunker is in use")
    version.set_defaults(func=_cmd_version)

    hash_cmd = sub.add_parser("hash", help="print the XET file hash of files (as hf-xet computes it)")
    hash_cmd.add_argument("files", nargs="+", metavar="FILE")
    hash_cmd.add_argument("--sha256", action="store_true", help="also print the sha256 (the Git LFS oid)")
    hash_cmd.add_argument("--json", action="store_true", help="one JSON object per file")
    hash_cmd.set_defaults(func=_cmd_hash)

    compare = sub.add_parser("compare", help="how much of NEW is new content relative to OLD (what a push would send)")
    compare.add_argument("old", metavar="OLD")
    compare.add_argument("new", metavar="NEW")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(func=_cmd_compare)

    serve = sub.add_parser("serve", help="run the XET CAS server (disk + SQLite)")
    serve.add_argument("--data", type=Path, required=True, help="data directory (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port (printed on stdout)")
    serve.add_argument("--public-url", help="base URL clients reach this server at (default: from each request)")
    serve.add_argument("--url-ttl", type=int, default=3600, help="lifetime of signed xorb URLs, seconds")
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_cmd_serve)

    token = sub.add_parser("token", help="mint an access token for a server's data directory")
    token.add_argument("--data", type=Path, required=True)
    token.add_argument("--scope", choices=["read", "write"], default="write")
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")
    token.add_argument("--repo", default="*")
    token.add_argument("--json", action="store_true", help='print {"accessToken", "exp"}')
    token.set_defaults(func=_cmd_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .memory import tune_allocator

    tune_allocator()
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
