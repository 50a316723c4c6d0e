"""Our extension (core/extension.py) as a `git xet serve` offers it over HTTP: the
GitXetExtension of an HttpCasBackend whose server listed it in its capabilities answer.

Each operation uses only what that answer lists: a shard and its small xorbs in one upload
bundle, a small object whole, upload streams named in a header; without one, the operation
falls back to the XET API's requests (or, for a whole object, to None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..core.bundle_merge import BundleParts, groupable
from ..core.extension import LFS_OBJECTS, UPLOAD_BUNDLES, UPLOAD_STREAM, Capabilities
from ..core.hashes import hex_to_hash
from ..core.http_headers import bearer
from ..core.scattered import OutgoingBytes
from ..core.upload_bundle import MAX_BUNDLE_XORBS, pack_bundle
from .backend import UploadStream
from .errors import TransferError
from .group_send import SENT
from .http_errors import unless_refused
from .http_types import HttpClient, Response
from .lfs_batch import batch_one
from .retry import Outage, RetryPolicy


class ServedStore(Protocol):
    """What the extension uses of the XET backend it extends (an HttpCasBackend): its requests,
    signed and retried as the backend's own, so our routes share its token, session and budget.
    A protocol rather than the class, so the backend (which builds its extension) is the only
    one of the two that names the other."""

    endpoint: str
    http: HttpClient
    policy: RetryPolicy
    outage: Outage

    def token(self) -> str | None: ...
    def request(self, what: str, method: str, path: str, *, ok: tuple[int, ...] = ..., body: OutgoingBytes | None = ..., json: Any = ..., headers: dict[str, str] | None = ..., answer_limit: int = ...) -> Response: ...
    def posts_directly(self, size: int) -> bool: ...
    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes) -> bool: ...
    def send_xorb(self, xorb_hex: str, body: OutgoingBytes, named: dict[str, str] | None) -> bool: ...
    def send_shard(self, body: bytes, named: dict[str, str] | None) -> bool: ...


class BundleGroup(Protocol):
    """A sender of small-file bundles shared with other senders (GroupSender, or a link to the
    one another agent runs): SENT once the server accepted a bundle holding `parts`, SEND_ALONE
    when this file must be posted alone; raises TransferError for a refusal of this file."""

    def send(self, parts: BundleParts) -> str: ...


class ServeExtension:
    """GitXetExtension of a `git xet serve`, as its capabilities answer (`offered`) lists it."""

    def __init__(self, backend: ServedStore, offered: Capabilities) -> None:
        self.backend = backend
        self.offered = offered
        # The sender this command's agents share (agent/group_link.py), set by the agent where
        # the platform has one; None: each bundle is posted here, alone.
        self.group: BundleGroup | None = None

    @property
    def checks_sha256_claims(self) -> bool:
        return self.offered.checks_sha256_claims

    def _stream_header(self, value: str) -> dict[str, str] | None:
        """X-Git-Xet-Upload-Stream with `value` (see backend.UploadStream), where the server
        takes upload streams; else no header."""
        return {UPLOAD_STREAM: value} if self.offered.upload_streams else None

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream) -> bool:
        """HttpCasBackend.upload_xorb, its requests to the CAS naming `stream` where the server
        takes it (never the grant's PUT: a presigned PUT carries exactly the grant's headers)."""
        return self.backend.send_xorb(xorb_hex, body, self._stream_header(f"{stream.id} {stream.seq}"))

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str) -> bool:
        """One upload bundle (core/extension.py) where the server takes them and they fit one
        (small xorbs, each posted directly anyway), else the usual requests in order. With a
        `group` (a sender shared by a command's agents), a small bundle holding every xorb its
        shard names goes with other agents' files when they queue (client/group_send.py)."""
        named = self._stream_header(stream_id)
        fits = 0 < len(xorbs) <= MAX_BUNDLE_XORBS and all(self.backend.posts_directly(len(body)) for _, body in xorbs)
        if not (fits and self.offered.upload_bundles):
            for xorb_hex, body in xorbs:
                self.backend.upload_xorb(xorb_hex, body)
            return self.backend.send_shard(shard, named)
        if self.group is not None and (parts := groupable(xorbs, shard)) is not None and self.group.send(parts) == SENT:
            return True  # the group's bundle was accepted with this file in it
        answer = self.post_bundle(xorbs, shard, named)
        return unless_refused(answer, int(answer["result"]) == 1)

    def post_bundle(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, named: dict[str, str] | None = None) -> dict[str, Any]:
        """POST one upload bundle (`named`: its headers, e.g. the upload stream); the server's
        JSON answer, checked to be one (its `result`, and the files it refused, if any)."""
        body = pack_bundle([(hex_to_hash(xorb_hex), xorb) for xorb_hex, xorb in xorbs], shard)
        resp = self.backend.request("upload of a shard and its xorbs", "POST", UPLOAD_BUNDLES, body=body, headers=named)
        try:
            answer = resp.json()
            int(answer["result"])
        except (ValueError, KeyError, TypeError):
            raise TransferError("the server answered an upload bundle with something unexpected", retryable=True) from None
        if not isinstance(answer, dict):
            raise TransferError("the server answered an upload bundle with something unexpected", retryable=True)
        return answer

    def file_for_sha256(self, oid: str, size: int) -> str | None:
        """Asked through the server's Git LFS batch API: `/git-xet.git` is the batch API of the
        repo this backend's token names, and an `xet` download action names the file's hash.
        No action (a per-object 404, or an object of another size) means the store does not
        hold it."""
        backend = self.backend
        token = backend.token()
        answer = batch_one(
            backend.http, f"{backend.endpoint}/git-xet.git/info/lfs", "download", ["xet"], oid, size, bearer(token) if token else {}, backend.policy, backend.outage
        )
        return answer.xet_file_hash()

    def lfs_object(self, oid: str, size: int) -> bytes | None:
        """In one request where the server offers it (LFS_OBJECTS): for small files, one round
        trip instead of three. None when it does not, or has no such object."""
        if not self.offered.lfs_objects:
            return None
        resp = self.backend.request(f"download of {oid[:12]}", "GET", f"{LFS_OBJECTS}/{oid}", ok=(200, 404), answer_limit=size)
        if resp.status_code == 404:
            return None
        if len(resp.content) != size:
            raise TransferError(f"the server sent {len(resp.content)} bytes of {oid[:12]}, expected {size}", retryable=True)
        return resp.content
