"""A server's data directory: made private when git-xet makes it, never chmodded when it existed."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from git_xet.storage.cas_store import CasStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_data_directory_made_here_is_private_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0o002)
    try:
        store = CasStore(tmp_path / "new" / "data", private=True)
    finally:
        os.umask(old)
    store.close()
    assert _mode(tmp_path / "new" / "data") == 0o700


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711, 0o777])
def test_an_existing_open_directory_is_left_as_it_is_and_the_operator_is_told(tmp_path, mode: int, caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="git_xet.storage.cas_store"):
        CasStore(shared, private=True).close()
    assert _mode(shared) == mode
    assert f"chmod 700 {shared}" in caplog.text


def test_an_existing_private_directory_raises_no_warning(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    data.chmod(0o700)
    with caplog.at_level(logging.WARNING, logger="git_xet.storage.cas_store"):
        CasStore(data, private=True).close()
    assert _mode(data) == 0o700 and not caplog.text
