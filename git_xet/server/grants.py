"""Upload grants, as hf-xet >= 1.8 uses them: a client asks for a grant, PUTs the xorb where
the grant says (no CAS token), then commits it.

    POST /v1/xorb-grants/{prefix}/{xorb}   {"length", "checksum": {"algo": "crc64nvme", "value"}}
        201 {"id", "method", "url", "headers"}; 200 when the xorb is stored already
    PUT  <grant url>                        the footerless xorb; 412 when it is stored already
    POST /v1/xorb-commits/{prefix}/{xorb}/grant/{id}
        200 once the xorb is stored and verified; 404 when nothing arrived for the grant

A server offers grants where they save work: with `--objects s3://...` (`--upload-grants
auto`, the default; see ServerConfig.offers_grants). With `--upload-grants always`, in directory
mode the grant URL points at this server and carries its own signature over the
xorb, length, checksum, expiry and grant id, so no grant state is kept (any replica can take
the PUT). The PUT is checked against the signed length and checksum and the xorb verified
before it is stored: nothing unverified is ever visible.

With objects in a bucket (`--objects s3://...`) the grant is a presigned PUT straight to the
bucket, into a staging key `uploads/{xorb}/{grant id}` that nothing reads; `If-None-Match: *`
and the CRC-64/NVME are signed in, so the store itself refuses a body that does not match
(400 BadDigest) and a second PUT (412). The commit reads the staged object once, verifies it
(hash, chunk layout) like any upload as it arrives, makes the stored object from it inside the
bucket (a multipart copy plus the footer we rebuilt) and indexes it, then deletes the staged
copy: only a verified xorb is ever referenced, and its bytes cross the server once. A grant
whose PUT never comes, or whose commit never comes, leaves only a staged object, which nothing
references (fsck lists it, gc and every server's collector remove it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.checksums import crc64nvme, crc64nvme_header
from ..core.reconstruction import MAX_FETCH_RANGE_BYTES
from ..core.xorb import MAX_XORB_BODY_BYTES, VerifiedXorb
from ..core.xorb_stream import StreamingXorbVerifier
from ..storage.cas_store import STAGED_UPLOADS
from ..storage.errors import StorageError
from ..storage.s3 import MIN_COPY_PART_BYTES
from .errors import RequestRefused
from .upload_streams import StreamRef
from .worker_threads import in_worker

if TYPE_CHECKING:
    from ..storage.s3 import S3ObjectStore
    from .app import CasApp

log = logging.getLogger("git_xet.server")

GrantMode = Literal["auto", "always", "never"]  # when a server offers grants: ServerConfig.offers_grants
GRANT_TTL = 900  # seconds a grant's URL stays usable
MAX_GRANT_REQUEST = 4096
# A staged upload older than this was never committed: its URL expired long ago and clients
# commit right after their PUT (a later commit answers 404, and the client asks a new grant).
ABANDONED_AFTER = 4 * GRANT_TTL


def staging_key(xorb: str, grant_id: str) -> str:
    """Where a grant's PUT lands in a bucket, before its commit verifies it."""
    return f"{STAGED_UPLOADS}{xorb}/{grant_id}"


