"""model_snapshot and the real huggingface_hub (the version requirements/ pin) read and write the same
cache. Both ways, against the fake hub (tests/upstream/hub.py):

* what the module lays out, the real client finds offline (``HF_HUB_OFFLINE=1``): by commit, by
  branch or tag (through ``refs/``), whole snapshots and single files, with a file in a subdirectory;
  its cache scanner finds the cache sound;
* what the real client downloads online, the module takes as complete, with no request;
* two revisions share their common blobs (one file), and pruning the older one removes only what
  was its own.

The module runs as a process, as Ansible runs it; the real client runs in a process of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.upstream.hub import TINY_CHAT, TINY_SHARDED

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "build" / "collections"
MODULE = REPO / "plugins" / "modules" / "model_snapshot.py"

# Run by the real client: every call's answer, as JSON. Paths are read back here.
CLIENT = r"""
import json, sys
from huggingface_hub import hf_hub_download, snapshot_download, scan_cache_dir
spec = json.loads(sys.argv[1])
out = {"snapshots": {}, "files": {}, "errors": []}
for repo, revision in spec.get("snapshots", []):
    try:
        out["snapshots"]["%s@%s" % (repo, revision)] = snapshot_download(repo, revision=revision)
    except Exception as exc:
        out["errors"].append("snapshot_download(%s, %s): %r" % (repo, revision, exc))
for repo, revision, name in spec.get("files", []):
    try:
        out["files"]["%s@%s:%s" % (repo, revision, name)] = hf_hub_download(repo, name, revision=revision)
    except Exception as exc:
        out["errors"].append("hf_hub_download(%s, %s, %s): %r" % (repo, name, revision, exc))
if spec.get("scan"):
    report = scan_cache_dir()
    out["scan"] = {"warnings": [str(w) for w in report.warnings],
                   "repos": sorted([r.repo_id, sorted(x.commit_hash for x in r.revisions)] for r in report.repos)}
print(json.dumps(out))
"""


def hub_lock(upstream, repo, revision="main"):
    entry = upstream.hub_catalog()["repos"][repo]
    commit = entry["branches"].get(revision) or entry["tags"].get(revision) or revision
    found = [c for c in entry["commits"] if c["commit"] == commit][0]
    return {"format": 1, "repo": repo, "revision": revision, "commit": commit, "files": found["files"],
            "size": found["size"]}


def run_module(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


def real_client(tmp_path, cache, spec, endpoint=None):
    """Run the real huggingface_hub; offline unless an endpoint is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HUB_CACHE=str(cache), HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_XET="1")
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    else:
        env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def digest(path, entry):
    with open(path, "rb") as handle:
        data = handle.read()
    if "sha256" in entry:
        return len(data), hashlib.sha256(data).hexdigest()
    return len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def blobs(lock):
    return set(e.get("sha256") or e["git_oid"] for e in lock["files"])


def assert_snapshot_matches(folder, lock):
    assert folder is not None
    for entry in lock["files"]:
        assert digest(os.path.join(folder, entry["path"]), entry) == (
            entry["size"], entry.get("sha256") or entry["git_oid"]), entry["path"]


