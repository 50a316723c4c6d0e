"""The scale-out deployment as the README describes it, started whole for a test or a benchmark:
`git xet serve` replicas keeping objects in an S3 bucket (SeaweedFS) and their index in
PostgreSQL, behind nginx terminating TLS with a private CA, upload grants on.

nginx also fronts the S3 endpoint (plain HTTP, Host passed through, so presigned URLs stay
valid): its log is the wire evidence of which bytes clients PUT and GET straight to and from
the bucket. nginx starts first, on ports reserved for it and the replicas, because a replica
checks its bucket through that front before it listens. Everything is on 127.0.0.1 and
stopped by PID (the helpers it uses do that).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from git_xet.storage.cas_store import CasStore
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.nginx_process import Nginx, reserve_port, running_nginx
from tests.support.postgres_process import Postgres
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

PREFIX = "cas"


@dataclass
class Deployment:
    nginx: Nginx
    replicas: list[RunningServer]
    bucket: str
    index_url: str
    env: dict[str, str]  # what every replica and admin command runs with (AWS_*, the secret)
    direct_env: dict[str, str]  # AWS_* naming the bucket's endpoint itself, not the front

    @property
    def objects_url(self) -> str:
        return f"s3://{self.bucket}/{PREFIX}"

    def objects(self) -> S3ObjectStore:
        """The bucket, reached directly (not through the front), as a test inspects it."""
        return S3ObjectStore(S3Location(self.bucket, PREFIX), S3Config.from_env(self.direct_env))

    def store(self) -> CasStore:
        """The shared store as an admin tool opens it; close() it."""
        data = self.replicas[0].data_dir
        return CasStore(data, objects=self.objects(), private=True, index=PostgresIndex(self.index_url))

    def token(self, scope: str = "write", repo: str = "default") -> str:
        """A user token for `repo`, signed with the deployment's secret (every replica accepts it)."""
        out = subprocess.run(
            [sys.executable, "-m", "git_xet", "token", "--data", str(self.replicas[0].data_dir), "--scope", scope, "--ttl", "3600", "--repo", repo],
            capture_output=True, text=True, check=True, timeout=60, env={**os.environ, **self.env},
        )  # fmt: skip
        return out.stdout.strip()

    def admin_args(self) -> list[str]:
        """The store options of `git xet fsck` / `gc` for this deployment."""
        return ["--data", str(self.replicas[0].data_dir), "--index", self.index_url, "--objects", self.objects_url]


@contextmanager
def running_deployment(root: Path, s3: RunningS3, postgres: Postgres, replicas: int = 2) -> Iterator[Deployment]:
    """`replicas` servers on a fresh bucket and a fresh database behind nginx (TLS), grants on."""
    bucket = s3.new_bucket()
    index_url = postgres.create_database(f"deploy_{secrets.token_hex(6)}")
    port, object_port = reserve_port(), reserve_port()
    replica_ports = [reserve_port() for _ in range(replicas)]
    env = s3.env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{object_port}", GIT_XET_SERVER_SECRET=secrets.token_hex(32))
    with ExitStack() as stack:
        nginx = stack.enter_context(
            running_nginx(
                [f"127.0.0.1:{p}" for p in replica_ports], port,
                object_store=s3.endpoint.removeprefix("http://"), object_port=object_port,
            )
        )  # fmt: skip
        servers = [
            stack.enter_context(
                running_server(
                    root / "replicas" / "data", "--index", index_url, "--objects", f"s3://{bucket}/{PREFIX}",
                    "--public-url", nginx.url, port=p, log_name=f"replica{i}.log", env=env,
                )
            )
            for i, p in enumerate(replica_ports)
        ]  # fmt: skip
        yield Deployment(nginx, servers, bucket, index_url, env, s3.env())
