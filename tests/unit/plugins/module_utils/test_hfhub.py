"""_hfhub: repo names, URLs, the file selection, the lock, and the hub's errors (HTTP scripted)."""

from __future__ import annotations

import copy
import json

import pytest
from huggingface_hub import hf_hub_url
from huggingface_hub.utils import filter_repo_objects

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _hfhub, _lock
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from tests.unit.plugins.lookup_fakes import Reply, install

EP = "https://hub.test/prefix"
REPO = "org/model"
SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_TOPSECRETtoken0123456789"


def paths(selected):
    return [s["rfilename"] for s in selected]


def siblings(*names):
    return [{"rfilename": n} for n in names]


# -- names and URLs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("repo", ["org/model", "Qwen/Qwen3-0.6B", "a/b", "meta-llama/Llama-3.1-8B-Instruct",
                                  "org_1/m.v2_x-y"])
def test_valid_repo_names(repo):
    assert _lock.validate_repo(repo) is None


@pytest.mark.parametrize("repo, words", [
    ("foo", ["'foo'", "org/name", "openai-community/gpt2"]),
    ("a/b/c", ["'a/b/c'", "org/name"]),
    ("/model", ["'/model'", "letter or digit"]),
    ("org/-model", ["'org/-model'"]),
    ("org/mo del", ["'org/mo del'"]),
    ("org/a--b", ["'--'"]),
    ("org/a..b", ["'..'"]),
    ("", ["org/name"]),
    (None, ["None"]),
])
def test_invalid_repo_names_say_what_is_allowed(repo, words):
    problem = _lock.validate_repo(repo)
    assert problem is not None
    for word in words:
        assert word in problem


@pytest.mark.parametrize("endpoint", ["https://huggingface.co", "https://huggingface.co/", "http://127.0.0.1:8080/hub",
                                      "http://127.0.0.1:8080/hub/"])
def test_model_info_url_with_any_endpoint_form(endpoint):
    base = endpoint.rstrip("/")
    assert _hfhub.model_info_url(endpoint, REPO, "main") == base + "/api/models/org/model/revision/main?blobs=true"
    assert _hfhub.model_info_url(endpoint, REPO, "main", blobs=False) == base + "/api/models/org/model/revision/main"


@pytest.mark.parametrize("revision, quoted", [
    ("main", "main"), ("refs/pr/1", "refs%2Fpr%2F1"), ("v1.0+cu", "v1.0%2Bcu"), ("a b", "a%20b"), (SHA, SHA),
])
def test_revision_is_one_quoted_segment(revision, quoted):
    assert _hfhub.quote_revision(revision) == quoted
    assert _hfhub.model_info_url(EP, REPO, revision).endswith("/revision/%s?blobs=true" % quoted)


@pytest.mark.parametrize("path", ["config.json", "sub dir/a+b.json", "original/params.json", "weird#name?.txt",
                                  "ünï/côdé.py"])
@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8080/hub", "http://127.0.0.1:8080/hub/"])
def test_file_url_is_what_the_real_client_asks(endpoint, path):
    ours = _hfhub.file_url(endpoint, REPO, SHA, path)
    assert ours == hf_hub_url(REPO, path, revision=SHA, endpoint=endpoint.rstrip("/"))
    assert ours.startswith("http://127.0.0.1:8080/hub/org/model/resolve/%s/" % SHA)
    assert "?" not in ours and "#" not in ours and " " not in ours


@pytest.mark.parametrize("endpoint, ok", [
    ("https://huggingface.co", True), ("http://127.0.0.1:8080/hub/", True), ("ftp://x", False),
    ("huggingface.co", False), ("https://hub.test/?x=1", False), ("https://u:p@hub.test", False), ("", False),
])
def test_endpoint_validation(endpoint, ok):
    assert (_hfhub.validate_endpoint(endpoint) is None) is ok


def test_the_public_default_is_one_constant():
    assert _hfhub.DEFAULT_ENDPOINT == "https://huggingface.co"
    assert _hfhub.model_info_url(None, REPO, "main").startswith("https://huggingface.co/api/models/")


