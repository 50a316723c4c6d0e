"""Where a standalone XET store is: the one parser for store locations, and the marker that
makes a directory a store.

A location is an http(s) URL of a `git xet serve`, an S3-compatible bucket (`s3://BUCKET[/PREFIX]`,
see bucket_backend.py), or an explicit directory (an absolute path, `~/...`, or `file:///...`). Anything else is refused with the fix, because the old lenient
reading turned `xet.example.com:8080` or `htp://host` into a relative directory that every push
silently filled inside the working tree.

A directory becomes a store only by `git xet install --standalone` (or `git xet clone`), which
writes STORE_MARKER; the agent never creates one, so a mistyped path or an unmounted shared
drive fails the push instead of scattering objects where no teammate can find them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from ..core.errors import XetError

STORE_MARKER = "git-xet-store"
CACHE_LABEL = "store"  # in each shard-cache directory (named by a hash): the store it describes
_MARKER_TEXT = "git-xet directory store, format 1 (objects + index.sqlite; servable with `git xet serve --data`)\n"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_LIKE = re.compile(r"^(localhost|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+:\d+)(:\d+)?(/.*)?$")
FORMS = (
    "an XET store is an http(s) URL (e.g. https://xet.example.com), a bucket (s3://BUCKET[/PREFIX]) "
    "or a directory (an absolute path or file:///path)"
)


class LocationError(XetError, ValueError):
    """The text is not a store location; the message says what to write instead."""


class StoreLocation(NamedTuple):
    # "local" (a directory), "http" (a `git xet serve` URL) or "s3" (a bucket store); "cas" (a
    # CAS a Git LFS server named, the Hub's) never comes from the parser: see backends.py
    kind: str
    location: str  # an absolute path, or the URL without a trailing slash

    def __str__(self) -> str:
        return self.location


def parse_store_location(text: str, *, relative_to: Path | None = None) -> StoreLocation:
    """Parse a store location. `relative_to` (the user's shell directory, at install time)
    also allows paths spelled explicitly relative (`./store`, `../store`); stored configuration
    must be absolute, because the agent runs in whatever work tree git-lfs starts it in."""
    value = text.strip()
    if not value:
        raise LocationError(f"the store location is empty; {FORMS}")
    scheme = _SCHEME.match(value)
    if scheme:
        return _parse_url(value, scheme.group(1).lower())
    if value.startswith("~"):
        expanded = os.path.expanduser(value)
        if expanded.startswith("~"):
            raise LocationError(f"cannot expand '{value}' (no such user); {FORMS}")
        return StoreLocation("local", str(Path(expanded).resolve()))
    if value.startswith("/"):
        return StoreLocation("local", str(Path(value).resolve()))
    explicit_relative = value in (".", "..") or value.startswith(("./", "../"))
    if explicit_relative and relative_to is not None:
        return StoreLocation("local", str((relative_to / value).resolve()))
    if _HOST_LIKE.match(value):
        raise LocationError(
            f"'{value}' looks like a server without a scheme; write https://{value} (or http://{value} for a server without TLS)"
        )
    if relative_to is not None:
        raise LocationError(f"'{value}' is ambiguous (a host name or a relative directory?); write ./{value} for a directory here, or an https:// URL")
    raise LocationError(f"'{value}' is a relative path, which would land inside each work tree; {FORMS}")


def _parse_url(value: str, scheme: str) -> StoreLocation:
    if scheme in ("http", "https"):
        parts = urlsplit(value)
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise LocationError(f"'{value}' has an invalid port; {FORMS}") from None
        if not parts.hostname:
            raise LocationError(f"'{value}' has no host name; {FORMS}")
        if parts.query or parts.fragment:
            raise LocationError(f"'{value}' has a query or fragment; give the server's base URL (e.g. https://xet.example.com)")
        return StoreLocation("http", f"{scheme}://{parts.netloc}{parts.path}".rstrip("/"))
    if scheme == "s3":
        from ..storage.s3 import parse_s3_url

        try:
            return StoreLocation("s3", str(parse_s3_url(value)))
        except ValueError as exc:
            raise LocationError(str(exc)) from None
    if scheme == "file":
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise LocationError(f"'{value}' names another host; a file URL is file:///absolute/path")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise LocationError(f"'{value}' is not absolute; a file URL is file:///absolute/path")
        return StoreLocation("local", str(Path(path).resolve()))
    import difflib  # only to word this refusal: not imported by every agent

    close = difflib.get_close_matches(scheme, ["http", "https", "file", "s3"], n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}://{value.split('://', 1)[1]}?" if close else ""
    raise LocationError(f"'{value}' has the unknown scheme '{scheme}'{hint} ({FORMS})")


def is_local_store(path: Path) -> bool:
    """Whether `path` is a directory store: marked by install, or (stores made before the
    marker existed, and `git xet serve` data directories) holding the store's index."""
    return (path / STORE_MARKER).is_file() or (path / "index.sqlite").is_file()


def create_local_store(path: Path) -> bool:
    """Make `path` a directory store (True) or accept the existing one (False). The parent must
    exist: a missing parent is more often a typo or an unmounted drive than a wish."""
    if is_local_store(path):
        return False
    if path.exists() and not path.is_dir():
        raise LocationError(f"{path} exists and is not a directory; choose another place for the store")
    if path.is_dir() and any(path.iterdir()):
        raise LocationError(f"{path} is a non-empty directory that is not an XET store; choose a new or empty directory")
    if not path.parent.is_dir():
        raise LocationError(f"{path.parent} does not exist; create it first (mkdir -p {path.parent}) if the store belongs there")
    path.mkdir(exist_ok=True)
    (path / STORE_MARKER).write_text(_MARKER_TEXT, encoding="utf-8")
    return True
