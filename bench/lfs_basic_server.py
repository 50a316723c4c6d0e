"""A plain Git LFS server (batch API + `basic` transfers, objects as files): the baseline
git-lfs is compared against. Not part of git-xet; it exists so the benchmark measures stock
git-lfs on the same machine, over the same loopback, in the same run.

    python bench/lfs_basic_server.py DATA_DIR [--verify-sha256] [--no-fsync]   # prints its URL, then serves

Every repository path shares one object store under DATA_DIR/objects. Each request's body
size is appended to DATA_DIR/requests.jsonl so the benchmark can count bytes sent.

An upload is answered only once it is durable (the object file fsynced, renamed into place,
the directory fsynced), as a real LFS server's would be and as git-xet's stores are: a
baseline that acknowledges bytes still in the page cache would flatter git-lfs.
With --no-fsync it answers once the file is renamed into place, unsynced, as the LFS servers
users run do: Gitea's local storage (modules/storage/local.go: a temp file, io.Copy, Close,
Rename) and git-lfs's own test server (objects in memory).

It stores what it is sent under the oid in the URL without checking it: the baseline the push
target in the README was set against ("it only streams bytes"). With --verify-sha256 it hashes each
upload as it arrives and refuses (422, nothing stored) one whose sha256 is not its oid, as
git-lfs's own test server does (t/cmd/lfstest-gitserver.go answers 403) and as `git xet serve`
checks the sha256 each shard claims: like against like, for bench/git_e2e.py's tool
`git-lfs-checked`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_OID = re.compile(r"^[0-9a-f]{64}$")
_COPY = 1 << 20


def make_handler(root: Path, verify_sha256: bool = False, fsync: bool = True) -> type[BaseHTTPRequestHandler]:
    objects = root / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    record_lock = threading.Lock()

    def record(method: str, path: str, bytes_in: int, bytes_out: int) -> None:
        line = json.dumps({"method": method, "path": path, "bytes_in": bytes_in, "bytes_out": bytes_out})
        with record_lock, open(root / "requests.jsonl", "a") as log:
            log.write(line + "\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, payload: dict) -> int:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.git-lfs+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return len(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.endswith("/info/lfs/objects/batch"):
                record("POST", self.path, length, self._json(404, {"message": "not found"}))
                return
            base = f"http://{self.headers['Host']}/objects"
            answers = []
            for obj in request.get("objects", []):
                oid, size = obj.get("oid", ""), obj.get("size", 0)
                if not _OID.match(oid):
                    answers.append({"oid": oid, "size": size, "error": {"code": 422, "message": "bad oid"}})
                    continue
                stored = (objects / oid).exists()
                if request.get("operation") == "upload":
                    actions = {} if stored else {"upload": {"href": f"{base}/{oid}"}}
                elif stored:
                    actions = {"download": {"href": f"{base}/{oid}"}}
                else:
                    answers.append({"oid": oid, "size": size, "error": {"code": 404, "message": "not found"}})
                    continue
                answers.append({"oid": oid, "size": size, "authenticated": True, "actions": actions})
            record("POST", self.path, length, self._json(200, {"transfer": "basic", "objects": answers}))

        def do_PUT(self) -> None:
            oid = self.path.rsplit("/", 1)[-1]
            length = int(self.headers.get("Content-Length") or 0)
            if not _OID.match(oid):
                record("PUT", self.path, 0, self._json(422, {"message": "bad oid"}))
                return
            tmp = objects / f".{oid}.{threading.get_ident()}.tmp"
            digest = hashlib.sha256() if verify_sha256 else None
            with open(tmp, "wb") as out:
                left = length
                while left:
                    block = self.rfile.read(min(_COPY, left))
                    if not block:
                        break
                    out.write(block)
                    if digest is not None:
                        digest.update(block)
                    left -= len(block)
                if not left and fsync:
                    out.flush()
                    os.fsync(out.fileno())
            if left:
                tmp.unlink()
                self.close_connection = True
                return
            if digest is not None and digest.hexdigest() != oid:
                tmp.unlink()
                record("PUT", self.path, length, self._json(422, {"message": f"the body's sha256 is {digest.hexdigest()}, not its oid"}))
                return
            os.replace(tmp, objects / oid)
            if fsync:
                directory = os.open(objects, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            record("PUT", self.path, length, 0)  # before the answer: whoever reads the log after it finds the line
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            oid = self.path.rsplit("/", 1)[-1]
            path = objects / oid
            if not _OID.match(oid) or not path.exists():
                record("GET", self.path, 0, self._json(404, {"message": "not found"}))
                return
            size = path.stat().st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as src:
                shutil.copyfileobj(src, self.wfile, _COPY)
            record("GET", self.path, 0, size)

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--verify-sha256", action="store_true", help="refuse an upload whose sha256 is not its oid")
    parser.add_argument("--no-fsync", action="store_true", help="answer an upload once its file is renamed into place, unsynced, as Gitea's local storage does")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args.data, args.verify_sha256, fsync=not args.no_fsync))
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