@pytest.mark.parametrize("revision, commit", [(SHA, True), (SHA.upper(), True), (SHA[:12], False), ("main", False),
                                              (SHA + "0", False)])
def test_is_commit(revision, commit):
    assert _lock.is_commit(revision) is commit


# -- selection -----------------------------------------------------------------------------------------
COMMON = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", ".gitattributes", "README.md", "LICENSE"]

SELECTION = [
    ("safetensors-and-bin", COMMON + ["model.safetensors", "pytorch_model.bin", "pytorch_model.bin.index.json",
                                      "flax_model.msgpack", "tf_model.h5", "onnx/model.onnx", "logo.png",
                                      "merges.txt", "vocab.json", "model.gguf"],
     ["config.json", "generation_config.json", "merges.txt", "model.safetensors", "special_tokens_map.json",
      "tokenizer.json", "tokenizer_config.json", "vocab.json"]),
    ("bin-only", COMMON + ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
                           "pytorch_model.bin.index.json", "training_args.bin", "optimizer.pt", "scheduler.pt",
                           "rng_state_0.pth", "tokenizer.model"],
     ["config.json", "generation_config.json", "pytorch_model-00001-of-00002.bin",
      "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json", "special_tokens_map.json",
      "tokenizer.json", "tokenizer.model", "tokenizer_config.json"]),
    ("sharded-with-index", COMMON + ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                     "model-00003-of-00003.safetensors", "model.safetensors.index.json",
                                     "consolidated.safetensors", "params.json", "tekken.json"],
     ["config.json", "generation_config.json", "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
      "params.json", "special_tokens_map.json", "tekken.json", "tokenizer.json", "tokenizer_config.json"]),
    ("original-excluded", COMMON + ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                    "model.safetensors.index.json", "original/consolidated.00.pth",
                                    "original/params.json", "original/tokenizer.model", "USE_POLICY.md"],
     ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors", "model.safetensors.index.json", "special_tokens_map.json",
      "tokenizer.json", "tokenizer_config.json"]),
    ("only-original-weights-fall-back-to-nothing-there",
     ["config.json", "original/consolidated.00.pth", "original/params.json", "tokenizer.json"],
     ["config.json", "tokenizer.json"]),
    ("remote-code-and-tiktoken", ["config.json", "modeling_x.py", "configuration_x.py", "qwen.tiktoken",
                                  "model.safetensors", "assets/diagram.jpg"],
     ["config.json", "configuration_x.py", "model.safetensors", "modeling_x.py", "qwen.tiktoken"]),
    ("star-crosses-directories", ["config.json", "model.safetensors", "sub/extra.json", "sub/deeper/w.safetensors"],
     ["config.json", "model.safetensors", "sub/deeper/w.safetensors", "sub/extra.json"]),
]


@pytest.mark.parametrize("names, wanted", [(n, w) for _id, n, w in SELECTION], ids=[c[0] for c in SELECTION])
def test_default_selection_is_what_vllm_loads(names, wanted):
    selected = _hfhub.select_files(siblings(*reversed(names)))
    assert paths(selected) == wanted


def test_selection_returns_the_siblings_themselves():
    given = [{"rfilename": "model.safetensors", "size": 3}, {"rfilename": "config.json", "size": 2}]
    selected = _hfhub.select_files(given)
    assert selected[0] is given[1] and selected[1] is given[0]


LLAMA = COMMON + ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                  "model.safetensors.index.json", "original/consolidated.00.pth", "original/params.json",
                  "original/tokenizer.model", "sub\\odd.json"]
USER_PATTERNS = [
    (["*.json", "original/"], None),
    (["*.json", "original/"], ["*.pth"]),
    (["*"], ["*.md", ".gitattributes", "original/"]),
    (["*.safetensors", "config.json"], None),
    (["original\\*"], None),
    (["*.JSON", "config.json"], None),
    (["model-0000[12]-*"], None),
    (["config.json", "sub/"], ["*odd*"]),
    ("*.json", "tokenizer*"),
]


