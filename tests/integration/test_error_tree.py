"""One exception tree: every error class of ours is a XetError, and the same bad input raises
the same client error class whether the store is a local directory or `git xet serve`."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import git_xet
from git_xet.client import errors as client_errors
from git_xet.client.backend import XetBackend
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.location import create_local_store
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes, shard, xorb
from git_xet.core.errors import XetError
from git_xet.server.errors import STATUSES
from git_xet.storage import errors as storage_errors
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import running_server

# Modules that need an optional extra this environment may lack; everything else must import.
_OPTIONAL = {"git_xet.storage.index_postgres": "psycopg"}


def _our_modules() -> Iterator[object]:
    for info in pkgutil.walk_packages(git_xet.__path__, "git_xet."):
        if info.name == "git_xet.__main__":  # runs the command line when imported
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError as exc:
            assert _OPTIONAL.get(info.name) == exc.name, f"{info.name} failed to import: {exc}"


def test_every_error_class_of_ours_is_a_xet_error() -> None:
    classes = [
        obj
        for module in _our_modules()
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__  # type: ignore[attr-defined]
    ]
    assert len(classes) >= 25, classes  # the walk found the tree (it has ~40 classes)
    assert [c for c in classes if not issubclass(c, XetError)] == []


def test_no_storage_error_carries_an_http_status() -> None:
    for name, cls in vars(storage_errors).items():
        if inspect.isclass(cls) and issubclass(cls, storage_errors.StorageError):
            assert not hasattr(cls("x"), "status"), name


def test_the_server_maps_every_storage_error_class() -> None:
    """A storage error without a row would reach the client as an opaque 500."""
    leaves = {c for c in vars(storage_errors).values() if inspect.isclass(c) and issubclass(c, storage_errors.StorageError)}
    for cls in leaves - {storage_errors.StorageError}:
        assert any(row in STATUSES for row in cls.__mro__), cls


# ---------------------------------------------------------------- the same refusal from both stores


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, XetBackend]]:
    root = tmp_path_factory.mktemp("parity")
    create_local_store(root / "store")
    with running_server(root / "server-data") as server:
        http = HttpCasBackend(server.url, StaticToken(server.token("write")))
        yield {"local": LocalStoreBackend(root / "store"), "http": http}
        http.http.close()


def _raised(call: Callable[[], object]) -> type[BaseException]:
    with pytest.raises(client_errors.TransferError) as caught:
        call()
    return type(caught.value)


def _shard_of(built: xorb.VerifiedXorb, data: bytes, *, verification: bytes | None = None) -> bytes:
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    digest = hashes.file_hash(list(built.chunk_hashes), list(built.chunk_sizes))
    info = shard.FileInfo(digest, (term,), (verification or hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    return shard.serialize_shard(shard.Shard((info,)), with_footer=False)


def _same_class_from_both(backends: dict[str, XetBackend], call: Callable[[XetBackend], object], expected: type[BaseException]) -> None:
    raised = {name: _raised(lambda b=backend: call(b)) for name, backend in backends.items()}
    assert raised == dict.fromkeys(backends, expected)


@settings(max_examples=8, deadline=None)
@given(body=st.binary(min_size=0, max_size=4096))
def test_a_xorb_that_is_not_what_it_claims_is_rejected_alike(backends: dict[str, XetBackend], body: bytes) -> None:
    claimed = hashes.hash_to_hex(hashlib.sha256(b"claim" + body).digest())  # a name body never hashes to
    _same_class_from_both(backends, lambda b: b.upload_xorb(claimed, body), client_errors.RejectedError)


@settings(max_examples=8, deadline=None)
@given(body=st.binary(min_size=1, max_size=2048))
def test_a_shard_that_does_not_parse_is_rejected_alike(backends: dict[str, XetBackend], body: bytes) -> None:
    _same_class_from_both(backends, lambda b: b.upload_shard(b"not a shard" + body), client_errors.RejectedError)


def test_a_shard_naming_a_xorb_never_uploaded_is_missing_xorbs_alike(backends: dict[str, XetBackend]) -> None:
    data = random_bytes(200_000, 41)
    built, _ = single_xorb(data)
    _same_class_from_both(backends, lambda b: b.upload_shard(_shard_of(built, data)), client_errors.MissingXorbsError)


def test_a_shard_whose_verification_is_wrong_is_rejected_alike(backends: dict[str, XetBackend]) -> None:
    data = random_bytes(200_000, 42)
    built, _ = single_xorb(data)
    for backend in backends.values():
        backend.upload_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
    wrong = _shard_of(built, data, verification=bytes(32))
    _same_class_from_both(backends, lambda b: b.upload_shard(wrong), client_errors.RejectedError)


def test_unknown_files_and_ranges_past_the_end_are_refused_alike(backends: dict[str, XetBackend]) -> None:
    data = random_bytes(150_000, 43)
    built, _ = single_xorb(data)
    body = _shard_of(built, data)
    file_hex = hashes.hash_to_hex(hashes.file_hash(list(built.chunk_hashes), list(built.chunk_sizes)))
    for backend in backends.values():
        backend.upload_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
        assert backend.upload_shard(body) is True
        assert backend.reconstruction(file_hex).terms  # the file is there
    unknown = hashes.hash_to_hex(hashlib.sha256(b"no such file").digest())
    _same_class_from_both(backends, lambda b: b.reconstruction(unknown), client_errors.NotFoundError)
    past_end = (len(data), len(data) + 10)
    _same_class_from_both(backends, lambda b: b.reconstruction(file_hex, past_end), client_errors.RangeNotSatisfiableError)


def test_refusals_of_bad_input_are_not_retried(backends: dict[str, XetBackend]) -> None:
    """Rejected input is final: neither store marks it retryable, so no backoff is spent on it."""
    for backend in backends.values():
        with pytest.raises(client_errors.RejectedError) as caught:
            backend.upload_shard(b"not a shard")
        assert caught.value.retryable is False
