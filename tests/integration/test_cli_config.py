"""Configuration that must not silently do the wrong thing, and the messages users see:
`git xet install/uninstall/token/serve/doctor/clone/stats` with real git and git-lfs in a temp HOME."""

from __future__ import annotations

import json
import string
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent.summary import PushTotals, describe
from git_xet.agent.summary import human as describe_size
from git_xet.client.location import STORE_MARKER, LocationError, create_local_store, parse_store_location
from git_xet.client.retry import MAX_RETRY_AFTER, RetryPolicy
from git_xet.core.http_headers import bearer
from tests.support.datagen import random_bytes
from tests.support.http_stub import http_stub
from tests.support.gitenv import GitEnv, make_git_env, run_git_xet
from tests.support.server_process import running_server

# ------------------------------------------------------------------ store locations (pure)

_label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12)
_host = st.lists(_label, min_size=2, max_size=4).map(".".join)
_port = st.integers(1, 65535)


@given(host=_host, port=st.none() | _port, path=st.sampled_from(["", "/", "/xet", "/a/b/"]))
def test_a_host_without_a_scheme_is_refused_with_the_url_to_write(host: str, port: int | None, path: str) -> None:
    text = host + (f":{port}" if port else "") + path
    for base in (None, Path("/somewhere")):
        try:
            parse_store_location(text, relative_to=base)
        except LocationError as exc:
            assert f"https://{text}" in str(exc)
        else:
            raise AssertionError(f"{text!r} was accepted as a store")


@given(scheme=st.text(string.ascii_lowercase, min_size=2, max_size=6).filter(lambda s: s not in ("http", "https", "file")), host=_host)
def test_an_unknown_scheme_is_refused(scheme: str, host: str) -> None:
    text = f"{scheme}://{host}:8080"
    try:
        parse_store_location(text, relative_to=Path("/w"))
    except LocationError as exc:
        assert f"unknown scheme '{scheme}'" in str(exc)
    else:
        raise AssertionError(f"{text!r} was accepted")


@given(parts=st.lists(_label, min_size=1, max_size=4), scheme=st.sampled_from(["http", "https", "HTTPS"]), port=st.none() | _port)
def test_urls_and_absolute_directories_are_accepted_as_written(parts: list[str], scheme: str, port: int | None) -> None:
    directory = "/" + "/".join(parts)
    assert parse_store_location(directory) == parse_store_location("file://" + directory)
    assert parse_store_location(directory).kind == "local"
    assert parse_store_location(directory).location == str(Path(directory).resolve())
    url = f"{scheme}://{parts[0]}.example{':' + str(port) if port else ''}/{'/'.join(parts)}/"
    parsed = parse_store_location(url)
    assert parsed.kind == "http" and parsed.location == scheme.lower() + url[len(scheme) :].rstrip("/")


@settings(max_examples=30)
@given(parts=st.lists(_label, min_size=1, max_size=3))
def test_relative_directories_need_an_explicit_spelling_and_a_base(parts: list[str]) -> None:
    relative = "/".join(parts)
    assert parse_store_location("./" + relative, relative_to=Path("/base")).location == str(Path("/base", *parts).resolve())
    for text in ("./" + relative, "../" + relative):
        try:
            parse_store_location(text)  # stored configuration: relative to what?
        except LocationError as exc:
            assert "relative path" in str(exc)
        else:
            raise AssertionError(f"{text!r} was accepted without a base")


# ------------------------------------------------------------------ install refuses, nothing changes


def _config_listing(g: GitEnv) -> str:
    return g.git("config", "--global", "--list").stdout


