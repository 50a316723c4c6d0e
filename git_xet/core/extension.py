"""Our extension of the XET CAS API, spelled once for the server and the client.

A `git xet serve` offers our agent a few things beyond the XET API, for small files. They live
in our own namespace, never under the XET API's `/v1/` nor with its `X-Xet-` prefix, so that
neither collides with a future version of the protocol:

    GET  /git-xet/v1/capabilities        what this server offers (Capabilities, as JSON)
    POST /git-xet/v1/upload-bundles      a shard and its small xorbs in one body
                                         (core/upload_bundle.py) -> {"result": 0|1}
    GET  /git-xet/v1/lfs-objects/{oid}   a repo's LFS object, whole; X-Git-Xet-Hash names its
                                         XET file hash
    X-Git-Xet-Upload-Stream              "<id> <seq>" on a xorb upload, "<id>" on its shard
                                         (server/upload_streams.py)

A client asks for the capabilities once per store and uses only what they list: a server
without the route (the Hub's CAS, an older server) answers 404, which means "nothing of ours".
"""

from __future__ import annotations

from typing import Any, NamedTuple

PREFIX = "/git-xet/v1"
CAPABILITIES = f"{PREFIX}/capabilities"
UPLOAD_BUNDLES = f"{PREFIX}/upload-bundles"
LFS_OBJECTS = f"{PREFIX}/lfs-objects"  # + "/{oid}"
UPLOAD_STREAM = "X-Git-Xet-Upload-Stream"
FILE_HASH = "X-Git-Xet-Hash"  # on an LFS_OBJECTS answer


class Capabilities(NamedTuple):
    """What a server offers of our extension. Each field is a yes/no; keys a client does not
    know are ignored and missing ones mean "no", so either side may add one. (A NamedTuple: the
    agent imports no dataclasses, tests/unit/test_agent_imports.py.)"""

    upload_bundles: bool = False
    lfs_objects: bool = False
    upload_streams: bool = False
    # What the server's other APIs offer, so that a client need not find out by trying.
    upload_grants: bool = False
    locks: bool = False
    checks_sha256_claims: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"extension": "git-xet", "version": 1, **self._asdict()}

    @classmethod
    def from_json(cls, answer: object) -> Capabilities:
        """The capabilities a server's answer lists; none for an answer of another shape."""
        listed = cls.listed_in(answer)
        return listed if listed is not None else cls()

    @classmethod
    def listed_in(cls, answer: object) -> Capabilities | None:
        """The capabilities a server's answer lists, or None when it is not an answer of ours
        (the server does not offer the extension at all)."""
        if not isinstance(answer, dict) or answer.get("extension") != "git-xet":
            return None
        return cls(**{name: answer.get(name) is True for name in cls._fields})
