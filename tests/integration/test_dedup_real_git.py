"""Real-shaped data pushed through real git + git-lfs sends no more than hf-xet (issue 41 §6).

The datasets of tests/support/real_shaped.py (Parquet edits with and without content-defined
chunking, a checkpoint sequence, a GGUF quantization family), small, are committed and pushed
version by version with git and git-lfs (3.3.0 or 3.6.1, two datasets each) through our agent into a `git xet
serve` on 127.0.0.1 (`install --standalone URL`), and one dataset into a local directory store
(`install --standalone DIR`: the agent writes the store itself); hf-xet uploads the same versions in the same
order to a server of its own, with one HF_XET_CACHE. On every push, the bytes the push wrote
to its store (new xorbs and shards, as the server or the agent keeps them) must not exceed hf-xet's: the
same chunks dedup the same way, and compression gives no larger xorbs
(test_compression_vs_hf_xet.py). Bytes at the store, not request bodies: our agent sends a
small push's xorb and shard in one request, whose framing adds ~40 body bytes and saves a
request (its headers, a round trip) that the access log's body counts do not see.
A family's versions are files of their own (model-Q8_0.gguf, ...), the other datasets one
file edited in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import hf_xet_oracle
from tests.support.gitenv import make_git_env
from tests.support.objects import stored_objects
from tests.support.real_shaped import Version, checkpoint_versions, parquet_versions, quantization_family
from tests.support.server_process import running_server

pytest.importorskip("hf_xet", reason="hf-xet (the peer compared with) is a test dependency")

DATASETS: dict[str, Callable[[], list[Version]]] = {
    "parquet-cdc": lambda: parquet_versions(True, 0.5, 11),
    "parquet": lambda: parquet_versions(False, 0.5, 12),
    "checkpoints": lambda: checkpoint_versions(1.0, 13, 2),
    "quantizations": lambda: quantization_family(0.25, 14, 2),
}


@functools.cache
def _versions(name: str) -> tuple[Version, ...]:
    return tuple(DATASETS[name]())


def _stored(data_dir: Path) -> dict[str, int]:
    return {**stored_objects(data_dir, "xorbs/"), **stored_objects(data_dir, "shards/")}


def _written(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(size for key, size in after.items() if key not in before)


@functools.cache
def _hf_xet_pushes(name: str, workdir: Path) -> tuple[int, ...]:
    """Bytes each of hf-xet's uploads of the dataset's versions wrote to its store."""
    written = []
    with running_server(workdir / name / "server" / "data") as srv:
        token = srv.token("write")
        seen = _stored(srv.data_dir)
        for n, version in enumerate(_versions(name)):
            path = workdir / name / f"v{n}.bin"
            path.write_bytes(version.data)
            hf_xet_oracle.remote_upload([path], srv.url, token, workdir / name / "hf-xet")
            now = _stored(srv.data_dir)
            written.append(_written(seen, now))
            seen = now
    return tuple(written)


# Each dataset with one git-lfs, each git-lfs with two datasets: a push costs seconds of git,
# git-lfs and agent start-ups, and the module stays near a minute. The directory store reuses a
# dataset whose hf-xet figures are already made, with the git-lfs that dataset has not met.
PAIRS = [
    ("parquet-cdc", "system", "server"),
    ("checkpoints", "system", "server"),
    ("parquet", "3.6.1", "server"),
    ("quantizations", "3.6.1", "server"),
    ("parquet-cdc", "3.6.1", "directory"),
]


@contextmanager
def _store(kind: str, root: Path) -> Iterator[tuple[str, Path, str | None]]:
    """(what `install --standalone` is given, the store's data directory, a write token or
    None): a `git xet serve` on 127.0.0.1, or a directory the agent writes itself."""
    if kind == "directory":
        yield str(root / "store"), root / "store", None
        return
    with running_server(root / "srv" / "data") as srv:
        yield srv.url, srv.data_dir, srv.token("write")


@pytest.mark.parametrize(("dataset", "lfs_path", "store"), PAIRS, indirect=["lfs_path"])
def test_each_push_sends_no_more_than_hf_xet(dataset: str, lfs_path: str, store: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    versions = _versions(dataset)
    theirs = _hf_xet_pushes(dataset, tmp_path_factory.getbasetemp() / "hf-xet-pushes")
    g = make_git_env(tmp_path)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    sent: list[int] = []
    with _store(store, tmp_path) as (endpoint, data_dir, token):
        g.git_xet("install", "--standalone", endpoint)
        if token is not None:
            g.git("config", "--global", "xet.token", token)
        work = g.lfs_work_tree({})
        seen = _stored(data_dir)
        for version in versions:
            name = f"model-{version.name}.bin" if dataset == "quantizations" else "data.bin"
            (work / name).write_bytes(version.data)
            g.git("add", name, cwd=work)
            g.git("commit", "-qm", version.name, cwd=work)
            g.git("push", "-q", "origin", "main", cwd=work)
            now = _stored(data_dir)
            sent.append(_written(seen, now))
            seen = now
        g.git("clone", "-q", "remote.git", "check")
        assert (g.root / "check" / name).read_bytes() == versions[-1].data
    assert sent[0] > 0, f"the first push wrote nothing into {data_dir}: the store looked at is not the one written"
    over = [(v.name, mine, hf) for v, mine, hf in zip(versions, sent, theirs) if mine > hf]
    assert not over, f"pushes that sent more than hf-xet (version, ours, hf-xet): {over}"
    assert sum(sent[1:]) < sum(len(v.data) for v in versions[1:]), "dedup must have saved something"
