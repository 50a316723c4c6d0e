"""Usage and dedup per repository (git-xet issue 46 §1), from the index's rows.

A stand-in with the interface `git xet usage` uses (repo_usage): the admin page and API show
these figures. It reads every row of files, repo_files and xorb_refs, through the index's
export_rows, so it works on both index kinds at the cost of a full read per call.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

from .index_base import MetadataIndex


class RepoUsage(NamedTuple):
    repo: str
    files: int
    logical_bytes: int  # the sum of its files' sizes
    unique_bytes: int  # stored bytes of xorbs only its files use
    shared_bytes: int  # stored bytes of xorbs its files share with another repo's
    dedup_ratio: float  # logical bytes per stored byte it uses (1.0 with nothing stored)


def repo_usage(index: MetadataIndex, repo: str | None = None) -> list[RepoUsage]:
    """Each repository's usage (only `repo`'s when given), sorted by name."""
    sizes = {row[0]: int(row[1]) for row in index.export_rows("files")}
    xorb_bytes = {xorb: int(size) for xorb, size in index.iter_xorbs()}
    xorbs_of_file: dict[str, set[str]] = defaultdict(set)
    for xorb, file_hex in index.export_rows("xorb_refs"):
        xorbs_of_file[file_hex].add(xorb)
    files_of_repo: dict[str, set[str]] = defaultdict(set)
    for name, file_hex in index.export_rows("repo_files"):
        files_of_repo[name].add(file_hex)
    repos_of_xorb: dict[str, set[str]] = defaultdict(set)
    for name, files in files_of_repo.items():
        for file_hex in files:
            for xorb in xorbs_of_file[file_hex]:
                repos_of_xorb[xorb].add(name)
    usages = []
    for name in sorted(files_of_repo):
        if repo is not None and name != repo:
            continue
        files = files_of_repo[name]
        used = {x for f in files for x in xorbs_of_file[f]}
        unique = sum(xorb_bytes.get(x, 0) for x in used if len(repos_of_xorb[x]) == 1)
        shared = sum(xorb_bytes.get(x, 0) for x in used if len(repos_of_xorb[x]) > 1)
        logical = sum(sizes.get(f, 0) for f in files)
        stored = unique + shared
        usages.append(RepoUsage(name, len(files), logical, unique, shared, logical / stored if stored else 1.0))
    return usages
