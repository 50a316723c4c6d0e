"""What agents of the previous release (0.x, before core/extension.py's namespace) send, still
accepted: our extension's routes under the XET API's `/v1/` and its `X-Xet-Upload-Stream`
header. Our client sends only the new names; remove this module once no such agent is left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core import extension as names

UPLOAD_BUNDLES = "/v1/xorbs-and-shard"
LFS_OBJECTS = "/v1/lfs-objects/{oid}"
UPLOAD_STREAM = "X-Xet-Upload-Stream"

Handler = Callable[[Request], Awaitable[Response]]


def deprecated_routes(upload_bundle: Handler, lfs_object: Handler) -> list[Route]:
    """The old paths of our extension's routes, answered by the same handlers."""
    return [
        Route(UPLOAD_BUNDLES, upload_bundle, methods=["POST"]),
        Route(LFS_OBJECTS, lfs_object),
    ]


def upload_stream_header(headers: Mapping[str, str]) -> str | None:
    """A request's upload stream header: ours, else the old spelling."""
    return headers.get(names.UPLOAD_STREAM) or headers.get(UPLOAD_STREAM)
