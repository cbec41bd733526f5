"""model_snapshot: main() against the fake hub (tests/upstream/hub.py) on 127.0.0.1. The lock is built
from the hub's own catalogue; what lands in the cache is read back through the snapshot's links and
hashed here, and the hub's request log shows what was asked (nothing, when the snapshot is complete)."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _cache, _lock, _snapshot
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import model_snapshot
from tests.unit.plugins.lookup_fakes import run_module
from tests.upstream.hub import GATED_TINY, HUB_TOKEN, TINY_CHAT, TINY_SHARDED


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _s: None)


def hub_lock(upstream, repo, revision="main"):
    """The lock of ``repo`` at ``revision``, from the fake hub's catalogue (every file of the commit)."""
    entry = upstream.hub_catalog()["repos"][repo]
    commit = entry["branches"].get(revision) or entry["tags"].get(revision) or revision
    found = [c for c in entry["commits"] if c["commit"] == commit][0]
    return {"format": 1, "repo": repo, "revision": revision, "commit": commit, "files": found["files"],
            "size": found["size"]}


def run(capsys, upstream, lock, cache_dir, **kw):
    args = {"lock": lock, "cache_dir": str(cache_dir), "endpoint": upstream.hub_url}
    args.update(kw)
    return run_module(model_snapshot.main, args, capsys)


