"""The fake Hugging Face hub (tests/upstream/hub.py): its HTTP surface with urllib, and the real
``huggingface_hub`` client against it (in this process behind a guard that refuses any address but
127.0.0.1, and in a subprocess with a clean environment where import-time settings matter)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest

from tests.upstream import hub
from tests.upstream.hub import BENCH_MODEL, GATED_TINY, HUB_TOKEN, TINY_CHAT, TINY_SHARDED
from tests.upstream.server import State

AUTH = {"Authorization": "Bearer " + HUB_TOKEN}
OTHER = {"Authorization": "Bearer hf_someoneElseWithoutAccess00000000"}


def call(url, path="", headers=None, method="GET", body=None):
    """(status, headers, body) of one request to ``url + path``, redirects not followed."""
    split = urllib.parse.urlsplit(url + path)
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=10)
    try:
        target = split.path + ("?" + split.query if split.query else "")
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def api(up, path, headers=None):
    status, _headers, body = call(up.hub_url, path, headers)
    return status, json.loads(body)


def follow(up, path, headers=None, method="GET"):
    """The hub's answer after its redirects (relative ones on the hub, then the CDN's URL)."""
    url = up.hub_url + path
    for _hop in range(5):
        status, got, body = call(url, "", headers, method)
        if status not in (302, 307):
            return status, got, body
        url = urllib.parse.urljoin(url, got["Location"])
    raise AssertionError("redirect loop")


def control(up, action, payload):
    status, _headers, body = call(up.url, "/_control/" + action, {"Content-Type": "application/json"}, "POST",
                                  json.dumps(payload).encode())
    return status, json.loads(body)


def header(entry: dict, name: str):
    """A request header from the log, whatever its case (httpx sends lower case)."""
    return {k.lower(): v for k, v in entry["headers"].items()}.get(name.lower())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def commits(up, repo):
    return {c["commit"]: c for c in up.hub_catalog()["repos"][repo]["commits"]}


def files_of(up, repo, rev="main"):
    cat = up.hub_catalog()["repos"][repo]
    cid = cat["branches"].get(rev) or cat["tags"].get(rev) or rev
    return cid, {f["path"]: f for f in commits(up, repo)[cid]["files"]}


# -- the catalogue --------------------------------------------------------------------------------


def test_catalogue_is_deterministic_with_real_git_ids_and_valid_safetensors():
    assert hub.git_oid(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git hash-object /dev/null
    assert hub.git_oid(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    first, second = hub.Hub(State()), hub.Hub(State())
    assert first.catalog()["repos"][TINY_CHAT] == second.catalog()["repos"][TINY_CHAT]
    chat = first.repo(TINY_CHAT)
    v1, main = chat.commits[chat.tags["v1"]], chat.commits[chat.branches["main"]]
    assert main["parent"] == v1["id"] and len(main["id"]) == 40
    changed = sorted(p for p in v1["files"] if v1["files"][p] is not main["files"][p])
    assert changed == ["README.md", "model.safetensors"]
    assert sorted(v1["files"]) == sorted(main["files"]) == [
        ".gitattributes", "README.md", "config.json", "generation_config.json", "model.safetensors",
        "pytorch_model.bin", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
    ]
    blob = main["files"]["model.safetensors"]
    assert blob.lfs and blob.sha256 == sha256(blob.data) and 20000 < blob.size < 100000
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
        blob.sha256.encode(), blob.size)
    assert blob.blob_id == hub.git_oid(pointer) and blob.pointer_size == len(pointer)
    assert main["files"]["config.json"].blob_id == hub.git_oid(main["files"]["config.json"].data)
    for repo in (TINY_CHAT, TINY_SHARDED, GATED_TINY):
        for commit in first.repo(repo).commits.values():
            for path, blob in commit["files"].items():
                if path.endswith(".safetensors"):
                    assert hub.safetensors_header(blob.data)["__metadata__"] == {"format": "pt"}
    sharded = first.repo(TINY_SHARDED).commits[first.repo(TINY_SHARDED).branches["main"]]["files"]
    index = json.loads(sharded["model.safetensors.index.json"].data)
    tensors = {}
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        header = hub.safetensors_header(sharded[shard].data)
        for key, tensor in header.items():
            if key != "__metadata__":
                tensors[key] = (shard, tensor["data_offsets"][1] - tensor["data_offsets"][0])
    assert index["weight_map"] == {k: v[0] for k, v in tensors.items()}
    assert index["metadata"]["total_size"] == sum(v[1] for v in tensors.values())
    assert sharded["original/consolidated.00.pth"].lfs and not sharded["original/params.json"].lfs
    assert first.repo(GATED_TINY).gated == "manual"
    small = hub.Hub(State(), bench_size=65536)
    assert callable(small._repos[BENCH_MODEL])  # built on first use only
    assert files_size(small.catalog()["repos"][BENCH_MODEL])["model.safetensors"] == 65536
    with pytest.raises(hub.HubControlError):
        hub.safetensors_file(1, 100)


def files_size(repo_doc):
    return {f["path"]: f["size"] for f in repo_doc["commits"][-1]["files"]}


# -- API ------------------------------------------------------------------------------------------


def test_model_info_json_like_the_hub(upstream):
    main, files = files_of(upstream, TINY_CHAT)
    v1, _files = files_of(upstream, TINY_CHAT, "v1")
    status, doc = api(upstream, "/api/models/" + TINY_CHAT)
    assert status == 200
    assert {"_id", "id", "modelId", "sha", "lastModified", "private", "gated", "disabled", "tags"} <= set(doc)
    assert (doc["id"], doc["modelId"], doc["sha"]) == (TINY_CHAT, TINY_CHAT, main)
    assert (doc["private"], doc["gated"], doc["disabled"]) == (False, False, False)
    assert doc["siblings"] == [{"rfilename": p} for p in sorted(files)]
    assert api(upstream, "/api/models/%s/revision/v1" % TINY_CHAT)[1]["sha"] == v1
    assert api(upstream, "/api/models/%s/revision/%s" % (TINY_CHAT, v1))[1]["sha"] == v1
    upstream.hub_commit(TINY_CHAT, {"x.txt": "x"}, branch="release/1")  # a branch with a "/", quoted
    release = files_of(upstream, TINY_CHAT, "release/1")[0]
    assert api(upstream, "/api/models/%s/revision/release%%2F1" % TINY_CHAT)[1]["sha"] == release
    assert call(upstream.hub_url, "/%s/resolve/release%%2F1/x.txt" % TINY_CHAT)[1]["X-Repo-Commit"] == release
    for flag in ("true", "True", "1"):
        doc = api(upstream, "/api/models/%s/revision/main?blobs=%s" % (TINY_CHAT, flag))[1]
        siblings = {s["rfilename"]: s for s in doc["siblings"]}
        model, config = siblings["model.safetensors"], siblings["config.json"]
        assert model["size"] == files["model.safetensors"]["size"]
        assert model["lfs"]["sha256"] == files["model.safetensors"]["sha256"] and model["lfs"]["size"] == model["size"]
        assert model["blobId"] != model["lfs"]["sha256"][:40] and model["lfs"]["pointerSize"] > 100
        assert config == {"rfilename": "config.json", "size": files["config.json"]["size"],
                          "blobId": files["config.json"]["git_oid"]}
    status, doc = api(upstream, "/api/models/%s?expand=sha&expand=siblings" % TINY_CHAT)
    assert status == 200 and sorted(doc) == ["_id", "id", "sha", "siblings"]
    assert api(upstream, "/api/models/%s?expand=nonsense" % TINY_CHAT)[0] == 400


def test_api_errors_carry_the_hubs_error_codes(upstream):
    status, headers, body = call(upstream.hub_url, "/api/models/llmfleet-test/no-such-model")
    assert (status, headers["X-Error-Code"]) == (401, "RepoNotFound")
    assert json.loads(body) == {"error": "Repository not found"}
    status, headers, _body = call(upstream.hub_url, "/api/models/llmfleet-test/no-such-model", OTHER)
    assert (status, headers["X-Error-Code"]) == (404, "RepoNotFound")
    status, headers, body = call(upstream.hub_url, "/api/models/%s/revision/nope" % TINY_CHAT)
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    assert json.loads(body) == {"error": "Invalid rev id: nope"}
    status, headers, _body = call(upstream.hub_url, "/api/models/%s/revision/%s" % (TINY_CHAT, "0" * 40))
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    status, headers, body = call(upstream.hub_url, "/api/models/" + TINY_CHAT, {"Authorization": "token nope"})
    assert status == 401 and headers["X-Error-Message"] == "Invalid credentials in Authorization header"


def test_tree_and_refs(upstream):
    main, files = files_of(upstream, TINY_SHARDED)
    status, entries = api(upstream, "/api/models/%s/tree/main?recursive=true&expand=false" % TINY_SHARDED)
    assert status == 200
    by_path = {e["path"]: e for e in entries}
    assert by_path["original"] == {"type": "directory", "oid": by_path["original"]["oid"], "size": 0,
                                   "path": "original"}
    assert sorted(p for p, e in by_path.items() if e["type"] == "file") == sorted(files)
    shard = by_path["model-00001-of-00002.safetensors"]
    assert shard["lfs"]["oid"] == files[shard["path"]]["sha256"] and shard["size"] == files[shard["path"]]["size"]
    assert "lfs" not in by_path["config.json"] and by_path["config.json"]["oid"] == files["config.json"]["git_oid"]
    assert not any("xetHash" in e for e in entries)
    top = api(upstream, "/api/models/%s/tree/main" % TINY_SHARDED)[1]
    assert "original" in [e["path"] for e in top] and "original/params.json" not in [e["path"] for e in top]
    assert [e["path"] for e in api(upstream, "/api/models/%s/tree/%s/original" % (TINY_SHARDED, main))[1]] == [
        "original/consolidated.00.pth", "original/params.json"]
    status, headers, _body = call(upstream.hub_url, "/api/models/%s/tree/main/nowhere" % TINY_SHARDED)
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound")
    refs = api(upstream, "/api/models/%s/refs" % TINY_CHAT)[1]
    main = files_of(upstream, TINY_CHAT)[0]
    assert refs["branches"] == [{"name": "main", "ref": "refs/heads/main", "targetCommit": main}]
    assert [t["name"] for t in refs["tags"]] == ["v1"]


# -- files ----------------------------------------------------------------------------------------


def test_git_file_resolves_through_the_relative_307_or_at_once(upstream):
    main, files = files_of(upstream, TINY_CHAT)
    path = "/%s/resolve/main/config.json" % TINY_CHAT
    status, headers, _body = call(upstream.hub_url, path)
    assert status == 307 and headers["X-Repo-Commit"] == main
    assert headers["Location"].startswith("/hub/api/resolve-cache/models/%s/%s/config.json?" % (TINY_CHAT, main))
    for method in ("GET", "HEAD"):
        status, headers, body = follow(upstream, path, method=method)
        assert status == 200 and headers["ETag"] == '"%s"' % files["config.json"]["git_oid"]
        assert headers["X-Repo-Commit"] == main and headers["Accept-Ranges"] == "bytes"
        assert int(headers["Content-Length"]) == files["config.json"]["size"] and "X-Xet-Hash" not in headers
        assert (body == b"") if method == "HEAD" else (hub.git_oid(body) == files["config.json"]["git_oid"])
    assert upstream.hub_switch(resolve_cache=False) == {"resolve_cache": False, "gated_info": "public"}
    status, headers, body = call(upstream.hub_url, path)
    assert status == 200 and hub.git_oid(body) == files["config.json"]["git_oid"]
    status, headers, body = call(upstream.hub_url, "/%s/resolve/main/missing.json" % TINY_CHAT)
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", main)
    status, headers, _body = call(upstream.hub_url, "/%s/resolve/nope/config.json" % TINY_CHAT)
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    assert control(upstream, "hub_switch", {"resolve_cache": "yes"})[0] == 400


def test_lfs_file_redirects_to_a_signed_cdn_url_on_another_origin(upstream):
    main, files = files_of(upstream, TINY_CHAT)
    model = files["model.safetensors"]
    for method in ("HEAD", "GET"):
        status, headers, _body = call(upstream.hub_url, "/%s/resolve/main/model.safetensors" % TINY_CHAT, AUTH, method)
        assert status == 302 and headers["X-Repo-Commit"] == main
        assert headers["X-Linked-Etag"] == '"%s"' % model["sha256"] and headers["X-Linked-Size"] == str(model["size"])
        assert len(headers["ETag"].strip('"')) == 40 and not any(h.lower().startswith("x-xet") for h in headers)
    location = headers["Location"]
    assert location.startswith(upstream.hub_cdn_url + "/hub-cdn/%s/%s?" % (TINY_CHAT, model["sha256"]))
    assert upstream.hub_cdn_url != upstream.url and "Expires=" in location and "Signature=" in location
    status, headers, body = call(location)
    assert status == 200 and sha256(body) == model["sha256"] and headers["ETag"] == '"%s"' % model["sha256"]
    assert int(headers["Content-Length"]) == model["size"] and headers["Accept-Ranges"] == "bytes"
    assert call(location, method="HEAD")[2] == b""
    split = urllib.parse.urlsplit(location)
    assert call(upstream.url + split.path + "?" + split.query)[0] == 200  # the main port serves it too
    bad = location.replace("Signature=", "Signature=0")
    assert call(bad)[0] == 403 and b"AccessDenied" in call(bad)[2]
    assert call(location.split("?")[0])[0] == 403
    expired = upstream.hub.cdn_url(TINY_CHAT, model["sha256"], ttl=-5)
    status, _headers, body = call(expired)
    assert status == 403 and b"expired" in body
    assert call(upstream.hub_cdn_url, "/hub/api/models/" + TINY_CHAT)[0] == 404  # the CDN serves the CDN only
    entries = [e for e in upstream.log() if e["path"].startswith("/hub-cdn/")]
    assert [e["status"] for e in entries[:2]] == [200, 200] and entries[0]["headers"]["Host"].endswith(
        str(urllib.parse.urlsplit(upstream.hub_cdn_url).port))


def test_ranges_on_git_files_and_the_cdn(upstream):
    upstream.hub_switch(resolve_cache=False)
    _main, files = files_of(upstream, TINY_CHAT)
    status, _headers, whole = call(upstream.hub_url, "/%s/resolve/main/tokenizer.json" % TINY_CHAT)
    cdn = call(upstream.hub_url, "/%s/resolve/main/model.safetensors" % TINY_CHAT)[1]["Location"]
    model = call(cdn)[2]
    for url, path, data in ((upstream.hub_url, "/%s/resolve/main/tokenizer.json" % TINY_CHAT, whole), (cdn, "", model)):
        size = len(data)
        status, headers, body = call(url, path, {"Range": "bytes=100-"})
        assert (status, body, headers["Content-Range"]) == (206, data[100:], "bytes 100-%d/%d" % (size - 1, size))
        assert int(headers["Content-Length"]) == size - 100
        status, headers, body = call(url, path, {"Range": "bytes=10-19"})
        assert (status, body, headers["Content-Range"]) == (206, data[10:20], "bytes 10-19/%d" % size)
        assert call(url, path, {"Range": "bytes=-5"})[2] == data[-5:]
        assert call(url, path, {"Range": "bytes=%d-" % (size - 1)})[2] == data[-1:]
        assert call(url, path, {"Range": "bytes=0-%d" % (size * 2)})[2] == data
        status, headers, _body = call(url, path, {"Range": "bytes=%d-" % size})
        assert (status, headers["Content-Range"]) == (416, "bytes */%d" % size)
        assert call(url, path, {"Range": "lines=1-2"})[0] == 200
    assert sha256(model) == files["model.safetensors"]["sha256"]
    range_log = [header(e, "Range") for e in upstream.log() if e["path"].startswith("/hub-cdn/")]
    assert "bytes=100-" in range_log


def test_gated_repo_needs_the_token_for_files_and_never_logs_it(upstream):
    status, doc = api(upstream, "/api/models/%s?blobs=true" % GATED_TINY)  # as the real hub: info is public
    assert status == 200 and doc["gated"] == "manual" and doc["siblings"]
    path = "/%s/resolve/main/config.json" % GATED_TINY
    status, headers, body = call(upstream.hub_url, path)
    assert (status, headers["X-Error-Code"]) == (401, "GatedRepo") and "restricted" in json.loads(body)["error"]
    status, headers, _body = call(upstream.hub_url, path, OTHER)
    assert (status, headers["X-Error-Code"]) == (403, "GatedRepo")
    assert call(upstream.hub_url, path, {"Authorization": "Bearer not-a-token"})[0] == 401
    assert follow(upstream, path, AUTH)[0] == 200
    status, headers, _body = call(upstream.hub_url, "/%s/resolve/main/model.safetensors" % GATED_TINY, AUTH)
    assert status == 302 and call(headers["Location"])[0] == 200  # the signed CDN URL needs no token
    upstream.hub_switch(gated_info="token")
    assert api(upstream, "/api/models/" + GATED_TINY)[0] == 401
    assert api(upstream, "/api/models/%s/tree/main" % GATED_TINY, OTHER)[0] == 403
    assert api(upstream, "/api/models/" + GATED_TINY, AUTH)[0] == 200
    log = upstream.log()
    assert HUB_TOKEN not in json.dumps(log) and HUB_TOKEN not in call(upstream.url, "/_control/log")[2].decode()
    assert {header(e, "Authorization") for e in log} == {None, "Bearer ***"}


def test_renamed_repo_answers_a_relative_307(upstream):
    status, headers, _body = call(upstream.hub_url, "/llmfleet-test/tiny-chat-old/resolve/v1/README.md")
    assert (status, headers["Location"]) == (307, "/hub/%s/resolve/v1/README.md" % TINY_CHAT)
    status, headers, _body = call(upstream.hub_url, "/api/models/llmfleet-test/tiny-chat-old/revision/v1?blobs=true")
    assert (status, headers["Location"]) == (307, "/hub/api/models/%s/revision/v1?blobs=true" % TINY_CHAT)
    assert follow(upstream, "/api/models/llmfleet-test/tiny-chat-old")[0] == 200


# -- faults ---------------------------------------------------------------------------------------


def test_status_slow_and_truncate_faults_hit_hub_paths(upstream):
    upstream.hub_switch(resolve_cache=False)
    upstream.fault("status", status=503, count=1, path="/hub-cdn/")
    upstream.fault("truncate", count=1, path="/hub/%s/resolve/" % TINY_CHAT)
    upstream.fault("slow", delay=0.3, count=1, path="/hub/api/")
    with pytest.raises(http.client.IncompleteRead):
        call(upstream.hub_url, "/%s/resolve/main/tokenizer.json" % TINY_CHAT)
    status, headers, body = call(upstream.hub_url, "/%s/resolve/main/tokenizer.json" % TINY_CHAT)
    assert status == 200 and len(body) == int(headers["Content-Length"])
    location = call(upstream.hub_url, "/%s/resolve/main/model.safetensors" % TINY_CHAT)[1]["Location"]
    assert call(location)[0] == 503 and call(location)[0] == 200
    started = time.monotonic()
    assert api(upstream, "/api/models/" + TINY_CHAT)[0] == 200 and time.monotonic() - started >= 0.3
    assert [e["fault"] for e in upstream.log()] == ["truncate", None, None, "status", None, "slow"]


def test_tamper_alters_the_bytes_but_not_the_published_hashes(upstream):
    _main, files = files_of(upstream, TINY_CHAT)
    model = files["model.safetensors"]
    upstream.fault("tamper", filename="model.safetensors", repo=TINY_CHAT)
    upstream.fault("tamper", filename="config.json", repo=TINY_SHARDED)
    body = follow(upstream, "/%s/resolve/main/model.safetensors" % TINY_CHAT)[2]
    assert len(body) == model["size"] and sha256(body) != model["sha256"]
    siblings = api(upstream, "/api/models/%s?blobs=true" % TINY_CHAT)[1]["siblings"]
    assert [s["lfs"]["sha256"] for s in siblings if s["rfilename"] == "model.safetensors"] == [model["sha256"]]
    config = follow(upstream, "/%s/resolve/main/config.json" % TINY_CHAT)[2]
    assert hub.git_oid(config) == files["config.json"]["git_oid"]  # only the named repo's config.json
    sharded = files_of(upstream, TINY_SHARDED)[1]["config.json"]
    body = follow(upstream, "/%s/resolve/main/config.json" % TINY_SHARDED)[2]
    assert len(body) == sharded["size"] and hub.git_oid(body) != sharded["git_oid"]
    gated = files_of(upstream, GATED_TINY)[1]["model.safetensors"]
    assert sha256(follow(upstream, "/%s/resolve/main/model.safetensors" % GATED_TINY, AUTH)[2]) == gated["sha256"]
    assert control(upstream, "fault", {"kind": "tamper", "filename": "x", "repo": 3})[0] == 400


# -- hub_commit and reset -------------------------------------------------------------------------


def test_hub_commit_moves_the_branch_keeps_other_files_and_reset_restores(upstream):
    before, old = files_of(upstream, TINY_CHAT)
    v1 = files_of(upstream, TINY_CHAT, "v1")[0]
    status, doc = control(upstream, "hub_commit", {
        "repo": TINY_CHAT, "branch": "main", "files": {
            "model.safetensors": {"seed": 7, "size": 20000}, "README.md": "text", "pytorch_model.bin": None}})
    assert status == 200 and len(doc["commit"]) == 40
    after, new = files_of(upstream, TINY_CHAT)
    assert after == doc["commit"] and commits(upstream, TINY_CHAT)[after]["parent"] == before
    assert api(upstream, "/api/models/" + TINY_CHAT)[1]["sha"] == after
    assert files_of(upstream, TINY_CHAT, "v1")[0] == v1
    assert "pytorch_model.bin" not in new and new["config.json"] == old["config.json"]
    assert new["model.safetensors"]["size"] == 20000 and new["README.md"]["git_oid"] == hub.git_oid(b"text")
    data = follow(upstream, "/%s/resolve/main/model.safetensors" % TINY_CHAT)[2]
    assert sha256(data) == new["model.safetensors"]["sha256"] and hub.safetensors_header(data)
    # the old commit's objects stay served (a lock pinned to it still downloads)
    pinned = follow(upstream, "/%s/resolve/%s/model.safetensors" % (TINY_CHAT, before))[2]
    assert sha256(pinned) == old["model.safetensors"]["sha256"]
    notes = {"extra/notes.txt": {"seed": 1, "size": 10, "lfs": False}}
    dev = upstream.hub_commit(TINY_CHAT, notes, branch="dev", tag="v2")
    assert files_of(upstream, TINY_CHAT, "dev")[0] == dev == files_of(upstream, TINY_CHAT, "v2")[0]
    assert commits(upstream, TINY_CHAT)[dev]["parent"] == after
    for bad in ({"repo": "llmfleet-test/nope", "files": {"a": "b"}}, {"repo": TINY_CHAT, "files": {"../x": "b"}},
                {"repo": TINY_CHAT, "files": {"gone.txt": None}}, {"repo": TINY_CHAT, "files": {"a": 3}},
                {"repo": TINY_CHAT, "files": {}}, {"repo": TINY_CHAT, "files": {"a": "b"}, "nope": 1}):
        assert control(upstream, "hub_commit", bad)[0] == 400
    assert control(upstream, "reset", {})[0] == 200
    assert files_of(upstream, TINY_CHAT)[0] == before
    assert upstream.hub_catalog()["repos"][TINY_CHAT]["branches"] == {"main": before}


def test_commits_share_blobs_and_the_bench_model(upstream):
    _v1, old = files_of(upstream, TINY_CHAT, "v1")
    _main, new = files_of(upstream, TINY_CHAT)
    assert [p for p in new if new[p] != old[p]] == ["README.md", "model.safetensors"]
    status, doc = api(upstream, "/api/models/%s?blobs=true" % BENCH_MODEL)
    assert status == 200
    assert {s["rfilename"]: s["size"] for s in doc["siblings"]}["model.safetensors"] == hub.BENCH_SIZE
    status, _headers, body = call(upstream.url, "/_control/hub_catalog")
    assert status == 200 and json.loads(body)["repos"][TINY_CHAT]["tags"]["v1"] == _v1


# -- the real huggingface_hub ---------------------------------------------------------------------

CLIENT_ENV = {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}
GUARD = '''
import socket
_attempts = []
_connect = socket.socket.connect
def _guarded(self, address):
    if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1"):
        _attempts.append(repr(address))
        raise OSError("test guard: no network but 127.0.0.1")
    return _connect(self, address)
socket.socket.connect = _guarded
_getaddrinfo = socket.getaddrinfo
def _lookup(host, *args, **kw):
    if host not in ("127.0.0.1", "localhost", b"127.0.0.1"):
        _attempts.append("lookup " + repr(host))
        raise socket.gaierror("test guard: no name look-ups")
    return _getaddrinfo(host, *args, **kw)
socket.getaddrinfo = _lookup
'''


@pytest.fixture
def hf(monkeypatch):
    """huggingface_hub in this process, telemetry off, every address but 127.0.0.1 refused (and
    the test failed if anything tried one)."""
    hh = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    for key, value in CLIENT_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    namespace = {}
    real = socket.socket.connect, socket.getaddrinfo
    exec(GUARD, namespace)  # noqa: S102 - the guard above, shared with the subprocess
    try:
        yield hh
    finally:
        socket.socket.connect, socket.getaddrinfo = real
    assert namespace["_attempts"] == [], "huggingface_hub tried the network: %s" % namespace["_attempts"]


def test_the_network_guard_refuses_and_records():
    namespace, real = {}, (socket.socket.connect, socket.getaddrinfo)
    exec(GUARD, namespace)  # noqa: S102
    try:
        with pytest.raises(OSError):
            socket.create_connection(("huggingface.co", 443), timeout=1)
        with socket.socket() as sock, pytest.raises(OSError):
            sock.connect(("10.255.255.1", 443))
    finally:
        socket.socket.connect, socket.getaddrinfo = real
    assert namespace["_attempts"] == ["lookup 'huggingface.co'", "('10.255.255.1', 443)"]


def run_client(tmp_path, code: str, **env) -> dict:
    """Run ``code`` (which sets ``result``) in a fresh interpreter with a clean environment."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
             "HF_HOME": str(tmp_path / "hf-home")}
    clean.update(CLIENT_ENV, **env)
    script = GUARD + code + "\nimport json\nprint(json.dumps({'result': result, 'attempts': _attempts}))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["attempts"] == [], "huggingface_hub tried the network: %s" % out["attempts"]
    return out["result"]


