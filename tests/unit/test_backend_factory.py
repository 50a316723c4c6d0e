"""client/backends.open_backend, the one factory of the agent's router and open_store: which
location gets which backend, and with which extension. HTTP answers come from an in-process
client (no socket); bucket stores need S3 and are covered by tests/integration/test_bucket_store.py
and test_public_api.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.client.backends import MissingStoreError, open_backend
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.http_types import Headers, Response, Timeouts
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.location import StoreLocation, create_local_store
from git_xet.client.tokens import StaticToken
from git_xet.core.extension import CAPABILITIES, Capabilities

FLAGS = st.builds(Capabilities, *(st.booleans() for _ in Capabilities._fields))


class _Body:
    """A whole answer body, read from memory."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read(self, size: int) -> bytes:
        piece = self.data[self.pos : self.pos + size]
        self.pos += len(piece)
        return piece

    def readinto(self, view: memoryview) -> int:
        piece = self.read(len(view))
        view[: len(piece)] = piece
        return len(piece)

    @property
    def finished(self) -> bool:
        return self.pos == len(self.data)

    def release(self) -> None:
        pass


class _Server:
    """An HttpClient whose server answers the capabilities request (with `offered`, or 404 for
    None) and nothing else; it keeps the paths it was asked."""

    timeouts = Timeouts(1.0, 1.0, 1.0)

    def __init__(self, offered: Capabilities | None) -> None:
        self.offered = offered
        self.asked: list[str] = []

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def close(self) -> None:
        pass

    def request(self, method: str, url: str, **_: Any) -> Response:
        path = url.removeprefix("https://xet.example.com")
        self.asked.append(path)
        assert method == "GET" and path == CAPABILITIES, f"only the capabilities are asked here, not {method} {path}"
        if self.offered is None:
            return Response(404, Headers(), url, _Body(b""))
        return Response(200, Headers([("content-type", "application/json")]), url, _Body(json.dumps(self.offered.to_json()).encode()))


@given(st.none() | FLAGS)
def test_a_git_xet_serve_has_the_extension_it_lists(offered: Capabilities | None) -> None:
    server = _Server(offered)
    backend = open_backend(StoreLocation("http", "https://xet.example.com"), tokens=StaticToken("t"), http=server)  # type: ignore[arg-type]
    assert isinstance(backend, HttpCasBackend) and backend.http is server
    assert server.asked == []  # asked when first needed, not when opened
    ext = backend.extension
    if offered is None:
        assert ext is None
    else:
        assert ext is not None and ext.checks_sha256_claims == offered.checks_sha256_claims
    assert server.asked == [CAPABILITIES]


@given(st.none() | FLAGS)
def test_a_cas_an_lfs_server_named_is_used_through_xet_alone(offered: Capabilities | None) -> None:
    server = _Server(offered)
    backend = open_backend(StoreLocation("cas", "https://xet.example.com"), tokens=StaticToken("t"), session_id="s", http=server)  # type: ignore[arg-type]
    assert isinstance(backend, HttpCasBackend) and backend.session_id == "s"
    assert backend.extension is None and server.asked == []  # whatever the server would say


def test_a_directory_store_is_its_own_extension(tmp_path: Path) -> None:
    create_local_store(tmp_path / "store")
    backend = open_backend(StoreLocation("local", str(tmp_path / "store")))
    try:
        assert isinstance(backend, LocalStoreBackend) and backend.extension is backend
        assert not backend.extension.checks_sha256_claims  # the uploader computes the sha256 itself
        assert backend.extension.file_for_sha256("0" * 64, 1) is None
    finally:
        backend.close()


@pytest.mark.parametrize("shape", ["missing", "empty", "parent_missing"])
def test_a_directory_that_is_not_a_store_is_refused_and_left_alone(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "a" / "store" if shape == "parent_missing" else tmp_path / "store"
    if shape == "empty":
        path.mkdir()
    with pytest.raises(MissingStoreError, match=f"git xet install --standalone {path}"):
        open_backend(StoreLocation("local", str(path)))
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["store"] if shape == "empty" else [])


def test_create_makes_a_directory_a_store(tmp_path: Path) -> None:
    open_backend(StoreLocation("local", str(tmp_path / "new")), create=True).close()
    again = open_backend(StoreLocation("local", str(tmp_path / "new")))
    again.close()
    assert isinstance(again, LocalStoreBackend)
