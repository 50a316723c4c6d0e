"""Signer.verify remembers the claims of tokens whose signature it checked (one HMAC per token,
not per request), and still refuses, at every use, what a fresh check refuses: a token
tampered with, signed with another secret, expired by now, revoked since, of a kind not
accepted here or of too small a scope; whatever it verified before."""

from __future__ import annotations

import hmac

from hypothesis import given
from hypothesis import strategies as st

from git_xet.server import auth
from git_xet.server.auth import AuthError, Claims, Signer

SECRET = b"s" * 32
NOW = 1_000_000


def _tokens() -> list[tuple[str, Claims]]:
    """Tokens of every kind and scope, expiring at different times; and forgeries of them."""
    signer, other = Signer(SECRET), Signer(b"o" * 32)
    made = [signer.mint_user(scope, ttl, "team/game", now=NOW) for scope in ("read", "write", "admin") for ttl in (10, 100)]
    made += [(signer.mint_cas(claims, "write", 50, now=NOW)[0], claims) for _, claims in made[2:4]]
    forged = [(other.mint_user("admin", 100, "team/game", now=NOW)[0], made[0][1])]
    head, body, sig = made[0][0].split(".")
    forged.append((f"{head}.{made[5][0].split('.')[1]}.{sig}", made[5][1]))  # another token's claims under this signature
    forged.append((f"{head}.{body}.{sig[:-2]}AA", made[0][1]))
    return made + forged


TOKENS = _tokens()
calls = st.tuples(
    st.integers(0, len(TOKENS) - 1),
    st.sampled_from(["read", "write", "admin"]),
    st.integers(NOW - 5, NOW + 120),  # the moment of the request
    st.booleans(),  # the token's id revoked by then
    st.sampled_from([auth.KINDS, ("user",), ("cas",)]),
)


def _outcome(signer: Signer, token: str, needed: str, now: int, revoked: bool, kinds: tuple[str, ...]) -> object:
    claims = TOKENS[[t for t, _ in TOKENS].index(token)][1]
    try:
        return signer.verify(token, needed, frozenset([claims.id]) if revoked else frozenset(), kinds, now=now)
    except AuthError as exc:
        return (exc.status, exc.message)


@given(st.lists(calls, min_size=1, max_size=40))
def test_a_remembered_token_gets_the_answer_a_fresh_check_gives(sequence: list[tuple[int, str, int, bool, tuple[str, ...]]]) -> None:
    remembering = Signer(SECRET)
    for index, needed, now, revoked, kinds in sequence:
        token = TOKENS[index][0]
        assert _outcome(remembering, token, needed, now, revoked, kinds) == _outcome(Signer(SECRET), token, needed, now, revoked, kinds)


def test_a_token_presented_again_is_not_hashed_again(monkeypatch) -> None:
    macs = []
    real = hmac.new
    monkeypatch.setattr(auth.hmac, "new", lambda *args, **kw: macs.append(1) or real(*args, **kw))
    signer = Signer(SECRET)
    token, _ = signer.mint_user("write", 100, "team/game", now=NOW)
    macs.clear()
    for _ in range(5):
        signer.verify(token, "write", now=NOW)
    assert len(macs) == 1


def test_forgeries_are_never_remembered() -> None:
    """Only correctly signed tokens take memory: presenting a forgery costs its HMAC every time
    and never grows the table (nobody without the secret can fill it)."""
    signer = Signer(SECRET)
    for token, _ in TOKENS[-3:]:
        for _ in range(2):
            try:
                signer.verify(token, "read", now=NOW)
            except AuthError:
                pass
    assert signer._verified == {}


def test_the_memory_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(auth, "VERIFIED_TOKENS", 3)
    signer = Signer(SECRET)
    for n in range(10):
        token, _ = signer.mint_user("read", 100 + n, "team/game", now=NOW)
        signer.verify(token, "read", now=NOW)
        assert len(signer._verified) <= 3
