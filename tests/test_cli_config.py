"""Configuration that must not silently do the wrong thing, and the messages users see:
`git xet install/uninstall/token/serve/doctor/clone/stats` with real git and git-lfs in a temp HOME."""

from __future__ import annotations

import string
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.client.location import STORE_MARKER, LocationError, create_local_store, parse_store_location
from tests.datagen import random_bytes
from tests.gitenv import GitEnv, make_git_env
from tests.server_process import running_server

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
    create_local_store(tmp_path / "local")
    assert "needs no tokens" in g.git_xet("token", "--data", str(tmp_path / "local"), check=False).stderr
    with running_server(tmp_path / "srv" / "data") as srv:
        import httpx

        token = g.git_xet("token", "--data", str(srv.data_dir), "--scope", "read").stdout.strip()
        resp = httpx.get(f"{srv.url}/v1/reconstructions/{'0' * 64}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
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

