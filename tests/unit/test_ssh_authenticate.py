"""SSH remotes: the ssh command git-lfs would run, git-lfs-authenticate answers and their cache,
and the forced command's answers (who may have which token)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.errors import TransferError
from git_xet.client.ssh_authenticate import SshAuth, SshCredentials, SshRemote, parse_ssh_remote, ssh_command
from git_xet.commands.lfs_authenticate import Grant, Refused, answer, repo_of
from git_xet.server.auth import Signer


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ssh://git@example.org:2222/acme/model.git", SshRemote("git@example.org", "2222", "/acme/model.git")),
        ("git+ssh://example.org/acme/model.git", SshRemote("example.org", "", "/acme/model.git")),
        ("git@example.org:acme/model.git", SshRemote("git@example.org", "", "acme/model.git")),
        ("[git@example.org:2222]:acme/model.git", SshRemote("git@example.org", "2222", "acme/model.git")),
        ("https://example.org/acme/model.git", None),
        ("/srv/git/model.git", None),
        ("./a:b", None),
    ],
)
def test_ssh_remotes_are_recognised_as_git_lfs_does(url: str, expected: SshRemote | None) -> None:
    assert parse_ssh_remote(url) == expected


REMOTE = SshRemote("git@example.org", "2222", "acme/model.git")


def test_the_ssh_command_is_git_lfs_s() -> None:
    no_config = {}.get
    assert ssh_command(REMOTE, "git-lfs-authenticate acme/model.git upload", {}, no_config) == [
        "ssh", "-p", "2222", "git@example.org", "git-lfs-authenticate acme/model.git upload",
    ]  # fmt: skip
    # GIT_SSH_COMMAND (then core.sshCommand) runs through sh -c with the arguments quoted.
    argv = ssh_command(REMOTE, "git-lfs-authenticate acme/model.git upload", {"GIT_SSH_COMMAND": "ssh -i '/k ey'"}, no_config)
    assert argv == ["sh", "-c", "ssh -i '/k ey' -p 2222 git@example.org 'git-lfs-authenticate acme/model.git upload'"]
    assert ssh_command(REMOTE, "x", {}, {"core.sshcommand": "myssh -v"}.get)[:2] == ["sh", "-c"]
    # GIT_SSH wins over core.sshCommand; plink takes -P, TortoisePlink -batch too.
    assert ssh_command(REMOTE, "x", {"GIT_SSH": "/usr/bin/plink"}, {"core.sshcommand": "other"}.get) == ["/usr/bin/plink", "-P", "2222", "git@example.org", "x"]
    assert ssh_command(REMOTE, "x", {"GIT_SSH": "TortoisePlink.exe"}, no_config)[:3] == ["TortoisePlink.exe", "-batch", "-P"]
    # A host that looks like an option never becomes one.
    assert ssh_command(SshRemote("-oProxyCommand=evil", "", "r"), "x", {}, no_config) == ["ssh", "--", "-oProxyCommand=evil", "x"]


def test_credentials_are_cached_until_they_expire_and_checked_each_time() -> None:
    answers = [SshAuth("https://h/info/lfs", {"Authorization": f"Bearer {n}"}, time.time() + 3600) for n in range(3)]
    checked: list[str] = []
    creds = SshCredentials(lambda: answers.pop(0), checked.append)
    assert creds() == creds() == {"Authorization": "Bearer 0"} and creds.runs == 1
    expiring = SshCredentials(lambda: SshAuth("https://h", {"A": "b"}, time.time() + 1), checked.append)
    expiring(), expiring()
    assert expiring.runs == 2  # within the 5 s margin: asked again
    assert checked == ["https://h/info/lfs", "https://h", "https://h"]


def test_an_answer_naming_another_origin_is_never_used() -> None:
    def refuse(href: str) -> None:
        raise TransferError("other origin")

    creds = SshCredentials(lambda: SshAuth("https://elsewhere", {"Authorization": "Bearer t"}, time.time() + 60), refuse)
    with pytest.raises(TransferError):
        creds()


SIGNER = Signer(b"s" * 32)
ALICE = Grant("alice", ["acme/*", "datasets/acme/*"], "write")


def test_authenticate_names_the_repo_s_endpoint_and_a_token_for_it_alone() -> None:
    reply = answer("git-lfs-authenticate '/acme/model.git' upload", ALICE, SIGNER.mint_user, "https://xet.example.com/", 60, None)
    body = json.loads(reply.stdout)
    assert body["href"] == "https://xet.example.com/acme/model.git/info/lfs" and body["expires_in"] == 60
    claims = SIGNER.claims_of(body["header"]["Authorization"].removeprefix("Bearer "))
    assert (claims.repo, claims.scope, claims.kind) == ("acme/model", "write", "user")
    assert claims.id in reply.log and body["header"]["Authorization"] not in reply.log
    download = json.loads(answer("git-lfs-authenticate datasets/acme/d download", ALICE, SIGNER.mint_user, "https://x", 60, None).stdout)
    assert SIGNER.claims_of(download["header"]["Authorization"].split()[1]).scope == "read"


@pytest.mark.parametrize(
    ("command", "grant"),
    [
        ("git-lfs-authenticate other/model.git upload", ALICE),  # another namespace
        ("git-lfs-authenticate acme/model/extra.git upload", ALICE),  # * stays within one segment
        ("git-lfs-authenticate acme/model.git upload", Grant("bob", ["acme/*"], "read")),  # a reader uploading
        ("git-lfs-authenticate acme/model.git delete", ALICE),
        ("git-lfs-transfer acme/model.git upload", ALICE),  # the pure SSH protocol
        ("git-receive-pack 'acme/model.git'", ALICE),  # git not served without --git-root
        ("bash -i", ALICE),
        ("", ALICE),
    ],
)
def test_what_a_key_may_not_have_is_refused_and_nothing_is_minted(command: str, grant: Grant) -> None:
    minted: list[str] = []

    def mint(scope: str, ttl: int, repo: str):
        minted.append(repo)
        return SIGNER.mint_user(scope, ttl, repo)

    with pytest.raises(Refused):
        answer(command, grant, mint, "https://x", 60, None)
    assert minted == []


@settings(deadline=None)
@given(st.lists(st.sampled_from(["..", ".", "acme", "model.git", "", "x..y", "-n", "~", "a b", "%2e%2e"]), min_size=1, max_size=5))
def test_no_requested_path_leaves_the_git_root(segments: list[str]) -> None:
    path = "/".join(segments)
    try:
        repo = repo_of(path)
    except Refused:
        return
    parts = repo.split("/")
    assert all(p not in ("", ".", "..") and not p.startswith(("-", ".")) for p in parts)
    assert (Path("/srv/git") / f"{repo}.git").resolve().is_relative_to("/srv/git")


def test_git_is_served_from_the_git_root_to_who_may(tmp_path: Path) -> None:
    (tmp_path / "acme" / "model.git").mkdir(parents=True)
    reply = answer("git-receive-pack '/acme/model.git'", ALICE, SIGNER.mint_user, "https://x", 60, tmp_path)
    assert reply.exec_argv == ["git", "receive-pack", str(tmp_path / "acme" / "model.git")]
    with pytest.raises(Refused, match="may not push"):
        answer("git-receive-pack 'acme/model.git'", Grant("bob", ["acme/*"], "read"), SIGNER.mint_user, "https://x", 60, tmp_path)
    with pytest.raises(Refused, match="no repository"):
        answer("git-upload-pack 'acme/other.git'", ALICE, SIGNER.mint_user, "https://x", 60, tmp_path)
