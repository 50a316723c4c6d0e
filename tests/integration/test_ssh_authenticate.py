"""git-lfs-authenticate over ssh as the client runs it: a stand-in ssh (a Python script) answers,
fails or says something that is not JSON (tests/unit/test_ssh_authenticate.py has the rest)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from git_xet.client.errors import TransferError
from git_xet.client.ssh_authenticate import authenticate


def _fake_ssh(tmp: Path, body: str, code: int = 0) -> list[str]:
    script = tmp / "fake_ssh.py"
    script.write_text(f"import sys\nsys.stdout.write({body!r})\nsys.stderr.write('said no')\nsys.exit({code})\n")
    return [sys.executable, str(script)]


def test_an_answer_is_read_with_its_expiry(tmp_path: Path) -> None:
    before = time.time()
    auth = authenticate(_fake_ssh(tmp_path, json.dumps({"href": "https://h/r.git/info/lfs", "header": {"Authorization": "Bearer t"}, "expires_in": 60})))
    assert auth.href == "https://h/r.git/info/lfs" and auth.header == {"Authorization": "Bearer t"}
    assert before + 60 <= auth.expires_at <= time.time() + 60
    with pytest.raises(TransferError, match="exit code 3: said no"):
        authenticate(_fake_ssh(tmp_path, "", code=3))
    with pytest.raises(TransferError, match="not its JSON"):
        authenticate(_fake_ssh(tmp_path, "Welcome to the shell"))
