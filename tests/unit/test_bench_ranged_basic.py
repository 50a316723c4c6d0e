"""bench/ranged_basic_agent.py (upstream's git-xet download design as a git-lfs agent, the clone
baseline) cuts objects as upstream describes: up to 8 ranged GETs of at least 16 MiB each,
covering every byte once; answers git-lfs with exactly the object, and refuses other bytes
(against an in-process LFS endpoint); and its clone row reaches the summary (bench/run_all.py)."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import git_e2e
import ranged_basic_agent
import run_all

MIB = 1 << 20


@given(st.one_of(st.integers(0, 40 * MIB), st.integers(0, 1 << 40)))
def test_parts_are_at_most_8_of_at_least_16_mib_covering_every_byte_once(size: int) -> None:
    parts = ranged_basic_agent.parts(size)
    assert len(parts) <= 8
    covered = 0
    for first, last in parts:
        assert first == covered and last >= first
        covered = last + 1
    assert covered == size
    if len(parts) > 1:
        assert all(last - first + 1 >= 16 * MIB for first, last in parts)
    if size >= 8 * 16 * MIB:
        assert len(parts) == 8


def _sample(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "client_cpu": 1.0, "server_cpu": 1.0, "bytes_in": 1.0, "bytes_out": 1.0, "agent_peak_rss_mib": float("nan")}


def test_the_ranged_basic_clone_is_a_row_of_the_summary() -> None:
    run = {"push": [_sample(2.0)], "clone": [_sample(3.0)], "push_v2": [_sample(1.0)], git_e2e.RANGED_CLONE: [_sample(4.0), _sample(5.0)]}
    lfs = {"push": [_sample(2.0)], "clone": [_sample(3.0)], "push_v2": [_sample(1.0)]}
    summary = {"files": 2, "file_mib": 32, "repeats": 1, "clones": 2, "tools": {"git-xet": git_e2e.phase_medians([run]), "git-lfs": git_e2e.phase_medians([lfs])}}
    rows = [row for row in run_all.git_e2e_rows(summary) if "ranged basic" in row]
    assert len(rows) == 1 and "ranged basic 4.50 (4.00-5.00)" in rows[0] and "| 0.67 |" in rows[0]
    assert git_e2e.RANGED_CLONE not in summary["tools"]["git-lfs"]


class _LfsEndpoint:
    """The LFS batch API and basic download URL of one object, in-process (httpx.MockTransport):
    what `git xet serve` answers the baseline agent. `corrupt_at` flips one served byte (a server
    or path sending other bytes); `ignore_range` answers 200 with the whole object."""

    def __init__(self, blob: bytes, *, corrupt_at: int | None = None, ignore_range: bool = False) -> None:
        self.blob, self.corrupt_at, self.ignore_range = blob, corrupt_at, ignore_range
        self.batches = 0
        self.ranges: list[tuple[int, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/objects/batch"):
            self.batches += 1
            assert request.headers["authorization"] == "Bearer read-token"
            [obj] = json.loads(request.content)["objects"]
            action = {"href": "http://cas.test/object", "header": {"X-Object": "1"}}
            return httpx.Response(200, json={"objects": [{**obj, "actions": {"download": action}}]})
        assert request.headers["x-object"] == "1"
        if self.ignore_range:
            return httpx.Response(200, stream=_Pieces(self.blob))
        first, _, last = request.headers["range"].removeprefix("bytes=").partition("-")
        self.ranges.append((int(first), int(last)))
        body = bytearray(self.blob[int(first) : int(last) + 1])
        if self.corrupt_at is not None and int(first) <= self.corrupt_at <= int(last):
            body[self.corrupt_at - int(first)] ^= 0xFF
        return httpx.Response(206, stream=_Pieces(bytes(body)))


class _Pieces(httpx.SyncByteStream):
    """A body streamed in 1000-byte pieces, as a socket delivers it (a `content=` body would be
    read at once, and the agent streams)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        for at in range(0, len(self.body), 1000):
            yield self.body[at : at + 1000]


def _serve(endpoint: _LfsEndpoint, blob: bytes, tmp: Path) -> list[dict]:
    """One agent session as git-lfs runs it: init, one download, terminate; the answers."""
    out = io.StringIO()
    agent = ranged_basic_agent.Agent("http://git-xet.test", "read-token", out, transport=httpx.MockTransport(endpoint))
    agent.tmp_dir, agent.min_part = tmp, 4096
    oid = hashlib.sha256(blob).hexdigest()
    requests = [{"event": "init", "operation": "download", "concurrenttransfers": 8}, {"event": "download", "oid": oid, "size": len(blob)}, {"event": "terminate"}]
    agent.serve(io.StringIO("".join(json.dumps(r) + "\n" for r in requests)))
    return [json.loads(line) for line in out.getvalue().splitlines()]


@given(st.binary(max_size=40_000) | st.integers(0, 80_000).map(lambda n: bytes(i * 7 % 251 for i in range(n))))
def test_the_agent_answers_git_lfs_with_the_object_fetched_in_ranges(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        endpoint = _LfsEndpoint(blob)
        answers = _serve(endpoint, blob, Path(tmp))
        assert answers[0] == {}
        *progress, done = answers[1:]
        assert done["event"] == "complete" and "error" not in done
        assert Path(done["path"]).read_bytes() == blob and Path(done["path"]).parent == Path(tmp)
        assert sum(p["bytesSinceLast"] for p in progress) == len(blob)
        assert [p["bytesSoFar"] for p in progress] == sorted({p["bytesSoFar"] for p in progress})
        assert endpoint.batches == 1
        assert sorted(endpoint.ranges) == ranged_basic_agent.parts(len(blob), min_part=4096)


@given(st.integers(1, 40_000), st.data())
def test_the_agent_refuses_bytes_that_are_not_the_object_and_leaves_no_file(size: int, data: st.DataObject) -> None:
    blob = bytes(i * 13 % 256 for i in range(size))
    corrupt_at = data.draw(st.integers(0, size - 1))
    with tempfile.TemporaryDirectory() as tmp:
        for endpoint in (_LfsEndpoint(blob, corrupt_at=corrupt_at), _LfsEndpoint(blob, ignore_range=True)):
            done = _serve(endpoint, blob, Path(tmp))[-1]
            assert done["event"] == "complete" and "error" in done and "path" not in done
            assert list(Path(tmp).iterdir()) == []
