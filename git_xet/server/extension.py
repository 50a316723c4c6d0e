"""Ours: what a `git xet serve` offers our agent beyond the XET API, for small files, in our
own namespace (core/extension.py names the paths and the header):

    GET  /git-xet/v1/capabilities        (read) what this server offers, one JSON object
    POST /git-xet/v1/upload-bundles      (write) a shard and its small xorbs in one body
    GET  /git-xet/v1/lfs-objects/{oid}   (read) a repo's LFS object, whole

The paths agents of the previous release send are still accepted: see deprecated.py.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core import hashes
from ..core import extension as names
from ..core.errors import FormatError
from ..core.upload_bundle import parse_bundle
from .deprecated import deprecated_routes
from .errors import RequestRefused
from .shard_intake import parsed_if_small, shard_result
from .state import ServerState
from .worker_threads import in_worker

# An upload bundle carries at most MAX_BUNDLE_XORBS xorbs that our client posts directly
# (under 1 MiB each) and the shard of a few small files.
MAX_BUNDLE_BODY = 32 * 1024 * 1024


class Extension:
    """Handlers of our extension on one ServerState."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.offered = names.Capabilities(
            upload_bundles=True,
            lfs_objects=True,
            upload_streams=True,
            upload_grants=state.config.offers_grants,
            locks=True,
            checks_sha256_claims=True,
        )

    async def capabilities(self, request: Request) -> Response:
        """What this server offers: asked once per store by our client, instead of trying each
        route for a 404. Behind a token, as everything about a store is."""
        await self.state.authorize(request, "read")
        return JSONResponse(self.offered.to_json(), headers={"Cache-Control": "private, max-age=300"})

    async def lfs_object(self, request: Request) -> Response:
        """A Git LFS object of the caller's repo, whole, by its oid (sha256): one round trip
        where our agent would otherwise make three for a small file (oid -> file hash, the
        reconstruction, the xorb range). Served as the bridge serves `basic` downloads: each
        chunk checked against its stored hash as it is read, paced, any size; the agent asks
        only for small files and checks the sha256 itself. X-Git-Xet-Hash names the file."""
        return await self.whole_lfs_object(request, names.FILE_HASH)

    async def whole_lfs_object(self, request: Request, hash_header: str) -> Response:
        """lfs_object, its file hash named in `hash_header` (deprecated.py names it the old way)."""
        claims = await self.state.authorize(request, "read")
        oid = request.path_params["oid"].lower()
        if not hashes.is_hash_hex(oid):
            raise RequestRefused(400, "an LFS oid is 64 hex digits (the object's sha256)")
        stored = await in_worker(self.state.store.file_by_sha256, oid, claims.repo)
        if stored is None:
            raise RequestRefused(404, f"object {oid} not found")
        return self.state.whole_file(stored, {hash_header: stored.file_hex, "Cache-Control": "private, no-store"})

    async def upload_bundle(self, request: Request) -> Response:
        """A shard and its small xorbs in one body (core/upload_bundle.py, our agent's small
        files): each xorb stored, verified, as POST /v1/xorbs does, then the shard registered
        as POST /v1/shards does; what was stored before a refusal stays, as with two requests."""
        claims = await self.state.authorize(request, "write")
        body = await self.state.read_body(request, MAX_BUNDLE_BODY)
        try:
            xorbs, shard = parse_bundle(body)
        except FormatError as exc:
            raise RequestRefused(400, f"invalid upload bundle: {exc}") from None
        shard_body = bytes(shard)
        small = parsed_if_small(shard_body)
        refused: list[str] = []
        shards = self.state.shards
        inserted = await shards.validated(small, shards.store_bundle, xorbs, shard_body, claims.repo, small, self.state.upload_stream(request, claims), refused)
        return JSONResponse(shard_result(inserted, refused))


def extension_routes(ext: Extension) -> list[Route]:
    return [
        Route(names.CAPABILITIES, ext.capabilities),
        Route(names.UPLOAD_BUNDLES, ext.upload_bundle, methods=["POST"]),
        Route(names.LFS_OBJECTS + "/{oid}", ext.lfs_object),
        *deprecated_routes(ext.upload_bundle, ext.whole_lfs_object),
    ]
