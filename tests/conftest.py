"""Session-wide fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres_process import Postgres, running_postgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One private PostgreSQL cluster for the whole test session (each test makes its own database)."""
    with running_postgres() as pg:
        yield pg
