"""What an HttpCasBackend makes of a server's capabilities answer (client/serve_extension.py):
its `extension` exists exactly when the answer is ours, and what the client does (send the
oid as a claim instead of hashing, ask for upload grants) follows the answer's flags, not the
caller's guess. The answer comes from a stand-in for the one GET (no socket)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from git_xet.client.capabilities import ServerCapabilities
from git_xet.client.http_backend import HttpCasBackend
from git_xet.core.extension import Capabilities

FLAGS = st.builds(Capabilities, *(st.booleans() for _ in Capabilities._fields))


class _Answer:
    """The capabilities GET's answer: a status and a JSON body."""

    def __init__(self, status_code: int, body: Any = None) -> None:
        self.status_code = status_code
        self.body = body

    def json(self) -> Any:
        return self.body


def _backend(answer: _Answer | None, *, extension: bool = True) -> tuple[HttpCasBackend, list[str]]:
    """A backend for a server that answers the capabilities request with `answer`, and the
    paths it was asked."""
    asked: list[str] = []

    def get(path: str, ok: tuple[int, ...]) -> Any:
        asked.append(path)
        assert answer is not None and answer.status_code in ok
        return answer

    backend = HttpCasBackend("https://xet.example.com", extension=extension)
    backend.capabilities = ServerCapabilities(get, asked=extension)
    return backend, asked


@given(FLAGS)
def test_the_extension_follows_the_servers_flags(offered: Capabilities) -> None:
    backend, asked = _backend(_Answer(200, offered.to_json()))
    ext = backend.extension
    assert ext is not None and ext.checks_sha256_claims == offered.checks_sha256_claims
    assert backend._may_grant() == offered.upload_grants
    assert backend.extension is ext and len(asked) == 1  # asked once, kept


@given(st.one_of(st.just(_Answer(404)), st.builds(_Answer, st.just(200), st.none() | st.integers() | st.dictionaries(st.text(max_size=6), st.booleans(), max_size=3))))
def test_a_server_that_does_not_list_the_extension_has_none(answer: _Answer) -> None:
    backend, asked = _backend(answer)
    assert backend.extension is None and backend.extension is None
    assert backend._may_grant()  # the XET API's own way: try, and remember a 404
    assert len(asked) == 1


def test_a_cas_named_by_an_lfs_server_is_never_asked() -> None:
    backend, asked = _backend(None, extension=False)
    assert backend.extension is None and backend._may_grant() and asked == []
