"""What a user token covers (server/access.py, Claims.may): one repo, or the repos directly under
a namespace pattern NS/*, never a repo reached by a prefix, a deeper path or a dot segment; and
the role order read < write < admin. CAS tokens minted from a pattern token name one repo."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.server import access
from git_xet.server.auth import AuthError, Claims, Signer

SECRET = b"s" * 32
segments = st.text(alphabet="abcZ09._-", min_size=1, max_size=8)
# Names an attacker would try: other namespaces sharing a prefix, dot segments, deeper paths,
# empty segments, encoded separators and wildcards.
tricky = st.sampled_from(["..", ".", "", "%2e%2e", "a/..", "../x", "a/b", "*", "a%2fb", "a\\b", "a\x00", " a", "a "])
names = st.one_of(segments, tricky, st.builds(lambda a, b: a + b, segments, tricky))


@given(st.lists(segments.filter(access._SEGMENT.fullmatch), min_size=1, max_size=3), st.lists(names, min_size=1, max_size=4))
def test_a_pattern_covers_exactly_the_plain_repos_directly_under_its_namespace(namespace: list[str], rest: list[str]) -> None:
    ns = "/".join(namespace)
    pattern = access.check_grant(ns + "/*")
    for repo in (ns + "/" + "/".join(rest), ns + "".join(rest), ns + "-" + "/".join(rest), "/".join(rest)):
        expected = repo.startswith(ns + "/") and "/" not in repo[len(ns) + 1 :] and access._SEGMENT.fullmatch(repo[len(ns) + 1 :]) is not None
        assert access.grant_covers(pattern, repo) == expected, repo
        if expected:  # a plain name, not a dot segment
            assert repo[len(ns) + 1 :] not in (".", "..") and not repo[len(ns) + 1 :].startswith(".")


@pytest.mark.parametrize("repo", ["team-evil/x", "teamx/y", "team", "team/", "team/../x", "team/..", "team/.", "team/a/b", "team/*", "other/team/x", "team/.git"])
def test_team_star_does_not_reach_outside_team(repo: str) -> None:
    assert not access.grant_covers("team/*", repo)


def test_an_exact_grant_covers_only_itself() -> None:
    assert access.grant_covers("team/game", "team/game")
    assert not access.grant_covers("team/game", "team/game2") and not access.grant_covers("team/game", "team/gam")


@pytest.mark.parametrize("grant", ["*", "/*", "team/../*", "team/*/x", "te*m/x", "team*", "", "team//*", "./*"])
def test_malformed_grants_are_refused_at_minting(grant: str) -> None:
    with pytest.raises(ValueError):
        Signer(SECRET).mint_user("write", 60, grant)


@pytest.mark.parametrize("user", ["", "a:b", "token:abc", "a b", "-x", "x" * 65, "é"])
def test_malformed_user_names_are_refused(user: str) -> None:
    with pytest.raises(ValueError):
        access.check_user(user)


@given(st.sampled_from(access.ROLES), st.sampled_from(access.ROLES))
def test_roles_are_ordered(role: str, needed: str) -> None:
    assert access.role_allows(role, needed) == (access.ROLES.index(role) >= access.ROLES.index(needed))


def test_a_token_names_its_user_and_a_user_less_token_is_its_own_user() -> None:
    signer = Signer(SECRET)
    token, _ = signer.mint_user("write", 60, "team/*", user="alice")
    assert signer.verify(token, "write").owner == "alice"
    old, old_claims = signer.mint_user("read", 60, "team/game")  # no --user: as tokens minted before users
    verified = signer.verify(old, "read")
    assert verified.user == "" and verified.owner == f"token:{old_claims.id}" and verified.may("read", "team/game") == "team/game"


def test_cas_tokens_from_a_pattern_token_name_one_repo() -> None:
    signer = Signer(SECRET)
    _, parent = signer.mint_user("write", 60, "team/*", user="alice")
    cas, _ = signer.mint_cas(parent, "write", 60, repo="team/game")
    claims = signer.verify(cas, "write")
    assert (claims.kind, claims.repo, claims.owner) == ("cas", "team/game", "alice")
    with pytest.raises(AuthError) as refused:
        claims.may("read", "team/other")
    assert refused.value.status == 403
    for target in ("team-evil/x", "team/../x", None):  # None: the pattern itself is no repo
        with pytest.raises(AuthError):
            signer.mint_cas(parent, "read", 60, repo=target)


def test_a_pattern_token_on_a_route_of_its_own_repo_says_which_endpoint_to_use() -> None:
    claims = Claims("user", "i", "write", 2**40, "team/*", "alice")
    with pytest.raises(AuthError, match=r"team/NAME\.git/info/lfs"):
        claims.may("read")


def test_a_read_token_may_not_write_and_a_write_token_may_not_administer() -> None:
    reader = Claims("user", "i", "read", 2**40, "team/*", "r")
    writer = Claims("user", "i", "write", 2**40, "team/*", "w")
    with pytest.raises(AuthError):
        reader.may("write", "team/game")
    with pytest.raises(AuthError):
        writer.may("admin", "team/game")
    assert Claims("user", "i", "admin", 2**40, "team/*", "a").may("write", "team/game") == "team/game"
