"""The `git-xet` command (also reachable as `git xet ...`).

Subcommands import what they need lazily: git-lfs spawns many agent processes, so start-up
must stay cheap for all of them.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: the agent path below must not even import typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path


def _version_line() -> str:
    from .version import __version__
    from .core.chunking import NATIVE_AVAILABLE

    return f"git-xet {__version__} (chunker: {'native C' if NATIVE_AVAILABLE else 'pure Python, slow'})"


def _cmd_version(_args: argparse.Namespace) -> int:
    print(_version_line())
    return 0


def _cmd_hash(args: argparse.Namespace) -> int:
    from .commands.hashing import cmd_hash

    return cmd_hash(args)


def _cmd_compare(args: argparse.Namespace) -> int:
    from .commands.hashing import cmd_compare

    return cmd_compare(args)


def _scope(args: argparse.Namespace):
    from .commands.install import Scope

    return Scope("--system" if args.system else "--local" if args.local else "--global")


def _report_git_config(name: str, action) -> int:
    """Run a git-configuring action, print what it did, or why it failed."""
    from .commands.install import GitError

    try:
        for line in action():
            print(f"git-xet: {line}", flush=True)  # before whatever the action runs next prints
    except GitError as exc:
        print(f"git-xet {name}: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    from .commands.install import install

    return _report_git_config("install", lambda: install(_scope(args), args.standalone, args.remote, args.concurrency, args.native, check_server=not args.no_check))


def _cmd_uninstall(args: argparse.Namespace) -> int:
    from .commands.install import uninstall

    return _report_git_config("uninstall", lambda: uninstall(_scope(args)))


def _add_scope_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--global", dest="global_", action="store_true", help="for the current user (default)")
    group.add_argument("--local", action="store_true", help="for this repository only")
    group.add_argument("--system", action="store_true", help="for every user of this machine")


def _cmd_doctor(_args: argparse.Namespace) -> int:
    from .commands.doctor import checks

    problems = 0
    for check in checks():
        print(f"{'ok ' if check.ok else 'XX '} {check.what}")
        if not check.ok:
            problems += 1
            print(f"     fix: {check.fix}")
    return 1 if problems else 0


def _cmd_track(args: argparse.Namespace) -> int:
    from .platform.gitcmd import NOT_RUN, run_git

    result = run_git("lfs", "track", *args.patterns, capture=False)
    if result.returncode == NOT_RUN:
        print(f"git-xet: {result.stderr}", file=sys.stderr)
        return 1
    return result.returncode


def _cmd_cache(args: argparse.Namespace) -> int:
    from .commands import cache

    lines = cache.show() if args.action == "show" else cache.prune(args.max_size, args.all)
    print("\n".join(lines))
    return 0


def _parse_size(text: str) -> int:
    """A size such as 500M, 2G, 2GiB or 1048576 (binary units), for argparse."""
    import argparse
    import re

    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size; write a number with an optional unit: 500M, 2G, 1T")
    return int(float(match.group(1)) * units[match.group(2)])


def _cmd_stats(args: argparse.Namespace) -> int:
    from .commands.stats import cmd_stats

    return cmd_stats(args)


def _cmd_clone(args: argparse.Namespace) -> int:
    from .commands.clone import clone

    return _report_git_config("clone", lambda: clone(args.url, args.directory, args.store, args.origin))


def _cmd_setup_repo(args: argparse.Namespace) -> int:
    from .commands.setup_repo import setup_repo

    return _report_git_config("setup-repo", lambda: setup_repo(args.url))


def _cmd_migrate(args: argparse.Namespace) -> int:
    from .commands.migrate import cmd_migrate

    return cmd_migrate(args)


def _cmd_help(args: argparse.Namespace) -> int:
    parser = build_parser()
    if args.man:
        from .commands.manpage import render

        print(render(parser), end="")
        return 0
    if args.topic:
        return _main([args.topic, "--help"])
    parser.print_help()
    print("\nRun `git xet help COMMAND` (or `git-xet COMMAND --help`) for a command's options.")
    return 0


def _cmd_transfer(_args: argparse.Namespace | None = None) -> int:
    from .agent.transfer import run

    return run()


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .server.run import Limits, serve
    except ImportError as exc:
        print(f"git-xet serve: the server needs extra packages ({exc.name}); from a git-xet checkout run: {sys.executable} -m pip install '.[server]' (install/install.sh includes it)", file=sys.stderr)
        return 1
    limits = Limits(args.header_timeout, args.max_header_bytes, args.idle_timeout, args.max_connections, args.keep_alive_timeout)
    return serve(
        args.data, args.host, args.port, args.public_url, args.url_ttl, args.log_level, args.cas_token_ttl,
        args.upload_grants, limits, args.index, args.secret_file, objects=args.objects, workers=args.workers,
    )  # fmt: skip


def _cmd_token(args: argparse.Namespace) -> int:
    from .commands.server_tokens import cmd_token

    return cmd_token(args)


def _cmd_fsck(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_fsck

    return cmd_fsck(args)


def _cmd_gc(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_gc

    return cmd_gc(args)


def _cmd_usage(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_usage

    return cmd_usage(args)


def _cmd_repo(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_repo

    return cmd_repo(args)


def _cmd_quota(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_quota

    return cmd_quota(args)


def _quota_bytes(text: str) -> str | int | None:
    from .commands.store_admin import parse_bytes

    return text if text == "show" else parse_bytes(text)


def _cmd_copy_index(args: argparse.Namespace) -> int:
    from .commands.store_admin import cmd_copy_index

    return cmd_copy_index(args)


def _cmd_lfs_authenticate(args: argparse.Namespace) -> int:
    from .commands.lfs_authenticate import Grant, run

    grant = Grant(args.user, args.repo, args.scope)
    return run(args.data, args.secret_file, args.url, grant, args.ttl, args.git_root, args.log)


# git-lfs drops batch actions that expire within 5 s of its check; 3 s more for the answer to reach it.
MIN_CAS_TOKEN_TTL = 8


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1")
    return value


def _seconds_at_least(floor: int, why: str):
    """An argparse type: whole seconds, refused below `floor` with the reason."""

    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of seconds") from None
        if value < floor:
            raise argparse.ArgumentTypeError(f"{value} s is too short: at least {floor} s ({why})")
        return value

    return parse


def _add_store_flags(parser: argparse.ArgumentParser, data_required: bool = True) -> None:
    """--data/--index/--objects, as fsck and gc take them (the server's)."""
    if data_required:
        parser.add_argument("--data", type=_nonempty_path, required=True, help="the server's data directory (its objects)")
    else:
        parser.add_argument("--data", type=_nonempty_path, help="the server's data directory (its objects); required unless --bucket")
    parser.add_argument("--index", metavar="URL", help="the server's shared index (postgresql://...); default: SQLite in --data")
    parser.add_argument("--objects", metavar="s3://BUCKET[/PREFIX]", help="the server's --objects bucket (AWS_* environment as for serve)")


def _add_shared_flags(parser: argparse.ArgumentParser) -> None:
    """Where replicas find their shared index and secret."""

    parser.add_argument(
        "--index", metavar="URL", help="a shared index, postgresql://USER@HOST/DB (password from ~/.pgpass or $PGPASSWORD); default: SQLite in --data"
    )
    parser.add_argument(
        "--secret-file", type=_nonempty_path, help="the signing secret (else $GIT_XET_SERVER_SECRET, else <data>/secret; required with --index unless the env is set)"
    )


def _nonempty_path(value: str) -> Path:
    """A path argument. An empty one (an unset variable in a unit file, say) is refused: as a
    Path it would be the current directory, and a server or fsck would make its store there."""
    import argparse
    from pathlib import Path

    if not value.strip():
        raise argparse.ArgumentTypeError("empty path (an unset variable?): name the directory")
    return Path(value)


def _nonempty_store(value: str) -> str:
    """A store argument (a directory or URL); an empty one would quietly mean 'no store'."""
    import argparse

    if not value.strip():
        raise argparse.ArgumentTypeError("empty store (an unset variable?): give a directory or an http(s) URL")
    return value


def build_parser() -> argparse.ArgumentParser:
    import argparse
    from pathlib import Path

    class OneLineErrors(argparse.ArgumentParser):
        """Usage errors as one line with where to look, not the usage block."""

        def error(self, message: str):
            topic = self.prog.removeprefix("git-xet").strip()
            self.exit(2, f"{self.prog}: error: {message} (see `git xet help{' ' + topic if topic else ''}`)\n")

    parser = OneLineErrors(prog="git-xet", description="XET storage for Git LFS.")

    class PrintVersion(argparse.Action):
        """`git xet --version`, as git and most tools answer it (the chunker is imported only then)."""

        def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
            print(_version_line())
            parser.exit()

    parser.add_argument("--version", nargs=0, action=PrintVersion, help="print the version and exit")
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

    install_cmd = sub.add_parser("install", help="register the XET transfer agent with git-lfs (idempotent)")
    _add_scope_flags(install_cmd)
    install_cmd.add_argument("--standalone", metavar="ENDPOINT", type=_nonempty_store, help="store LFS objects in this XET store (a directory or a `git xet serve` URL)")
    install_cmd.add_argument("--remote", help="with --standalone: only for this remote (use with --local)")
    install_cmd.add_argument("--no-check", action="store_true", help="with --standalone URL: do not check that the server answers (one set up later)")
    install_cmd.add_argument("--concurrency", type=int, help="set lfs.concurrenttransfers")
    install_cmd.add_argument(
        "--native", metavar="URL", help="for a Hub-style server (e.g. https://huggingface.co): our own batch calls, native XET downloads"
    )
    install_cmd.set_defaults(func=_cmd_install)

    uninstall_cmd = sub.add_parser("uninstall", help="remove git-xet's git configuration")
    _add_scope_flags(uninstall_cmd)
    uninstall_cmd.set_defaults(func=_cmd_uninstall)

    for name in ("doctor", "env"):
        doctor = sub.add_parser(name, help="show the configuration and check it (git-lfs, agent, store, token)")
        doctor.set_defaults(func=_cmd_doctor)

    track = sub.add_parser("track", help="track file patterns with Git LFS (same as `git lfs track`)")
    track.add_argument("patterns", nargs="*", metavar="PATTERN")
    track.set_defaults(func=_cmd_track)

    cache_cmd = sub.add_parser("cache", help="show or prune the local shard cache")
    cache_cmd.add_argument("action", choices=["show", "prune"])
    cache_cmd.add_argument("--max-size", type=_parse_size, help="with prune: cap the cache per store, e.g. 500M or 2G")
    cache_cmd.add_argument("--all", action="store_true", help="with prune: remove everything")
    cache_cmd.set_defaults(func=_cmd_cache)

    stats = sub.add_parser("stats", help="what the last push from this repository sent and deduplicated")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_cmd_stats)

    clone_cmd = sub.add_parser("clone", help="clone a repository whose LFS objects are in an XET store for one remote (see README)")
    clone_cmd.add_argument("url", metavar="URL")
    clone_cmd.add_argument("directory", nargs="?", metavar="DIR")
    clone_cmd.add_argument("--store", help="the XET store (default: xet.endpoint from the repository's committed .xetconfig)")
    clone_cmd.add_argument("--origin", default="origin", help="name of the remote (default: origin)")
    clone_cmd.set_defaults(func=_cmd_clone)

    setup_cmd = sub.add_parser("setup-repo", help="make a `git xet serve` this repository's LFS endpoint for everyone (writes .lfsconfig)")
    setup_cmd.add_argument("url", metavar="URL", help="the repository on the server, e.g. https://xet.example.com/acme/models")
    setup_cmd.set_defaults(func=_cmd_setup_repo)

    help_cmd = sub.add_parser("help", help="show help for git-xet or one of its commands")
    help_cmd.add_argument("topic", nargs="?", metavar="COMMAND")
    help_cmd.add_argument("--man", action="store_true", help="print the manual page (roff), as install/install.sh installs it")
    help_cmd.set_defaults(func=_cmd_help)

    transfer = sub.add_parser("transfer", help="the Git LFS custom transfer agent (run by git-lfs, not by hand)")
    transfer.set_defaults(func=_cmd_transfer)

    serve = sub.add_parser("serve", help="run the XET CAS server (disk + SQLite, or disk + PostgreSQL for replicas)")
    serve.add_argument("--data", type=_nonempty_path, required=True, help="data directory: objects, and the SQLite index unless --index (created if missing)")
    _add_shared_flags(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port (printed on stdout)")
    serve.add_argument(
        "--public-url",
        help="the URL clients reach this server at (e.g. https://xet.example.org behind a TLS proxy); required unless --host is loopback",
    )
    serve.add_argument("--url-ttl", type=int, default=3600, help="lifetime of signed xorb URLs, seconds")
    serve.add_argument(
        "--cas-token-ttl",
        type=_seconds_at_least(MIN_CAS_TOKEN_TTL, "git-lfs refuses batch actions that expire within 5 s; the Hub uses about 900"),
        default=900, help="lifetime of CAS tokens the LFS batch API and token routes hand out, seconds")
    serve.add_argument(
        "--objects",
        metavar="s3://BUCKET[/PREFIX]",
        help="keep xorbs and shards in an S3-compatible bucket (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... as for the AWS SDK); "
        "the index stays in --data (or --index). Upload grants then PUT straight to the bucket, downloads GET from it",
    )
    serve.add_argument(
        "--upload-grants",
        choices=("auto", "always", "never"),
        default="auto",
        help="offer upload grants (hf-xet's PUT of a xorb where the grant says, then a commit): auto (the default) "
        "with --objects only, where the bytes then go straight to the bucket; always, also with objects in --data "
        "(the PUT then comes back here: two more requests per xorb than a POST); never",
    )
    serve.add_argument("--no-upload-grants", dest="upload_grants", action="store_const", const="never", help="the same as --upload-grants never")
    serve.add_argument("--header-timeout", type=float, default=10.0, help="seconds a client may take to send a request's headers")
    serve.add_argument("--max-header-bytes", type=int, default=64 * 1024, help="largest request header block accepted")
    serve.add_argument("--idle-timeout", type=float, default=60.0, help="seconds an upload or download may make no progress")
    serve.add_argument("--max-connections", type=int, default=512, help="open connections beyond this get 503 (per worker)")
    serve.add_argument(
        "--keep-alive-timeout",
        type=_seconds_at_least(1, "a client needs time to send its next request on a kept-alive connection"),
        default=75,
        help="seconds a kept-alive connection may wait for its next request (default 75: longer than load balancers' "
        "and clients' own idle limits)",
    )
    serve.add_argument(
        "--workers",
        type=_at_least_one,
        default=None,
        help="server processes sharing the port, each with its own Python interpreter (default 1): pushes of many small "
        "files go faster with more, if the machine has the cores; see docs/server.md",
    )
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_cmd_serve)

    fsck_cmd = sub.add_parser("fsck", help="check a server's store: every indexed object present and valid; list orphans")
    _add_store_flags(fsck_cmd)
    fsck_cmd.add_argument(
        "--repair", action="store_true",
        help="replace each recorded sha256 that does not match its file's bytes by the computed one, and remove that wrong oid's mappings to the file",
    )  # fmt: skip
    fsck_cmd.set_defaults(func=_cmd_fsck)

    gc_cmd = sub.add_parser("gc", help="remove a server's orphaned and unused objects (failed pushes, abandoned grants) after a grace period")
    _add_store_flags(gc_cmd, data_required=False)
    gc_cmd.add_argument("--bucket", metavar="s3://BUCKET[/PREFIX]", help="instead: a serverless bucket store; removes the xorbs no shard names")
    gc_cmd.add_argument("--grace", type=float, default=24 * 3600, help="only objects last written longer ago than this, seconds (default: 1 day)")
    gc_cmd.add_argument(
        "--retention", type=float, default=7 * 24 * 3600,
        help="first end the retention of `git xet repo delete|prune` older than this, seconds (default: 7 days); their unused xorbs go with the others",
    )  # fmt: skip
    gc_cmd.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc_cmd.set_defaults(func=_cmd_gc)

    usage_cmd = sub.add_parser("usage", help="a server's usage and dedup per repository and in total (from its index)")
    _add_store_flags(usage_cmd)
    usage_cmd.add_argument("--repo", help="only this repository")
    usage_cmd.add_argument("--json", action="store_true", help="as JSON (the admin API's form)")
    usage_cmd.set_defaults(func=_cmd_usage)

    repo_cmd = sub.add_parser("repo", help="delete a repository or prune its files (undoable for the retention period), or restore them")
    actions = repo_cmd.add_subparsers(dest="action", required=True, metavar="delete|prune|restore|quota")
    for action, text in (
        ("delete", "delete every file of REPO (restorable until gc passes the retention period)"),
        ("prune", "delete REPO's files that --keep does not name (or that --drop names)"),
        ("restore", "undo REPO's deletions and prunes still within the retention period"),
    ):
        repo_action = actions.add_parser(action, help=text)
        repo_action.add_argument("repo", metavar="REPO")
        _add_store_flags(repo_action)
        if action == "prune":
            repo_action.add_argument("--keep", type=Path, metavar="FILE_OF_OIDS", help="oids to keep, one a line or `git lfs ls-files --all --long` output (- for stdin)")
            repo_action.add_argument("--drop", type=Path, metavar="FILE_OF_OIDS", help="oids to delete, in the same form")
        repo_action.set_defaults(func=_cmd_repo)
    quota_cmd = actions.add_parser("quota", help="show or set the most logical bytes REPO may hold; a push beyond it is refused")
    quota_cmd.add_argument("repo", metavar="REPO")
    quota_cmd.add_argument(
        "bytes", nargs="?", default="show", type=_quota_bytes, metavar="BYTES",
        help="the quota: bytes, or with K/M/G/T (powers of 1024); `none` removes it; left out: show it",
    )
    _add_store_flags(quota_cmd)
    quota_cmd.set_defaults(func=_cmd_quota)

    copy_cmd = sub.add_parser(
        "copy-index", help="copy a server's index into another (e.g. SQLite in --data into PostgreSQL); stop the servers first"
    )
    copy_cmd.add_argument("--data", type=_nonempty_path, required=True, help="the server's data directory")
    copy_cmd.add_argument("--index", metavar="URL", help="the index to copy from (default: SQLite in --data)")
    copy_cmd.add_argument("--to", required=True, metavar="URL_OR_DIR", help="postgresql://USER@HOST/DB, or a directory for a SQLite index")
    copy_cmd.set_defaults(func=_cmd_copy_index)

    migrate_cmd = sub.add_parser("migrate", help="copy a directory store's objects into an S3-compatible bucket (resumable)")
    migrate_cmd.add_argument("source", type=_nonempty_path, help="the server's --data directory, or a directory store")
    migrate_cmd.add_argument("target", metavar="s3://BUCKET[/PREFIX]", help="where the objects go (AWS_* environment as for the AWS SDK)")
    migrate_cmd.add_argument(
        "--standalone", action="store_true", help="make the bucket a serverless store (for `git xet install --standalone s3://...`), not a server's --objects"
    )
    migrate_cmd.set_defaults(func=_cmd_migrate)

    token = sub.add_parser("token", help="mint (or revoke) a user token for a server")
    token.add_argument("--data", type=_nonempty_path, help="the server's data directory (its secret and SQLite index, unless given otherwise)")
    _add_shared_flags(token)
    token.add_argument("--scope", choices=["read", "write", "admin"], default="write", help="write also reads; admin also writes and force-unlocks others' locks")
    token.add_argument("--user", help="who the token acts as: the owner of its locks (default: token:ID, the token itself)")
    token.add_argument("--ttl", type=int, default=90 * 24 * 3600, help="lifetime in seconds (default: 90 days)")
    token.add_argument(
        "--repo", default="default", help="the repo the token acts on: ns/name, datasets/ns/name, spaces/ns/name, or every repo of a namespace: ns/* (default: default)"
    )
    token.add_argument("--revoke", metavar="ID_OR_TOKEN", help="revoke a user token (by its id or the token itself) and its CAS tokens")
    token.add_argument("--json", action="store_true", help='print {"accessToken", "exp", "id", "repo", "scope", "user"}')
    token.set_defaults(func=_cmd_token)

    ssh_cmd = sub.add_parser("lfs-authenticate", help="sshd's forced command for a user's key: git-lfs-authenticate (and git) over SSH (see docs/server.md)")
    ssh_cmd.add_argument("--data", type=_nonempty_path, help="the server's data directory (its secret), unless $GIT_XET_SERVER_SECRET or --secret-file")
    ssh_cmd.add_argument("--secret-file", type=_nonempty_path, help="the server's secret")
    ssh_cmd.add_argument("--url", required=True, help="the server's public URL (its --public-url)")
    ssh_cmd.add_argument("--user", required=True, help="who holds this key (logged)")
    ssh_cmd.add_argument("--repo", action="append", required=True, help="a repo the user may use: ns/name, with * per segment (repeatable)")
    ssh_cmd.add_argument("--scope", choices=["read", "write"], default="write", help="the most the user may do (default: write)")
    ssh_cmd.add_argument(
        "--ttl", type=_seconds_at_least(MIN_CAS_TOKEN_TTL, "git-lfs drops answers that expire within 5 s"), default=3600,
        help="lifetime of the tokens handed out, seconds (default: 1 hour)",
    )  # fmt: skip
    ssh_cmd.add_argument("--git-root", type=_nonempty_path, help="serve git too: bare repositories at GIT_ROOT/REPO.git")
    ssh_cmd.add_argument("--log", type=_nonempty_path, help="append one line per request (user, repo, token id) to this file")
    ssh_cmd.set_defaults(func=_cmd_lfs_authenticate)
    return parser


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help, or a usage error already printed
        return int(exc.code or 0)
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["transfer"]:
        # The hot path: git-lfs starts many agents; skip argparse and answer `init` first.
        return _cmd_transfer()
    from .platform.memory import tune_allocator

    tune_allocator()
    debug = "--debug" in argv  # hidden: the traceback of an unexpected error
    argv = [a for a in argv if a != "--debug"]
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("git-xet: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every error is one line unless --debug
        if debug:
            raise
        name = argv[0] if argv else "git-xet"
        detail = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror and exc.filename else str(exc) or type(exc).__name__
        print(f"git-xet {name}: error: {detail} (run again with --debug for the details)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
