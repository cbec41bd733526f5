"""hf_revision: main() with patched arguments; the hub scripted at open_url, then the fake hub."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _hfhub, _lock
from ansible_collections.llmfleet.engines.plugins.modules import hf_revision
from tests.unit.plugins.lookup_fakes import Reply, install, run_module, warnings_text

EP = "https://hub.test/hub"
REPO = "org/model"
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
TOKEN = "hf_SCRIPTEDsecret0123456789"


def info_url(revision="main"):
    return _hfhub.model_info_url(EP, REPO, revision)


def info(sha=SHA, repo_id=REPO):
    return {
        "id": repo_id, "sha": sha, "private": False, "gated": False,
        "siblings": [
            {"rfilename": ".gitattributes", "size": 1519, "blobId": "1" * 40},
            {"rfilename": "README.md", "size": 20, "blobId": "2" * 40},
            {"rfilename": "config.json", "size": 611, "blobId": "a" * 40},
            {"rfilename": "model.safetensors", "size": 2 * 1024 * 1024, "blobId": "d" * 40,
             "lfs": {"sha256": "c" * 64, "size": 2 * 1024 * 1024, "pointerSize": 134}},
            {"rfilename": "tokenizer.json", "size": 40, "blobId": "b" * 40},
        ],
    }


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return install(monkeypatch)


def args(**kw):
    out = {"repo": REPO, "endpoint": EP, "backoff": 0.01}
    out.update(kw)
    return out


def test_resolves_a_branch_to_the_hubs_commit(fake, capsys):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    code, result, _out = run_module(hf_revision.main, args(), capsys)
    assert code == 0, result
    assert result["changed"] is False and result["lock_file"] is None
    assert (result["repo"], result["revision"], result["commit"]) == (REPO, "main", SHA)
    assert result["files"] == 3 and result["size"] == 611 + 40 + 2 * 1024 * 1024
    assert [f["path"] for f in result["lock"]["files"]] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert result["msg"] == "org/model main -> 0123456789ab, 3 files, 2.0 MiB"
    assert result["size_human"] == "2.0 MiB"
    assert _lock.validate_lock(result["lock"]) == []
    assert "Authorization" not in server.calls[0]["headers"]


@pytest.mark.parametrize("given", [SHA, SHA.upper()])
def test_a_commit_resolves_to_itself(fake, capsys, given):
    server, _sleeps = fake
    server.add(info_url(SHA), Reply(200, info()))
    code, result, _out = run_module(hf_revision.main, args(revision=given), capsys)
    assert code == 0, result
    assert result["commit"] == SHA and result["lock"]["revision"] == SHA and result["revision"] == SHA
    assert [c["url"] for c in server.calls] == [info_url(SHA)]


def test_a_commit_answered_with_another_commit_fails(fake, capsys):
    server, _sleeps = fake
    server.add(info_url(SHA), Reply(200, info(sha=OTHER)))
    code, result, _out = run_module(hf_revision.main, args(revision=SHA), capsys)
    assert code == 1 and result["failed"]
    assert "answered commit %s for commit %s" % (OTHER, SHA) in result["msg"]
    assert "lock" not in result


def test_a_renamed_repo_warns(fake, capsys):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info(repo_id="Org/Model")))
    code, result, _out = run_module(hf_revision.main, args(), capsys)
    assert code == 0
    assert any("the hub calls org/model Org/Model" in w for w in warnings_text(result))
    assert result["lock"]["repo"] == REPO


ARG_ERRORS = [
    ({"repo": "foo"}, "repo 'foo' is not of the form org/name"),
    ({"repo": "org/a--b"}, "'--' and '..' are not allowed"),
    ({"revision": ""}, "revision must be a branch, tag or commit"),
    ({"revision": " main"}, "revision ' main' has spaces"),
    ({"endpoint": "hub.test"}, "endpoint 'hub.test' is not an http:// or https:// URL"),
    ({"endpoint": "http://hub.test/?a=1"}, "must not have a query"),
    ({"allow_patterns": []}, "allow_patterns is an empty list"),
    ({"ignore_patterns": ["*.md", ""]}, "ignore_patterns has an empty pattern"),
    ({"timeout": 0}, "timeout must be more than 0 seconds"),
    ({"retries": -1}, "retries must not be negative"),
]


@pytest.mark.parametrize("extra, words", ARG_ERRORS)
def test_bad_arguments_fail_before_asking_the_hub(fake, capsys, extra, words):
    server, _sleeps = fake
    code, result, _out = run_module(hf_revision.main, args(**extra), capsys)
    assert code == 1 and words in result["msg"]
    assert server.calls == []


def test_http_failure_names_the_url_and_masks_the_token(fake, capsys):
    server, _sleeps = fake
    server.add(info_url(), Reply(500, {"error": "broken for %s" % TOKEN}))
    code, result, out = run_module(hf_revision.main, args(token=TOKEN, retries=1), capsys)
    assert code == 1
    assert result["url"] == info_url()
    assert "could not get %s after 2 attempts" % info_url() in result["msg"]
    assert "broken for" in result["msg"]
    assert TOKEN not in out
    assert server.count(info_url()) == 2
    assert server.calls[0]["headers"]["Authorization"] == "Bearer " + TOKEN


def test_the_token_comes_from_hf_token(fake, capsys, monkeypatch):
    server, _sleeps = fake
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    server.add(info_url(), Reply(200, info()))
    code, result, out = run_module(hf_revision.main, args(), capsys)
    assert code == 0
    assert server.calls[0]["headers"]["Authorization"] == "Bearer " + TOKEN
    assert TOKEN not in out


def test_selection_errors_name_the_repo_and_patterns(fake, capsys):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    code, result, _out = run_module(hf_revision.main, args(allow_patterns=["*.gguf"]), capsys)
    assert code == 1
    assert result["msg"].startswith("resolving org/model at revision main on %s: no file" % EP)
    assert '["*.gguf"]' in result["msg"]
    assert "model.safetensors" in result["repo_files"]


def test_a_mirror_without_blobs_is_named(fake, capsys):
    server, _sleeps = fake
    bare = info()
    bare["siblings"] = [{"rfilename": s["rfilename"]} for s in bare["siblings"]]
    server.add(info_url(), Reply(200, bare))
    code, result, _out = run_module(hf_revision.main, args(), capsys)
    assert code == 1 and "blobs=true" in result["msg"] and EP in result["msg"]


# -- lock_file -------------------------------------------------------------------------------------------
def test_lock_file_written_once_then_unchanged(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    dest = tmp_path / "locks" / "models" / "org--model.json"
    code, first, _out = run_module(hf_revision.main, args(lock_file=str(dest)), capsys)
    assert code == 0 and first["changed"] is True
    assert first["lock_file"] == str(dest)
    text = dest.read_text()
    assert json.loads(text) == first["lock"]
    assert text == json.dumps(first["lock"], sort_keys=True, indent=2) + "\n"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert first["msg"].endswith("; wrote %s" % dest)
    assert os.listdir(dest.parent) == ["org--model.json"]  # no temporary file left
    inode = dest.stat().st_ino

    code, second, _out = run_module(hf_revision.main, args(lock_file=str(dest)), capsys)
    assert code == 0 and second["changed"] is False
    assert second["msg"].endswith("; %s is up to date" % dest)
    assert dest.stat().st_ino == inode  # not rewritten


def test_lock_file_replaced_when_the_branch_moved(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()), Reply(200, info(sha=OTHER)))
    dest = tmp_path / "lock.json"
    assert run_module(hf_revision.main, args(lock_file=str(dest)), capsys)[1]["changed"] is True
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), _ansible_diff=True), capsys)
    assert code == 0 and result["changed"] is True
    assert json.loads(dest.read_text())["commit"] == OTHER
    assert SHA in result["diff"]["before"] and OTHER in result["diff"]["after"]
    assert OTHER not in result["diff"]["before"]


def test_check_mode_writes_nothing_and_diff_shows_the_new_text(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    dest = tmp_path / "new" / "lock.json"
    code, result, _out = run_module(
        hf_revision.main, args(lock_file=str(dest), _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert code == 0 and result["changed"] is True
    assert not dest.parent.exists()
    assert result["msg"].endswith("; would write %s" % dest)
    assert result["diff"]["before"] == "" and result["diff"]["before_header"].endswith("(absent)")
    assert json.loads(result["diff"]["after"]) == result["lock"]


def test_check_mode_leaves_an_old_lock_alone(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    dest = tmp_path / "lock.json"
    dest.write_text("{}\n")
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), _ansible_check_mode=True), capsys)
    assert code == 0 and result["changed"] is True
    assert dest.read_text() == "{}\n"
    assert "diff" not in result


@pytest.mark.parametrize("where, words", [
    ("file/lock.json", "cannot read lock_file {tmp}/file/lock.json: [Errno 20] Not a directory"),
    ("dir", "cannot read lock_file {tmp}/dir: [Errno 21] Is a directory"),
    ("/proc/llmfleet-none/lock.json", "cannot write lock_file /proc/llmfleet-none/lock.json: "),
])
def test_an_unusable_lock_file_fails_clearly(fake, capsys, tmp_path, where, words):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(tmp_path / where)), capsys)
    assert code == 1 and result["msg"].startswith(words.format(tmp=tmp_path)), result["msg"]
    assert (tmp_path / "file").read_text() == "x" and os.listdir(tmp_path / "dir") == []


# -- against the fake hub (tests/upstream/hub.py) ----------------------------------------------------------
TINY_CHAT = "llmfleet-test/tiny-chat"
TINY_SHARDED = "llmfleet-test/tiny-sharded"
GATED = "llmfleet-test/gated-tiny"
TINY_CHAT_DEFAULT = ["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                     "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture
def hub(upstream, monkeypatch):
    """The started fake upstream; back-off waits are recorded, not slept; no HF_TOKEN around."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http

    monkeypatch.delenv("HF_TOKEN", raising=False)
    sleeps = []
    monkeypatch.setattr(_http, "_sleep", sleeps.append)
    upstream.sleeps = sleeps
    return upstream


