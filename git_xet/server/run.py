"""Run the CAS server with uvicorn on a socket we bind ourselves (so --port 0 can report its port)."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

from .app import ServerConfig, create_app


def serve(data_dir: Path, host: str, port: int, public_url: str | None, url_ttl: int, log_level: str, cas_token_ttl: int = 900) -> int:
    import uvicorn

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO), format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    app = create_app(ServerConfig(Path(data_dir), public_url, url_ttl, cas_token_ttl))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(f"git-xet serve: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    # The first line on stdout is the URL, for scripts and tests that start us with --port 0.
    print(f"http://{shown}:{bound}", flush=True)
    config = uvicorn.Config(app, log_level=log_level.lower(), access_log=False, timeout_graceful_shutdown=10)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
