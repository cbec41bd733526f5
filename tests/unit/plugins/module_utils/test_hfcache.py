"""hub._cache, _fetch, _snapshot: the hub cache layout (as the real huggingface_hub computes it), the hashes, the streaming
fetch (ranges, redirects, retries, the token kept to its origin) against small HTTP servers on
127.0.0.1, refused downloads, pruning and the free-space check."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import stat
import threading
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _cache, _fetch, _hfhub, _snapshot
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http, _progress
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import NotEnoughSpace
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import NotFoundError as NotFound, UnreachableError as Unreachable
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import IntegrityError
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._fetch import AccessDenied, Fetcher, Refused
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._snapshot import Snapshot

TOKEN = "hf_unitTestSecret0123456789"
COMMIT = "a" * 40
OLD = "b" * 40
OLDER = "c" * 40


# -- a small origin server ---------------------------------------------------------------------

class Origin(object):
    """Serves ``files`` (path -> bytes) with ranges; ``plan`` holds one-shot answers for the next
    requests: ("status", code), ("cut", n) (announces the whole length, sends n bytes, closes),
    ("whole",) (ignores Range, 200), ("redirect", location[, code]), ("echo", code) (an error whose
    body repeats the Authorization header)."""

    def __init__(self):
        self.files = {}
        self.redirects = {}
        self.plan = []
        self.requests = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def do_GET(self):  # noqa: N802
                origin.requests.append({"path": self.path, "headers": dict(self.headers.items())})
                action = origin.plan.pop(0) if origin.plan else None
                if action and action[0] == "status":
                    return self._send(action[1], b'{"error": "scripted"}')
                if action and action[0] == "echo":
                    return self._send(action[1], json.dumps(
                        {"error": "bad credentials: %s" % self.headers.get("Authorization")}).encode())
                if action and action[0] == "redirect":
                    return self._send(action[2] if len(action) > 2 else 302, b"", {"Location": action[1]})
                if self.path in origin.redirects:
                    return self._send(302, b"", {"Location": origin.redirects[self.path]})
                data = origin.files.get(self.path)
                if data is None:
                    return self._send(404, b'{"error": "Entry not found"}')
                rng = self.headers.get("Range")
                if rng and not (action and action[0] == "whole"):
                    first = int(rng.split("=")[1].rstrip("-"))
                    if first >= len(data):
                        return self._send(416, b"", {"Content-Range": "bytes */%d" % len(data)})
                    body = data[first:]
                    headers = {"Content-Range": "bytes %d-%d/%d" % (first, len(data) - 1, len(data))}
                    return self._send(206, body, headers, cut=action[1] if action and action[0] == "cut" else None)
                return self._send(200, data, {}, cut=action[1] if action and action[0] == "cut" else None)

            def _send(self, code, body, headers=None, cut=None):
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                if cut is not None:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(body if cut is None else body[:cut])
                self.wfile.flush()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.daemon = True
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin():
    server = Origin()
    yield server
    server.stop()


@pytest.fixture
def cdn():
    server = Origin()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    waits = []
    monkeypatch.setattr(_http, "_sleep", waits.append)
    return waits


# -- helpers -----------------------------------------------------------------------------------

def lfs(path, data):
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def git(path, data):
    return {"path": path, "size": len(data), "git_oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}


def make_lock(files, commit=COMMIT, revision="main", repo="org/model"):
    files = sorted(files, key=lambda f: f["path"])
    return {"format": 1, "repo": repo, "revision": revision, "commit": commit, "files": files,
            "size": sum(f["size"] for f in files)}


WEIGHTS = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and 4 bytes: more than one chunk
CONFIG = b'{"model_type": "llama"}\n'
TOKENIZER = b'{"version": "1.0"}\n'


def serve(origin, lock, contents):
    for entry in lock["files"]:
        origin.files["/%s/resolve/%s/%s" % (lock["repo"], lock["commit"], entry["path"])] = contents[entry["path"]]


def fill(snapshot, origin, fetcher=None):
    """What model_snapshot does, in order: download the missing blobs, link, write the ref."""
    fetcher = fetcher or Fetcher(retries=2)
    survey = snapshot.survey()
    work = snapshot.work(survey)
    snapshot.prepare()
    by_path = dict((e["path"], e) for e in snapshot.files)
    for item in work["fetch"]:
        snapshot.download(item, by_path[item["path"]], fetcher,
                          _hfhub.file_url(origin.url, snapshot.repo, snapshot.commit, item["path"]))
    snapshot.link_all(work["links"])
    if work["ref"]:
        snapshot.write_ref()
    return work


def tree(top):
    out = []
    for here, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(here, d))]):
            out.append(os.path.relpath(os.path.join(here, name), top))
    return sorted(out)


# -- layout ------------------------------------------------------------------------------------

def test_repo_folder_is_what_huggingface_hub_names_it():
    from huggingface_hub.file_download import repo_folder_name

    assert _cache.repo_folder("Org.x/Name_1-b") == repo_folder_name(repo_id="Org.x/Name_1-b", repo_type="model")


@pytest.mark.parametrize("path", ["config.json", "original/params.json", "a/b/c/model.safetensors"])
def test_link_target_is_what_huggingface_hub_writes(tmp_path, path):
    """The real client's _create_symlink, given the same blob and pointer paths, makes the same link."""
    from huggingface_hub.file_download import _create_symlink, _get_pointer_path

    storage = tmp_path / "models--org--model"
    blob = storage / "blobs" / ("f" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x")
    pointer = _get_pointer_path(str(storage), COMMIT, path)
    os.makedirs(os.path.dirname(pointer))
    _create_symlink(str(blob), pointer, new_blob=False)
    assert os.readlink(pointer) == _cache.link_target(path, "f" * 64)


def test_digests_are_sha256_and_the_git_blob_id():
    data = b"hello\n"
    digest = _cache.Digest(git("a", data))
    digest.update(data)
    # `git hash-object` of "hello\n", as git itself prints it
    assert digest.hexdigest() == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert digest.problem() is None
    digest = _cache.Digest({"path": "a", "size": 6, "sha256": hashlib.sha256(b"HELLO\n").hexdigest()})
    digest.update(data)
    assert digest.problem() == "sha256 %s, not the lock's %s" % (
        hashlib.sha256(data).hexdigest(), hashlib.sha256(b"HELLO\n").hexdigest())


@pytest.mark.parametrize("mutate, words", [
    (lambda lk: lk.update(revision="../../etc/x"), "cannot name a file under refs/"),
    (lambda lk: lk["files"][0].update(path="../x"), "'..' component"),
    (lambda lk: lk.update(size=lk["size"] + 1), "not the sum"),
    (lambda lk: lk["files"][0].update(sha256="ABC"), "64 lower-case hex"),
    (lambda lk: lk.update(repo="a--b/c"), "'--'"),
])
def test_a_lock_that_cannot_be_laid_out_is_refused(mutate, words):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    assert _cache.cache_lock_problems(lock) == []
    mutate(lock)
    problems = _cache.cache_lock_problems(lock)
    assert any(words in p for p in problems), problems


def test_a_snapshot_is_laid_out_as_the_hub_cache(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS), git("config.json", CONFIG),
                      git("sub/dir/tokenizer.json", TOKENIZER)])
    serve(origin, lock, {"model.safetensors": WEIGHTS, "config.json": CONFIG, "sub/dir/tokenizer.json": TOKENIZER})
    snapshot = Snapshot(lock, str(tmp_path / "hub"))
    fill(snapshot, origin)
    repo = tmp_path / "hub" / "models--org--model"
    blobs = {f["path"]: f.get("sha256") or f["git_oid"] for f in lock["files"]}
    assert tree(str(repo)) == sorted(
        ["blobs/" + b for b in blobs.values()]
        + ["refs/main"]
        + ["snapshots/%s/%s" % (COMMIT, p) for p in blobs])
    for path, blob in blobs.items():
        link = repo / "snapshots" / COMMIT / path
        assert os.readlink(str(link)) == "../" * (path.count("/") + 2) + "blobs/" + blob
    assert (repo / "snapshots" / COMMIT / "sub/dir/tokenizer.json").read_bytes() == TOKENIZER
    assert (repo / "snapshots" / COMMIT / "model.safetensors").read_bytes() == WEIGHTS
    assert (repo / "refs" / "main").read_bytes() == COMMIT.encode()  # no newline
    for here, dirs, files in os.walk(str(tmp_path / "hub")):
        for name in dirs:
            assert stat.S_IMODE(os.lstat(os.path.join(here, name)).st_mode) == 0o755, name
        for name in files:
            st = os.lstat(os.path.join(here, name))
            if stat.S_ISREG(st.st_mode):
                assert stat.S_IMODE(st.st_mode) == 0o644, name
    survey = snapshot.survey()
    assert snapshot.work(survey) == {"fetch": [], "links": [], "ref": False}


