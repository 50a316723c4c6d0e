"""`git xet usage` and `git xet repo delete|prune|restore|quota`: a server operator's commands
over its store's index (run where `git xet fsck` runs, with the server's --data/--index)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from ..storage.retention import DEFAULT_RETENTION_SECONDS, delete_repo, parse_oids, prune_repo, restore_repo
from ..storage.usage import RepoUsage, usage

OpenStore = Callable[[argparse.Namespace, str], object]


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def _line(row: RepoUsage) -> str:
    return (
        f"{row.repo}\t{row.files} files\t{_mib(row.logical_bytes)} logical\t{_mib(row.unique_bytes)} unique\t{_mib(row.shared_bytes)} shared\t"
        f"dedup {row.dedup_ratio:.2f}x\t{_mib(row.reclaimable_bytes)} reclaimable"
    )


def cmd_usage(args: argparse.Namespace, open_store: OpenStore) -> int:
    store = open_store(args, "usage")
    if store is None:
        return 1
    try:
        report = usage(store.index)  # type: ignore[attr-defined]
    finally:
        store.close()  # type: ignore[attr-defined]
    rows = [r for r in report.repos if args.repo is None or r.repo == args.repo]
    if args.repo is not None and not rows:
        print(f"git-xet usage: no repository {args.repo!r} holds files in this store", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"repos": [r.as_json() for r in rows], "total": report.total.as_json()}, indent=2))
        return 0
    for row in rows:
        print(_line(row))
    if args.repo is None:
        print(_line(report.total))
    return 0


def parse_bytes(text: str) -> int | None:
    """A quota as given: bytes, with an optional K/M/G/T suffix (powers of 1024), or `none`."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    if value == "NONE":
        return None
    factor = 1024 ** (" KMGT".index(value[-1]) if value and value[-1] in "KMGT" else 0)
    number = value[:-1] if factor > 1 else value
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes (e.g. 5000000000 or 5G) or `none`")
    return int(number) * factor


def cmd_quota(args: argparse.Namespace, open_store: OpenStore) -> int:
    store = open_store(args, "repo quota")
    if store is None:
        return 1
    index = store.index  # type: ignore[attr-defined]
    try:
        if args.bytes != "show":
            index.set_quota(args.repo, args.bytes)
        quota, used = index.quotas().get(args.repo), index.logical_bytes(args.repo)
    finally:
        store.close()  # type: ignore[attr-defined]
    limit = "no quota" if quota is None else f"quota {quota} bytes"
    print(f"git-xet repo quota: {args.repo}: {limit}, {used} logical bytes held (the sizes of its files)")
    return 0


def cmd_repo(args: argparse.Namespace, open_store: OpenStore) -> int:
    keep = drop = None
    if args.action == "prune":
        if (args.keep is None) == (args.drop is None):
            print("git-xet repo prune: give --keep FILE_OF_OIDS or --drop FILE_OF_OIDS", file=sys.stderr)
            return 2
        source: Path = args.keep if args.keep is not None else args.drop
        oids = parse_oids(sys.stdin.read() if str(source) == "-" else source.read_text())
        if not oids:
            print(f"git-xet repo prune: no sha256 oids in {source} (one per line, or `git lfs ls-files --all --long` output): nothing done", file=sys.stderr)
            return 1
        keep, drop = (oids, None) if args.keep is not None else (None, oids)
    store = open_store(args, f"repo {args.action}")
    if store is None:
        return 1
    index = store.index  # type: ignore[attr-defined]
    try:
        if args.action == "delete":
            n = delete_repo(index, args.repo)
        elif args.action == "prune":
            n = prune_repo(index, args.repo, keep=keep, drop=drop)
        else:
            n = restore_repo(index, args.repo)
    finally:
        store.close()  # type: ignore[attr-defined]
    if args.action == "restore":
        print(f"git-xet repo restore: {n} files of {args.repo} restored")
    else:
        days = DEFAULT_RETENTION_SECONDS // 86400
        print(
            f"git-xet repo {args.action}: {n} files of {args.repo} deleted; `git xet repo restore {args.repo}` undoes it until "
            f"`git xet gc` runs past the retention period (--retention, default {days} days)"
        )
    return 0


def add_parsers(sub: argparse._SubParsersAction, store_flags: Callable[[argparse.ArgumentParser], None], open_store: OpenStore) -> None:
    """The commands' parsers; `store_flags` adds --data/--index/--objects as fsck has them."""
    usage_cmd = sub.add_parser("usage", help="a server's usage and dedup per repository and in total (from its index)")
    store_flags(usage_cmd)
    usage_cmd.add_argument("--repo", help="only this repository")
    usage_cmd.add_argument("--json", action="store_true", help="as JSON (the admin API's form)")
    usage_cmd.set_defaults(func=lambda a: cmd_usage(a, open_store))

    repo_cmd = sub.add_parser("repo", help="delete a repository or prune its files (undoable for the retention period), or restore them")
    actions = repo_cmd.add_subparsers(dest="action", required=True, metavar="delete|prune|restore|quota")
    for action, text in (
        ("delete", "delete every file of REPO (restorable until gc passes the retention period)"),
        ("prune", "delete REPO's files that --keep does not name (or that --drop names)"),
        ("restore", "undo REPO's deletions and prunes still within the retention period"),
    ):
        parser = actions.add_parser(action, help=text)
        parser.add_argument("repo", metavar="REPO")
        store_flags(parser)
        if action == "prune":
            parser.add_argument("--keep", type=Path, metavar="FILE_OF_OIDS", help="oids to keep, one a line or `git lfs ls-files --all --long` output (- for stdin)")
            parser.add_argument("--drop", type=Path, metavar="FILE_OF_OIDS", help="oids to delete, in the same form")
        parser.set_defaults(func=lambda a: cmd_repo(a, open_store))
    quota = actions.add_parser("quota", help="show or set the most logical bytes REPO may hold; a push beyond it is refused")
    quota.add_argument("repo", metavar="REPO")
    quota.add_argument(
        "bytes", nargs="?", default="show", type=lambda t: t if t == "show" else parse_bytes(t), metavar="BYTES",
        help="the quota: bytes, or with K/M/G/T (powers of 1024); `none` removes it; left out: show it",
    )
    store_flags(quota)
    quota.set_defaults(func=lambda a: cmd_quota(a, open_store))
