"""Scale-out: git push and clone through nginx (TLS) to `git xet serve` with its embedded
SQLite index vs a PostgreSQL index with one and with two replicas (objects in a shared
directory), and vs replicas keeping their objects in an S3 bucket (SeaweedFS) with the index on
PostgreSQL, upload grants on (xorb bytes go straight to the bucket), same files, same run.

    python bench/scale_out.py [--big-mib 1024] [--small-files 1000] [--small-kib 64]
                              [--modes sqlite,pg1,pg2,s3pg1,s3pg2] [--workloads big,small] [--json OUT]

Per mode and workload (one big file; many small files) a fresh server set, a fresh HOME and
caches: push, then clone (smudge downloads everything). Reports wall seconds, and CPU seconds
per GiB of the server processes (replicas), of PostgreSQL's postmaster with its backends and of
SeaweedFS's `weed`, read from /proc before they stop. Every process runs on loopback, started
and stopped here.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import MIB, lfs_repo_with, machine, timed, write_json, write_random_file

from tests.support.deployment import running_deployment
from tests.support.gitenv import make_git_env
from tests.support.nginx_process import reserve_port, running_nginx
from tests.support.postgres_process import Postgres, running_postgres
from tests.support.seaweed import RunningS3, running_seaweedfs
from tests.support.server_process import running_server

# mode -> (replicas on PostgreSQL (0: one server, SQLite), objects in an S3 bucket)
MODES = {"sqlite": (0, False), "pg1": (1, False), "pg2": (2, False), "s3pg1": (1, True), "s3pg2": (2, True)}
GIB = 1024 * MIB
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    """utime + stime of a live process (and of its reaped children, with_children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if with_children else 0)
    return ticks / _TICK


def postgres_cpu(pg: Postgres) -> float:
    """The postmaster, its reaped backends, and its live children."""
    assert pg.process is not None
    total = cpu_seconds(pg.process.pid, with_children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pg.process.pid:
                    total += cpu_seconds(int(entry.name))
            except (OSError, ValueError):
                continue
    return total


@contextmanager
def deployment(
    mode: str, root: Path, pg: Postgres | None, s3: RunningS3 | None
) -> Iterator[tuple[str, Path, str, Callable[[], dict[str, float]]]]:
    """(https URL, CA cert, write token, cpu()) of a server set behind nginx; cpu() reads the
    servers' (and their stores') CPU seconds so far."""
    replicas, on_s3 = MODES[mode]
    if on_s3:
        assert pg is not None and s3 is not None
        with running_deployment(root, s3, pg, replicas) as d:

            def s3_cpu() -> dict[str, float]:
                return {
                    "server": sum(cpu_seconds(r.process.pid) for r in d.replicas),
                    "postgres": postgres_cpu(pg),
                    "s3": cpu_seconds(s3.process.pid, with_children=True),
                }

            yield d.nginx.url, d.nginx.cert, d.token("write"), s3_cpu
        return
    port = reserve_port()
    extra = ["--public-url", f"https://localhost:{port}"]
    if replicas:
        assert pg is not None
        extra += ["--index", pg.create_database(f"bench_{secrets.token_hex(4)}")]
    with ExitStack() as stack:
        servers = [
            stack.enter_context(running_server(root / "data", *extra, log_name=f"server{i}.log")) for i in range(max(1, replicas))
        ]
        nginx = stack.enter_context(running_nginx([s.url.removeprefix("http://") for s in servers], port))

        def cpu() -> dict[str, float]:
            result = {"server": sum(cpu_seconds(s.process.pid) for s in servers)}
            if replicas:
                assert pg is not None
                result["postgres"] = postgres_cpu(pg)
            return result

        yield nginx.url, nginx.cert, servers[0].token("write"), cpu


def run_once(mode: str, workload: str, sources: list[Path], root: Path, pg: Postgres | None, s3: RunningS3 | None) -> dict:
    genv = make_git_env(root)
    with deployment(mode, root, pg, s3) as (url, cert, token, cpu):
        genv.env["SSL_CERT_FILE"] = str(cert)
        genv.git_xet("install", "--standalone", url)
        genv.git("config", "--global", "xet.token", token)
        work = lfs_repo_with(genv, root, sources)
        result: dict = {}
        for phase, cmd, cwd in (
            ("push", ["git", "push", "-q", "origin", "main"], work),
            ("clone", ["git", "clone", "-q", str(root / "remote.git"), str(root / "clone")], root),
        ):
            before = cpu()
            run = timed(cmd, cwd=cwd, env=genv.env, stderr_to=root / f"{phase}.stderr")
            after = cpu()
            result[phase] = {"seconds": run["seconds"], **{f"{k}_cpu": after[k] - before[k] for k in after}}
        for src in sources:
            if subprocess.run(["cmp", "-s", str(src), str(root / "clone" / src.name)], check=False).returncode:
                raise RuntimeError(f"{mode}/{workload}: the clone's {src.name} differs from what was pushed")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--small-kib", type=int, default=64)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workloads", default="big,small", help="which of big,small to run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    os.environ.setdefault("GIT_XET_SERVER_SECRET", secrets.token_hex(32))  # one secret for every replica
    summary: dict = {"machine": machine(), "big_mib": args.big_mib, "small_files": args.small_files, "small_kib": args.small_kib, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-scale-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        pg = stack.enter_context(running_postgres()) if any(MODES[m][0] for m in modes) else None
        s3 = stack.enter_context(running_seaweedfs(base / "seaweedfs")) if any(MODES[m][1] for m in modes) else None
        workloads = {"big": [base / "src-big" / "big.bin"], "small": [base / "src-small" / f"f{i:04d}.bin" for i in range(args.small_files)]}
        workloads = {name: paths for name, paths in workloads.items() if name in args.workloads.split(",")}
        for path in workloads.get("big", []):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_random_file(path, args.big_mib * MIB, seed=1)
        for i, path in enumerate(workloads.get("small", [])):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_random_file(path, args.small_kib * 1024, seed=100 + i)
        print(f"scale-out: push/clone through nginx (TLS); {machine()}")
        print(f"{'workload':<9}{'mode':<7}{'phase':<7}{'seconds':>9}{'MiB/s':>8}{'server cpu s/GiB':>18}{'postgres cpu s/GiB':>20}{'s3 cpu s/GiB':>14}")
        for workload, sources in workloads.items():
            size = sum(p.stat().st_size for p in sources)
            for mode in modes:
                root = base / f"{workload}-{mode}"
                result = run_once(mode, workload, sources, root, pg, s3)
                summary["runs"][f"{workload}/{mode}"] = {"bytes": size, **result}
                for phase, m in result.items():
                    pg_cpu = f"{m['postgres_cpu'] * GIB / size:>20.2f}" if "postgres_cpu" in m else f"{'-':>20}"
                    s3_cpu = f"{m['s3_cpu'] * GIB / size:>14.2f}" if "s3_cpu" in m else f"{'-':>14}"
                    print(
                        f"{workload:<9}{mode:<7}{phase:<7}{m['seconds']:>9.2f}{size / MIB / m['seconds']:>8.1f}"
                        f"{m['server_cpu'] * GIB / size:>18.2f}{pg_cpu}{s3_cpu}"
                    )
                shutil.rmtree(root, ignore_errors=True)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
