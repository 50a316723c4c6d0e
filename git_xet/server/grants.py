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
bucket, into a staging key `uploads/{xorb}/{grant id}` that nothing reads; Content-Length,
`If-None-Match: *` and the CRC-64/NVME are signed in, so the store itself refuses a body of
another length (403) or content (400 BadDigest) and a second PUT (412). The commit reads the
staged object once, verifies it (hash, chunk layout) like any upload as it arrives, makes the
stored object from it inside the bucket (a multipart copy plus the footer we rebuilt) and
indexes it, then leaves an empty marker in the staged object's place, on which a replayed PUT
gets 412: only a verified xorb is ever referenced, its bytes cross the server once, and a grant
is used once. A grant whose PUT never comes, or whose commit never comes, leaves only a staged
object, which nothing references (fsck lists it, gc and every server's collector remove it).

Every grant is bound to the token that asked for it (its id carries a MAC of the token's id
and the xorb: a commit with another token is refused, 403) and bounded: its length is signed,
it lives no longer than its token, and grant_limits caps the grants per token and the bytes a
repo may have granted and not yet committed (429 with Retry-After beyond either).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.checksums import crc64nvme, crc64nvme_header
from ..core.reconstruction import MAX_FETCH_RANGE_BYTES
from ..core.xorb import MAX_XORB_BODY_BYTES, VerifiedXorb
from ..core.xorb_stream import StreamingXorbVerifier
from ..storage.cas_store import STAGED_UPLOADS
from ..storage.errors import StorageError
from ..storage.s3 import MIN_COPY_PART_BYTES
from .errors import RequestRefused
from .grant_limits import GrantLimits
from .state import ServerState
from .upload_streams import StreamRef
from .worker_threads import in_worker

if TYPE_CHECKING:
    from ..storage.s3 import S3ObjectStore

log = logging.getLogger("git_xet.server")

GRANT_TTL = 900  # seconds a grant's URL stays usable (at most: never beyond its token)
MAX_GRANT_REQUEST = 4096
# A staged upload older than this was never committed: its URL has expired and clients commit
# right after their PUT (a later commit answers 404, and the client asks a new grant). Longer
# than GRANT_TTL, so that a used grant's marker (see _retire) outlives the grant's URL.
ABANDONED_AFTER = 2 * GRANT_TTL
COLLECT_INTERVAL = GRANT_TTL  # seconds between two rounds of the abandoned-upload collector
# The longest a grant's bytes can stay staged: its PUT at the end of the URL's life, then
# uncollected for ABANDONED_AFTER and until the next round. What an uncommitted grant holds of
# its repo's staged-bytes allowance (grant_limits) lasts as long.
STAGED_AT_MOST = GRANT_TTL + ABANDONED_AFTER + COLLECT_INTERVAL
GRANT_ID_RANDOM = 16  # hex digits of a grant id drawn at random; the other 16 bind it (see _grant_id)


def staging_key(xorb: str, grant_id: str) -> str:
    """Where a grant's PUT lands in a bucket, before its commit verifies it."""
    return f"{STAGED_UPLOADS}{xorb}/{grant_id}"


class Grants:
    def __init__(self, app: ServerState) -> None:
        self.app = app
        self._key = app.signer.derive_key("xorb-upload-grant")  # its own MAC domain
        self._owner_key = app.signer.derive_key("xorb-upload-grant-owner")
        self.limits = GrantLimits(STAGED_AT_MOST)

    def _grant_id(self, token_id: str, xorb: str, nonce: str | None = None) -> str:
        """A grant id (32 hex digits, as hf-xet passes it back): a random part and a MAC of it
        with the requesting token's id and the xorb, so the commit can tell, without state
        shared between replicas, that it comes from whoever got the grant."""
        nonce = nonce or secrets.token_hex(GRANT_ID_RANDOM // 2)
        mac = hmac.new(self._owner_key, f"{nonce}:{token_id}:{xorb}".encode(), hashlib.sha256).hexdigest()
        return nonce + mac[: 32 - GRANT_ID_RANDOM]

    def _granted_to(self, grant_id: str, token_id: str, xorb: str) -> bool:
        if len(grant_id) != 32 or not all(c in "0123456789abcdef" for c in grant_id):
            return False
        return hmac.compare_digest(grant_id, self._grant_id(token_id, xorb, grant_id[:GRANT_ID_RANDOM]))

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
        grant_id = self._grant_id(claims.id, xorb)
        self.limits.reserve(claims.id, claims.repo, grant_id, length)
        now = int(time.time())
        exp = min(now + GRANT_TTL, claims.exp)  # a grant outlives neither its own TTL nor its token
        bucket = self.app.object_bucket
        if bucket is not None:
            url, headers = await in_worker(bucket.presign_put_new, staging_key(xorb, grant_id), length, crc, exp - now)
            return JSONResponse({"id": grant_id, "method": "PUT", "url": url, "headers": headers}, status_code=201)
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
            from .metrics import grant_event  # not above: see metrics.py on when it may be imported

            grant_event("expired")
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
        grant_id = request.path_params["grant"]
        if not self._granted_to(grant_id, claims.id, xorb):
            raise RequestRefused(403, "this grant was not given to this token for this xorb; commit with the token that asked for it")
        if self.app.object_bucket is not None:
            if await in_worker(self._commit_staged, xorb, grant_id):
                await in_worker(self.app.stored_in_stream, self.app.upload_stream(request, claims), xorb)  # its file, off the loop
        else:
            self.limits.release(grant_id)  # its PUT stored the xorb, or no PUT can any more
        if await in_worker(self.app.store.xorb_layout, xorb) is None:
            raise RequestRefused(404, "no uploaded data for this grant")
        return JSONResponse({"was_inserted": True})

    def _commit_staged(self, xorb: str, grant_id: str) -> bool:
        """Verify and store the xorb a grant's PUT staged in the bucket (if it did), then retire
        the grant (see _retire); True if this stored it. Nothing staged, or the grant retired
        already: nothing to do (the caller answers 404 unless the xorb is stored already). A
        staged body that is not the xorb: 400, and the grant is retired.

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
        if not size:  # nothing staged yet, or a retired grant's marker
            return False
        if size > MAX_XORB_BODY_BYTES:  # the store signed the PUT's length; one that does not check it
            self._retire(bucket, key, grant_id)
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
            except (StorageError, RequestRefused):
                self._retire(bucket, key, grant_id)
                raise
        finally:
            buffers.give_back(buffer)
        self._retire(bucket, key, grant_id)
        return created

    def _retire(self, bucket: S3ObjectStore, key: str, grant_id: str) -> None:
        """End a grant whose staged body was committed or refused: its staged object becomes
        an empty marker, which the collector removes after ABANDONED_AFTER, when the grant's
        URL has long expired. While the marker is there, the URL's signed If-None-Match: *
        makes the store refuse a replayed PUT (412), so nothing is staged again after a commit;
        its bytes no longer count against the repo (grant_limits)."""
        bucket.put(key)
        self.limits.release(grant_id)


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


def start_upload_collector(bucket: S3ObjectStore, interval: float = COLLECT_INTERVAL) -> threading.Thread:
    """Collect abandoned staged uploads now and then every `interval` seconds, in a daemon
    thread (a failed round is logged and retried at the next)."""

    def loop() -> None:
        from .metrics import grant_event  # not above: see metrics.py on when it may be imported

        while True:
            try:
                removed = collect_abandoned_uploads(bucket)
                grant_event("expired", removed)  # a staged upload never committed: its grant expired unused
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


def grant_routes(grants: Grants) -> list[Route]:
    return [
        Route("/v1/xorb-grants/{prefix}/{xorb}", grants.grant, methods=["POST"]),
        Route("/v1/xorb-uploads/{xorb}", grants.put, methods=["PUT"]),
        Route("/v1/xorb-commits/{prefix}/{xorb}/grant/{grant}", grants.commit, methods=["POST"]),
    ]
