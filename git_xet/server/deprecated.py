"""What agents of the previous release (0.x, before core/extension.py's namespace) send, still
accepted: our extension's routes under the XET API's `/v1/` and its `X-Xet-Upload-Stream`
header; the old route's whole object still names its file in the Hub's `X-Xet-Hash`, as it
did. Our client sends only the new names; remove this module once no such agent is left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core import extension as names
from ..core.http_headers import FILE_HASH

UPLOAD_BUNDLES = "/v1/xorbs-and-shard"
LFS_OBJECTS = "/v1/lfs-objects/{oid}"
UPLOAD_STREAM = "X-Xet-Upload-Stream"

Handler = Callable[[Request], Awaitable[Response]]


def deprecated_routes(upload_bundle: Handler, lfs_object: Callable[[Request, str], Awaitable[Response]]) -> list[Route]:
    """The old paths of our extension's routes, answered by the same handlers (`lfs_object`
    told which header names the file)."""

    async def old_lfs_object(request: Request) -> Response:
        return await lfs_object(request, FILE_HASH)

    return [
        Route(UPLOAD_BUNDLES, upload_bundle, methods=["POST"]),
        Route(LFS_OBJECTS, old_lfs_object),
    ]


def upload_stream_header(headers: Mapping[str, str]) -> str | None:
    """A request's upload stream header: ours, else the old spelling."""
    return headers.get(names.UPLOAD_STREAM) or headers.get(UPLOAD_STREAM)