@pytest.mark.parametrize("allow, ignore", USER_PATTERNS)
def test_user_patterns_mean_what_they_mean_to_huggingface_hub(allow, ignore):
    names = [n.replace("\\", "/") for n in LLAMA]
    wanted = sorted(filter_repo_objects(names, allow_patterns=allow, ignore_patterns=ignore))
    if "config.json" not in wanted:
        with pytest.raises(_hfhub.SelectionError):
            _hfhub.select_files(siblings(*names), allow, ignore)
        return
    assert paths(_hfhub.select_files(siblings(*names), allow, ignore)) == wanted


def test_user_allow_patterns_replace_the_default_and_its_exclusions():
    selected = paths(_hfhub.select_files(siblings(*LLAMA), ["*.json", "original/"], ["*.pth"]))
    assert "original/params.json" in selected and "original/tokenizer.model" in selected
    assert "original/consolidated.00.pth" not in selected
    assert "model-00001-of-00002.safetensors" not in selected


def test_ignore_patterns_apply_after_the_default_selection():
    selected = paths(_hfhub.select_files(siblings(*LLAMA), None, ["generation_config.json", "model-00002*"]))
    assert "generation_config.json" not in selected and "model-00002-of-00002.safetensors" not in selected
    assert "model-00001-of-00002.safetensors" in selected


def test_nothing_selected_is_an_error_naming_the_patterns():
    with pytest.raises(_hfhub.SelectionError) as exc:
        _hfhub.select_files(siblings(*LLAMA), ["*.gguf"], ["x*"])
    assert '["*.gguf"]' in exc.value.msg and '["x*"]' in exc.value.msg
    assert "no file" in exc.value.msg and "config.json" in exc.value.msg  # the repo's files are listed
    assert exc.value.details["repo_files"] == sorted(n for n in LLAMA)


def test_a_selection_without_config_json_is_an_error():
    with pytest.raises(_hfhub.SelectionError) as exc:
        _hfhub.select_files(siblings(*LLAMA), None, ["config.json"])
    assert "no config.json" in exc.value.msg and "not set (the default selection" in exc.value.msg
    assert '["config.json"]' in exc.value.msg
    assert "model-00001-of-00002.safetensors" in exc.value.details["selected"]


def test_an_empty_repo_selects_nothing():
    with pytest.raises(_hfhub.SelectionError) as exc:
        _hfhub.select_files([])
    assert "the repo has: none" in exc.value.msg


# -- the lock -----------------------------------------------------------------------------------------
CFG_OID = "a" * 40
TOK_OID = "b" * 40
W_SHA = "c" * 64


def info(**changes):
    data = {
        "id": REPO, "sha": SHA, "gated": False, "private": False,
        "siblings": [
            {"rfilename": "model.safetensors", "size": 16384, "blobId": "d" * 40,
             "lfs": {"sha256": W_SHA, "size": 16384, "pointerSize": 134}},
            {"rfilename": "tokenizer.json", "size": 40, "blobId": TOK_OID},
            {"rfilename": "config.json", "size": 611, "blobId": CFG_OID},
        ],
    }
    data.update(changes)
    return data


def test_lock_is_the_documented_object():
    data = info()
    lock = _hfhub.build_lock(REPO, "main", data, data["siblings"])
    assert lock == {
        "format": 1, "repo": REPO, "revision": "main", "commit": SHA,
        "files": [
            {"path": "config.json", "size": 611, "git_oid": CFG_OID},
            {"path": "model.safetensors", "size": 16384, "sha256": W_SHA},
            {"path": "tokenizer.json", "size": 40, "git_oid": TOK_OID},
        ],
        "size": 611 + 16384 + 40,
    }
    assert _lock.validate_lock(lock) == []
    assert [_lock.blob_name(f) for f in lock["files"]] == [CFG_OID, W_SHA, TOK_OID]


def test_lock_lowercases_the_hub_hex():
    data = info(sha=SHA.upper())
    data["siblings"][0]["lfs"]["sha256"] = W_SHA.upper()
    lock = _hfhub.build_lock(REPO, "v1", data, data["siblings"])
    assert lock["commit"] == SHA and lock["files"][1]["sha256"] == W_SHA


