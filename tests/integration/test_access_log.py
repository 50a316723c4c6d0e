"""The server's access log: each request's line is written before the last bytes of its answer
leave, so whoever has read a whole answer finds the line already there (no waiting, no
polling), with the status and the byte counts of what was sent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.support.server_process import running_server


def _lines(log: str, path: str) -> list[dict]:
    return [json.loads(line.split(" ", 3)[-1]) for line in log.splitlines() if f'"path": "{path}"' in line]


def test_a_request_is_in_the_log_once_its_answer_has_been_read(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        token = srv.token("read")
        missing = "/v1/reconstructions/" + "ab" * 32
        started = len(_lines(srv.log_once_it_has('"path": "/health"'), "/health"))  # start-up's health checks
        for i in range(1, 151):
            resp = http.get("/health") if i % 2 else http.get(missing, headers={"Authorization": f"Bearer {token}"})
            resp.read()
            log = srv.log()  # at once: the line must already be there
            healths, misses = _lines(log, "/health"), _lines(log, missing)
            assert (len(healths) - started, len(misses)) == ((i + 1) // 2, i // 2), f"request {i}: its line is not in the log yet"
            latest = healths[-1] if i % 2 else misses[-1]
            assert (latest["status"], latest["bytes_out"]) == (resp.status_code, len(resp.content))