class Grants:
    def __init__(self, app: CasApp) -> None:
        self.app = app
        self._key = app.signer.derive_key("xorb-upload-grant")  # its own MAC domain

    def _sign(self, xorb: str, length: int, crc: int, exp: int, grant_id: str, stream: str) -> str:
        message = f"{xorb}:{length}:{crc}:{exp}:{grant_id}:{stream}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    async def grant(self, request: Request) -> Response:
        claims = await self.app.authorize(request, "write")
        xorb = self.app.hash_param(request, "xorb")
        if crc64nvme is None or not self.app.config.offers_grants:
            raise RequestRefused(404, "upload grants are not offered; POST /v1/xorbs/{prefix}/{hash}")
        length, crc = _parse_grant_request(await self.app.read_body(request, MAX_GRANT_REQUEST))
        if await in_worker(self.app.store.xorb_layout, xorb) is not None:
            return JSONResponse({})
        grant_id = uuid.uuid4().hex
        bucket = self.app.object_bucket
        if bucket is not None:
            url, headers = await in_worker(bucket.presign_put_new, staging_key(xorb, grant_id), crc, GRANT_TTL)
            return JSONResponse({"id": grant_id, "method": "PUT", "url": url, "headers": headers}, status_code=201)
        exp = int(time.time()) + GRANT_TTL
        # The PUT stores the xorb here, without a token: its upload stream travels signed.
        named = self.app.upload_stream(request, claims)
        stream = named.to_param() if named is not None and named.seq is not None else ""
        sig = self._sign(xorb, length, crc, exp, grant_id, stream)
        query = urlencode({"grant": grant_id, "length": length, "crc": crc, "exp": exp, "stream": stream, "sig": sig})
        url = f"{self.app.base_url(request)}/v1/xorb-uploads/{xorb}?{query}"
        headers = {"Content-Type": "application/octet-stream", "x-amz-checksum-crc64nvme": crc64nvme_header(crc)}
        return JSONResponse({"id": grant_id, "method": "PUT", "url": url, "headers": headers}, status_code=201)

    async def put(self, request: Request) -> Response:
        xorb = self.app.hash_param(request, "xorb")
        try:
            q = request.query_params
            grant_id, length, crc, exp, sig = q["grant"], int(q["length"]), int(q["crc"]), int(q["exp"]), q["sig"]
        except (KeyError, ValueError):
            raise RequestRefused(403, "not a signed upload grant URL") from None
        stream = q.get("stream", "")
        if not hmac.compare_digest(sig, self._sign(xorb, length, crc, exp, grant_id, stream)):
            raise RequestRefused(403, "upload grant signature does not match")
        if exp < time.time():
            raise RequestRefused(403, "upload grant expired; ask for a new one")
        async with self.app.receive_xorb(request, length, crc=True) as received:
            if received.length != length:
                raise RequestRefused(400, f"the grant is for {length} bytes; {received.length} arrived")
            if await in_worker(received.verifier.crc64, length) != crc:
                raise RequestRefused(400, "BadDigest: the body does not match the granted CRC-64/NVME checksum")
            if await in_worker(self.app.store.xorb_layout, xorb) is not None:
                raise RequestRefused(412, "this xorb is stored already")
            named = StreamRef.from_param(stream)
            inserted = await in_worker(self.app.store_received_xorb, xorb, received, named)
        if not inserted:
            raise RequestRefused(412, "this xorb is stored already")
        return Response(status_code=200)

    async def commit(self, request: Request) -> Response:
        claims = await self.app.authorize(request, "write")
        xorb = self.app.hash_param(request, "xorb")
        if self.app.object_bucket is not None:
            grant_id = request.path_params["grant"]
            if len(grant_id) != 32 or not all(c in "0123456789abcdef" for c in grant_id):
                raise RequestRefused(404, "no such grant")
            if await in_worker(self._commit_staged, xorb, grant_id):
                await in_worker(self.app.stored_in_stream, self.app.upload_stream(request, claims), xorb)  # its file, off the loop
        if await in_worker(self.app.store.xorb_layout, xorb) is None:
            raise RequestRefused(404, "no uploaded data for this grant")
        return JSONResponse({"was_inserted": True})

    def _commit_staged(self, xorb: str, grant_id: str) -> bool:
        """Verify and store the xorb a grant's PUT staged in the bucket (if it did), then drop
        the staged copy; True if this stored it. Nothing staged: nothing to do (the caller
        answers 404 unless the xorb is stored already). A staged body that is not the xorb:
        400, and it is deleted.

        The staged object is read once, into a pooled receive buffer, and verified as its
        bytes arrive. The stored object is then made inside the bucket: a multipart copy of
        the staged object plus the footer we rebuilt, so the server never sends the xorb's
        bytes back (a body too small for a copied part, or sent with a footer, is written
        from the buffer as any upload is)."""
        bucket = self.app.object_bucket
        assert bucket is not None
        key = staging_key(xorb, grant_id)
        buffers = self.app.receive_buffers
        size = bucket.size(key)
        if size is None:
            return False
        if size > MAX_XORB_BODY_BYTES:  # the PUT's length is not signed: bound what we read
            bucket.delete(key)
            raise RequestRefused(400, f"the uploaded body is {size} bytes, more than a xorb can be")
        buffer = buffers.take()
        try:
            verifier = StreamingXorbVerifier(buffer)
            try:
                length = bucket.read_into(key, buffer, progress=verifier.advance)
            except FileNotFoundError:
                return False

            def create(final: str, verified: VerifiedXorb) -> bool:
                footer = verified.footer().serialize()
                if len(verified.body) == length >= MIN_COPY_PART_BYTES:
                    return bucket.copy_new(key, final, footer)
                return bucket.put_new(final, verified.body, footer)

            try:
                created = self.app.store.put_verified_xorb(xorb, lambda expected: verifier.finish(length, expected), create)
            except StorageError:
                bucket.delete(key)
                raise
        finally:
            buffers.give_back(buffer)
        bucket.delete(key)
        return created


def collect_abandoned_uploads(bucket: S3ObjectStore, older_than: float = ABANDONED_AFTER, now: float | None = None) -> int:
    """Delete staged grant uploads older than `older_than` seconds (never referenced: only a
    commit makes a xorb visible, from a verified copy); returns how many. Safe to run from
    every replica at once: deleting an absent object is not an error."""
    cutoff = (time.time() if now is None else now) - older_than
    removed = 0
    for key, _size, modified in list(bucket.list_entries(STAGED_UPLOADS)):
        if modified < cutoff:
            bucket.delete(key)
            removed += 1
    return removed


def start_upload_collector(bucket: S3ObjectStore, interval: float = 3600) -> threading.Thread:
    """Collect abandoned staged uploads now and then every `interval` seconds, in a daemon
    thread (a failed round is logged and retried at the next)."""

    def loop() -> None:
        while True:
            try:
                removed = collect_abandoned_uploads(bucket)
                if removed:
                    log.info("removed %d abandoned grant uploads from %s", removed, bucket.location)
            except Exception as exc:  # noqa: BLE001 - the store may be down for a while; try again later
                log.warning("could not collect abandoned grant uploads: %s", getattr(exc, "message", exc))
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="git-xet-upload-collector", daemon=True)
    thread.start()
    return thread


def _parse_grant_request(body: bytes) -> tuple[int, int]:
    """(length, checksum) of a grant request; 400 on anything else."""
    try:
        request = json.loads(body)
        length = request["length"]
        checksum = request["checksum"]
        crc = int(checksum["value"])
        if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= MAX_FETCH_RANGE_BYTES:
            raise ValueError("length")
        if checksum.get("algo") != "crc64nvme" or not 0 <= crc < 2**64:
            raise ValueError("checksum")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RequestRefused(400, 'a grant request is {"length": <bytes>, "checksum": {"algo": "crc64nvme", "value": "<decimal>"}}') from None
    return length, crc
