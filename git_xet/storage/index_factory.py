"""Which MetadataIndex a server opens: SQLite in its data directory, or the PostgreSQL one its
replicas share. Its own module, above index_base and both implementations, so that the base,
which the implementations import, imports neither of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .errors import Misconfigured
from .index_base import MetadataIndex


def open_index(url: str | None, data_dir: Path, read_only: bool = False) -> MetadataIndex:
    """The index `url` names (postgresql://...), or the SQLite index in `data_dir` (opened for
    reading only with `read_only`)."""
    if url is None:
        from .index_sqlite import SqliteIndex

        return SqliteIndex(Path(data_dir) / "index.sqlite", read_only=read_only)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .index_postgres import PostgresIndex
        except ImportError as exc:
            raise Misconfigured(f"a PostgreSQL index needs psycopg ({exc.name}); from a git-xet checkout run: {sys.executable} -m pip install '.[postgres]'") from None
        return PostgresIndex(url)
    raise Misconfigured(f"unknown index {url.split(':', 1)[0]!r}: use postgresql://USER@HOST/DB (or leave --index out for SQLite in --data)")
