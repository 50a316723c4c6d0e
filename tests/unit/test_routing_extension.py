"""How the agent's router uses a configured store's extension (agent/routing.py): oid lookups
go through it, and a `git xet serve` that does not list it (one older than its agent) still
takes uploads through XET alone, while a download, which cannot find an object by its oid
there, names the fix. The store is a stand-in: nothing is sent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.agent.endpoints import ConfigError, StandaloneTarget
from git_xet.agent.protocol import Transfer
from git_xet.agent.routing import StoreRouter

URL = "https://xet.example.com"


class _Lookups:
    """An extension that knows one oid."""

    checks_sha256_claims = True

    def __init__(self, known: str) -> None:
        self.known = known
        self.asked: list[str] = []

    def file_for_sha256(self, oid: str, size: int) -> str | None:
        self.asked.append(oid)
        return "f" * 64 if oid == self.known else None


class _Server:
    """A configured `git xet serve` backend, with or without the extension."""

    cache_key = URL

    def __init__(self, extension: _Lookups | None) -> None:
        self.extension = extension


def _router(monkeypatch: pytest.MonkeyPatch, backend: _Server) -> StoreRouter:
    monkeypatch.setenv("GIT_XET_ENDPOINT", URL)  # configured: standalone, no git config read
    router = StoreRouter(None)
    router._target = StandaloneTarget("http", URL, "token")
    router._backends[f"http:{URL}"] = backend  # type: ignore[assignment]
    return router


OIDS = st.text("0123456789abcdef", min_size=64, max_size=64)


@given(OIDS, st.booleans(), st.sampled_from(["upload", "download"]), st.integers(1 << 20, 1 << 40))
def test_lookups_go_through_the_extension(oid: str, stored: bool, operation: str, size: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        ext = _Lookups(oid if stored else "")
        _, lookup = _router(mp, _Server(ext)).route(Transfer(operation, oid, size, None, None))
        assert (lookup(oid) is not None) == stored and ext.asked == [oid]


@given(OIDS, st.integers(0, 1 << 40))
def test_a_server_without_the_extension_takes_uploads_and_names_the_fix_for_downloads(oid: str, size: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        router = _router(mp, _Server(None))
        _, lookup = router.route(Transfer("upload", oid, size, None, None))
        assert lookup(oid) is None  # sent, through XET alone
        with pytest.raises(ConfigError, match="older than this agent"):
            router.route(Transfer("download", oid, size, None, None))
        with pytest.raises(ConfigError, match="older than this agent"):
            router.missing([(oid, size)])
