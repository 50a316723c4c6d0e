"""Start the real `git xet serve` process on 127.0.0.1 for a test, and stop it afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


from tests.support.gitenv import run_git_xet
from tests.support.processes import stop_process, wait_for_health


@dataclass(frozen=True)
class RunningServer:
    url: str
    data_dir: Path
    process: subprocess.Popen
    log_name: str = "server.log"

    def token(self, scope: str = "write", ttl: int = 3600, repo: str = "default") -> str:
        """A user token for `repo` (the repo standalone clients and hf-xet act on by default)."""
        return self._mint(scope, ttl, repo).stdout.strip()

    def minted(self, scope: str = "write", ttl: int = 3600, repo: str = "default") -> dict:
        """`git xet token --json`: the token with its expiry and CAS URL fields."""
        return json.loads(self._mint(scope, ttl, repo, "--json").stdout)

    def _mint(self, scope: str, ttl: int, repo: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_git_xet("token", "--data", str(self.data_dir), "--scope", scope, "--ttl", str(ttl), "--repo", repo, *extra, timeout=60, check=True)

    def metrics(self, admin_token: str) -> dict[str, float]:
        """Every sample of /metrics: its name with labels -> value (summed where names repeat)."""
        import httpx

        answer = httpx.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {admin_token}"}, timeout=60)
        assert answer.status_code == 200, answer.text
        values: dict[str, float] = {}
        for line in answer.text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = values.get(name, 0.0) + float(value)
        return values

    def requests(self) -> list[dict]:
        """The server's access log so far: one dict per request (method, path, status, bytes_in,
        ...), as server/access_log.py writes them."""
        return [json.loads(line[line.index("{") :]) for line in self.log().splitlines() if '"path": ' in line]

    def log(self) -> str:
        return (self.data_dir.parent / self.log_name).read_text(errors="replace")

    def log_once_it_has(self, fragment: str, count: int = 1, timeout: float = 10.0) -> str:
        """The log, once it holds `count` lines with `fragment` (AssertionError after `timeout`
        seconds). A request's access-log line is written as its last bytes leave, and a line
        with no answer to wait for (an answer cut short, an idle timeout) comes when the
        server gives up: either may follow what the caller just saw."""
        deadline = time.monotonic() + timeout
        while (log := self.log()).count(fragment) < count:
            assert time.monotonic() < deadline, f"the server log still has fewer than {count} lines with {fragment!r} after {timeout} s"
            time.sleep(0.05)
        return log


@contextmanager
def running_server(
    data_dir: Path,
    *extra: str,
    port: int = 0,
    wrapper: tuple[str, ...] = (),
    log_name: str = "server.log",
    env: dict[str, str] | None = None,
) -> Iterator[RunningServer]:
    """`git xet serve --data data_dir ...` on 127.0.0.1, run through `wrapper` (a command that
    execs the rest of its arguments, e.g. to give the server its own mounts) when given; its
    stderr goes to `log_name` beside data_dir (replicas sharing a directory each have their own);
    `env` adds to the environment (e.g. the AWS SDK's variables for --objects s3://...)."""
    log_path = data_dir.parent / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "git_xet", "serve", "--data", str(data_dir), "--port", str(port), *extra],
            stdout=subprocess.PIPE, stderr=log, env={**os.environ, **(env or {})},
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"server did not start: {log_path.read_text(errors='replace')[-2000:]}")
        wait_for_health(url, proc, lambda: log_path.read_text(errors="replace")[-2000:])
        yield RunningServer(url, data_dir, proc, log_name)
    finally:
        stop_process(proc)
