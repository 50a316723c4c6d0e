"""The S3 page's recipe for a local S3 server, run word for word (tests/support/docs_blocks.py):
SeaweedFS started in the background from the page's command, the page's bounded wait and bucket,
then a serverless store in that bucket pushed to and cloned from, and `git xet serve --objects`
on it answering /health; SeaweedFS stopped by the page's `kill` of its pid file. Only the
documented placeholders change: every port is a free one (and its + 10000 gRPC twin), HOME is
the test's own, so `~/seaweed` and `~/xet-server` are temp directories."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from git_xet.storage.s3 import S3Config, make_client
from tests.support.docs_blocks import block, substitute
from tests.support.gitenv import make_git_env

GRPC_OFFSET = 10000  # SeaweedFS's gRPC port for a service on port p, unless told otherwise
WAIT = 60  # seconds, for anything to come up or go away

pytestmark = pytest.mark.seaweedfs  # the documented commands start SeaweedFS themselves


def _ports_with_grpc_twins(n: int) -> list[int]:
    """n distinct free ports p on 127.0.0.1 whose p + 10000 is free too (bounded tries)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(500):
            if len(ports) == n:
                return ports
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
            port = sock.getsockname()[1]
            if port + GRPC_OFFSET > 65535:
                continue
            twin = socket.socket()
            try:
                twin.bind(("127.0.0.1", port + GRPC_OFFSET))
            except OSError:
                twin.close()
                continue
            held.append(twin)
            ports.append(port)
        raise RuntimeError(f"found only {len(ports)} of {n} free port pairs")
    finally:
        for sock in held:
            sock.close()


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, whose parent has not reaped it yet, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return not _alive(pid)


def _kill(pid: int) -> None:
    """SIGTERM, then SIGKILL if it is still there after a grace period: weed may ignore SIGTERM."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 15)):
        if not _alive(pid):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if _gone_within(pid, grace):
            return


def _shell(script: str, *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Blocks typed one after the other into one shell (so its `cd` and `export`s hold)."""
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"docs/s3.md blocks failed ({proc.returncode}):\n{script}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    return proc


def test_local_s3_recipe_push_clone_and_serve(tmp_path: Path) -> None:
    genv = make_git_env(tmp_path / "user")
    home = Path(genv.env["HOME"])
    env = {k: v for k, v in genv.env.items() if not k.startswith("AWS_")}  # only what the page exports
    master, volume, filer, s3, serve_port = _ports_with_grpc_twins(5)
    endpoint = f"http://127.0.0.1:{s3}"
    start = substitute(
        block("s3.md", "local-s3-start").text,
        {"-master.port=9333": f"-master.port={master}", "-volume.port=8081": f"-volume.port={volume}",
         "-filer.port=8888": f"-filer.port={filer}", "-s3.port=8333": f"-s3.port={s3}"},
    )  # fmt: skip
    exports = substitute(block("s3.md", "local-s3-env").text, {"http://127.0.0.1:8333": endpoint})
    serve = substitute(block("s3.md", "local-s3-serve").text, {"--port 8080": f"--port {serve_port}"})
    health = substitute(block("s3.md", "local-s3-health").text, {"http://127.0.0.1:8080": f"http://127.0.0.1:{serve_port}"})
    pid_file = home / "seaweed" / "weed.pid"
    server: subprocess.Popen[bytes] | None = None
    try:
        session = start + exports + block("s3.md", "local-s3-bucket").text + block("s3.md", "local-s3-standalone").text
        _shell(session, cwd=home, env=env, timeout=300)
        weed_pid = int(pid_file.read_text())
        assert _alive(weed_pid)

        client = make_client(S3Config(endpoint_url=endpoint, access_key="localkey", secret_key="localsecret0123456789", region="us-east-1"))
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="xet-local", Prefix="lfs/").get("Contents", [])]
        assert "lfs/git-xet-store.json" in keys and any(k.startswith("lfs/xorbs/") for k in keys)  # the push went to the bucket
        pointer = subprocess.run(["git", "show", "HEAD:model.bin"], cwd=home / "seaweed" / "models-copy", env=env, capture_output=True, text=True, check=True)
        assert pointer.stdout.startswith("version https://git-lfs.github.com/spec/v1")

        log = tmp_path / "serve.log"
        with open(log, "ab") as out:
            server = subprocess.Popen(["bash", "-e", "-c", exports + "exec " + serve.strip()], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home)
        deadline = time.monotonic() + WAIT
        while True:
            assert server.poll() is None, f"the server exited ({server.returncode}): {log.read_text(errors='replace')[-3000:]}"
            answer = subprocess.run(["bash", "-e", "-c", health], env=env, capture_output=True, text=True, timeout=30, check=False)
            if answer.returncode == 0:
                break
            assert time.monotonic() < deadline, f"no /health in {WAIT}s: {answer.stderr}\n{log.read_text(errors='replace')[-3000:]}"
            time.sleep(0.3)
        assert (home / "xet-server").is_dir()

        server.terminate()
        server.wait(timeout=30)
        _shell(block("s3.md", "local-s3-stop").text, cwd=home, env=env, timeout=30)
        assert _gone_within(weed_pid, WAIT), "weed still runs a minute after the page's kill"
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(timeout=15)
        if pid_file.is_file() and pid_file.read_text().strip().isdigit():
            _kill(int(pid_file.read_text()))