def hub_args(hub, **kw):
    out = {"endpoint": hub.hub_url, "backoff": 0.01}
    out.update(kw)
    return out


def catalog_commit(hub, repo, commit):
    """The fake's own record of a commit: files in the lock's shape, computed from its bytes."""
    for entry in hub.hub_catalog()["repos"][repo]["commits"]:
        if entry["commit"] == commit:
            return entry
    raise AssertionError("the fake has no commit %s of %s" % (commit, repo))


def hub_requests(hub):
    return [r for r in hub.log() if r["path"].startswith("/hub")]


def test_fake_hub_main_and_v1_are_different_commits(hub, capsys):
    results = {}
    for rev in ("main", "v1"):
        code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, revision=rev), capsys)
        assert code == 0, result
        results[rev] = result
    refs = hub.hub_catalog()["repos"][TINY_CHAT]
    assert results["main"]["commit"] == refs["branches"]["main"]
    assert results["v1"]["commit"] == refs["tags"]["v1"]
    assert results["main"]["commit"] != results["v1"]["commit"]
    for rev, result in results.items():
        files = result["lock"]["files"]
        assert [f["path"] for f in files] == TINY_CHAT_DEFAULT
        known = dict((f["path"], f) for f in catalog_commit(hub, TINY_CHAT, result["commit"])["files"])
        assert files == [known[f["path"]] for f in files]
        assert result["size"] == sum(f["size"] for f in files)
        assert result["gated"] is False and result["msg"].startswith(
            "%s %s -> %s, 6 files, " % (TINY_CHAT, rev, result["commit"][:12]))
    weights = [dict((f["path"], f) for f in r["lock"]["files"])["model.safetensors"] for r in results.values()]
    assert weights[0]["sha256"] != weights[1]["sha256"]


