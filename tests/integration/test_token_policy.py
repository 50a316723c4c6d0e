"""Which token goes where (git-xet issue 42 §4): a token is bound to the store it was configured
for, and no credential travels over plain http except to this machine's loopback.

Hosts and URLs are generated; nothing here opens a socket (the decision functions are pure;
store_token's last step asks `git credential fill`, here with no helper configured)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.provisional import domains

from git_xet.agent.endpoints import ConfigError, ConfigSnapshot, sendable_store_token, store_token
from git_xet.client.token_policy import is_loopback_host, may_send_credentials

PORTS = st.none() | st.integers(min_value=1, max_value=65535)
PATHS = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8), max_size=3).map(lambda p: "".join("/" + x for x in p))
LOOPBACK_V4 = st.integers(min_value=0x7F000000, max_value=0x7FFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n)))
OTHER_V4 = st.ip_addresses(v=4).filter(lambda a: not a.is_loopback).map(str)
OTHER_V6 = st.ip_addresses(v=6).filter(lambda a: not a.is_loopback and not (a.ipv4_mapped and a.ipv4_mapped.is_loopback)).map(lambda a: f"[{a}]")
NAMES = domains().filter(lambda d: d.lower().rstrip(".") != "localhost") | st.sampled_from(["localhost.example.com", "127.0.0.1.nip.io", "loopback", "0x7f.1"])


def _url(scheme: str, host: str, port: int | None, path: str) -> str:
    return f"{scheme}://{host}{f':{port}' if port else ''}{path}"


@given(st.sampled_from(["https", "HTTPS"]), LOOPBACK_V4 | OTHER_V4 | OTHER_V6 | NAMES, PORTS, PATHS)
def test_https_may_carry_a_token_anywhere(scheme: str, host: str, port: int | None, path: str) -> None:
    assert may_send_credentials(_url(scheme, host, port, path))


@given(LOOPBACK_V4 | st.sampled_from(["[::1]", "localhost", "LOCALHOST", "localhost.", "[::ffff:127.0.0.1]"]), PORTS, PATHS)
def test_plain_http_may_carry_a_token_to_loopback_only(host: str, port: int | None, path: str) -> None:
    assert may_send_credentials(_url("http", host, port, path))


@given(OTHER_V4 | OTHER_V6 | NAMES, PORTS, PATHS)
def test_plain_http_off_this_machine_never_carries_a_token(host: str, port: int | None, path: str) -> None:
    assert not is_loopback_host(host)
    assert not may_send_credentials(_url("http", host, port, path))


@given(st.sampled_from(["ftp", "file", "ws", "s3", ""]), LOOPBACK_V4 | NAMES, PATHS)
def test_other_schemes_never_carry_a_token(scheme: str, host: str, path: str) -> None:
    assert not may_send_credentials(_url(scheme, host, None, path))


# ---------------------------------------------------------------- binding a token to its store


@pytest.fixture(autouse=True, scope="module")
def _no_user_credentials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No credential helper, no environment token: only what each example's config says."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.setenv("GIT_TERMINAL_PROMPT", "0")
        mp.chdir(home)
        for key in ("GIT_XET_TOKEN", "GIT_XET_ENDPOINT", "GIT_CONFIG_GLOBAL", "GIT_DIR"):
            mp.delenv(key, raising=False)
        yield


STORES = st.builds(_url, st.sampled_from(["https", "http"]), st.sampled_from(["127.0.0.1", "xet.example.com", "[::1]", "other.example"]), PORTS, PATHS)


def _config(*entries: tuple[str, str, str]) -> ConfigSnapshot:
    values = {key: value for _, key, value in entries}
    return ConfigSnapshot(values, list(entries))


def _same_store(a: str, b: str) -> bool:
    return store_token(a, _config(("global", "xet.endpoint", b), ("global", "xet.token", "t"))).token == "t"


@given(STORES, STORES)
def test_xet_token_goes_only_to_the_endpoint_of_its_own_scope(configured: str, named: str) -> None:
    """The documented pair (global xet.endpoint + xet.token) keeps working; a store a
    repository names (the clone's local xet.endpoint) gets nothing unless it is that store."""
    config = _config(("global", "xet.endpoint", configured), ("global", "xet.token", "T"), ("local", "xet.endpoint", named))
    assert store_token(configured, config).token == "T"
    found = store_token(named, config)
    assert found.token == ("T" if _same_store(named, configured) else None)
    if found.token is None:
        assert f"git config --global xet.{named.rstrip('/')}.token <token>" in found.source


@given(STORES, PATHS, STORES)
def test_a_per_store_token_covers_its_url_and_paths_below_only(store: str, below: str, other: str) -> None:
    config = _config(("global", f"xet.{store}.token", "S"))
    assert store_token(store, config).token == "S"
    assert store_token(store.rstrip("/") + below, config).token == "S"
    if urlsplit(store).path.strip("/"):
        assert store_token(store.rstrip("/") + "x", config).token is None  # not a path boundary
    assert store_token(other, config).token == ("S" if _same_store(other, store) or (other.rstrip("/") + "/").startswith(store.rstrip("/") + "/") else None)


@given(STORES, STORES)
def test_the_environment_token_goes_only_to_the_environment_store(env_store: str, store: str) -> None:
    same = _same_store(store, env_store)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GIT_XET_TOKEN", "E")
        mp.setenv("GIT_XET_ENDPOINT", env_store)
        assert store_token(store, _config()).token == ("E" if same else None)
        mp.delenv("GIT_XET_ENDPOINT")
        assert store_token(store, _config()).token is None


@given(OTHER_V4 | NAMES, PORTS, PATHS)
def test_a_configured_token_for_plain_http_off_this_machine_is_refused_not_sent(host: str, port: int | None, path: str) -> None:
    store = _url("http", host, port, path)
    config = _config(("global", "xet.endpoint", store), ("global", "xet.token", "xet1.secret"))
    with pytest.raises(ConfigError, match="over plain http") as refused:
        sendable_store_token(store, config)
    assert "secret" not in str(refused.value)


def test_git_config_keys_name_the_store_as_git_prints_them(tmp_path: Path) -> None:
    """`git config --global xet.<url>.token` (the command the errors print) is read back."""
    import subprocess

    from git_xet.agent.endpoints import read_config_snapshot

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "config", "xet.https://Xet.Example.com:8443/team.token", "K"], cwd=tmp_path, check=True)
    config = read_config_snapshot(tmp_path)
    assert store_token("https://xet.example.com:8443/team/", config).token == "K"
    assert store_token("https://xet.example.com/team", config).token is None