@pytest.mark.parametrize("sha", [None, "", "abc", SHA + "00", 42])
def test_lock_refuses_an_info_without_a_commit(sha):
    data = info(sha=sha)
    if sha is None:
        del data["sha"]
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.build_lock(REPO, "main", data, data["siblings"], endpoint=EP)
    assert "no commit sha" in exc.value.msg and EP in exc.value.msg


def test_lock_refuses_siblings_without_blobs_and_names_the_endpoint():
    data = info(siblings=[{"rfilename": "config.json"}, {"rfilename": "model.safetensors"}])
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.build_lock(REPO, "main", data, data["siblings"], endpoint=EP + "/")
    assert "blobs=true" in exc.value.msg and EP in exc.value.msg
    assert exc.value.details["files_without_blobs"] == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("sibling", [
    {"rfilename": "config.json", "blobId": CFG_OID},                    # no size
    {"rfilename": "config.json", "size": 611},                          # no blob id
    {"rfilename": "config.json", "size": -1, "blobId": CFG_OID},
    {"rfilename": "config.json", "size": True, "blobId": CFG_OID},
    {"rfilename": "config.json", "size": 611, "blobId": "xyz"},
])
def test_lock_refuses_a_sibling_without_size_or_blob_id(sibling):
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.build_lock(REPO, "main", info(), [sibling])
    assert "config.json" in exc.value.msg


def test_lock_takes_the_lfs_size_when_size_is_missing_and_refuses_two_sizes():
    sib = {"rfilename": "model.safetensors", "lfs": {"sha256": W_SHA, "size": 7}}
    assert _hfhub.build_lock(REPO, "main", info(), [sib])["size"] == 7
    sib = {"rfilename": "model.safetensors", "size": 8, "lfs": {"sha256": W_SHA, "size": 7}}
    with pytest.raises(_hfhub.HubAnswerError, match="two sizes"):
        _hfhub.build_lock(REPO, "main", info(), [sib])
    sib = {"rfilename": "model.safetensors", "size": 8, "lfs": {"size": 8}}
    with pytest.raises(_hfhub.HubAnswerError, match="without a sha256"):
        _hfhub.build_lock(REPO, "main", info(), [sib])


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.json", "a/../../x", "a//b", "./config.json", "a\\..\\b", ""])
def test_lock_refuses_unsafe_paths(path):
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.build_lock(REPO, "main", info(), [{"rfilename": path, "size": 1, "blobId": CFG_OID}])
    assert "unsafe" in exc.value.msg


def good_lock():
    data = info()
    return _hfhub.build_lock(REPO, "main", data, data["siblings"])


def mutate(fn):
    lock = good_lock()
    fn(lock)
    return lock


BAD_LOCKS = [
    ("format", lambda l: l.update(format=2), "format is 2"),
    ("format-bool", lambda l: l.update(format=True), "format is True"),
    ("repo", lambda l: l.update(repo="foo"), "'foo'"),
    ("revision", lambda l: l.update(revision=""), "revision ''"),
    ("commit-short", lambda l: l.update(commit=SHA[:12]), "commit '0123456789ab'"),
    ("commit-upper", lambda l: l.update(commit=SHA.upper()), "40 lower-case hex"),
    ("no-files", lambda l: l.update(files=[], size=0), "files is not a non-empty list"),
    ("abs-path", lambda l: l["files"][0].update(path="/config.json"), "absolute"),
    ("dotdot", lambda l: l["files"][0].update(path="../config.json"), "'..'"),
    ("size-neg", lambda l: l["files"][0].update(size=-1), "size -1"),
    ("size-str", lambda l: l["files"][0].update(size="611"), "size '611'"),
    ("both-hashes", lambda l: l["files"][0].update(sha256=W_SHA), "both of sha256 and git_oid"),
    ("no-hash", lambda l: l["files"][0].pop("git_oid"), "neither of sha256 and git_oid"),
    ("sha-len", lambda l: l["files"][1].update(sha256="c" * 63), "64 lower-case hex"),
    ("oid-len", lambda l: l["files"][0].update(git_oid="a" * 41), "40 lower-case hex"),
    ("duplicate", lambda l: l["files"].insert(1, dict(l["files"][0])) or l.update(size=l["size"] + 611),
     "listed twice"),
    ("unsorted", lambda l: l["files"].reverse(), "not sorted"),
    ("sum", lambda l: l.update(size=l["size"] + 1), "not the sum"),
    ("extra-key", lambda l: l.update(extra=1), "unknown keys extra"),
    ("extra-file-key", lambda l: l["files"][0].update(url="x"), "unknown keys url"),
]


