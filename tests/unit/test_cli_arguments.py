"""What the command line refuses before anything runs, and `git xet --version`.

In-process (argparse only): nothing here starts a server or touches a store."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet import __version__
from git_xet.cli import build_parser

# Every command that takes a data directory or a store: an empty value (an unset variable in a
# unit file or a script) used to become the current directory, or "no store" for install.
PATH_OPTIONS = [
    ["serve", "--data", "{}"],
    ["fsck", "--data", "{}"],
    ["gc", "--data", "{}"],
    ["token", "--data", "{}"],
    ["install", "--standalone", "{}"],
]

blank = st.text(alphabet=" \t\n", max_size=4)


@pytest.mark.parametrize("words", PATH_OPTIONS, ids=lambda w: w[0])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # capsys is read afresh per example
@given(value=blank)
def test_an_empty_path_or_store_is_refused_with_what_to_give(words: list[str], value: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([w.format(value) for w in words])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {words[1]}: empty" in err and "unset variable" in err


@pytest.mark.parametrize("words", PATH_OPTIONS, ids=lambda w: w[0])
def test_a_named_path_is_taken(words: list[str], tmp_path) -> None:
    args = build_parser().parse_args([w.format(tmp_path) for w in words])
    assert str(getattr(args, words[1].lstrip("-"))) == str(tmp_path)


def test_version_flag_prints_the_version_as_the_version_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"git-xet {__version__} (chunker: ")
    args = build_parser().parse_args(["version"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == line
