"""`git xet setup-repo URL`: which URLs name a repository's LFS endpoint, and what it becomes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.commands.install import GitError
from git_xet.commands.setup_repo import endpoint_url

_segment = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,12}", fullmatch=True)


@given(scheme=st.sampled_from(["https", "http"]), host=st.sampled_from(["xet.example.com", "127.0.0.1:8080"]),
       path=st.lists(_segment, min_size=1, max_size=3), form=st.sampled_from(["", ".git", ".git/info/lfs", "/", ".git/info/lfs/"]))  # fmt: skip
def test_every_form_of_a_repo_url_gives_its_endpoint(scheme: str, host: str, path: list[str], form: str) -> None:
    repo = "/".join(path)
    assert endpoint_url(f"{scheme}://{host}/{repo}{form}") == f"{scheme}://{host}/{repo}.git/info/lfs"


@pytest.mark.parametrize("url", ["xet.example.com/acme/models", "ssh://git@host/acme/models", "https://xet.example.com", "https://xet.example.com/", "https://u:secret@xet.example.com/acme/m"])
def test_urls_that_name_no_repository_or_carry_credentials_are_refused(url: str) -> None:
    with pytest.raises(GitError):
        endpoint_url(url)
