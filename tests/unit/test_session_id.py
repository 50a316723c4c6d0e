"""X-Xet-Session-Id values: random version-4 UUIDs in their canonical text form."""

from __future__ import annotations

import uuid

from git_xet.core.http_headers import new_session_id


def test_session_ids_are_canonical_random_version_4_uuids() -> None:
    ids = [new_session_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text  # lower-case hex, dashes where uuid puts them
    # every bit outside the version and variant fields varies across the sample
    fixed = 0xFFFFFFFF_FFFF_0FFF_3FFF_FFFFFFFFFFFF  # all bits but the version (4) and variant (2) fields
    varied = 0
    for text in ids:
        varied |= uuid.UUID(text).int ^ uuid.UUID(ids[0]).int
    assert varied == fixed
