"""model_prune and model_snapshot's clean-up against the fake hub (tests/upstream/hub.py) on 127.0.0.1:
the snapshots of models a node no longer lists are removed, never a commit in use; a download another
revision left behind does not stay; check mode's free space lets a caller check the sum of its models."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _cache
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import model_prune
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.modules.test_model_snapshot import hub_lock, run
from tests.upstream.hub import TINY_CHAT, TINY_SHARDED


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _s: None)


def repo_dir(cache, repo):
    return cache / ("models--" + repo.replace("/", "--"))


def prune(capsys, cache, repos, **kw):
    args = {"cache_dir": str(cache), "repos": repos}
    args.update(kw)
    return run_module(model_prune.main, args, capsys)


def test_a_model_no_longer_listed_goes_and_one_in_use_stays(upstream, capsys, tmp_path):
    cache = tmp_path / "hub"
    v1, main, sharded = hub_lock(upstream, TINY_CHAT, "v1"), hub_lock(upstream, TINY_CHAT), hub_lock(upstream, TINY_SHARDED)
    for lock in (v1, main, sharded):
        assert run(capsys, upstream, lock, cache)[0] == 0
    (cache / "datasets--org--data").mkdir()  # not a model: never touched

    # listed: tiny-sharded; tiny-chat is not, and a unit still serves its v1
    code, check, _out = prune(capsys, cache, [TINY_SHARDED], in_use=[v1["commit"]], _ansible_check_mode=True,
                              _ansible_diff=True)
    assert code == 0 and check["changed"] is True and check["pruned"] == {repo_dir(cache, TINY_CHAT).name: [main["commit"]]}
    assert (repo_dir(cache, TINY_CHAT) / "snapshots" / main["commit"]).is_dir()  # check mode removed nothing
    code, result, _out = prune(capsys, cache, [TINY_SHARDED], in_use=[v1["commit"]])
    assert code == 0 and result["changed"] is True, result
    chat = repo_dir(cache, TINY_CHAT)
    assert os.listdir(chat / "snapshots") == [v1["commit"]]
    assert (chat / "snapshots" / v1["commit"] / "model.safetensors").resolve().is_file()
    assert result["kept"] == {chat.name: [v1["commit"]]} and result["removed"] == []
    # main's own weights went, v1's stayed; tiny-sharded (listed) is untouched
    assert sorted(os.listdir(chat / "blobs")) == sorted({e.get("sha256") or e["git_oid"] for e in v1["files"]})
    assert (repo_dir(cache, TINY_SHARDED) / "snapshots" / sharded["commit"]).is_dir()
    assert (cache / "datasets--org--data").is_dir()

    # once no unit serves it, the whole directory goes; a second run has nothing to do
    code, result, _out = prune(capsys, cache, [TINY_SHARDED])
    assert code == 0 and result["removed"] == [chat.name] and not chat.exists()
    code, result, _out = prune(capsys, cache, [TINY_SHARDED])
    assert code == 0 and result["changed"] is False
    assert (repo_dir(cache, TINY_SHARDED) / "snapshots" / sharded["commit"]).is_dir()


def test_an_open_cache_dir_is_refused(capsys, tmp_path):
    cache = tmp_path / "hub"
    cache.mkdir()
    cache.chmod(0o777)
    code, result, _out = prune(capsys, cache, [TINY_CHAT])
    assert code == 1 and result["msg"].startswith("cache_dir %s cannot be trusted" % cache)


def test_a_download_another_revision_left_is_removed_and_the_locks_own_is_resumed(upstream, capsys, tmp_path):
    cache = tmp_path / "hub"
    v1, main = hub_lock(upstream, TINY_CHAT, "v1"), hub_lock(upstream, TINY_CHAT)
    assert run(capsys, upstream, v1, cache)[0] == 0
    blobs = repo_dir(cache, TINY_CHAT) / "blobs"
    weights = next(e for e in main["files"] if e["path"] == "model.safetensors")["sha256"]
    (blobs / (weights + ".incomplete")).write_bytes(b"half of main's weights")  # a failed move to main
    own = next(e for e in v1["files"] if e["path"] == "config.json")["git_oid"]
    os.unlink(blobs / own)
    (blobs / (own + ".incomplete")).write_bytes(b"{")  # v1's own download, cut: resumed, not removed
    code, result, _out = run(capsys, upstream, v1, cache)
    assert code == 0, result
    assert not (blobs / (weights + ".incomplete")).exists(), "a download of another revision stayed"
    assert (blobs / own).is_file() and not (blobs / (own + ".incomplete")).exists()
    assert [name for name in os.listdir(blobs) if name.endswith(".incomplete")] == []
    code, result, _out = run(capsys, upstream, v1, cache)
    assert code == 0 and result["changed"] is False


def test_check_mode_tells_the_free_space_of_the_filesystem(upstream, capsys, tmp_path, monkeypatch):
    class Fs:
        f_bavail = 4096
        f_frsize = 1024 * 1024

    monkeypatch.setattr(_cache.os, "statvfs", lambda _p: Fs())
    code, result, _out = run(capsys, upstream, hub_lock(upstream, TINY_CHAT), tmp_path / "hub", _ansible_check_mode=True)
    assert code == 0 and result["space"]["free_bytes"] == 4096 * 1024 * 1024
    assert result["space"]["device"] == os.stat(str(tmp_path)).st_dev and result["space"]["margin_mib"] == 1024
    assert result["bytes_downloaded"] > 0