def check_snapshot(cache: pathlib.Path, repo: str, commit: str, files: dict, rev: str) -> None:
    """The hub cache's layout for these files (docs/dev/MODELS.md)."""
    top = cache / ("models--" + repo.replace("/", "--"))
    assert (top / "refs" / rev).read_text() == commit
    for path, entry in files.items():
        link = top / "snapshots" / commit / path
        blob_name = entry.get("sha256") or entry["git_oid"]
        assert link.is_symlink() and not os.readlink(link).startswith("/")
        assert link.resolve() == (top / "blobs" / blob_name).resolve()
        data = link.read_bytes()
        assert len(data) == entry["size"]
        assert (sha256(data) if "sha256" in entry else hub.git_oid(data)) == blob_name


def test_real_client_snapshot_download_then_offline(upstream, hf, tmp_path):
    cache = tmp_path / "cache"
    patterns = ["*.json", "*.safetensors", "*.md", ".gitattributes"]
    for rev in ("v1", "main"):
        commit, files = files_of(upstream, TINY_CHAT, rev)
        folder = hf.snapshot_download(TINY_CHAT, revision=rev, cache_dir=cache, endpoint=upstream.hub_url,
                                      allow_patterns=patterns, token=False)
        assert pathlib.Path(folder) == cache / "models--llmfleet-test--tiny-chat" / "snapshots" / commit
        wanted = sorted(p for p in files if p != "pytorch_model.bin")
        assert sorted(p.name for p in pathlib.Path(folder).iterdir()) == wanted
        check_snapshot(cache, TINY_CHAT, commit, {p: f for p, f in files.items() if p != "pytorch_model.bin"}, rev)
    blobs = os.listdir(cache / "models--llmfleet-test--tiny-chat" / "blobs")
    assert len(blobs) == len(set(blobs)) == 10  # 8 files of v1, plus main's new README and weights
    cdn = [e for e in upstream.log() if e["path"].startswith("/hub-cdn/")]
    assert len(cdn) == 2 and all(e["method"] == "GET" and e["status"] == 200 for e in cdn)
    upstream.clear_log()
    code = ("import huggingface_hub\nresult = huggingface_hub.snapshot_download(%r, revision='main', cache_dir=%r, "
            "endpoint=%r, allow_patterns=%r)\n" % (TINY_CHAT, str(cache), upstream.hub_url, patterns))
    assert run_client(tmp_path, code, HF_HUB_OFFLINE="1") == folder
    assert upstream.log() == []


