"""nginx from Debian as a TLS-terminating load balancer in front of server replicas, for tests.

A private CA and a server certificate it signs (localhost, 127.0.0.1) are made with openssl;
clients trust the CA through SSL_CERT_FILE (our agent, git-lfs, hf-xet), git's http.sslCAInfo
or NODE_EXTRA_CA_CERTS (huggingface.js). A CA and a leaf rather than one self-signed
certificate: rustls (hf-xet) refuses a served certificate that is itself a CA (openssl's
self-signed default, CA:TRUE), as browsers and other strict verifiers do. nginx runs in the
foreground on 127.0.0.1 on a free port, as a child we stop by PID. Bodies are streamed both
ways (no buffering), as a deployment in front of `git xet serve` should be configured.

With `object_store` it also fronts an S3 endpoint on a second, plain-HTTP port, passing the
Host header through unchanged (presigned URLs sign it) and logging each request with its
Range header: wire evidence of what clients fetched and put straight from/to the bucket.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_CONF = """
worker_processes 2;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
{user}
events {{ worker_connections 512; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    log_format objects '$request_method $request_uri $status range=$http_range sent=$bytes_sent received=$request_length';
    upstream replicas {{
{servers}
        keepalive 16;
    }}
{object_front}    server {{
        listen 127.0.0.1:{port} ssl;
        server_name localhost;
        ssl_certificate {prefix}/cert.pem;
        ssl_certificate_key {prefix}/key.pem;
        client_max_body_size 0;           # the server enforces its own limits
        proxy_request_buffering off;      # stream uploads and downloads through
        proxy_buffering off;
        proxy_read_timeout 300s;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host:$server_port;
        proxy_set_header X-Forwarded-Proto https;
        proxy_next_upstream error timeout http_502 http_503;
        location / {{ proxy_pass http://replicas; }}
    }}
}}
"""

_OBJECT_FRONT = """
    server {{
        listen 127.0.0.1:{port};
        access_log {prefix}/objects_access.log objects;
        client_max_body_size 0;
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        location / {{ proxy_pass http://{upstream}; }}
    }}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_certificate(directory: Path) -> Path:
    """A private CA (`ca.pem`) and a certificate it signs for localhost and 127.0.0.1
    (`cert.pem`, `key.pem`: what nginx serves); returns the CA, the file clients trust."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=directory)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=git-xet test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "key.pem", "-out", "server.csr")
    (directory / "server.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "server.ext", "-out", "cert.pem")  # fmt: skip
    (directory / "ca.key").unlink()  # nothing else is ever signed with it
    return directory / "ca.pem"


@dataclass
class Nginx:
    port: int
    prefix: Path
    cert: Path  # the CA clients trust (SSL_CERT_FILE, http.sslCAInfo, NODE_EXTRA_CA_CERTS)
    process: subprocess.Popen
    object_port: int | None = None

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def access_log(self) -> str:
        path = self.prefix / "access.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def object_access_log(self) -> list[str]:
        """One line per request to the object store: 'METHOD URI STATUS range=... sent=N received=N'."""
        path = self.prefix / "objects_access.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []


def reserve_port() -> int:
    """A free port to give nginx (known before the replicas start: their --public-url)."""
    return _free_port()


@contextmanager
def running_nginx(
    upstreams: Sequence[str], port: int | None = None, object_store: str | None = None, object_port: int | None = None
) -> Iterator[Nginx]:
    """nginx on https://localhost:`port` balancing over `upstreams` (host:port), round robin;
    with `object_store` (host:port of an S3 endpoint) also http://127.0.0.1:`object_port` in front of it."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        raise RuntimeError("nginx is not installed: run `bash install/services.sh` as root (Debian: apt-get install nginx)")
    prefix = Path(tempfile.mkdtemp(prefix="git-xet-nginx-"))
    (prefix / "tmp").mkdir()
    os.chmod(prefix, 0o755)
    os.chmod(prefix / "tmp", 0o777)  # workers run as nobody when we are root
    cert = make_certificate(prefix)
    port = port or _free_port()
    # A replica that refuses connections (killed) is out for 5 s; the next request tries another.
    servers = "\n".join(f"        server {u} max_fails=1 fail_timeout=5s;" for u in upstreams)
    user = "user nobody nogroup;" if os.geteuid() == 0 else ""
    front = ""
    if object_store:
        object_port = object_port or _free_port()
        front = _OBJECT_FRONT.format(port=object_port, prefix=prefix, upstream=object_store)
    (prefix / "nginx.conf").write_text(_CONF.format(prefix=prefix, port=port, servers=servers, user=user, object_front=front))
    with open(prefix / "stderr.log", "ab") as log:
        proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {(prefix / 'stderr.log').read_text(errors='replace')[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("nginx did not listen within 30 s") from None
                time.sleep(0.05)
        yield Nginx(port, prefix, cert, proc, object_port if object_store else None)
    finally:
        proc.terminate()  # SIGTERM: fast shutdown of the master and its workers
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        shutil.rmtree(prefix, ignore_errors=True)
