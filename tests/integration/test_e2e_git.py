"""Real git and git-lfs (3.x) pushing and cloning through `git xet transfer`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core.native import native_disabled
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server


def _stored_bytes(store: Path) -> int:
    return sum(stored_objects(store).values())


def _push_first_commit(g: GitEnv, files: dict[str, bytes]) -> Path:
    work = g.lfs_work_tree(files)
    g.git("push", "origin", "main", cwd=work)
    return work


def test_push_and_clone_through_the_local_store(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    store = tmp_path / "xet-store"
    out = g.git_xet("install", "--standalone", str(store))
    assert "registered the transfer agent" in out.stdout
    files = {"model.bin": random_bytes(6_000_000, 1), "zeros.bin": bytes(2_000_000), "notes.txt": b"plain git\n"}
    work = _push_first_commit(g, files)
    cas = CasStore(store)
    for name in ("model.bin", "zeros.bin"):
        assert cas.file_by_sha256(hashlib.sha256(files[name]).hexdigest()) is not None

    g.git("clone", "remote.git", "clone2")
    for name, data in files.items():
        assert (g.root / "clone2" / name).read_bytes() == data
    fsck = g.git("lfs", "fsck", cwd=g.root / "clone2")
    assert "Git LFS fsck OK" in fsck.stdout

    # v2: an edit plus an insertion; only the changed chunks travel.
    v2 = bytearray(files["model.bin"])
    v2[3_000_000:3_000_000] = b"inserted bytes"
    (work / "model.bin").write_bytes(bytes(v2))
    g.git("commit", "-am", "v2", cwd=work)
    before = _stored_bytes(store)
    g.git("push", "origin", "main", cwd=work)
    assert 0 < _stored_bytes(store) - before < 0.05 * len(v2)  # the edit is stored, and only about it
    g.git("pull", cwd=g.root / "clone2")
    assert (g.root / "clone2" / "model.bin").read_bytes() == bytes(v2)


def test_agent_errors_are_readable_in_git_output(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git_xet("install")  # registered, but no store configured
    g.git("config", "--global", "lfs.standalonetransferagent", "xet")
    g.git("init", "--bare", "remote.git")
    g.git("clone", "remote.git", "work")
    work = g.root / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / "a.bin").write_bytes(b"x" * 1000)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0
    assert "git xet install --standalone" in push.stderr


def test_a_store_that_is_gone_is_named_in_git_output(tmp_path: Path) -> None:
    """A configured store whose directory went away (unmounted drive, renamed): the push fails
    with the agent's message, which names the store and the fix, and nothing is created."""
    g = make_git_env(tmp_path)
    store = tmp_path / "xet-store"
    g.git_xet("install", "--standalone", str(store))
    store.rename(tmp_path / "elsewhere")
    work = g.lfs_work_tree({"a.bin": random_bytes(5000, 7)})
    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0
    assert f"the XET store {store} does not exist" in push.stderr
    assert f"git xet install --standalone {store}" in push.stderr
    assert not store.exists()


@pytest.mark.parametrize("scope", ["--global", "--local"])
def test_install_is_idempotent_and_uninstall_cleans_up(tmp_path: Path, scope: str) -> None:
    g = make_git_env(tmp_path)
    g.git("init", "repo")
    repo = g.root / "repo"
    for _ in range(2):
        g.git_xet("install", scope, "--standalone", str(tmp_path / "s"), cwd=repo)
    listing = g.git("config", scope, "--list", cwd=repo).stdout
    assert listing.count("lfs.customtransfer.xet.path=") == 1
    assert "lfs.standalonetransferagent=xet" in listing
    g.git_xet("uninstall", scope, cwd=repo)
    listing = g.git("config", scope, "--list", cwd=repo).stdout
    assert "customtransfer.xet" not in listing and "standalonetransferagent" not in listing and "xet.endpoint" not in listing


# ---------------------------------------------------------------- through `git xet serve`



def _server_bytes(srv: RunningServer) -> int:
    return _stored_bytes(srv.data_dir)


