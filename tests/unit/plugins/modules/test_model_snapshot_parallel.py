"""model_snapshot and hf_warm download the files of a lock in parallel (issue 29): against the gated hub
(tests/upstream/gated_hub.py), which holds each answer until N are in flight, so a client that downloads
one file after another makes the test fail on the hub's time-outs rather than hang."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _cache, _fetch, _snapshot
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import hf_warm, model_snapshot
from tests.unit.plugins.lookup_fakes import run_module
from tests.upstream.gated_hub import GatedHub, lock_of, shard

REPO = "llmfleet-test/parallel"
COMMIT = "a" * 40
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _s: None)


def shards(count, size):
    return dict(("model-%05d-of-%05d.safetensors" % (n + 1, count), shard(n, size)) for n in range(count))


def snapshot(capsys, hub, lock, cache_dir, **kw):
    args = {"lock": lock, "cache_dir": str(cache_dir), "endpoint": hub.url}
    args.update(kw)
    return run_module(model_snapshot.main, args, capsys)


def repo_dir(cache_dir):
    return os.path.join(str(cache_dir), "models--" + REPO.replace("/", "--"))


def download_threads():
    return [t for t in threading.enumerate() if t.name.startswith("llmfleet-download") and t.is_alive()]


@pytest.mark.parametrize("parallel", [2, 4])
def test_the_files_download_at_once_never_more_than_parallel_and_the_progress_sums_them(
        tmp_path, capsys, monkeypatch, parallel):
    files = shards(2 * parallel, MIB)
    lock = lock_of(REPO, COMMIT, files)
    seen = []
    real = _snapshot.DownloadProgress._write

    def spy(self, force=False, **values):
        real(self, force, **values)
        seen.append(dict(self.data))

    monkeypatch.setattr(_snapshot.DownloadProgress, "_write", spy)
    # each answer waits for `parallel` in flight, and takes about 0.25 s, so that more would overlap too
    with GatedHub(REPO, COMMIT, files, hold=parallel, hold_timeout=3.0, rate=4 * MIB) as hub:
        code, result, _out = snapshot(capsys, hub, lock, tmp_path / "hub", parallel=parallel,
                                      progress_file=str(tmp_path / "progress.json"))
    assert code == 0, result
    assert hub.timeouts == 0, "%d answers waited out the hold: the downloads did not overlap" % hub.timeouts
    assert hub.max_in_flight == parallel  # at once, and never more
    assert sorted(result["downloaded"]) == sorted(files) and result["bytes_downloaded"] == lock["size"]
    snap = os.path.join(repo_dir(tmp_path / "hub"), "snapshots", COMMIT)
    for path, data in files.items():
        with open(os.path.join(snap, path), "rb") as handle:
            assert handle.read() == data, path
    # the progress line sums the workers: more bytes than any one file while several were in flight
    assert max(len(s["files"]) for s in seen) == parallel
    assert max(s["bytes_done"] for s in seen if len(s["files"]) == parallel) > MIB
    assert seen[-1]["bytes_done"] == lock["size"] and seen[-1]["files_done"] == len(files)
    assert not download_threads()


def test_a_bad_file_fails_naming_it_stops_the_others_and_links_nothing(tmp_path, capsys):
    files = shards(4, 8 * MIB)
    files["config.json"] = b'{"architectures": ["LlamaForCausalLM"]}\n'
    lock = lock_of(REPO, COMMIT, files)
    bad = [e for e in lock["files"] if e["path"] == "config.json"][0]
    # the shards send 64 KiB and stall (a read of them waits for the 10 s time-out unless it is cut); the
    # bad file comes 0.5 s later, while the workers wait in their reads
    shards_ = set(files) - {"config.json"}
    with GatedHub(REPO, COMMIT, files, hold=5, hold_timeout=3.0, stall=shards_, tamper={"config.json"},
                  late={"config.json": 0.5}) as hub:
        began = time.monotonic()
        code, result, _out = snapshot(capsys, hub, lock, tmp_path / "hub", parallel=5, timeout=10)
        took = time.monotonic() - began
        assert hub.settled(), "the other downloads were still running"
    assert code == 1, result
    assert result["msg"].startswith("config.json of %s@%s from %s/%s/resolve/%s/config.json is not the lock's file"
                                    % (REPO, COMMIT, hub.url, REPO, COMMIT)), result["msg"]
    assert result["file"] == "config.json" and result["expected_hash"] == bad["sha256"]
    assert not download_threads()
    assert took < 3.0, "the module waited %.1f s for the other downloads" % took
    cut = [e for e in hub.log if e["path"] != "config.json"]
    assert len(cut) == 4 and not any(e["complete"] for e in cut), cut  # stopped, not read to the end
    repo = repo_dir(tmp_path / "hub")
    assert os.listdir(os.path.join(repo, "snapshots")) == []  # nothing linked
    assert not os.path.exists(os.path.join(repo, "refs"))
    blobs = os.listdir(os.path.join(repo, "blobs"))
    assert not [n for n in blobs if n.startswith(bad["sha256"])]
    # what the stopped downloads got stays private (0600), and is not in place
    assert sorted(n for n in blobs if not n.endswith(".incomplete")) == []
    for name in blobs:
        assert stat.S_IMODE(os.lstat(os.path.join(repo, "blobs", name)).st_mode) == 0o600, name


def test_an_incomplete_download_is_resumed_beside_the_others(tmp_path, capsys):
    files = shards(4, MIB)
    lock = lock_of(REPO, COMMIT, files)
    first = lock["files"][0]
    blobs = os.path.join(repo_dir(tmp_path / "hub"), "blobs")
    os.makedirs(blobs)
    with open(os.path.join(blobs, first["sha256"] + ".incomplete"), "wb") as handle:  # an earlier run's
        handle.write(files[first["path"]][:300000])
    with GatedHub(REPO, COMMIT, files, hold=4, hold_timeout=3.0) as hub:
        code, result, _out = snapshot(capsys, hub, lock, tmp_path / "hub", parallel=4)
    assert code == 0, result
    assert hub.timeouts == 0
    asked = dict((e["path"], e["range"]) for e in hub.log)
    assert asked[first["path"]] == "bytes=300000-"  # only the rest of it
    assert [r for p, r in asked.items() if p != first["path"]] == [None] * 3
    assert result["bytes_downloaded"] == lock["size"] - 300000
    snap = os.path.join(repo_dir(tmp_path / "hub"), "snapshots", COMMIT)
    for path, data in files.items():
        with open(os.path.join(snap, path), "rb") as handle:
            assert handle.read() == data, path


def test_the_mirror_is_warmed_in_parallel_never_more_than_parallel(capsys):
    files = shards(6, MIB)
    lock = lock_of(REPO, COMMIT, files)
    with GatedHub(REPO, COMMIT, files, hold=3, hold_timeout=3.0, rate=4 * MIB) as hub:
        code, result, _out = run_module(hf_warm.main, {"lock": lock, "endpoint": hub.url, "parallel": 3}, capsys)
    assert code == 0, result
    assert hub.timeouts == 0 and hub.max_in_flight == 3
    assert [f["path"] for f in result["files"]] == [e["path"] for e in lock["files"]]  # the lock's order
    assert result["fetched"] == 6 and result["bytes"] == lock["size"] and result["changed"] is True
    assert not download_threads()


def test_a_bad_file_through_the_mirror_fails_naming_it_and_stops_the_others(capsys):
    files = shards(3, 8 * MIB)
    files["config.json"] = b"{}\n"
    lock = lock_of(REPO, COMMIT, files)
    with GatedHub(REPO, COMMIT, files, hold=4, hold_timeout=3.0, rate=2 * MIB, fast={"config.json"},
                  tamper={"config.json"}) as hub:
        began = time.monotonic()
        code, result, _out = run_module(hf_warm.main, {"lock": lock, "endpoint": hub.url, "parallel": 4}, capsys)
        took = time.monotonic() - began
        assert hub.settled()
    assert code == 1 and result["file"] == "config.json", result
    assert result["purge"] == "%s@%s/config.json" % (REPO, COMMIT)
    assert took < 3.0 and not download_threads(), (took, hub.timeouts)
    assert not any(e["complete"] for e in hub.log if e["path"] != "config.json")


@pytest.mark.parametrize("module", [model_snapshot, hf_warm])
@pytest.mark.parametrize("value", [0, 33])
def test_a_parallel_out_of_range_is_refused_naming_it(tmp_path, capsys, module, value):
    lock = lock_of(REPO, COMMIT, shards(1, 10))
    args = {"lock": lock, "endpoint": "http://127.0.0.1:9", "parallel": value}
    if module is model_snapshot:
        args["cache_dir"] = str(tmp_path / "hub")
    code, result, _out = run_module(module.main, args, capsys)
    assert code == 1
    assert result["msg"].startswith("parallel must be 1 to 32") and result["msg"].endswith("got %d" % value)
    assert not (tmp_path / "hub").exists()


def test_run_parallel_raises_the_first_failure_not_the_stops_it_caused():
    stopped = []

    def work(item, cancel):
        if item == "bad":
            raise _cache.IntegrityError("bad is not the lock's file", file="bad")
        if not cancel.wait(5):
            return item
        stopped.append(item)
        raise _fetch.Cancelled("stopped")

    with pytest.raises(_cache.IntegrityError) as exc:
        _fetch.run_parallel(["a", "b", "bad", "c", "d"], work, 3)
    assert exc.value.details == {"file": "bad"}
    assert sorted(stopped) == ["a", "b"]  # the two beside it stopped; c and d never started
