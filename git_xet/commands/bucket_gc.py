"""`git xet gc --bucket s3://BUCKET[/PREFIX]`: reachability gc on a serverless bucket store
(client/bucket_gc.py says what it removes and why a racing push never loses a xorb)."""

from __future__ import annotations

import argparse
import sys

from ..client.bucket_backend import BucketStoreError, open_bucket_objects
from ..client.bucket_gc import collect_bucket_garbage
from ..storage.s3 import S3Error


def cmd_bucket_gc(args: argparse.Namespace) -> int:
    if args.data or args.index or args.objects:
        print("git-xet gc: --bucket is a serverless bucket store; --data/--index/--objects are a server's: give one or the other", file=sys.stderr)
        return 2
    try:
        objects = open_bucket_objects(args.bucket)
    except ValueError as exc:
        print(f"git-xet gc: --bucket: {exc}", file=sys.stderr)
        return 2
    try:
        report = collect_bucket_garbage(objects, args.grace, dry_run=args.dry_run, progress=lambda line: print(f"git-xet gc: {line}", file=sys.stderr))
    except (BucketStoreError, S3Error) as exc:
        print(f"git-xet gc: {exc}", file=sys.stderr)
        return 1
    finally:
        objects.client.close()
    for key in report.removed:
        print(f"{'would remove' if args.dry_run else 'removed'}: {key}")
    for key in report.restored:
        print(f"kept: {key} (a push named it while gc ran)")
    print(
        f"git-xet gc: {len(report.removed)} xorbs no shard names, older than {args.grace:g} s, {'would be ' if args.dry_run else ''}removed "
        f"({report.freed_bytes} bytes; {report.shards} shards, {report.xorbs} xorbs read)"
    )
    return 0