def test_fake_hub_a_commit_resolves_to_itself(hub, capsys):
    v1 = hub.hub_catalog()["repos"][TINY_CHAT]["tags"]["v1"]
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, revision=v1), capsys)
    assert code == 0, result
    assert result["commit"] == v1 and result["lock"]["revision"] == v1


def test_fake_hub_sharded_without_original(hub, capsys):
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_SHARDED), capsys)
    assert code == 0, result
    paths = [f["path"] for f in result["lock"]["files"]]
    assert paths == ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                     "model-00002-of-00002.safetensors", "model.safetensors.index.json", "special_tokens_map.json",
                     "tokenizer.json", "tokenizer_config.json"]
    repo_paths = [f["path"] for f in catalog_commit(hub, TINY_SHARDED, result["commit"])["files"]]
    assert "original/consolidated.00.pth" in repo_paths  # there, and left out


def test_fake_hub_gated_without_a_token_fails_clearly(hub, capsys):
    code, result, out = run_module(hf_revision.main, hub_args(hub, repo=GATED), capsys)
    assert code == 1
    assert "%s is gated: its files need a token" % GATED in result["msg"]
    assert "Accept its terms on %s/%s" % (hub.hub_url, GATED) in result["msg"]
    assert "lock" not in result


def test_fake_hub_gated_info_behind_the_token_fails_clearly_too(hub, capsys):
    hub.hub_switch(gated_info="token")
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=GATED), capsys)
    assert code == 1 and "%s is gated: its files need a token" % GATED in result["msg"]
    assert result["url"] == _hfhub.model_info_url(hub.hub_url, GATED, "main")