def test_real_client_sharded_snapshot_with_a_folder(upstream, hf, tmp_path):
    commit, files = files_of(upstream, TINY_SHARDED)
    folder = hf.snapshot_download(TINY_SHARDED, cache_dir=tmp_path, endpoint=upstream.hub_url, token=False)
    assert pathlib.Path(folder, "original", "params.json").is_file()
    check_snapshot(tmp_path, TINY_SHARDED, commit, files, "main")


def test_real_client_gated_repo_and_no_token_to_the_cdn(upstream, hf, tmp_path):
    from huggingface_hub import errors

    with pytest.raises(errors.GatedRepoError):
        hf.hf_hub_download(GATED_TINY, "config.json", cache_dir=tmp_path, endpoint=upstream.hub_url, token=False)
    with pytest.raises(errors.GatedRepoError):
        hf.hf_hub_download(GATED_TINY, "config.json", cache_dir=tmp_path, endpoint=upstream.hub_url,
                           token="hf_someoneElseWithoutAccess00000000")
    commit, files = files_of(upstream, GATED_TINY)
    upstream.clear_log()
    hf.snapshot_download(GATED_TINY, cache_dir=tmp_path, endpoint=upstream.hub_url, token=HUB_TOKEN)
    check_snapshot(tmp_path, GATED_TINY, commit, files, "main")
    log = upstream.log()
    assert all(header(e, "Authorization") == "Bearer ***" for e in log if e["path"].startswith("/hub/"))
    cdn = [e for e in log if e["path"].startswith("/hub-cdn/")]
    assert len(cdn) == 1 and header(cdn[0], "Authorization") is None