def test_a_commit_as_revision_writes_no_ref(tmp_path, origin):
    lock = make_lock([git("config.json", CONFIG)], revision=COMMIT)
    serve(origin, lock, {"config.json": CONFIG})
    fill(Snapshot(lock, str(tmp_path)), origin)
    assert not (tmp_path / "models--org--model" / "refs").exists()


# -- fetch -------------------------------------------------------------------------------------

def test_a_partial_download_is_resumed_with_exactly_the_missing_bytes(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    snapshot = Snapshot(lock, str(tmp_path))
    snapshot.prepare()
    blob = snapshot.blob_path(lock["files"][0]["sha256"])
    have = 700001
    with open(blob + ".incomplete", "wb") as handle:
        handle.write(WEIGHTS[:have])
    survey = snapshot.survey()
    assert survey["files"][0]["partial"] == have
    assert snapshot.space_needed(snapshot.work(survey)["fetch"]) == len(WEIGHTS) - have
    fill(snapshot, origin)
    assert [r["headers"].get("Range") for r in origin.requests] == ["bytes=%d-" % have]
    with open(blob, "rb") as handle:
        assert handle.read() == WEIGHTS
    assert not os.path.exists(blob + ".incomplete")


def test_a_server_that_answers_200_to_a_range_restarts_the_file(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    snapshot = Snapshot(lock, str(tmp_path))
    snapshot.prepare()
    blob = snapshot.blob_path(lock["files"][0]["sha256"])
    with open(blob + ".incomplete", "wb") as handle:
        handle.write(WEIGHTS[:1000])
    origin.plan.append(("whole",))
    fill(snapshot, origin)
    with open(blob, "rb") as handle:
        assert handle.read() == WEIGHTS  # not the first 1000 bytes twice


def test_a_cut_off_answer_is_resumed_from_what_arrived(tmp_path, origin, _no_sleep):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    origin.plan.append(("cut", 300000))
    snapshot = Snapshot(lock, str(tmp_path))
    fill(snapshot, origin, Fetcher(retries=1, backoff=0.5))
    assert [r["headers"].get("Range") for r in origin.requests] == [None, "bytes=300000-"]
    assert _no_sleep == [0.5]
    with open(snapshot.blob_path(lock["files"][0]["sha256"]), "rb") as handle:
        assert handle.read() == WEIGHTS


def test_a_corrupt_partial_from_an_earlier_run_is_downloaded_again_whole(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    snapshot = Snapshot(lock, str(tmp_path))
    snapshot.prepare()
    blob = snapshot.blob_path(lock["files"][0]["sha256"])
    with open(blob + ".incomplete", "wb") as handle:
        handle.write(b"\0" * 5000)
    fill(snapshot, origin)
    assert [r["headers"].get("Range") for r in origin.requests] == ["bytes=5000-", None]
    with open(blob, "rb") as handle:
        assert handle.read() == WEIGHTS


def test_5xx_is_tried_again_and_gives_up_naming_the_url(tmp_path, origin, _no_sleep):
    lock = make_lock([git("config.json", CONFIG)])
    serve(origin, lock, {"config.json": CONFIG})
    origin.plan.extend([("status", 503)] * 3)
    snapshot = Snapshot(lock, str(tmp_path))
    with pytest.raises(Unreachable) as err:
        fill(snapshot, origin, Fetcher(retries=2, backoff=1.0))
    assert len(origin.requests) == 3 and _no_sleep == [1.0, 2.0]
    assert "could not get %s/org/model/resolve/%s/config.json after 3 attempts" % (origin.url, COMMIT) in err.value.msg
    assert "503" in err.value.msg
    assert tree(str(tmp_path / "models--org--model" / "snapshots")) == []


@pytest.mark.parametrize("status, cls, words", [
    (401, AccessDenied, "gated or private"),
    (403, AccessDenied, "the token given has no access"),
    (404, NotFound, "no such repo, commit or file"),
    (400, Refused, "answered 400"),
])
def test_client_errors_are_not_tried_again_and_never_show_the_token(tmp_path, origin, status, cls, words):
    origin.plan.append(("echo", status))
    url = origin.url + "/org/model/resolve/%s/config.json" % COMMIT
    with pytest.raises(cls) as err:
        Fetcher(token=TOKEN, retries=3).fetch(url, _fetch.HashSink(git("config.json", CONFIG)))
    assert len(origin.requests) == 1
    assert origin.requests[0]["headers"]["Authorization"] == "Bearer " + TOKEN  # it was sent, and echoed
    assert words in err.value.msg and url in err.value.msg
    assert TOKEN not in err.value.msg and TOKEN not in str(err.value)


def test_the_token_goes_to_the_endpoints_origin_only(origin, cdn):
    data = WEIGHTS
    cdn.files["/blob?sig=1"] = data
    origin.redirects["/org/model/resolve/%s/model.safetensors" % COMMIT] = cdn.url + "/blob?sig=1"
    sink = _fetch.HashSink(lfs("model.safetensors", data))
    result = Fetcher(token=TOKEN).fetch(origin.url + "/org/model/resolve/%s/model.safetensors" % COMMIT, sink)
    assert sink.digest.problem() is None and result.url == cdn.url + "/blob?sig=1"
    assert origin.requests[0]["headers"]["Authorization"] == "Bearer " + TOKEN
    assert [r["path"] for r in cdn.requests] == ["/blob?sig=1"]
    assert "Authorization" not in cdn.requests[0]["headers"]


def test_a_relative_redirect_on_the_same_origin_keeps_the_token(origin):
    origin.files["/api/resolve-cache/x"] = CONFIG
    origin.plan.append(("redirect", "/api/resolve-cache/x", 307))
    sink = _fetch.HashSink(git("config.json", CONFIG))
    Fetcher(token=TOKEN).fetch(origin.url + "/org/model/resolve/%s/config.json" % COMMIT, sink)
    assert sink.digest.problem() is None
    assert [r["headers"].get("Authorization") for r in origin.requests] == ["Bearer " + TOKEN] * 2


def test_a_redirect_loop_stops_after_ten(origin):
    origin.redirects["/loop"] = "/loop"
    with pytest.raises(Refused) as err:
        Fetcher().fetch(origin.url + "/loop", _fetch.HashSink(git("x", b"")))
    assert "redirected more than 10 times" in err.value.msg
    assert len(origin.requests) == 11


# -- refused downloads -------------------------------------------------------------------------

def test_a_tampered_file_is_refused_removed_and_never_linked(tmp_path, origin):
    lock = make_lock([git("config.json", CONFIG), lfs("model.safetensors", WEIGHTS)])
    tampered = WEIGHTS[:-1] + b"X"
    serve(origin, lock, {"config.json": CONFIG, "model.safetensors": tampered})
    snapshot = Snapshot(lock, str(tmp_path))
    with pytest.raises(IntegrityError) as err:
        fill(snapshot, origin)
    sha = lock["files"][1]["sha256"]
    assert err.value.msg.startswith("model.safetensors of org/model@%s from %s" % (COMMIT, origin.url))
    assert "got %d bytes with sha256 %s, expected %d bytes with sha256 %s" % (
        len(tampered), hashlib.sha256(tampered).hexdigest(), len(WEIGHTS), sha) in err.value.msg
    assert err.value.details["got_hash"] == hashlib.sha256(tampered).hexdigest()
    blobs = tmp_path / "models--org--model" / "blobs"
    assert sorted(os.listdir(str(blobs))) == [lock["files"][0]["git_oid"]]  # no .incomplete, no bad blob
    assert os.listdir(str(tmp_path / "models--org--model" / "snapshots")) == []


def test_a_shorter_file_is_refused_with_both_sizes(tmp_path, origin):
    lock = make_lock([git("config.json", CONFIG)])
    serve(origin, lock, {"config.json": CONFIG[:-3]})
    with pytest.raises(IntegrityError) as err:
        fill(Snapshot(lock, str(tmp_path)), origin)
    assert "got %d bytes" % (len(CONFIG) - 3) in err.value.msg
    assert "expected %d bytes with git_oid %s" % (len(CONFIG), lock["files"][0]["git_oid"]) in err.value.msg


def test_a_longer_answer_is_cut_and_refused(tmp_path, origin):
    lock = make_lock([git("config.json", CONFIG)])
    serve(origin, lock, {"config.json": CONFIG + b"x" * (3 << 20)})
    with pytest.raises(IntegrityError) as err:
        fill(Snapshot(lock, str(tmp_path)), origin)
    assert "sent more than the lock's %d bytes" % len(CONFIG) in err.value.msg
    assert os.listdir(str(tmp_path / "models--org--model" / "blobs")) == []


def test_a_cut_off_file_keeps_its_partial_for_the_next_run(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    # an attempt that got further starts the count of retries again; then one that gets nothing
    # more is one failure too many for retries=1
    origin.plan.extend([("cut", 100000), ("cut", 100000), ("cut", 0)])
    snapshot = Snapshot(lock, str(tmp_path))
    with pytest.raises(Unreachable) as err:
        fill(snapshot, origin, Fetcher(retries=1))
    assert [r["headers"].get("Range") for r in origin.requests] == [None, "bytes=100000-", "bytes=200000-"]
    assert "cut off at 200000 of %d bytes" % len(WEIGHTS) in err.value.msg
    partial = snapshot.blob_path(lock["files"][0]["sha256"]) + ".incomplete"
    assert os.path.getsize(partial) == 200000
    assert os.listdir(snapshot.snapshots_dir) == []
    origin.requests[:] = []
    fill(snapshot, origin)
    assert [r["headers"].get("Range") for r in origin.requests] == ["bytes=200000-"]


def test_a_present_blob_of_the_wrong_size_is_downloaded_again(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    snapshot = Snapshot(lock, str(tmp_path))
    snapshot.prepare()
    blob = snapshot.blob_path(lock["files"][0]["sha256"])
    with open(blob, "wb") as handle:
        handle.write(WEIGHTS[:10])
    assert snapshot.survey()["files"][0]["blob_state"] == "wrong_size"
    fill(snapshot, origin)
    with open(blob, "rb") as handle:
        assert handle.read() == WEIGHTS


def test_a_present_blob_of_the_right_size_but_other_bytes_is_caught_by_verify_full(tmp_path, origin):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    serve(origin, lock, {"model.safetensors": WEIGHTS})
    snapshot = Snapshot(lock, str(tmp_path))
    fill(snapshot, origin)
    blob = snapshot.blob_path(lock["files"][0]["sha256"])
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as handle:
        handle.write(b"evil")
    assert snapshot.survey("size")["files"][0]["blob_state"] == "ok"
    assert snapshot.survey("full")["files"][0]["blob_state"] == "wrong_hash"


def test_a_link_pointing_elsewhere_is_replaced(tmp_path, origin):
    lock = make_lock([git("config.json", CONFIG)])
    serve(origin, lock, {"config.json": CONFIG})
    snapshot = Snapshot(lock, str(tmp_path))
    fill(snapshot, origin)
    link = snapshot.link_path("config.json")
    os.unlink(link)
    os.symlink("/etc/passwd", link)
    survey = snapshot.survey()
    assert survey["files"][0]["link_state"] == "wrong"
    origin.requests[:] = []
    fill(snapshot, origin)
    assert origin.requests == []  # the blob is there: only the link is made again
    assert os.readlink(link) == "../../blobs/" + lock["files"][0]["git_oid"]


def test_a_directory_where_a_file_must_be_linked_is_in_the_way(tmp_path):
    lock = make_lock([git("config.json", CONFIG)])
    snapshot = Snapshot(lock, str(tmp_path))
    os.makedirs(os.path.join(snapshot.link_path("config.json"), "keep"))
    assert snapshot.survey()["in_the_way"] == [snapshot.link_path("config.json")]


# -- free space --------------------------------------------------------------------------------

def test_missing_bytes_and_the_margin_must_fit(tmp_path, monkeypatch):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    snapshot = Snapshot(lock, str(tmp_path / "hub"))

    class Fs(object):
        f_frsize = 4096
        f_bavail = (1024 * 1024 + len(WEIGHTS)) // 4096  # a bit less than weights + 1 MiB

    seen = []
    monkeypatch.setattr(_cache.os, "statvfs", lambda p: seen.append(p) or Fs())
    fetch = snapshot.work(snapshot.survey())["fetch"]
    free = Fs.f_bavail * Fs.f_frsize
    with pytest.raises(NotEnoughSpace) as err:
        snapshot.check_space(fetch, 1)
    assert seen == [str(tmp_path)]  # the nearest directory that exists
    assert ("1 files to download need 1.0 MiB (%d bytes) plus the margin of 1 MiB (free_space_margin_mib), "
            "and the filesystem of %s has 2.0 MiB (%d bytes) free" % (len(WEIGHTS), tmp_path, free)) in err.value.msg
    snapshot.check_space(fetch, 0)  # without the margin it fits


def test_what_an_incomplete_file_holds_is_not_counted_again(tmp_path, monkeypatch):
    lock = make_lock([lfs("model.safetensors", WEIGHTS)])
    snapshot = Snapshot(lock, str(tmp_path))
    snapshot.prepare()
    with open(snapshot.blob_path(lock["files"][0]["sha256"]) + ".incomplete", "wb") as handle:
        handle.write(WEIGHTS[:len(WEIGHTS) - 4096])

    class Fs(object):
        f_frsize = 4096
        f_bavail = 257 + 256  # 4096 bytes to get + the 1 MiB margin, and a block to spare

    monkeypatch.setattr(_cache.os, "statvfs", lambda p: Fs())
    snapshot.check_space(snapshot.work(snapshot.survey())["fetch"], 1)


# -- pruning -----------------------------------------------------------------------------------

def _snapshot_on_disk(root, commit, files, mtime, revision=None):
    """A snapshot as the real client leaves it (links to blobs), made by hand."""
    repo = os.path.join(root, "models--org--model")
    for path, blob in files.items():
        os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
        with open(os.path.join(repo, "blobs", blob), "wb") as handle:
            handle.write(b"x")
        link = os.path.join(repo, "snapshots", commit, path)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(_cache.link_target(path, blob), link)
    if revision:
        os.makedirs(os.path.dirname(os.path.join(repo, "refs", revision)), exist_ok=True)
        with open(os.path.join(repo, "refs", revision), "w") as handle:
            handle.write(commit)
    os.utime(os.path.join(repo, "snapshots", commit), (mtime, mtime))


def test_prune_keeps_the_newest_the_locks_and_those_in_use_and_shared_blobs(tmp_path):
    shared, only_old, only_older, only_oldest, current = "1" * 40, "2" * 40, "3" * 40, "4" * 40, "5" * 64
    oldest = "d" * 40
    lock = make_lock([{"path": "model.safetensors", "size": 1, "sha256": current},
                      {"path": "config.json", "size": 1, "git_oid": shared}])
    now = time.time()
    _snapshot_on_disk(str(tmp_path), OLD, {"config.json": shared, "a.json": only_old}, now - 100, "v2")
    _snapshot_on_disk(str(tmp_path), OLDER, {"config.json": shared, "sub/b.json": only_older}, now - 200,
                      "refs/pr/1")
    _snapshot_on_disk(str(tmp_path), oldest, {"config.json": shared, "c.json": only_oldest}, now - 300, "v0")
    _snapshot_on_disk(str(tmp_path), COMMIT, {"model.safetensors": current, "config.json": shared}, now - 400,
                      "main")
    repo = tmp_path / "models--org--model"
    (repo / "blobs" / "notes.txt").write_text("someone's")
    (repo / "blobs" / (only_oldest + ".incomplete")).write_text("half")
    (repo / "snapshots" / "stray-file").write_text("not a snapshot")
    # a name that is a blob's but for a trailing newline is not a blob: left alone, reported
    (repo / "blobs" / (only_old + "\n")).write_text("not a blob")
    snapshot = Snapshot(lock, str(tmp_path))
    # keep 2: the lock's commit and the newest other (OLD); OLDER stays as in use; oldest goes
    plan = snapshot.prune_plan(2, in_use=[OLDER])
    assert plan["snapshots"] == [oldest]
    assert plan["blobs"] == [only_oldest] and plan["partials"] == [only_oldest + ".incomplete"]
    assert plan["refs"] == ["v0"]
    assert sorted(plan["unknown"]) == sorted([str(repo / "snapshots" / "stray-file"), str(repo / "blobs" / "notes.txt"),
                                              str(repo / "blobs" / (only_old + "\n"))])
    snapshot.prune(plan)
    assert sorted(os.listdir(str(repo / "snapshots"))) == sorted([OLD, OLDER, COMMIT, "stray-file"])
    assert sorted(os.listdir(str(repo / "blobs"))) == sorted([shared, only_old, only_older, current, "notes.txt",
                                                              only_old + "\n"])
    assert tree(str(repo / "refs")) == ["main", "refs/pr/1", "v2"]
    # keep 1, nothing in use: OLD and OLDER go, and the ref in a subdirectory with its directories
    plan = snapshot.prune_plan(1)
    assert plan["snapshots"] == sorted([OLD, OLDER]) and sorted(plan["blobs"]) == sorted([only_old, only_older])
    snapshot.prune(plan)
    assert sorted(os.listdir(str(repo / "blobs"))) == sorted([shared, current, "notes.txt", only_old + "\n"])
    assert tree(str(repo / "refs")) == ["main"] and not (repo / "refs" / "refs").exists()
    assert snapshot.prune_plan(1)["snapshots"] == []


def test_prune_never_looks_into_other_repos(tmp_path):
    other = tmp_path / "models--org--other" / "snapshots" / OLD
    other.mkdir(parents=True)
    _snapshot_on_disk(str(tmp_path), OLD, {"a.json": "1" * 40}, time.time() - 10)
    snapshot = Snapshot(make_lock([git("config.json", CONFIG)]), str(tmp_path))
    snapshot.prune(snapshot.prune_plan(1))
    assert other.is_dir()
    assert os.listdir(str(tmp_path / "models--org--model" / "snapshots")) == []


# -- progress ----------------------------------------------------------------------------------

def test_the_progress_file_says_how_the_download_goes(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(_progress, "_clock", lambda: clock[0])
    path = str(tmp_path / "progress.json")
    progress = _snapshot.DownloadProgress(path, 1000, 2)
    clock[0] = 102.0
    progress.update(file="model.safetensors", bytes_done=500, files_done=0)
    with open(path) as handle:
        data = json.load(handle)
    assert data["file"] == "model.safetensors" and data["bytes_done"] == 500 and data["rate_bps"] == 250
    assert (data["bytes_total"], data["files_total"], data["files_done"]) == (1000, 2, 0)
    clock[0] = 102.5
    progress.update(bytes_done=600)  # within the second: not written
    with open(path) as handle:
        assert json.load(handle)["bytes_done"] == 500
    progress.remove()
    assert not os.path.exists(path)