def test_standalone_against_our_server(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.05")
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        files = {"weights.bin": random_bytes(12_000_000, 5), "small.bin": b"s" * 5000}
        work = _push_first_commit(g, files)
        port = int(srv.url.rsplit(":", 1)[1])
        # The small file's xorb went with its shard, in one request; the large one's on its own.
        pushed = [r["path"] for r in srv.requests()]
        assert pushed.count("/git-xet/v1/upload-bundles") == 1 and pushed.count("/v2/shards") == 1, pushed
        # Capabilities asked once per agent (at most one per object here), no route probed.
        assert 1 <= pushed.count("/git-xet/v1/capabilities") <= len(files), pushed
        assert not any(p.startswith(("/v1/xorbs-and-shard", "/v1/lfs-objects")) for p in pushed), pushed
        # A directory server lists no upload grants: the large xorb is posted, no grant asked.
        assert not any(p.startswith("/v1/xorb-grants/") for p in pushed), pushed

        # Re-offering everything sends nothing new.
        before = _server_bytes(srv)
        g.git("lfs", "push", "--all", "origin", cwd=work)
        assert _server_bytes(srv) == before

        # v2 edit: only the changed chunks reach the server.
        v2 = bytearray(files["weights.bin"])
        v2[6_000_000:6_000_500] = bytes(500)
        (work / "weights.bin").write_bytes(bytes(v2))
        g.git("commit", "-am", "v2", cwd=work)
        g.git("push", "origin", "main", cwd=work)
        assert _server_bytes(srv) - before < 0.05 * len(v2)

        requests_before = len(srv.requests())
        g.git("clone", "remote.git", "clone2")
        assert (g.root / "clone2" / "weights.bin").read_bytes() == bytes(v2)
        assert (g.root / "clone2" / "small.bin").read_bytes() == files["small.bin"]
        assert "Git LFS fsck OK" in g.git("lfs", "fsck", cwd=g.root / "clone2").stdout
        # The small file came whole in one request; the large one the XET way (lookup, plan, ranges).
        small_oid = hashlib.sha256(files["small.bin"]).hexdigest()
        paths = [r["path"] for r in srv.requests()[requests_before:]]
        assert paths.count(f"/git-xet/v1/lfs-objects/{small_oid}") == 1, paths
        assert sum("lfs-objects/" in p for p in paths) == 1, paths
        assert sum("/reconstructions/" in p for p in paths) == 1, paths

        # Worktrees: objects fetched from a linked worktree land in the common git dir.
        g.env["GIT_LFS_SKIP_SMUDGE"] = "1"
        g.git("clone", "remote.git", "lazy")
        del g.env["GIT_LFS_SKIP_SMUDGE"]
        g.git("worktree", "add", "../lazy-wt", cwd=g.root / "lazy")
        g.git("lfs", "pull", cwd=g.root / "lazy-wt")
        assert (g.root / "lazy-wt" / "weights.bin").read_bytes() == bytes(v2)

    # The server is down: the push fails with a readable reason, and succeeds once it is back.
    (work / "small.bin").write_bytes(b"t" * 7000)
    g.git("commit", "-am", "v3", cwd=work)
    failed = g.git("push", "origin", "main", cwd=work, check=False)
    assert failed.returncode != 0
    assert "git-xet: upload of" in failed.stderr and "failed" in failed.stderr
    with running_server(tmp_path / "srv" / "data", port=port):
        g.git("push", "origin", "main", cwd=work)
        g.git("pull", cwd=g.root / "clone2")
    assert (g.root / "clone2" / "small.bin").read_bytes() == b"t" * 7000
    assert (g.root / "clone2" / "weights.bin").read_bytes() == bytes(v2)


def test_hub_style_negotiation_with_our_server(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    with running_server(tmp_path / "srv" / "data") as srv:
        user_token = srv.token("write", repo="acme/model")
        g.git_xet("install")  # registered, no standalone mode: the server negotiates
        g.use_credentials(user_token)
        g.git("config", "--global", "lfs.url", f"{srv.url}/acme/model.git/info/lfs")
        files = {"data.bin": random_bytes(9_000_000, 7)}
        _push_first_commit(g, files)
        log = srv.log()
        assert "/acme/model.git/info/lfs/objects/batch" in log
        assert "/v1/xorbs/" in log and "/v2/shards" in log
        assert user_token not in log and user_token not in g.agent_log()
        g.git("clone", "remote.git", "clone2")
        assert (g.root / "clone2" / "data.bin").read_bytes() == files["data.bin"]
        assert "/v2/reconstructions/" in srv.log()  # a native XET download by our agent


def test_doctor_track_and_cache_commands(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    bare = g.git_xet("doctor", check=False)
    assert bare.returncode == 1 and "run `git xet install`" in bare.stdout
    store = tmp_path / "store"
    g.git_xet("install", "--standalone", str(store))
    ok = g.git_xet("doctor", check=False)
    assert ok.returncode == 0, ok.stdout
    chunker = "pure-Python chunker (GIT_XET_NO_NATIVE is set" if native_disabled() else "native C chunker"  # (CI runs this file both ways)
    assert chunker in ok.stdout and "local store" in ok.stdout
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git("config", "--global", "xet.endpoint", srv.url)
        g.git("config", "--global", "xet.token", "xet1.bad.token")
        bad = g.git_xet("env", check=False)
        assert bad.returncode == 1 and "access token refused" in bad.stdout
        g.git("config", "--global", "xet.token", srv.token("write"))
        assert g.git_xet("env", check=False).returncode == 0
    g.git("config", "--global", "xet.endpoint", str(store))

    g.git("init", "repo")
    repo = g.root / "repo"
    g.git_xet("track", "*.safetensors", cwd=repo)
    assert "*.safetensors filter=lfs" in (repo / ".gitattributes").read_text()
    (repo / "m.safetensors").write_bytes(random_bytes(2_000_000, 9))
    g.git("add", ".", cwd=repo)
    g.git("commit", "-m", "m", cwd=repo)
    g.git("init", "--bare", "remote.git")
    g.git("remote", "add", "origin", str(g.root / "remote.git"), cwd=repo)
    g.git("push", "origin", "main", cwd=repo)
    shown = g.git_xet("cache", "show").stdout
    assert "1 xorbs cached" in shown
    assert "MiB" in g.git_xet("cache", "prune", "--max-size", "1K").stdout
    assert "removed every cached shard" in g.git_xet("cache", "prune", "--all").stdout
    assert not (tmp_path / "xet-cache" / "shards").exists()


def test_native_mode_against_a_hub_style_server(tmp_path: Path) -> None:
    """`git xet install --native URL`: our own batch calls; downloads are reconstructed from the
    CAS using the XET hash in the Hub-style bridge href, not streamed through the bridge."""
    g = make_git_env(tmp_path)
    with running_server(tmp_path / "srv" / "data") as srv:
        user_token = srv.token("write", repo="datasets/acme/corpus")
        g.git_xet("install", "--native", srv.url)
        g.use_credentials(user_token)
        g.git("config", "--global", "lfs.url", f"{srv.url}/datasets/acme/corpus.git/info/lfs")
        files = {"shard.bin": random_bytes(7_000_000, 8)}
        _push_first_commit(g, files)
        g.git("clone", "remote.git", "clone2")
        assert (g.root / "clone2" / "shard.bin").read_bytes() == files["shard.bin"]
        log = srv.log()
        assert "/api/datasets/acme/corpus/xet-read-token/main" in log  # read token for the native download
        assert "/v2/reconstructions/" in log and "/xet-bridge-us/" not in log
        assert user_token not in log and user_token not in g.agent_log()


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(3, 12), agents=st.sampled_from([1, 3]))
def test_a_native_clone_asks_once_per_agent_for_its_token_and_credential(tmp_path_factory: pytest.TempPathFactory, count: int, agents: int) -> None:
    """Before, each object of a --native clone ran `git credential fill` and fetched a new
    read token (besides its batch call): one token request and one credential per object. Now
    each agent looks them up once (its read token is refreshed when it expires)."""
    tmp_path = tmp_path_factory.mktemp("native")
    g = make_git_env(tmp_path)
    asked = tmp_path / "credential-calls"
    with running_server(tmp_path / "srv" / "data") as srv:
        user_token = srv.token("write", repo="acme/many")
        g.git_xet("install", "--native", srv.url)
        g.use_credentials(user_token, record=asked)
        g.git("config", "--global", "lfs.url", f"{srv.url}/acme/many.git/info/lfs")
        g.git("config", "--global", "lfs.concurrenttransfers", str(agents))
        files = {f"f{i}.bin": random_bytes(2000 + 37 * i, 100 + i) for i in range(count)}
        _push_first_commit(g, files)
        before = asked.read_text().count("x") if asked.exists() else 0
        pushed_log = srv.log()
        g.git("clone", "remote.git", "clone2")
        for name, data in files.items():
            assert (g.root / "clone2" / name).read_bytes() == data
        clone_log = srv.log()[len(pushed_log) :]
    assert clone_log.count("xet-read-token") <= agents < count
    assert asked.read_text().count("x") - before <= agents