def test_real_client_model_info_and_errors(upstream, hf, tmp_path):
    from huggingface_hub import errors

    api = hf.HfApi(endpoint=upstream.hub_url, token=False)
    commit, files = files_of(upstream, TINY_CHAT, "v1")
    info = api.model_info(TINY_CHAT, revision="v1", files_metadata=True)
    assert info.sha == commit and info.gated is False
    got = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else s.blob_id) for s in info.siblings}
    assert got == {p: (f["size"], f.get("sha256") or f["git_oid"]) for p, f in files.items()}
    assert api.model_info(GATED_TINY).gated == "manual"
    with pytest.raises(errors.RepositoryNotFoundError):
        api.model_info("llmfleet-test/no-such-model")
    with pytest.raises(errors.RevisionNotFoundError):
        api.model_info(TINY_CHAT, revision="nope")
    with pytest.raises(errors.RemoteEntryNotFoundError):
        hf.hf_hub_download(TINY_CHAT, "missing.json", endpoint=upstream.hub_url, token=False, cache_dir=tmp_path)


def test_real_client_resumes_a_cut_download_with_a_range(upstream, hf, tmp_path, monkeypatch):
    # The client writes only whole chunks (10 MiB): a file cut before its first chunk is fetched
    # again from the start. With small chunks it resumes from what it has, with a Range.
    monkeypatch.setattr(hf.constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    upstream.fault("truncate", count=1, path="/hub-cdn/")
    _commit, files = files_of(upstream, TINY_CHAT)
    path = hf.hf_hub_download(TINY_CHAT, "model.safetensors", cache_dir=tmp_path, endpoint=upstream.hub_url,
                              token=False)
    assert sha256(pathlib.Path(path).read_bytes()) == files["model.safetensors"]["sha256"]
    cdn = [(e["status"], header(e, "Range"), e["fault"]) for e in upstream.log() if e["path"].startswith("/hub-cdn/")]
    have = (files["model.safetensors"]["size"] // 2) // 4096 * 4096
    assert cdn == [(200, None, "truncate"), (206, "bytes=%d-" % have, None)]
