"""A server operator's commands over its store (run where the server's --data/--index are, with
the server stopped or running): `git xet fsck`, `gc`, `usage`, `repo delete|prune|restore|quota`
and `copy-index`. cli.py holds their arguments and calls these; each returns the exit status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..storage.retention import DEFAULT_RETENTION_SECONDS, delete_repo, parse_oids, prune_repo, restore_repo
from ..storage.usage import RepoUsage, usage

if TYPE_CHECKING:
    import argparse

    from ..storage.cas_store import CasStore


def open_store(args: argparse.Namespace, name: str) -> CasStore | None:
    """The store `--data`/`--index` name, as the server opens it; None (after saying why) if it cannot be opened."""
    from ..storage.cas_store import CasStore
    from ..storage.errors import StorageError
    from ..storage.index_factory import open_index

    objects = None
    if args.objects:
        from ..storage.s3 import S3Error, open_s3_objects

        try:
            objects = open_s3_objects(args.objects)
            objects.check()
        except ValueError as exc:
            print(f"git-xet {name}: --objects: {exc}", file=sys.stderr)
            return None
        except S3Error as exc:
            print(f"git-xet {name}: --objects {args.objects}: {exc.message}", file=sys.stderr)
            return None
    try:
        return CasStore(args.data, objects=objects, private=True, index=open_index(args.index, args.data))
    except StorageError as exc:
        print(f"git-xet {name}: {exc.message}", file=sys.stderr)
        return None


def cmd_fsck(args: argparse.Namespace) -> int:
    from ..storage.admin import fsck

    store = open_store(args, "fsck")
    if store is None:
        return 1
    report = fsck(store, progress=lambda line: print(f"git-xet fsck: {line}", file=sys.stderr), repair=args.repair)
    store.close()
    for problem in report.problems:
        print(f"error: {problem}")
    for wrong in report.repaired:
        print(f"repaired: file {wrong.file_hex}: sha256 {wrong.recorded} -> {wrong.actual}")
    if report.repaired:
        print(f"git-xet fsck: {len(report.repaired)} wrong sha256s replaced by their files' own, {report.unmapped} oid mappings of them removed")
    for key in report.orphans:
        print(f"orphan: {key}")
    for xorb in report.unused:
        print(f"unused: {xorb}")
    removable = report.orphans or report.unused
    print(
        f"git-xet fsck: {report.xorbs} xorbs, {report.shards} shards and {report.files} files' sha256 checked, {len(report.problems)} problems, "
        f"{len(report.orphans)} orphaned objects, {len(report.unused)} unused xorbs{' (remove with `git xet gc`)' if removable else ''}"
    )
    return 0 if len(report.problems) == len(report.repaired) else 1


def cmd_gc(args: argparse.Namespace) -> int:
    from ..storage.admin import collect_garbage
    from ..storage.history import open_history
    from ..storage.retention import purge, purge_preview

    if args.bucket:
        from .bucket_gc import cmd_bucket_gc

        return cmd_bucket_gc(args)
    if args.data is None:
        print("git-xet gc: give the server's --data (and --index/--objects), or --bucket s3://... for a serverless bucket store", file=sys.stderr)
        return 2
    store = open_store(args, "gc")
    if store is None:
        return 1
    history = None if args.dry_run else open_history(args.index, args.data)
    stored_before = history.totals().stored_bytes if history is not None else 0
    if not args.dry_run:
        purged = purge(store.index, args.retention)
        print(f"git-xet gc: {purged} files deleted more than {args.retention:g} s ago unregistered")
    else:
        ending, gone = purge_preview(store.index, args.retention)
        for repo, file_hex in ending:
            print(f"would end the retention of: {repo} file {file_hex}")
        print(
            f"git-xet gc: {len(ending)} deletions older than {args.retention:g} s would end their retention, {len(gone)} files would be "
            "unregistered (the xorbs only they use are removed by the run without --dry-run, not listed below)"
        )
    removed = collect_garbage(store, args.grace, dry_run=args.dry_run)
    if history is not None:  # the run and what it freed, for /metrics and the admin page
        history.record_sample("gc", max(0, stored_before - history.totals().stored_bytes))
    store.close()
    for key in removed:
        print(f"{'would remove' if args.dry_run else 'removed'}: {key}")
    print(f"git-xet gc: {len(removed)} orphaned or unused objects older than {args.grace:g} s {'would be ' if args.dry_run else ''}removed")
    return 0


def cmd_copy_index(args: argparse.Namespace) -> int:
    from ..storage.errors import StorageError
    from ..storage.history import copy_history, open_history
    from ..storage.index_base import copy_index
    from ..storage.index_factory import open_index

    to_url = args.to if args.to.startswith(("postgresql://", "postgres://")) else None
    try:
        if to_url is None:
            Path(args.to).mkdir(parents=True, exist_ok=True)  # a new store's directory
        source = open_index(args.index, args.data)
        target = open_index(to_url, Path(args.to))
        copied = copy_index(source, target)
        copied |= copy_history(open_history(args.index, args.data), open_history(to_url, Path(args.to)))
    except StorageError as exc:
        print(f"git-xet copy-index: {exc.message}", file=sys.stderr)
        return 1
    source.close()
    target.close()
    print("git-xet copy-index: copied " + ", ".join(f"{n} {table}" for table, n in copied.items()))
    return 0


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def _line(row: RepoUsage) -> str:
    return (
        f"{row.repo}\t{row.files} files\t{_mib(row.logical_bytes)} logical\t{_mib(row.unique_bytes)} unique\t{_mib(row.shared_bytes)} shared\t"
        f"dedup {row.dedup_ratio:.2f}x\t{_mib(row.reclaimable_bytes)} reclaimable"
    )


def cmd_usage(args: argparse.Namespace) -> int:
    store = open_store(args, "usage")
    if store is None:
        return 1
    try:
        report = usage(store.index)
    finally:
        store.close()
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


def cmd_repo(args: argparse.Namespace) -> int:
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
    index = store.index
    try:
        if args.action == "delete":
            n = delete_repo(index, args.repo)
        elif args.action == "prune":
            n = prune_repo(index, args.repo, keep=keep, drop=drop)
        else:
            n = restore_repo(index, args.repo)
    finally:
        store.close()
    if args.action == "restore":
        print(f"git-xet repo restore: {n} files of {args.repo} restored")
    else:
        days = DEFAULT_RETENTION_SECONDS // 86400
        print(
            f"git-xet repo {args.action}: {n} files of {args.repo} deleted; `git xet repo restore {args.repo}` undoes it until "
            f"`git xet gc` runs past the retention period (--retention, default {days} days)"
        )
    return 0


def parse_bytes(text: str) -> int | None:
    """A quota as given: bytes, with an optional K/M/G/T suffix (powers of 1024), or `none`."""
    import argparse

    value = text.strip().upper().removesuffix("B").removesuffix("I")
    if value == "NONE":
        return None
    factor = 1024 ** (" KMGT".index(value[-1]) if value and value[-1] in "KMGT" else 0)
    number = value[:-1] if factor > 1 else value
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes (e.g. 5000000000 or 5G) or `none`")
    return int(number) * factor


def cmd_quota(args: argparse.Namespace) -> int:
    store = open_store(args, "repo quota")
    if store is None:
        return 1
    index = store.index
    try:
        if args.bytes != "show":
            index.set_quota(args.repo, args.bytes)
        quota, used = index.quotas().get(args.repo), index.logical_bytes(args.repo)
    finally:
        store.close()
    limit = "no quota" if quota is None else f"quota {quota} bytes"
    print(f"git-xet repo quota: {args.repo}: {limit}, {used} logical bytes held (the sizes of its files)")
    return 0