def test_fake_hub_gated_with_the_token_works_and_never_shows_it(hub, capsys, tmp_path):
    from tests.upstream.hub import HUB_TOKEN

    dest = tmp_path / "gated.json"
    code, result, out = run_module(
        hf_revision.main, hub_args(hub, repo=GATED, token=HUB_TOKEN, lock_file=str(dest), _ansible_diff=True), capsys)
    assert code == 0, result
    assert result["gated"] == "manual"
    assert [f["path"] for f in result["lock"]["files"]] == ["config.json", "model.safetensors"]
    assert HUB_TOKEN not in out and HUB_TOKEN not in dest.read_text()
    # the token went to the hub (the model info and config.json), nowhere else
    sent = [r for r in hub.log() if "Authorization" in (r.get("headers") or {})]
    assert sent and all(r["path"].startswith("/hub/") for r in sent)
    assert any("/resolve/%s/config.json" % result["commit"] in r["path"] for r in sent)


def test_fake_hub_gated_with_a_token_without_access(hub, capsys):
    other = "hf_someoneElsesToken1234567890"
    code, result, out = run_module(hf_revision.main, hub_args(hub, repo=GATED, token=other), capsys)
    assert code == 1
    assert "the token has no access to %s (403" % GATED in result["msg"]
    assert other not in out


def test_fake_hub_a_malformed_token_is_refused_and_masked_in_the_answer(hub, capsys):
    bad = "not-a-hub-token-secret"
    code, result, out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, token=bad), capsys)
    assert code == 1 and "refused the token (401" in result["msg"]
    assert bad not in out