@pytest.mark.parametrize("fn, words", [(f, w) for _i, f, w in BAD_LOCKS], ids=[b[0] for b in BAD_LOCKS])
def test_validate_lock_finds_each_problem(fn, words):
    problems = _lock.validate_lock(mutate(fn))
    assert problems, "no problem found"
    assert any(words in p for p in problems), problems


@pytest.mark.parametrize("value", [None, [], "lock", 1])
def test_validate_lock_of_a_non_object(value):
    assert _lock.validate_lock(value) == ["the lock is not a JSON object (got %s)" % type(value).__name__]


def test_lock_text_is_sorted_indented_and_ends_with_a_newline():
    lock = good_lock()
    text = _lock.lock_text(lock)
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert json.loads(text) == lock
    assert text.index('"commit"') < text.index('"files"') < text.index('"format"') < text.index('"repo"')
    assert '\n  "commit": "%s",\n' % SHA in text
    assert '      "git_oid": "%s",\n      "path": "config.json",\n      "size": 611\n' % CFG_OID in text


@pytest.mark.parametrize("size, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (17035, "16.6 KiB"),
                                        (15 * 1024 ** 3, "15.0 GiB"), (3 * 1024 ** 5, "3072.0 TiB")])
def test_human_size(size, text):
    assert _hfhub.human_size(size) == text


# -- the hub's answers and errors ------------------------------------------------------------------------
URL = EP + "/api/models/org/model/revision/main?blobs=true"


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def client(token=None, retries=2):
    return _http.HttpClient(retries=retries, backoff=0.01, secrets=[token] if token else None)


def test_fetch_sends_the_token_only_when_given(fake):
    server, _sleeps = fake
    server.add(URL, Reply(200, info()))
    assert _hfhub.fetch_model_info(client(), EP + "/", REPO, "main")["sha"] == SHA
    assert "Authorization" not in server.calls[-1]["headers"]
    assert _hfhub.fetch_model_info(client(TOKEN), EP, REPO, "main", TOKEN)["sha"] == SHA
    assert server.calls[-1]["headers"]["Authorization"] == "Bearer " + TOKEN
    assert [c["url"] for c in server.calls] == [URL, URL]


def hub_error(status, code=None, message=None):
    headers = {}
    if code:
        headers["X-Error-Code"] = code
    if message:
        headers["X-Error-Message"] = message
    return Reply(status, {"error": message or "error"}, headers=headers)


ERRORS = [
    # (id, reply, token, exception, words)
    ("gated-no-token", hub_error(401, "GatedRepo", "Access to model org/model is restricted."), None,
     _hfhub.HubAccessError, ["org/model is gated: its files need a token", "answer 401", "Accept its terms on "
                             + EP + "/org/model", "restricted"]),
    ("401-plain-no-token", Reply(401, {"error": "Invalid username or password."}), None,
     _hfhub.HubAccessError, ["a token is needed", "gated", "private", "does not exist"]),
    ("401-bad-token", hub_error(401, None, "Invalid credentials in Authorization header"), TOKEN,
     _hfhub.HubAccessError, ["refused the token", "expired", "Invalid credentials"]),
    ("401-with-token", hub_error(401, "RepoNotFound", "Repository not found"), TOKEN,
     _hfhub.HubAccessError, ["401 with the token", "does not exist", "private", "gated", EP + "/org/model"]),
    ("403-token-no-access", hub_error(403, "GatedRepo", "Access to model org/model is restricted and you are "
                                      "not in the authorized list. Token %s" % TOKEN), TOKEN,
     _hfhub.HubAccessError, ["the token has no access to org/model (403", "accept its terms on " + EP + "/org/model",
                             "gated", "********"]),
    ("403-without-token", Reply(403, {"error": "Forbidden"}), None,
     _hfhub.HubAccessError, ["refused access", "without a token"]),
    ("revision-404", hub_error(404, "RevisionNotFound", "Invalid rev id: nope"), None,
     _hfhub.HubNotFoundError, ["org/model has no revision 'main'", "Invalid rev id", "branch, a tag or a full commit"]),
    ("repo-404", hub_error(404, "RepoNotFound", "Repository not found"), TOKEN,
     _hfhub.HubNotFoundError, ["there is no model org/model", "private repo is not found with a token"]),
    ("plain-404", Reply(404, {"message": "Not Found"}), None,
     _hfhub.HubNotFoundError, ["no model org/model at revision 'main'", "answer 404"]),
    ("not-a-hub", Reply(200, {"models": []}), None,
     _hfhub.HubAnswerError, ["without a 'siblings' list", "Hugging Face hub"]),
    ("json-list", Reply(200, [1, 2]), None, _hfhub.HubAnswerError, ["siblings"]),
    ("teapot", Reply(418, {"error": "teapot"}), None, _http.HttpStatusError, ["418"]),
    ("html", Reply(200, body=b"<html>login</html>", content_type="text/html"), None,
     _http.InvalidJsonError, ["not valid JSON"]),
]


