"""Session-wide fixtures shared by several test modules: real services the tests start
themselves, on 127.0.0.1 only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres_process import Postgres, running_postgres
from tests.support.seaweed import RunningS3, running_seaweedfs


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One private PostgreSQL cluster for the whole test session (each test makes its own database)."""
    with running_postgres() as pg:
        yield pg


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningS3]:
    """One SeaweedFS S3 server for the whole run (it takes seconds to start); tests make their
    own buckets with `seaweed.new_bucket()`."""
    with running_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server
