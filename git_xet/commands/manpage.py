"""The git-xet(1) manual page, rendered from the argument parser so it never drifts from it.

`git xet --help` makes git run `man git-xet`; install/install.sh writes this page where man
finds it (`<prefix>/share/man/man1` beside the `bin` directory on PATH).
"""

from __future__ import annotations

import argparse


def _roff(text: str) -> str:
    """Escape text for roff: backslashes, hyphens, and a leading dot or quote."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def render(parser: argparse.ArgumentParser) -> str:
    from ..version import __version__

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = [
        f'.TH GIT\\-XET 1 "" "git\\-xet {__version__}" "Git Manual"',
        ".SH NAME",
        "git\\-xet \\- " + _roff(parser.description or ""),
        ".SH SYNOPSIS",
        ".B git xet",
        ".I COMMAND",
        "[options]",
        ".SH DESCRIPTION",
        _roff(
            "git-xet stores Git LFS objects with XET content-addressed storage: chunk-level "
            "deduplication, so a new version of a large file sends only what changed. git-lfs runs it "
            "as a custom transfer agent; you keep using git add, commit, push and clone."
        ),
        ".SH COMMANDS",
    ]
    for name, command in sub.choices.items():
        if name == "env":  # an alias of doctor
            continue
        usage = " ".join(command.format_usage().split()).removeprefix("usage: ")
        out += [".TP", ".B " + _roff(usage.replace("git-xet ", "git xet ", 1)), _roff(helps.get(name) or "")]
        for action in command._actions:
            if action.option_strings and action.help and action.help != argparse.SUPPRESS and "-h" not in action.option_strings:
                out += [".RS", ".TP", ".B " + _roff(", ".join(action.option_strings)), _roff(action.help), ".RE"]
    out += [
        ".SH ENVIRONMENT",
        ".TP",
        ".B GIT_XET_ENDPOINT, GIT_XET_TOKEN",
        _roff("the store and its access token, instead of git config xet.endpoint and xet.token"),
        ".TP",
        ".B GIT_XET_LOG",
        _roff("a file for the agent's full log (git-lfs hides the agent's stderr unless GIT_TRACE=1)"),
        ".TP",
        ".B GIT_XET_QUIET",
        _roff("set to 1: no retry notices or push summary on the terminal"),
        ".TP",
        ".B GIT_XET_FORK_SERVER",
        _roff("set to 0: each agent git-lfs starts imports and serves on its own, instead of through a worker forked from one that started once"),
        ".SH SEE ALSO",
        ".BR git\\-lfs (1),",
        _roff("git xet doctor, and the README of git-xet"),
    ]
    return "\n".join(out) + "\n"