@pytest.mark.parametrize("reply, token, cls, words", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_say_what_to_do_and_never_show_the_token(fake, reply, token, cls, words):
    server, _sleeps = fake
    server.add(URL, reply)
    with pytest.raises(cls) as exc:
        _hfhub.fetch_model_info(client(token), EP, REPO, "main", token)
    text = str(exc.value)
    for word in words:
        assert word in text
    assert TOKEN not in text and TOKEN not in json.dumps(getattr(exc.value, "details", {}))
    assert URL in text


def test_server_errors_are_tried_again(fake):
    server, sleeps = fake
    server.add(URL, Reply(503, {"error": "busy"}), Reply(502, {}), Reply(200, info()))
    assert _hfhub.fetch_model_info(client(retries=2), EP, REPO, "main")["sha"] == SHA
    assert server.count(URL) == 3 and len(sleeps) == 2


def test_server_errors_past_the_retries_are_unreachable(fake):
    server, _sleeps = fake
    server.add(URL, Reply(503, {"error": "busy"}))
    with pytest.raises(_http.UnreachableError) as exc:
        _hfhub.fetch_model_info(client(retries=1), EP, REPO, "main")
    assert server.count(URL) == 2 and exc.value.last_status == 503


def test_client_errors_are_not_tried_again(fake):
    server, _sleeps = fake
    server.add(URL, hub_error(401, "GatedRepo"))
    with pytest.raises(_hfhub.HubAccessError):
        _hfhub.fetch_model_info(client(retries=3), EP, REPO, "main")
    assert server.count(URL) == 1


def test_revision_is_quoted_in_the_request(fake):
    server, _sleeps = fake
    url = EP + "/api/models/org/model/revision/refs%2Fpr%2F3?blobs=true"
    server.add(url, Reply(200, info()))
    data = _hfhub.fetch_model_info(client(), EP, REPO, "refs/pr/3")
    assert data["sha"] == SHA and server.calls[-1]["url"] == url


def test_full_flow_on_a_copy_does_not_touch_the_answer():
    data = info()
    before = copy.deepcopy(data)
    _hfhub.build_lock(REPO, "main", data, _hfhub.select_files(data["siblings"]))
    assert data == before


# -- proving access to the files ------------------------------------------------------------------------
CONFIG = b'{"model_type": "llama"}\n'


def test_git_blob_id_is_gits():
    assert _hfhub.git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    assert _hfhub.git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # the empty blob


def lock_with(files):
    return {"format": 1, "repo": REPO, "revision": "main", "commit": SHA, "files": files,
            "size": sum(f["size"] for f in files)}


def test_probe_file_is_config_json_else_the_smallest_git_file():
    cfg = {"path": "config.json", "size": 99, "git_oid": "a" * 40}
    tok = {"path": "tok.json", "size": 5, "git_oid": "b" * 40}
    lfs = {"path": "model.safetensors", "size": 1, "sha256": "c" * 64}
    assert _hfhub.probe_file(lock_with([cfg, lfs, tok])) is cfg
    assert _hfhub.probe_file(lock_with([lfs, tok])) is tok
    assert _hfhub.probe_file(lock_with([lfs])) is None


def config_lock(data=CONFIG):
    return lock_with([{"path": "config.json", "size": len(data), "git_oid": _hfhub.git_blob_id(data)},
                      {"path": "model.safetensors", "size": 10, "sha256": W_SHA}])


CONFIG_URL = EP + "/org/model/resolve/%s/config.json" % SHA


def test_check_file_access_reads_config_json_with_the_token(fake):
    server, _sleeps = fake
    server.add(CONFIG_URL, Reply(200, body=CONFIG))
    assert _hfhub.check_file_access(client(TOKEN), EP, config_lock(), TOKEN) == "config.json"
    assert [c["url"] for c in server.calls] == [CONFIG_URL]
    assert server.calls[0]["headers"]["Authorization"] == "Bearer " + TOKEN


def test_check_file_access_refuses_other_bytes(fake):
    server, _sleeps = fake
    server.add(CONFIG_URL, Reply(200, body=CONFIG.replace(b"llama", b"LLAMA")))
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.check_file_access(client(), EP, config_lock(), None)
    assert "other content than its model info says" in exc.value.msg and CONFIG_URL in exc.value.msg


def test_check_file_access_without_a_git_file_reads_nothing(fake):
    server, _sleeps = fake
    lock = lock_with([{"path": "model.safetensors", "size": 10, "sha256": W_SHA}])
    assert _hfhub.check_file_access(client(TOKEN), EP, lock, TOKEN) is None
    assert server.calls == []


@pytest.mark.parametrize("reply, token, words", [
    (hub_error(401, "GatedRepo", "Access to model org/model is restricted."), None,
     ["org/model is gated: its files need a token", "Accept its terms on " + EP + "/org/model"]),
    (hub_error(403, "GatedRepo", "not in the authorized list"), TOKEN,
     ["the token has no access to org/model (403", "not in the authorized list"]),
])
def test_check_file_access_maps_refusals(fake, reply, token, words):
    server, _sleeps = fake
    server.add(CONFIG_URL, reply)
    with pytest.raises(_hfhub.HubAccessError) as exc:
        _hfhub.check_file_access(client(token), EP, config_lock(), token)
    for word in words:
        assert word in exc.value.msg
    assert CONFIG_URL in exc.value.msg and TOKEN not in exc.value.msg


# -- a trailing newline is not part of a name or a hex digest (``$`` matches before one) ---------------------
@pytest.mark.parametrize("repo", ["org/model\n", "org\n/model", "org/model\n\n"])
def test_a_repo_with_a_trailing_newline_is_refused(repo):
    assert _lock.validate_repo(repo) is not None


def test_a_commit_with_a_trailing_newline_is_not_a_commit():
    assert _lock.is_commit(SHA + "\n") is False


@pytest.mark.parametrize("where, fn", [
    ("commit", lambda l: l.update(commit=SHA + "\n")),
    ("sha256", lambda l: l["files"][1].update(sha256=W_SHA + "\n")),
    ("git_oid", lambda l: l["files"][0].update(git_oid=CFG_OID + "\n")),
])
def test_validate_lock_refuses_hex_with_a_trailing_newline(where, fn):
    problems = _lock.validate_lock(mutate(fn))
    assert any(where in p and "hex digits" in p for p in problems), problems


@pytest.mark.parametrize("field", ["sha", "sha256", "blobId"])
def test_the_lock_refuses_hub_hex_with_a_trailing_newline(field):
    data = info()
    if field == "sha":
        data["sha"] = SHA + "\n"
    elif field == "sha256":
        data["siblings"][0]["lfs"]["sha256"] = W_SHA + "\n"
    else:
        data["siblings"][2]["blobId"] = CFG_OID + "\n"
    with pytest.raises(_hfhub.HubAnswerError) as exc:
        _hfhub.build_lock(REPO, "main", data, data["siblings"], endpoint=EP)
    assert exc.value.msg