@pytest.mark.parametrize("token, words", [
    (None, ["answered 401 without a token", "a token is needed", "gated", "private", "does not exist"]),
    ("hf_someoneElsesToken1234567890", ["there is no model llmfleet-test/nope", "answer 404"]),
])
def test_fake_hub_unknown_repo(hub, capsys, token, words):
    code, result, out = run_module(hf_revision.main, hub_args(hub, repo="llmfleet-test/nope", token=token), capsys)
    assert code == 1
    for word in words:
        assert word in result["msg"]
    assert result["url"] == _hfhub.model_info_url(hub.hub_url, "llmfleet-test/nope", "main")
    assert token is None or token not in out


def test_fake_hub_unknown_revision(hub, capsys):
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, revision="v9"), capsys)
    assert code == 1
    assert "%s has no revision 'v9'" % TINY_CHAT in result["msg"] and "Invalid rev id: v9" in result["msg"]


def test_fake_hub_503_is_retried(hub, capsys):
    hub.fault("status", status=503, count=2, path="/hub/api/")
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT), capsys)
    assert code == 0, result
    info_calls = [r for r in hub_requests(hub) if r["path"].startswith("/hub/api/models/")]
    assert [r["status"] for r in info_calls] == [503, 503, 200]
    assert len(hub.sleeps) == 2


def test_fake_hub_503_past_the_retries_fails_with_the_url(hub, capsys):
    hub.fault("status", status=503, count=10, path="/hub/api/")
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, retries=1), capsys)
    assert code == 1
    url = _hfhub.model_info_url(hub.hub_url, TINY_CHAT, "main")
    assert result["url"] == url and "could not get %s after 2 attempts" % url in result["msg"]
    assert "503" in result["msg"]


def test_fake_hub_lock_file_once_then_unchanged_then_the_branch_moves(hub, capsys, tmp_path):
    dest = tmp_path / "locks" / "tiny-chat.json"
    code, check, _out = run_module(
        hf_revision.main, hub_args(hub, repo=TINY_CHAT, lock_file=str(dest), _ansible_check_mode=True), capsys)
    assert code == 0 and check["changed"] is True and not dest.parent.exists()

    code, first, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, lock_file=str(dest)), capsys)
    assert code == 0 and first["changed"] is True
    assert first["lock"] == check["lock"]
    written = json.loads(dest.read_text())
    assert written["commit"] == hub.hub_catalog()["repos"][TINY_CHAT]["branches"]["main"]

    code, second, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, lock_file=str(dest)), capsys)
    assert code == 0 and second["changed"] is False

    new = hub.hub_commit(TINY_CHAT, {"model.safetensors": {"seed": 99, "size": 48000}})
    code, check, _out = run_module(
        hf_revision.main, hub_args(hub, repo=TINY_CHAT, lock_file=str(dest), _ansible_check_mode=True,
                                   _ansible_diff=True), capsys)
    assert code == 0 and check["changed"] is True and check["commit"] == new
    assert json.loads(dest.read_text()) == written  # check mode left it
    assert json.loads(check["diff"]["before"]) == written and json.loads(check["diff"]["after"])["commit"] == new

    code, third, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, lock_file=str(dest)), capsys)
    assert code == 0 and third["changed"] is True
    assert json.loads(dest.read_text())["commit"] == new


def test_fake_hub_renamed_repo_is_followed_with_a_warning(hub, capsys):
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo="llmfleet-test/tiny-chat-old"), capsys)
    assert code == 0, result
    assert result["commit"] == hub.hub_catalog()["repos"][TINY_CHAT]["branches"]["main"]
    assert any("the hub calls llmfleet-test/tiny-chat-old %s" % TINY_CHAT in w for w in warnings_text(result))