def test_install_refuses_bad_endpoints_and_changes_nothing(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git("init", "repo")
    repo = g.root / "repo"
    before = _config_listing(g)
    cases = {
        "xet.example.com:8080": "https://xet.example.com:8080",
        "htp://127.0.0.1:9": "did you mean http://127.0.0.1:9",
        "store": "./store",
        str(tmp_path / "missing-parent" / "store"): "mkdir -p",
    }
    for endpoint, fix in cases.items():
        proc = g.git_xet("install", "--standalone", endpoint, cwd=repo, check=False)
        assert proc.returncode == 1, proc.stdout
        assert fix in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert _config_listing(g) == before
    assert sorted(p.name for p in repo.iterdir()) == [".git"]  # no store grew inside the repo
    assert not (tmp_path / "missing-parent").exists()


def test_install_creates_and_marks_the_store_and_accepts_explicit_relative(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    out = g.git_xet("install", "--standalone", "./team-store", cwd=tmp_path)
    store = tmp_path / "team-store"
    assert f"created a new XET store at {store}" in out.stdout
    assert (store / STORE_MARKER).is_file()
    assert g.git("config", "--global", "xet.endpoint").stdout.strip() == str(store)  # stored absolute
    again = g.git_xet("install", "--standalone", f"file://{store}")
    assert f"using the existing XET store at {store}" in again.stdout
    (tmp_path / "not-a-store").mkdir()
    (tmp_path / "not-a-store" / "thesis.tex").write_text("precious")
    refused = g.git_xet("install", "--standalone", str(tmp_path / "not-a-store"), check=False)
    assert refused.returncode == 1 and "not an XET store" in refused.stderr


def _repo_with_lfs_file(g: GitEnv, name: str = "work") -> Path:
    g.git("init", "--bare", f"{name}.git")
    g.git("clone", f"{name}.git", name)
    work = g.root / name
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / "a.bin").write_bytes(random_bytes(100_000, 3))
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    return work


def test_the_agent_never_creates_a_store(tmp_path: Path) -> None:
    """A store path install did not create (a typo, an unmounted drive) or an endpoint with a
    mistyped scheme fails the push with the fix; nothing is written anywhere."""
    g = make_git_env(tmp_path)
    g.git_xet("install", "--standalone", str(tmp_path / "store"))
    work = _repo_with_lfs_file(g)
    for endpoint, expected in (
        (str(tmp_path / "stroe"), f"the XET store {tmp_path / 'stroe'} does not exist"),
        (str(tmp_path / "gone" / "store"), "does not exist"),
        ("htp://127.0.0.1:9", "unknown scheme 'htp'"),
        ("xet.example.com:8080", "https://xet.example.com:8080"),
    ):
        g.git("config", "--global", "xet.endpoint", endpoint)
        push = g.git("push", "origin", "main", cwd=work, check=False)
        assert push.returncode != 0
        assert expected in push.stderr, push.stderr
        assert "git xet install --standalone" in push.stderr
    assert not (tmp_path / "stroe").exists() and not (tmp_path / "gone").exists()
    untracked = g.git("status", "--porcelain", "--ignored", cwd=work).stdout
    assert untracked == "", untracked  # nothing landed in the work tree either


def test_token_refuses_a_directory_that_is_not_a_server_data_dir(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    typo = tmp_path / "srv" / "dta"
    proc = g.git_xet("token", "--data", str(typo), check=False)
    assert proc.returncode == 1 and "not a `git xet serve` data directory" in proc.stderr
    assert not typo.exists()  # no fresh secret minted a token the server would reject
    shared = dict(g.env, GIT_XET_SERVER_SECRET="a-shared-secret-of-enough-length")
    minted = run_git_xet("token", "--data", str(typo), env=shared, timeout=60)
    assert minted.returncode == 0 and minted.stdout.startswith("xet1.")  # the secret is not in --data: nothing to mistype
    assert not typo.exists()
    create_local_store(tmp_path / "local")
    assert "needs no tokens" in g.git_xet("token", "--data", str(tmp_path / "local"), check=False).stderr
    with running_server(tmp_path / "srv" / "data") as srv:
        import httpx

        token = g.git_xet("token", "--data", str(srv.data_dir), "--scope", "read").stdout.strip()
        resp = httpx.get(f"{srv.url}/v1/reconstructions/{'0' * 64}", headers=bearer(token), timeout=30)
        assert resp.status_code == 404 and "not found" in resp.json()["error"]  # accepted, file unknown


def test_serve_refuses_a_cas_token_ttl_git_lfs_would_reject(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    for ttl in ("0", "5", "7"):
        proc = g.git_xet("serve", "--data", str(tmp_path / "data"), "--port", "0", "--cas-token-ttl", ttl, check=False)
        assert proc.returncode == 2 and "at least 8 s" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_uninstall_removes_every_key_install_set(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git("config", "--global", "lfs.concurrenttransfers", "3")  # the user's own setting
    g.git_xet("install", "--standalone", str(tmp_path / "s"), "--native", "https://hub.example")
    g.git("config", "--global", "xet.token", "xet1.secret.token")
    g.git_xet("uninstall")
    listing = _config_listing(g)
    assert "lfs.concurrenttransfers=3" in listing  # install did not set it: kept
    g.git_xet("install", "--standalone", str(tmp_path / "s"), "--concurrency", "4")
    g.git("config", "--global", "xet.token", "xet1.secret.token")
    out = g.git_xet("uninstall").stdout
    assert "xet.token" in out and "secret" not in out
    keys = g.git("config", "--global", "--name-only", "--list").stdout.split()
    left = [k for k in keys if k.startswith("xet.") or "customtransfer" in k or "standalonetransferagent" in k or "concurrenttransfers" in k]
    assert left == [], keys
    assert "filter.lfs.process" in keys  # git-lfs itself stays


def test_uninstall_local_scope_keeps_the_global_install(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git_xet("install", "--standalone", str(tmp_path / "s"))
    g.git("init", "repo")
    repo = g.root / "repo"
    g.git_xet("install", "--local", "--standalone", str(tmp_path / "s"), "--remote", "origin", cwd=repo)
    g.git_xet("uninstall", "--local", cwd=repo)
    local = g.git("config", "--local", "--list", cwd=repo).stdout
    assert "xet" not in local, local
    assert "xet.endpoint=" in _config_listing(g)



# ------------------------------------------------------------------ messages


def _on_a_terminal(g: GitEnv, command: str, cwd: Path) -> tuple[int, str]:
    """Run a shell command with a pseudo-terminal as its controlling terminal (util-linux
    `script`), as a user's `git push` runs: what git, git-lfs and the agent show the user."""
    env = {k: v for k, v in g.env.items() if k != "GIT_XET_QUIET"}
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], cwd=cwd, env=env, capture_output=True, timeout=300, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace").replace("\r\n", "\n")


def test_refused_tokens_show_the_servers_reason_and_the_standalone_fix(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.05")
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        work = _repo_with_lfs_file(g)
        expired = srv.token("write", ttl=1)
        time.sleep(2.1)
        for token, reason in ((None, "missing bearer token"), (expired, "token expired"), (srv.token("read"), "token scope 'read' does not allow write")):
            if token:
                g.git("config", "--global", "xet.token", token)
            push = g.git("push", "origin", "main", cwd=work, check=False)
            assert push.returncode != 0
            assert reason in push.stderr, push.stderr
            assert "git xet token --data" in push.stderr and f"git config --global xet.{srv.url}.token <token>" in push.stderr
            assert "HF_TOKEN" not in push.stderr and "credential approve" not in push.stderr
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("push", "origin", "main", cwd=work)


def test_refused_hub_credentials_show_the_reason_and_the_hub_fix(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install")
        read_only = srv.token("read", repo="acme/model")
        g.use_credentials(read_only)
        g.git("config", "--global", "lfs.url", f"{srv.url}/acme/model.git/info/lfs")
        work = _repo_with_lfs_file(g)
        g.git_xet("install", "--native", srv.url)  # our own batch call: its refusal is our message
        push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0
    assert "token scope 'read' does not allow write" in push.stderr, push.stderr
    assert "HF_TOKEN" in push.stderr and "git xet token" not in push.stderr
    assert read_only not in push.stderr


@given(attempt=st.integers(0, 40), base=st.floats(0, 1000), retry_after=st.none() | st.floats(0, 1e6))
def test_no_single_backoff_wait_is_long(attempt: int, base: float, retry_after: float | None) -> None:
    policy = RetryPolicy(base_delay=base)
    delay = policy.delay(attempt, retry_after)
    assert 0 <= delay <= (MAX_RETRY_AFTER if retry_after is not None else 10.0)
    if retry_after is not None and retry_after <= MAX_RETRY_AFTER:
        assert delay == retry_after  # the server's own wish, when reasonable


def test_retries_are_shown_on_the_terminal_while_the_server_is_down(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="3", GIT_XET_RETRY_BASE_DELAY="0.05")
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
    work = _repo_with_lfs_file(g)  # the server is gone now: every connection is refused
    quiet = g.git("push", "origin", "main", cwd=work, check=False)  # no terminal: nothing extra
    assert quiet.returncode != 0 and "retry 1/2" not in quiet.stderr
    code, shown = _on_a_terminal(g, "git push origin main", work)
    assert code != 0
    notices = [line for line in shown.splitlines() if "git-xet: " in line and "; retry " in line]
    assert any("retry 1/2" in line for line in notices), shown
    assert "Connection refused" in shown or "connect" in shown.lower()
    assert "failed after" in shown
    # The last word says what to check (client/diagnosis.py), not only "Connection refused".
    assert f"nothing accepts connections at {srv.url}" in shown and "git xet doctor" in shown, shown


def test_a_server_killed_mid_push_fails_the_push_within_one_budget_with_few_lines(tmp_path: Path) -> None:
    """The new user's trial: the server killed while a large push runs. Each dedup query and
    each xorb used to retry on its own (~144 s, ~60 lines); now the push gives up once the
    store has failed for the budget (GIT_XET_RETRY_MAX_SECONDS, shortened here), however many
    calls were under way, and says what to check."""
    budget = 6
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_SECONDS=str(budget), GIT_XET_RETRY_MAX_ATTEMPTS="1000")
    work = _repo_with_lfs_file(g)
    (work / "big.bin").write_bytes(random_bytes(192 << 20, 4))  # three xorbs: calls under way in parallel
    g.git("add", "big.bin", cwd=work)
    g.git("commit", "-m", "big", cwd=work)
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("push", "origin", "main", cwd=work)  # the store has been reached: the full budget applies
        (work / "big.bin").write_bytes(random_bytes(192 << 20, 5))
        g.git("commit", "-am", "v2", cwd=work)
        xorbs_before = srv.log().count("/v1/xorbs/")
        pushing = subprocess.Popen(["script", "-qec", "git push origin main", "/dev/null"], cwd=work, env={k: v for k, v in g.env.items() if k != "GIT_XET_QUIET"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        srv.log_once_it_has("/v1/xorbs/", xorbs_before + 1, timeout=120)  # the v2 push's first xorb has arrived
        srv.process.kill()
        killed = time.monotonic()
    out, _ = pushing.communicate(timeout=300)
    waited = time.monotonic() - killed
    shown = out.decode("utf-8", "replace")
    assert pushing.returncode != 0
    # Bounded by the one budget (plus the agent's exit and git-lfs's own wrap-up), not by calls x retries.
    assert waited < budget + 20, (waited, shown)
    notices = [line for line in shown.splitlines() if "; retry " in line]
    assert len(notices) <= 2 * (budget / 5 + 1) + 2, shown  # one per outage, then one every 5 s
    assert "git xet doctor" in shown, shown


def _xorb_bytes_received(srv_log: str, since: int) -> tuple[int, int, int]:
    """From the server's own access log (after line `since`): bytes received on xorb uploads
    (direct POSTs, or PUTs to upload grants), and the bytes and count of upload bundles (a
    small file's xorb with its shard: the shard and a 40-byte header are the rest)."""
    xorbs = bundles = count = 0
    for line in srv_log.splitlines()[since:]:
        if '"bytes_in"' in line:
            entry = json.loads(line[line.index("{") :])
            if not 200 <= entry["status"] < 300:
                continue
            if entry["path"].startswith(("/v1/xorbs/", "/v1/xorb-uploads/")):
                xorbs += entry["bytes_in"]
            elif entry["path"] == "/git-xet/v1/upload-bundles":
                bundles += entry["bytes_in"]
                count += 1
    return xorbs, bundles, count


def test_each_push_shows_one_summary_of_what_it_sent(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    files = {f"m{i}.bin": random_bytes(1_500_000 + i * 300_000, 40 + i) for i in range(3)}
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work = g.lfs_work_tree(files, remote="work.git")
        for version in (1, 2):
            if version == 2:  # a small edit of one file: most of it is deduplicated
                edited = bytearray(files["m1.bin"])
                edited[900_000:905_000] = bytes(5000)
                (work / "m1.bin").write_bytes(bytes(edited))
                g.git("commit", "-am", "v2", cwd=work)
            log_at = len(srv.log().splitlines())
            code, shown = _on_a_terminal(g, "git push origin main", work)
            assert code == 0, shown
            summaries = [line[line.index("git-xet: ") :] for line in shown.splitlines() if "git-xet: uploaded" in line]
            assert len(summaries) == 1, shown  # one line per push, however many agents ran
            stats = json.loads(g.git_xet("stats", "--json", cwd=work).stdout)
            assert summaries[0] == "git-xet: " + describe(PushTotals(**stats))
            xorbs, bundles, count = _xorb_bytes_received(srv.log(), log_at)
            # Every xorb byte the agent counts reached the server; a bundle adds its small shard.
            assert xorbs <= stats["sent_bytes"] <= xorbs + bundles and stats["sent_bytes"] >= xorbs + bundles - 8192 * count
            uploaded = files if version == 1 else {"m1.bin": bytes(edited)}
            assert stats["files"] == len(uploaded) and stats["file_bytes"] == sum(len(d) for d in uploaded.values())
            assert stats["new_bytes"] + stats["deduped_bytes"] == stats["file_bytes"]
        assert stats["sent_bytes"] < 0.2 * len(edited) and stats["deduped_bytes"] > 0.8 * len(edited)
    assert "last push: uploaded 1 file" in g.git_xet("stats", cwd=work).stdout


# ------------------------------------------------------------------ doctor


@pytest.mark.parametrize("cloner_repo", ["acme/model", "acme/other"])
def test_a_token_for_another_repo_is_named_where_it_matters(tmp_path: Path, cloner_repo: str) -> None:
    """The new user's trial: two teammates whose tokens name different repos push into different
    namespaces. The clone's error names the repo the token is for and says how to get the right
    token, and doctor, run in the clone, counts HEAD's objects that are not in that repo."""
    pusher, cloner = make_git_env(tmp_path / "pusher"), make_git_env(tmp_path / "cloner")
    with running_server(tmp_path / "srv" / "data") as srv:
        for g, repo in ((pusher, "acme/model"), (cloner, cloner_repo)):
            g.git_xet("install", "--standalone", srv.url)
            g.git("config", "--global", "xet.token", srv.token("write", repo=repo))
        work = _repo_with_lfs_file(pusher)
        pusher.git("push", "origin", "main", cwd=work)
        clone = cloner.git("clone", str(work.parent / "work.git"), str(tmp_path / "clone"), check=False)
        doctor = cloner.git_xet("doctor", cwd=tmp_path / "clone", check=False)
    assert f"access token (repo '{cloner_repo}') accepted" in doctor.stdout, doctor.stdout
    if cloner_repo == "acme/model":
        assert clone.returncode == 0, clone.stderr
        assert doctor.returncode == 0 and f"1 of 1 LFS objects of origin/main are in repo '{cloner_repo}'" in doctor.stdout
    else:
        assert clone.returncode != 0
        assert f"looked up in repo '{cloner_repo}' of {srv.url}, the repo your token is for" in clone.stderr, clone.stderr
        assert "git xet token --repo NAME" in clone.stderr
        assert doctor.returncode == 1 and f"0 of 1 LFS objects of origin/main are in repo '{cloner_repo}'" in doctor.stdout, doctor.stdout


def test_doctor_checks_what_it_claims(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("read"))
        read_only = g.git_xet("doctor", check=False)
        assert read_only.returncode == 1 and "allows reading only: pushes will fail" in read_only.stdout
        assert "does not allow write" in read_only.stdout
        g.git("config", "--global", "xet.token", srv.token("write"))
        good = g.git_xet("doctor", check=False)
        assert good.returncode == 0 and "accepted for reading and pushing" in good.stdout, good.stdout

        with _plain_http_server() as other:  # answers 404 to everything, like most web servers
            g.git("config", "--global", "xet.endpoint", other)
            wrong = g.git_xet("doctor", check=False)
            assert wrong.returncode == 1 and "does not answer like `git xet serve`" in wrong.stdout, wrong.stdout
        g.git("config", "--global", "xet.endpoint", srv.url.removeprefix("http://"))
        schemeless = g.git_xet("doctor", check=False)
        assert schemeless.returncode == 1 and f"write https://{srv.url.removeprefix('http://')}" in schemeless.stdout
        g.git("config", "--global", "xet.endpoint", str(tmp_path / "never-installed"))
        missing = g.git_xet("doctor", check=False)
        assert missing.returncode == 1 and "does not exist (pushes will fail)" in missing.stdout

        # --native: the Hub credentials are checked against the repository's remote.
        g.git_xet("uninstall")
        g.git_xet("install", "--native", srv.url)
        g.git("init", "repo")
        repo = g.root / "repo"
        g.git("config", "lfs.url", f"{srv.url}/acme/model.git/info/lfs", cwd=repo)
        none = g.git_xet("doctor", cwd=repo, check=False)
        assert none.returncode == 1 and "no credentials" in none.stdout
        assert "server-negotiated" not in none.stdout and "mode: native XET" in none.stdout
        for scope, ok in (("read", False), ("write", True)):
            token = srv.token(scope, repo="acme/model")
            g.use_credentials(token, username="u")
            out = g.git_xet("doctor", cwd=repo, check=False)
            assert (out.returncode == 0) is ok, out.stdout
            assert ("allow pushing to" in out.stdout) is ok
            assert token not in out.stdout


def test_doctor_and_a_push_give_the_same_advice_for_each_way_a_store_cannot_be_reached(tmp_path: Path) -> None:
    """One diagnosis (client/diagnosis.py) for doctor and the transfer path: an untrusted
    certificate is an SSL_CERT_FILE matter in both (doctor used to say to start the server),
    and a port nothing listens on is a stopped server or a wrong address in both."""
    import socket
    import ssl
    import threading

    from tests.support.nginx_process import make_certificate

    make_certificate(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def handshakes() -> None:  # a TLS server whose certificate nobody here trusts
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with served.wrap_socket(conn, server_side=True):
                    pass
            except OSError:
                pass

    threading.Thread(target=handshakes, daemon=True).start()
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    g = make_git_env(tmp_path / "env")
    g.env.update(GIT_XET_RETRY_BASE_DELAY="0.01")
    g.git_xet("install", "--no-check", "--standalone", f"https://localhost:{port}")  # git-lfs's hooks, before the repository
    work = _repo_with_lfs_file(g)
    try:
        for url, advice, wrong in (
            (f"https://localhost:{port}", "SSL_CERT_FILE", "start it"),
            (f"http://127.0.0.1:{dead.getsockname()[1]}", "nothing accepts connections at", "SSL_CERT_FILE"),
        ):
            install = g.git_xet("install", "--standalone", url, check=False)  # refused, with the same advice
            assert install.returncode == 1 and advice in install.stderr and "--no-check" in install.stderr, install.stderr
            g.git_xet("install", "--no-check", "--standalone", url)
            g.git("config", "--global", "xet.token", "any")
            doctor = g.git_xet("doctor", check=False)
            assert doctor.returncode == 1 and advice in doctor.stdout and wrong not in doctor.stdout, doctor.stdout
            push = g.git("push", "origin", "main", cwd=work, check=False)
            assert push.returncode != 0 and advice in push.stderr, push.stderr
    finally:
        listener.close()
        dead.close()


@contextmanager
def _plain_http_server():
    """A web server on loopback that is not a git-xet server."""
    from http.server import BaseHTTPRequestHandler

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    with http_stub(NotFound) as url:
        yield url


# ------------------------------------------------------------------ team workflow


def test_git_xet_clone_sets_up_a_one_remote_store_before_checkout(tmp_path: Path) -> None:
    """One remote only (the git host keeps the commits, the XET store the LFS objects): a
    teammate's fresh clone works with `git xet clone`, from the store named in .xetconfig."""
    alice = make_git_env(tmp_path / "alice")
    store = tmp_path / "team-store"
    alice.git("init", "--bare", str(tmp_path / "host.git"))
    alice.git("clone", str(tmp_path / "host.git"), "work")
    work = alice.root / "work"
    alice.git_xet("install", "--local", "--standalone", str(store), "--remote", "origin", cwd=work)
    alice.git("config", "-f", ".xetconfig", "xet.endpoint", str(store), cwd=work)
    alice.git("lfs", "track", "*.bin", cwd=work)
    files = {"model.bin": random_bytes(3_000_000, 60), "data/table.bin": random_bytes(700_000, 61)}
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    alice.git("add", ".", cwd=work)
    alice.git("commit", "-m", "v1", cwd=work)
    alice.git("push", "origin", "main", cwd=work)

    bob = make_git_env(tmp_path / "bob")  # a fresh HOME: git-lfs, but no git-xet configuration at all
    bob.git("lfs", "install", "--skip-repo")
    plain = bob.git("clone", str(tmp_path / "host.git"), "plain", check=False)
    assert plain.returncode != 0 and "missing object" in plain.stderr  # why plain `git clone` is not enough
    out = bob.git_xet("clone", str(tmp_path / "host.git"), "mine")
    assert f"using the XET store {store} (from .xetconfig in the repository)" in out.stdout
    mine = bob.root / "mine"
    for name, data in files.items():
        assert (mine / name).read_bytes() == data
    assert "Git LFS fsck OK" in bob.git("lfs", "fsck", cwd=mine).stdout
    # Bob pushes back through the same store; Alice pulls it.
    (mine / "model.bin").write_bytes(files["model.bin"][:1_000_000] + b"bob" + files["model.bin"][1_000_000:])
    bob.git("commit", "-am", "bob's edit", cwd=mine)
    bob.git("push", "origin", "main", cwd=mine)
    alice.git("pull", cwd=work)
    assert (work / "model.bin").read_bytes() == (mine / "model.bin").read_bytes()
    assert "xet.endpoint" not in bob.git("config", "--global", "--list").stdout  # nothing global


def test_git_xet_clone_refuses_a_store_that_is_not_there(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git("init", "--bare", "host.git")
    g.git("clone", "host.git", "work")
    work = g.root / "work"
    g.git("config", "-f", ".xetconfig", "xet.endpoint", str(tmp_path / "unmounted" / "store"), cwd=work)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "cfg", cwd=work)
    g.git("push", "origin", "main", cwd=work)
    proc = g.git_xet("clone", "host.git", "c", check=False)
    assert proc.returncode == 1 and "does not exist here; is its drive mounted?" in proc.stderr
    assert not (tmp_path / "unmounted").exists()


# ------------------------------------------------------------------ smaller


def test_cache_show_names_the_store_of_each_entry(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    store = tmp_path / "store"
    g.git_xet("install", "--standalone", str(store))
    work = _repo_with_lfs_file(g)
    g.git("push", "origin", "main", cwd=work)
    shown = g.git_xet("cache", "show").stdout
    assert f"  {store}: " in shown, shown


def test_help_and_errors(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    overview = g.git_xet("help")
    for command in ("install", "doctor", "clone", "stats", "serve"):
        assert f"    {command}" in overview.stdout
    assert "--max-size" in g.git_xet("help", "cache").stdout
    bad = g.git_xet("cache", "prune", "--max-size", "2X", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "500M, 2G" in bad.stderr
    # An unexpected failure: one line, with --debug for the traceback.
    data = tmp_path / "data"
    (data / "secret").mkdir(parents=True)
    (data / "index.sqlite").write_bytes(b"")
    odd = g.git_xet("token", "--data", str(data), check=False)
    assert odd.returncode == 1 and odd.stderr.count("\n") == 1 and "Traceback" not in odd.stderr and "--debug" in odd.stderr
    assert "Traceback" in g.git_xet("--debug", "token", "--data", str(data), check=False).stderr
    # `git xet --help`: git runs `man git-xet`; the page install/install.sh installs answers it.
    man1 = tmp_path / "man" / "man1"
    man1.mkdir(parents=True)
    (man1 / "git-xet.1").write_text(g.git_xet("help", "--man").stdout)
    env = dict(g.env, MANPATH=str(tmp_path / "man"), MANPAGER="cat", PAGER="cat", MANWIDTH="120")
    page = subprocess.run(["git", "xet", "--help"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert page.returncode == 0, page.stderr
    assert "git xet clone" in page.stdout and "GIT_XET_QUIET" in page.stdout


def test_a_clone_shows_one_summary_of_what_it_downloaded(tmp_path: Path) -> None:
    """As a push does: one line however many agents ran, naming the files and bytes written and
    what was fetched; and `git xet stats` still reports the last push, not the clone."""
    g = make_git_env(tmp_path)
    files = {f"m{i}.bin": random_bytes(300_000 + i * 700_000, 60 + i) for i in range(4)}
    files["copy.bin"] = files["m3.bin"]  # the same LFS object twice: git-lfs transfers it once
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work = g.lfs_work_tree(files, remote="work.git")
        g.git("push", "origin", "main", cwd=work)
        code, shown = _on_a_terminal(g, f"git clone {g.root / 'work.git'} clone", g.root)
    assert code == 0, shown
    summaries = [line[line.index("git-xet: ") :] for line in shown.splitlines() if "git-xet: downloaded" in line]
    assert len(summaries) == 1, shown
    distinct = set(files.values())
    n, size = len(distinct), sum(len(d) for d in distinct)  # git-lfs downloads an object once
    assert summaries[0].startswith(f"git-xet: downloaded {n} files ({describe_size(size)}): fetched "), summaries
    for name, data in files.items():
        assert (g.root / "clone" / name).read_bytes() == data
    assert f"last push: uploaded {n} files" in g.git_xet("stats", cwd=work).stdout


def test_a_failed_push_prints_no_summary(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="1")
    g.git_xet("install", "--no-check", "--standalone", "http://127.0.0.1:9")  # nothing listens on the discard port
    work = _repo_with_lfs_file(g)
    code, shown = _on_a_terminal(g, "git push origin main", work)
    assert code != 0 and "git-xet: upload of" in shown
    assert "git-xet: uploaded" not in shown and "nothing uploaded" not in shown
