"""`git xet token`: mint a user token for a `git xet serve`, or revoke one (a server operator's
command, run with the server's --data/--index/--secret-file). cli.py holds its arguments.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from pathlib import Path


def cmd_token(args: argparse.Namespace) -> int:
    import os
    import time

    from ..server.auth import AuthError, Signer, load_secret
    from ..server.errors import SecretError

    if args.revoke and args.index is None and args.data is None:
        print("git-xet token: --revoke needs the server's index: --index postgresql://... or --data DIR", file=sys.stderr)
        return 2
    # Only a secret read from --data can be mistyped into a fresh one (env and --secret-file cannot).
    from_data_dir = args.secret_file is None and not os.environ.get("GIT_XET_SERVER_SECRET") and args.data is not None
    problem = not_a_server_data_dir(args.data) if from_data_dir else None
    if problem:
        print(f"git-xet token: {problem}", file=sys.stderr)
        return 1
    try:
        signer = Signer(load_secret(args.data, args.secret_file))
    except SecretError as exc:
        print(f"git-xet token: {exc}", file=sys.stderr)
        return 1
    if args.revoke:
        from ..storage.errors import StorageError
        from ..storage.index_factory import open_index

        token_id = args.revoke
        if token_id.count(".") == 2:  # a whole token: revoke it by its id
            try:
                token_id = signer.claims_of(token_id).id
            except AuthError as exc:
                print(f"git-xet token: cannot revoke that token: {exc.message}", file=sys.stderr)
                return 1
        try:
            index = open_index(args.index, args.data)
            index.revoke_token(token_id, int(time.time()))
            index.close()
        except StorageError as exc:
            print(f"git-xet token: {exc.message}", file=sys.stderr)
            return 1
        print(f"git-xet: revoked token {token_id} and every CAS token minted from it (servers notice within a second)")
        return 0
    try:
        token, claims = signer.mint_user(args.scope, args.ttl, args.repo, user=args.user or "")
    except ValueError as exc:
        print(f"git-xet token: {exc}", file=sys.stderr)
        return 2
    if args.json:
        import json

        print(json.dumps({"accessToken": token, "exp": claims.exp, "id": claims.id, "repo": claims.repo, "scope": claims.scope, "user": claims.owner}))
    else:
        print(token)
        print(f"git-xet: token {claims.id} for {claims.owner} ({claims.scope}, repo {claims.repo}); revoke with `git xet token --revoke {claims.id}` and this command's --data/--index", file=sys.stderr)
    return 0


def not_a_server_data_dir(data: Path) -> str | None:
    """Why `data` is not the data directory of a `git xet serve` (None: it is). A mistyped
    --data would otherwise create a fresh secret and print a token the real server rejects."""
    from ..client.location import STORE_MARKER

    if (data / STORE_MARKER).is_file():
        return f"{data} is a serverless directory store, which needs no tokens; tokens are for `git xet serve --data {data}`"
    if not (data / "index.sqlite").is_file():
        return (
            f"{data} is not a `git xet serve` data directory (no index.sqlite); pass the --data the server runs with "
            "(a new server creates it when it first starts)"
        )
    return None
