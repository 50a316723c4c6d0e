"""When `git xet serve` offers upload grants: where they let a xorb's bytes bypass the server
(a bucket), unless told otherwise; and the command line names exactly the server's modes."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from git_xet.cli import build_parser
from git_xet.server.state import GrantMode, ServerConfig

BUCKET = "s3://bucket/prefix"


@pytest.mark.parametrize(
    ("mode", "objects", "offered"),
    [
        ("auto", None, False),  # the PUT would come back here: two requests more per xorb
        ("auto", BUCKET, True),  # the PUT goes straight to the bucket
        ("always", None, True),
        ("always", BUCKET, True),
        ("never", None, False),
        ("never", BUCKET, False),
    ],
)
def test_grants_are_offered_where_they_bypass_the_server(mode: GrantMode, objects: str | None, offered: bool) -> None:
    assert ServerConfig(Path("data"), upload_grants=mode, objects=objects).offers_grants is offered


def test_the_command_line_offers_the_servers_modes_and_auto_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--data", "d"]).upload_grants == "auto"
    for mode in get_args(GrantMode):
        assert parser.parse_args(["serve", "--data", "d", "--upload-grants", mode]).upload_grants == mode
    assert parser.parse_args(["serve", "--data", "d", "--no-upload-grants"]).upload_grants == "never"  # the older spelling
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--data", "d", "--upload-grants", "sometimes"])
