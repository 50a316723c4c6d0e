"""Session-wide fixtures shared by several test modules: real services the tests start
themselves, on 127.0.0.1 only."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support.postgres_process import Postgres, running_postgres
from tests.support.seaweed import RunningS3, running_seaweedfs

# The suite is deterministic on a clean checkout: every generated test draws the same examples
# on every run (derandomize), and no example saved by an earlier run is replayed (no database).
# A failure found on one machine is then found on every machine, and a run cannot turn red
# because of what a previous run left in .hypothesis/. To hunt for new counterexamples with
# fresh random draws: HYPOTHESIS_PROFILE=explore bash install/test.sh tests/unit
# No deadline either: hypothesis's default (200 ms per example) is a timed assertion, and on a
# loaded 2-core machine (CI's extra runs on Python 3.10 and 3.13 share it) examples fail it at random.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


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
