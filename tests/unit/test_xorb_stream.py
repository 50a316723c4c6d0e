"""StreamingXorbVerifier: verifying while the bytes arrive accepts and refuses exactly what
verify_xorb does for the finished body, whatever the steps the bytes arrive in."""

from __future__ import annotations

import mmap

from hypothesis import example, given, settings
from hypothesis import strategies as st

from git_xet.core import xorb
from git_xet.core.checksums import crc64nvme, crc64nvme_reference
from git_xet.core.errors import FormatError
from git_xet.core.xorb_stream import StreamingXorbVerifier
from tests.support.datagen import float32_like, random_bytes

_KINDS = {
    "noise": lambda n, seed: random_bytes(n, seed),
    "zeros": lambda n, seed: bytes(n),
    "floats": lambda n, seed: float32_like(n, seed),
}


def _body(kinds: list[tuple[str, int]]) -> bytes:
    builder = xorb.XorbBuilder()
    for i, (kind, size) in enumerate(kinds):
        builder.add(_KINDS[kind](size, i))
    return bytes(builder.build().body)


def _stream(data: bytes, cuts: list[int], crc: bool = False) -> tuple[StreamingXorbVerifier, int]:
    """Feed `data` into a buffer the way the server does: written in pieces, advanced at the
    given cut points (in any order the receiver might reach them: ascending)."""
    buffer = mmap.mmap(-1, max(len(data), 1))
    verifier = StreamingXorbVerifier(buffer, crc=crc)
    written = 0
    for cut in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
        buffer[written:cut] = data[written:cut]
        written = cut
        verifier.advance(cut)
    return verifier, len(data)


def _outcome(run):
    """(fields of the VerifiedXorb, None) or (None, (exception type, message))."""
    try:
        v = run()
    except FormatError as exc:
        return None, (type(exc), str(exc))
    return (v.xorb_hash, bytes(v.body), v.chunk_hashes, v.chunk_sizes, v.byte_ends), None


def _mutate(body: bytes, how: str, fraction: float) -> bytes:
    where = min(int(fraction * len(body)), len(body) - 1)
    if how == "flip":
        return body[:where] + bytes([body[where] ^ 0x40]) + body[where + 1 :]
    if how == "truncate":
        return body[:where]
    if how == "garbage":
        return body + random_bytes(where % 50 + 1, where)  # stray bytes after the last record
    if how == "footer":  # a client may send the footer along: verify_xorb reads it
        return xorb.verify_xorb(body).with_footer()
    if how == "bad footer":
        return xorb.verify_xorb(body).with_footer()[:-20] + bytes(16) + body[-4:]
    return body


chunk_specs = st.lists(st.tuples(st.sampled_from(sorted(_KINDS)), st.integers(1, 70_000)), min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(
    chunk_specs,
    st.lists(st.integers(0, 1 << 20), max_size=12),
    st.sampled_from(["none", "flip", "truncate", "garbage", "footer", "bad footer"]),
    st.floats(0, 1),
    st.booleans(),
)
@example([("noise", 5000), ("noise", 7000)], [4000], "flip", 0.9, True)  # a payload byte: hash mismatch
@example([("noise", 5000), ("zeros", 7000)], [100, 6000], "footer", 0.0, True)  # read as a footer
@example([("noise", 5000)], [], "bad footer", 0.0, False)
def test_streamed_verification_agrees_with_verify_xorb(specs, cuts, how, where, expect_hash) -> None:
    """Same VerifiedXorb, or the same error type and message, as verify_xorb on the whole
    body: for intact, tampered, truncated, extended and footer-carrying bodies, any steps."""
    good = _body(specs)
    expected = xorb.verify_xorb(good).xorb_hash if expect_hash else None
    data = _mutate(good, how, where)
    verifier, length = _stream(data, cuts)
    assert _outcome(lambda: verifier.finish(length, expected)) == _outcome(lambda: xorb.verify_xorb(data, expected))


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=0, max_size=5000), st.lists(st.integers(0, 5000), max_size=8))
def test_crc_over_any_steps_is_the_crc_of_the_body(data: bytes, cuts: list[int]) -> None:
    """The CRC-64/NVME computed step by step is the bitwise reference's over the whole body."""
    assert crc64nvme is not None, "the C extension is built by the install"
    verifier, length = _stream(data, cuts, crc=True)
    assert verifier.crc64(length) == crc64nvme_reference(data)


def test_a_chunk_that_ends_like_a_footer_is_judged_as_verify_xorb_does() -> None:
    """A raw chunk whose bytes end with a serialized footer: the records parse, but the body
    also ends the way a footer-carrying xorb does, and verify_xorb reads it that way."""
    footer = xorb.verify_xorb(_body([("noise", 3000)])).footer().serialize()
    builder = xorb.XorbBuilder()
    builder.add(random_bytes(9000, 3) + footer)  # noise: stored raw, so the body ends with `footer`
    data = bytes(builder.build().body)
    assert xorb.has_footer(data)
    verifier, length = _stream(data, [5000])
    outcome = _outcome(lambda: verifier.finish(length))
    assert outcome == _outcome(lambda: xorb.verify_xorb(data))
    assert outcome[0] is None, "verify_xorb reads the tail as a footer and refuses the body"
