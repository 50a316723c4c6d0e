"""Hashes against the draft's test vectors and interop-facts vectors."""

import blake3
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.constants import DATA_KEY, ZERO_HASH


def test_hash_string_vector() -> None:
    digest = bytes(range(32))
    assert hashes.hash_to_hex(digest) == "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"
    assert hashes.hex_to_hash("07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918") == digest


@given(st.binary(min_size=32, max_size=32))
def test_hash_string_round_trip(digest: bytes) -> None:
    text = hashes.hash_to_hex(digest)
    assert hashes.is_hash_hex(text)
    assert hashes.hex_to_hash(text) == digest
    assert hashes.hex_to_hash(text.upper()) == digest
    # The definition, lane by lane: each 8-byte lane reversed (little-endian u64), as hex.
    assert text == "".join(digest[i : i + 8][::-1].hex() for i in range(0, 32, 8))


def test_hex_to_hash_rejects_malformed() -> None:
    import pytest

    from git_xet.core.errors import FormatError

    for bad in ["", "00" * 31, "zz" * 32, "../" + "0" * 61, "0" * 65, "0_" * 32, " " + "0" * 63, "+" + "0" * 63]:
        with pytest.raises(FormatError):
            hashes.hex_to_hash(bad)
        assert not hashes.is_hash_hex(bad)


def test_chunk_hash_vector() -> None:
    digest = hashes.chunk_hash(b"Hello World!")
    assert digest.hex() == "a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8"
    assert hashes.hash_to_hex(digest) == "d8d408e608fb9ca213b9909a65d86d725f2de4d8d540324be8a363e7a6e228cb"
    # Independent derivation: BLAKE3 keyed hash with DATA_KEY.
    assert digest == blake3.blake3(b"Hello World!", key=DATA_KEY).digest()


def test_hello_world_file_hash_vector() -> None:
    digest = hashes.chunk_hash(b"Hello World!")
    assert (
        hashes.hash_to_hex(hashes.file_hash([digest], [12]))
        == "a9dae0ad88b060bdd7e7c87abdcf95b132c95a0414b06d4f6beb68d287b87165"
    )


def test_internal_node_vector() -> None:
    children = [
        (hashes.hex_to_hash("c28f58387a60d4aa200c311cda7c7f77f686614864f5869eadebf765d0a14a69"), 100),
        (hashes.hex_to_hash("6e4e3263e073ce2c0e78cc770c361e2778db3b054b98ab65e277fc084fa70f22"), 200),
    ]
    digest, size = hashes.merged_node_hash(children)
    assert size == 300
    assert hashes.hash_to_hex(digest) == "be64c7003ccd3cf4357364750e04c9592b3c36705dee76a71590c011766b6c14"
    # Two leaves merge into exactly that one node.
    assert hashes.merkle_root(children) == digest


def test_verification_vector() -> None:
    first = bytes.fromhex("aad4607a38588fc2777f7cda1c310c209e86f564486186f6694aa1d065f7ebad")
    second = bytes.fromhex("2cce73e063324e6e271e360c77cc780e65ab984b053bdb78220fa74f08fc77e2")
    assert (
        hashes.hash_to_hex(hashes.verification_hash([first, second]))
        == "eb06a8ad81d588ac05d1d9a079232d9c1e7d0b07232fa58091caa7bf333a2768"
    )


def test_empty_file_hash_is_zero() -> None:
    assert hashes.file_hash([], []) == ZERO_HASH
    assert hashes.xorb_hash([], []) == ZERO_HASH


def test_single_zero_chunk_file_hash_differs_from_empty() -> None:
    # interop-facts: one chunk of zero hash and size 0 hashes to 638a6bc3...8a4c.
    text = hashes.hash_to_hex(hashes.file_hash([ZERO_HASH], [0]))
    assert text.startswith("638a6bc3") and text.endswith("8a4c")


def test_merkle_root_matches_literal_draft_algorithm() -> None:
    """Our tree against a transcription of the draft's in-place collapsing loop."""

    def draft_root(entries: list[tuple[bytes, int]]) -> bytes:
        hv = list(entries)
        while len(hv) > 1:
            write_idx = read_idx = 0
            while read_idx < len(hv):
                rest = hv[read_idx:]
                n = len(rest)
                if n <= 2:
                    cut = n
                else:
                    cut = min(9, n)
                    for i in range(2, min(9, n)):
                        if int.from_bytes(rest[i][0][24:32], "little") % 4 == 0:
                            cut = i + 1
                            break
                hv[write_idx] = hashes.merged_node_hash(hv[read_idx : read_idx + cut])
                write_idx += 1
                read_idx += cut
            hv = hv[:write_idx]
        return hv[0][0]

    for n in [1, 2, 3, 9, 10, 64, 1000]:
        entries = [(hashes.chunk_hash(i.to_bytes(4, "little")), 1000 + i) for i in range(n)]
        assert hashes.merkle_root(entries) == draft_root(entries)


def test_hmac_is_blake3_keyed_hash_of_raw_chunk_hash() -> None:
    key = bytes(range(32, 64))
    digest = hashes.chunk_hash(b"abc")
    assert hashes.hmac_chunk_hash(digest, key) == blake3.blake3(digest, key=key).digest()
    assert hashes.hmac_chunk_hash(digest, key) != hashes.hmac_chunk_hash(digest, bytes(32))


def test_global_dedup_eligibility_uses_last_lane() -> None:
    assert hashes.is_global_dedup_eligible(bytes(24) + (1024 * 5).to_bytes(8, "little"))
    assert not hashes.is_global_dedup_eligible(bytes(24) + (1024 * 5 + 1).to_bytes(8, "little"))


def test_hash_sort_key_is_hash_string_order() -> None:
    import random

    rng = random.Random(3)
    digests = [rng.randbytes(32) for _ in range(200)]
    assert sorted(digests, key=hashes.hash_sort_key) == sorted(digests, key=hashes.hash_to_hex)
