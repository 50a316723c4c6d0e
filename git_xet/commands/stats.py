"""`git xet stats`: what the last push from this repository sent and deduplicated (the agent
records it: agent/summary.py).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..agent.endpoints import ConfigError, git_common_dir
from ..agent.summary import describe, last_push

if TYPE_CHECKING:
    import argparse


def cmd_stats(args: argparse.Namespace) -> int:
    try:
        state = git_common_dir() / "xet"
    except ConfigError as exc:
        print(f"git-xet stats: {exc}; run it inside the repository you pushed from", file=sys.stderr)
        return 1
    totals = last_push(state)
    if args.json:
        print(json.dumps(totals.as_dict() if totals else None))
    else:
        print(f"last push: {describe(totals)}" if totals else "no push through git-xet recorded in this repository yet")
    return 0