def read_back(cache_dir, lock):
    """Each file of the lock as the snapshot serves it: path -> (size, hash of the lock's kind)."""
    snap = os.path.join(str(cache_dir), "models--" + lock["repo"].replace("/", "--"), "snapshots", lock["commit"])
    out = {}
    for entry in lock["files"]:
        with open(os.path.join(snap, entry["path"]), "rb") as handle:
            data = handle.read()
        if "sha256" in entry:
            out[entry["path"]] = (len(data), hashlib.sha256(data).hexdigest())
        else:
            out[entry["path"]] = (len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
    return out


def expected(lock):
    return dict((e["path"], (e["size"], e.get("sha256") or e["git_oid"])) for e in lock["files"])


def hub_requests(upstream):
    return [r for r in upstream.log() if r["path"].startswith(("/hub/", "/hub-cdn/"))]


def test_a_model_is_laid_out_checked_and_a_second_run_asks_nothing(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_SHARDED)
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 0, result
    assert result["changed"] is True
    assert sorted(result["downloaded"]) == sorted(e["path"] for e in lock["files"])
    assert result["bytes_downloaded"] == result["bytes_total"] == lock["size"]
    assert result["reused"] == 0 and result["pruned"] == []
    assert result["path"] == str(tmp_path / "hub" / "models--llmfleet-test--tiny-sharded" / "snapshots" / lock["commit"])
    assert read_back(tmp_path / "hub", lock) == expected(lock)
    ref = tmp_path / "hub" / "models--llmfleet-test--tiny-sharded" / "refs" / "main"
    assert ref.read_text() == lock["commit"]
    assert any(r["path"].startswith("/hub-cdn/") for r in hub_requests(upstream))  # LFS files came from the CDN

    upstream.clear_log()
    code, again, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 0 and again["changed"] is False, again
    assert again["downloaded"] == [] and again["bytes_downloaded"] == 0
    assert again["reused"] == len(lock["files"])
    assert upstream.log() == []  # not a single request


def test_check_mode_says_what_it_would_fetch_and_writes_and_asks_nothing(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and result["changed"] is True, result
    assert sorted(result["downloaded"]) == sorted(e["path"] for e in lock["files"])
    assert result["bytes_downloaded"] == lock["size"]
    assert not (tmp_path / "hub").exists()
    assert upstream.log() == []
    added = [line for line in result["diff"]["after"].splitlines()
             if line not in result["diff"]["before"].splitlines()]
    assert added == ["snapshot %s" % lock["commit"]] + [
        "snapshots/%s/%s" % (lock["commit"], e["path"]) for e in lock["files"]]

    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 0 and result["changed"] is True
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", _ansible_check_mode=True)
    assert code == 0 and result["changed"] is False and result["downloaded"] == []


def test_files_and_directories_are_readable_by_all_and_writable_by_the_owner_only(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_SHARDED)
    old = os.umask(0o077)  # a hardened root's umask must not hide the weights from the service user
    try:
        code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    finally:
        os.umask(old)
    assert code == 0, result
    for here, dirs, files in os.walk(str(tmp_path / "hub")):
        for name in dirs:
            assert stat.S_IMODE(os.lstat(os.path.join(here, name)).st_mode) == 0o755, (here, name)
        for name in files:
            st = os.lstat(os.path.join(here, name))
            if stat.S_ISREG(st.st_mode) and name != _cache.LOCK_NAME:
                assert stat.S_IMODE(st.st_mode) == 0o644, (here, name)


def test_a_tampered_file_fails_naming_it_and_nothing_is_linked(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    upstream.fault("tamper", filename="model.safetensors")
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1 and result["failed"] is True
    entry = [e for e in lock["files"] if e["path"] == "model.safetensors"][0]
    assert result["msg"].startswith("model.safetensors of %s@%s from %s/%s/resolve/%s/model.safetensors is not the "
                                    "lock's file: got %d bytes with sha256 "
                                    % (TINY_CHAT, lock["commit"], upstream.hub_url, TINY_CHAT, lock["commit"], entry["size"]))
    assert "expected %d bytes with sha256 %s" % (entry["size"], entry["sha256"]) in result["msg"]
    assert result["got_hash"] != entry["sha256"] and result["expected_hash"] == entry["sha256"]
    repo = tmp_path / "hub" / "models--llmfleet-test--tiny-chat"
    assert os.listdir(str(repo / "snapshots")) == []
    assert not [n for n in os.listdir(str(repo / "blobs")) if n.startswith(entry["sha256"])]
    # the other downloads stopped with it: what they got stays private (0600), to be resumed
    for name in os.listdir(str(repo / "blobs")):
        if name.endswith(".incomplete"):
            assert stat.S_IMODE(os.lstat(str(repo / "blobs" / name)).st_mode) == 0o600, name
    assert not (repo / "refs").exists()


def test_a_cut_off_download_is_resumed_with_a_range(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    upstream.fault("truncate", path="/hub-cdn/", count=1)
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 0, result
    cdn = [r for r in upstream.log() if r["path"].startswith("/hub-cdn/")]
    assert cdn[0]["fault"] == "truncate" and "Range" not in cdn[0]["headers"]
    cdn = [r for r in cdn if r["path"] == cdn[0]["path"]]  # that file's requests (the others run beside it)
    assert cdn[1]["headers"]["Range"].startswith("bytes=")
    assert int(cdn[1]["headers"]["Range"][6:-1]) > 0
    assert read_back(tmp_path / "hub", lock) == expected(lock)


def test_a_gated_model_needs_the_token_which_goes_to_the_hub_only_and_is_never_shown(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, GATED_TINY)
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1
    assert "answered 401" in result["msg"] and "no token was given" in result["msg"]
    code, result, out = run(capsys, upstream, lock, tmp_path / "hub", token=HUB_TOKEN)
    assert code == 0, result
    assert HUB_TOKEN not in out
    assert read_back(tmp_path / "hub", lock) == expected(lock)
    sent = hub_requests(upstream)
    to_hub = [r for r in sent if r["path"].startswith("/hub/")]
    to_cdn = [r for r in sent if r["path"].startswith("/hub-cdn/")]
    assert to_cdn and all("Authorization" not in r["headers"] for r in to_cdn)
    assert to_hub[-1]["headers"]["Authorization"] == "Bearer ***"  # the log masks it: it was sent


def test_a_wrong_token_fails_without_showing_it(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, GATED_TINY)
    code, result, out = run(capsys, upstream, lock, tmp_path / "hub", token="hf_notTheRightOne123")
    assert code == 1 and "answered 403" in result["msg"] and "the token given has no access" in result["msg"]
    assert "hf_notTheRightOne123" not in out


def test_a_file_the_hub_does_not_have_fails_naming_it(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    lock["files"] = sorted(lock["files"] + [{"path": "missing.json", "size": 2, "git_oid": "0" * 40}],
                           key=lambda e: e["path"])
    lock["size"] += 2
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1
    assert "/resolve/%s/missing.json" % lock["commit"] in result["msg"] and "404" in result["msg"]


def test_two_revisions_share_blobs_and_prune_keeps_what_is_in_use(upstream, tmp_path, capsys):
    v1 = hub_lock(upstream, TINY_CHAT, "v1")
    main = hub_lock(upstream, TINY_CHAT, "main")
    cache = tmp_path / "hub"
    repo = cache / "models--llmfleet-test--tiny-chat"
    assert run(capsys, upstream, v1, cache)[0] == 0
    only_v1 = set(_lock.blob_name(e) for e in v1["files"]) - set(_lock.blob_name(e) for e in main["files"])
    # check mode, main not there yet: v1 would go, but not the blobs main will use
    code, result, _out = run(capsys, upstream, main, cache, keep=1, _ansible_check_mode=True)
    assert code == 0 and result["pruned"] == [v1["commit"]], result
    assert sorted(result["blobs_removed"]) == sorted(only_v1)
    assert os.listdir(str(repo / "snapshots")) == [v1["commit"]]
    upstream.clear_log()
    code, result, _out = run(capsys, upstream, main, cache, keep=1, in_use=[v1["commit"]])
    assert code == 0, result
    shared = set(e["path"] for e in main["files"]) & set(
        e["path"] for e in v1["files"] if e in main["files"])
    assert shared and result["reused"] == len(shared)
    assert sorted(result["downloaded"]) == sorted(e["path"] for e in main["files"] if e["path"] not in shared)
    assert result["pruned"] == []  # v1 is in use
    assert sorted(os.listdir(str(repo / "snapshots"))) == sorted([v1["commit"], main["commit"]])

    code, result, _out = run(capsys, upstream, main, cache, keep=1)
    assert code == 0 and result["changed"] is True, result
    assert result["pruned"] == [v1["commit"]] and sorted(result["blobs_removed"]) == sorted(only_v1)
    assert os.listdir(str(repo / "snapshots")) == [main["commit"]]
    assert sorted(os.listdir(str(repo / "blobs"))) == sorted(set(_lock.blob_name(e) for e in main["files"]))
    assert sorted(os.listdir(str(repo / "refs"))) == ["main"]  # v1's ref went with its snapshot
    assert read_back(cache, main) == expected(main)
    code, result, _out = run(capsys, upstream, main, cache, keep=1)
    assert result["changed"] is False


def test_not_enough_space_fails_before_any_download(upstream, tmp_path, capsys, monkeypatch):
    lock = hub_lock(upstream, TINY_CHAT)

    class Fs(object):
        f_frsize = 4096
        f_bavail = 256 * 1024 // 4096  # 256 KiB free; the model is ~73 KiB, the margin 1 MiB

    monkeypatch.setattr(_cache.os, "statvfs", lambda _p: Fs())
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1
    assert ("%d files to download need" % len(lock["files"])) in result["msg"]
    assert "(%d bytes) plus the margin of 1024 MiB" % lock["size"] in result["msg"]
    assert "has 0.2 MiB (262144 bytes) free" in result["msg"]
    assert hub_requests(upstream) == []
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", free_space_margin_mib=0)
    assert code == 0, result


def test_an_invalid_lock_is_refused_before_anything(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    lock["files"][0]["path"] = "../escape"
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1 and result["msg"].startswith("lock: ")
    assert "'..'" in result["msg"]
    assert not (tmp_path / "hub").exists() and upstream.log() == []


def test_a_cache_dir_others_can_write_is_refused(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    code, result, _out = run(capsys, upstream, lock, shared / "hub")
    assert code == 1
    assert result["msg"].startswith("cache_dir %s cannot be trusted" % (shared / "hub"))
    assert result["untrusted"]["component"] == str(shared) and "chmod go-w" in result["untrusted"]["fix"]
    assert upstream.log() == []


def test_something_else_in_the_way_is_never_removed(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    repo = tmp_path / "hub" / "models--llmfleet-test--tiny-chat"
    repo.mkdir(parents=True)
    (repo / "blobs").write_text("a file where the blobs directory goes")
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 1 and result["in_the_way"] == [str(repo / "blobs")]
    assert (repo / "blobs").read_text().startswith("a file")


def test_the_progress_file_is_removed_at_the_end(upstream, tmp_path, capsys, monkeypatch):
    lock = hub_lock(upstream, TINY_CHAT)
    seen = []
    real = _snapshot.DownloadProgress._write

    def spy(self, force=False, **values):
        real(self, True, **values)  # every update written, so that the test sees them
        with open(self.path) as handle:
            seen.append(json.load(handle))

    monkeypatch.setattr(_snapshot.DownloadProgress, "_write", spy)
    progress = tmp_path / "progress.json"
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", progress_file=str(progress))
    assert code == 0, result
    assert not progress.exists()
    assert seen[-1]["bytes_total"] == lock["size"] and seen[-1]["files_total"] == len(lock["files"])
    assert max(s["bytes_done"] for s in seen) <= lock["size"]
    assert set(s["file"] for s in seen) == set(e["path"] for e in lock["files"])


def test_a_second_run_on_the_same_repo_waits_for_the_first(upstream, tmp_path, capsys):
    from ansible_collections.llmfleet.engines.plugins.module_utils.common._pathlock import PathLock

    lock = hub_lock(upstream, TINY_CHAT)
    repo = tmp_path / "hub" / "models--llmfleet-test--tiny-chat"
    repo.mkdir(parents=True)
    holder = PathLock(str(repo / _cache.LOCK_NAME), 0, about="model_snapshot (another play)")
    holder.acquire()
    try:
        code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", lock_timeout=0)
    finally:
        holder.release()
    assert code == 1
    assert result["msg"].startswith("another run holds %s: pid %d (model_snapshot (another play)"
                                    % (repo / _cache.LOCK_NAME, os.getpid()))
    assert hub_requests(upstream) == []
    assert sorted(os.listdir(str(repo))) == [_cache.LOCK_NAME]  # nothing written before the lock
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", lock_timeout=0)
    assert code == 0 and result["changed"] is True, result


def test_verify_full_finds_a_blob_changed_in_place_and_fetches_it_again(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    assert run(capsys, upstream, lock, tmp_path / "hub")[0] == 0
    entry = [e for e in lock["files"] if e["path"] == "model.safetensors"][0]
    blob = tmp_path / "hub" / "models--llmfleet-test--tiny-chat" / "blobs" / entry["sha256"]
    with open(str(blob), "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff\xff")  # same size, other bytes
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub")
    assert code == 0 and result["changed"] is False  # verify=size trusts the size
    upstream.clear_log()
    code, result, _out = run(capsys, upstream, lock, tmp_path / "hub", verify="full")
    assert code == 0 and result["changed"] is True, result
    assert result["downloaded"] == ["model.safetensors"] and result["reused"] == len(lock["files"]) - 1
    assert read_back(tmp_path / "hub", lock) == expected(lock)
    assert [r["path"] for r in hub_requests(upstream)][0] == "/hub/%s/resolve/%s/model.safetensors" % (
        TINY_CHAT, lock["commit"])