def test_the_real_client_reads_offline_what_the_module_lays_out(upstream, tmp_path):
    cache = tmp_path / "hub"
    chat, sharded = hub_lock(upstream, TINY_CHAT), hub_lock(upstream, TINY_SHARDED)
    assert any("/" in e["path"] for e in sharded["files"])  # original/params.json: a link two levels down
    for lock in (chat, sharded):
        result = run_module(tmp_path, {"lock": lock, "cache_dir": str(cache), "endpoint": upstream.hub_url})
        assert result.get("failed") is not True and result["changed"] is True, result
    out = real_client(tmp_path, cache, {
        "snapshots": [[TINY_CHAT, chat["commit"]], [TINY_CHAT, "main"],
                      [TINY_SHARDED, sharded["commit"]], [TINY_SHARDED, "main"]],
        "files": [[TINY_CHAT, "main", "config.json"], [TINY_CHAT, chat["commit"], "model.safetensors"],
                  [TINY_SHARDED, "main", "original/params.json"]],
        "scan": True,
    })
    assert out["errors"] == []
    for lock in (chat, sharded):
        by_commit = out["snapshots"]["%s@%s" % (lock["repo"], lock["commit"])]
        assert by_commit == out["snapshots"]["%s@main" % lock["repo"]]
        assert_snapshot_matches(by_commit, lock)
    entries = dict((e["path"], e) for e in chat["files"] + sharded["files"] if e["path"] != "config.json")
    entries["config.json"] = [e for e in chat["files"] if e["path"] == "config.json"][0]
    for key, path in out["files"].items():
        name = key.split(":", 1)[1]
        entry = entries[name]
        assert digest(path, entry) == (entry["size"], entry.get("sha256") or entry["git_oid"]), key
    assert out["scan"]["warnings"] == []
    assert out["scan"]["repos"] == [[TINY_CHAT, [chat["commit"]]], [TINY_SHARDED, [sharded["commit"]]]]


def test_the_module_takes_what_the_real_client_downloaded_as_complete(upstream, tmp_path):
    cache = tmp_path / "hub"
    lock = hub_lock(upstream, TINY_SHARDED)
    out = real_client(tmp_path, cache, {"snapshots": [[TINY_SHARDED, "main"]]}, endpoint=upstream.hub_url)
    assert out["errors"] == []
    assert_snapshot_matches(out["snapshots"]["%s@main" % TINY_SHARDED], lock)
    upstream.clear_log()
    result = run_module(tmp_path, {"lock": lock, "cache_dir": str(cache), "endpoint": upstream.hub_url})
    assert result.get("failed") is not True, result
    assert result["changed"] is False and result["reused"] == len(lock["files"]) and result["downloaded"] == []
    assert upstream.log() == []


def test_two_revisions_share_blobs_and_pruning_the_older_keeps_them(upstream, tmp_path):
    cache = tmp_path / "hub"
    v1, main = hub_lock(upstream, TINY_CHAT, "v1"), hub_lock(upstream, TINY_CHAT, "main")
    repo = cache / "models--llmfleet-test--tiny-chat"
    for lock in (v1, main):
        result = run_module(tmp_path, {"lock": lock, "cache_dir": str(cache), "endpoint": upstream.hub_url})
        assert result.get("failed") is not True and result["pruned"] == [], result
    shared = [e for e in main["files"] if e in v1["files"]]
    assert shared and len(shared) < len(main["files"])
    for entry in shared:
        old = os.stat(str(repo / "snapshots" / v1["commit"] / entry["path"]))
        new = os.stat(str(repo / "snapshots" / main["commit"] / entry["path"]))
        assert (old.st_dev, old.st_ino) == (new.st_dev, new.st_ino), entry["path"]
    assert set(os.listdir(str(repo / "blobs"))) == blobs(v1) | blobs(main)
    out = real_client(tmp_path, cache, {"snapshots": [[TINY_CHAT, "v1"], [TINY_CHAT, "main"]]})
    assert out["errors"] == []
    assert_snapshot_matches(out["snapshots"]["%s@v1" % TINY_CHAT], v1)

    result = run_module(tmp_path, {"lock": main, "cache_dir": str(cache), "endpoint": upstream.hub_url, "keep": 1})
    assert result.get("failed") is not True and result["changed"] is True, result
    assert result["pruned"] == [v1["commit"]]
    assert sorted(result["blobs_removed"]) == sorted(blobs(v1) - blobs(main))
    assert os.listdir(str(repo / "snapshots")) == [main["commit"]]
    assert set(os.listdir(str(repo / "blobs"))) == blobs(main)
    out = real_client(tmp_path, cache, {"snapshots": [[TINY_CHAT, "main"], [TINY_CHAT, "v1"]], "scan": True})
    assert_snapshot_matches(out["snapshots"]["%s@main" % TINY_CHAT], main)
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("snapshot_download(%s, v1)" % TINY_CHAT)
    assert out["scan"]["warnings"] == []  # no ref left pointing at the removed commit