def test_fake_hub_lock_matches_what_the_real_client_downloads(hub, capsys, tmp_path, monkeypatch):
    """The lock's hashes and blob names are those of the bytes huggingface_hub itself fetches."""
    import hashlib

    from huggingface_hub import constants, hf_hub_download

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    code, result, _out = run_module(hf_revision.main, hub_args(hub, repo=TINY_CHAT, revision="v1"), capsys)
    assert code == 0, result
    lock = result["lock"]
    cache = tmp_path / "hub-cache"
    for entry in lock["files"]:
        if entry["path"] not in ("model.safetensors", "config.json"):
            continue
        got = hf_hub_download(TINY_CHAT, entry["path"], revision=lock["commit"], endpoint=hub.hub_url,
                              cache_dir=str(cache))
        data = open(got, "rb").read()
        assert len(data) == entry["size"]
        if "sha256" in entry:
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        else:
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == entry["git_oid"]
        # the real client names the blob as the lock says model_snapshot must
        blob = os.path.realpath(got)
        assert os.path.basename(blob) == _lock.blob_name(entry)
        assert os.path.dirname(blob) == str(cache / "models--llmfleet-test--tiny-chat" / "blobs")


# -- refresh: false (pins are data: a lock kept in lock_file is read back, the hub is not asked) -----------

def test_a_kept_lock_is_read_back_without_a_request(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    dest = tmp_path / "locks" / "org--model@main.json"
    code, first, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)
    assert code == 0 and first["changed"] is True and first["from_lock_file"] is False  # missing: asked, written
    asked = len(server.calls)
    code, again, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)
    assert code == 0 and again["changed"] is False and again["from_lock_file"] is True
    assert len(server.calls) == asked, "a kept lock still asked the hub"
    assert again["lock"] == first["lock"] and again["commit"] == SHA
    assert "read back from %s" % dest in again["msg"]


def test_refresh_asks_again_and_moves_the_pin(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()), Reply(200, info(sha=OTHER)))
    dest = tmp_path / "lock.json"
    assert run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)[1]["commit"] == SHA
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=True), capsys)
    assert code == 0 and result["commit"] == OTHER and result["changed"] is True
    assert json.loads(dest.read_text())["commit"] == OTHER


@pytest.mark.parametrize("text, words", [
    ("{not json", "is not JSON"),
    ('{"format": 1}\n', "is not a model lock: "),
    (None, "holds the lock of org/model at v9, not of org/model at main"),
])
def test_a_malformed_kept_lock_fails_naming_the_file(fake, capsys, tmp_path, text, words):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    dest = tmp_path / "lock.json"
    if text is None:  # a valid lock of another revision
        assert run_module(hf_revision.main, args(lock_file=str(dest)), capsys)[0] == 0
        lock = json.loads(dest.read_text())
        lock["revision"] = "v9"
        dest.write_text(json.dumps(lock))
    else:
        dest.write_text(text)
    asked = len(server.calls)
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)
    assert code == 1 and ("lock_file %s " % dest) in result["msg"] and words in result["msg"], result["msg"]
    assert len(server.calls) == asked


@pytest.mark.parametrize("opened", ["dir", "file"])
def test_a_kept_lock_others_can_change_is_refused(fake, capsys, tmp_path, opened):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    folder = tmp_path / "locks"
    dest = folder / "lock.json"
    assert run_module(hf_revision.main, args(lock_file=str(dest)), capsys)[0] == 0
    (folder if opened == "dir" else dest).chmod(0o777 if opened == "dir" else 0o666)
    asked = len(server.calls)
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)
    assert code == 1 and result["msg"].startswith("lock_file %s cannot be trusted: " % dest), result["msg"]
    assert "writable by others" in result["msg"] and len(server.calls) == asked


def test_a_kept_lock_behind_a_link_is_not_read(fake, capsys, tmp_path):
    server, _sleeps = fake
    server.add(info_url(), Reply(200, info()))
    real = tmp_path / "real.json"
    assert run_module(hf_revision.main, args(lock_file=str(real)), capsys)[0] == 0
    dest = tmp_path / "lock.json"
    dest.symlink_to(real)
    code, result, _out = run_module(hf_revision.main, args(lock_file=str(dest), refresh=False), capsys)
    assert code == 1 and "cannot read lock_file %s" % dest in result["msg"], result["msg"]
