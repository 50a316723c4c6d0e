"""The agent's git config snapshot answers exactly as `git config --get` does, for generated
keys: case variants, subsections holding dots and capitals (URL-scoped keys), repeated values,
empty values and valueless booleans."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.agent import endpoints

SECTIONS = st.sampled_from(["xet", "lfs", "remote", "Lfs"])
SUBSECTIONS = st.sampled_from(["", "origin", "Origin", "https://Xet.example.com/org/repo.git/info/lfs", "a.b"])
VARIABLES = st.sampled_from(["endpoint", "Token", "standalonetransferagent", "lfsurl", "url"])
VALUES = st.text(alphabet="abcXYZ019:/._- ", max_size=12)


def _key(section: str, sub: str, var: str) -> str:
    return f"{section}.{sub}.{var}" if sub else f"{section}.{var}"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_DIR", raising=False)
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    monkeypatch.chdir(tmp_path / "repo")
    return tmp_path / "repo"


def _git_get(key: str) -> str | None:
    out = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True, check=False)
    return out.stdout.rstrip("\n") or None if out.returncode == 0 else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(SECTIONS, SUBSECTIONS, VARIABLES, VALUES), max_size=8), st.lists(st.tuples(SECTIONS, SUBSECTIONS, VARIABLES), max_size=6))
def test_snapshot_answers_like_git_config_get(repo: Path, writes, reads) -> None:
    config = repo / ".git" / "config"
    original = config.read_text()
    try:
        for section, sub, var, value in writes:
            subprocess.run(["git", "config", "--add", _key(section, sub, var), value], check=True)
        with open(config, "a") as out:
            out.write("[core]\n\tvaluelessflag\n")
        endpoints._config_snapshot.cache_clear()
        for section, sub, var, _ in writes:
            for variant in (_key(section, sub, var), _key(section.upper(), sub, var.lower())):
                assert endpoints.git_config(variant) == _git_get(variant), variant
        for section, sub, var in reads:
            assert endpoints.git_config(_key(section, sub, var)) == _git_get(_key(section, sub, var))
        assert endpoints.git_config("core.valuelessflag") is None  # valueless: no string value
    finally:
        config.write_text(original)
        endpoints._config_snapshot.cache_clear()


def test_run_git_reports_a_missing_git_as_a_failure(tmp_path: Path) -> None:
    """No git on PATH is an ordinary failed result whose message says so, not a traceback."""
    from git_xet.platform.gitcmd import NOT_RUN, run_git

    result = run_git("version", env={"PATH": str(tmp_path)})
    assert (result.ok, result.returncode, result.value()) == (False, NOT_RUN, None)
    assert result.stderr.startswith("cannot run git:")


def test_run_git_decodes_any_bytes_and_reads_unset_as_none(repo: Path) -> None:
    """A config value that is not UTF-8 comes back decoded with replacements; unset and empty
    values are both None, as `git config --get` means them."""
    from git_xet.platform.gitcmd import run_git

    with open(repo / ".git" / "config", "ab") as out:
        out.write(b"[xet]\n\tlatin = caf\xe9\n\tempty =\n")
    assert run_git("config", "--get", "xet.latin").value() == "caf\ufffd"
    assert run_git("config", "--get", "xet.empty").value() is None
    unset = run_git("config", "--get", "xet.unset")
    assert (unset.returncode, unset.value()) == (1, None)
