"""hf_warm: main() against a small caching mirror (in this file: it answers X-Cache-Status MISS, then HIT,
as nginx's $upstream_cache_status does) in front of the fake hub, and against the fake hub itself."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _hfhub
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import hf_warm
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.modules.test_model_snapshot import hub_lock
from tests.upstream.hub import GATED_TINY, HUB_TOKEN, TINY_CHAT


class Mirror(object):
    """GET <mirror>/<path> -> the hub's <endpoint>/<path>, redirects followed, kept in memory."""

    def __init__(self, endpoint):
        self.cache = {}
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def do_GET(self):  # noqa: N802
                status = "HIT"
                if self.path not in mirror.cache:
                    status = "MISS"
                    request = urllib.request.Request(endpoint + self.path)
                    if self.headers.get("Authorization"):
                        request.add_unredirected_header("Authorization", self.headers["Authorization"])
                    try:
                        # an opener of its own: ansible's open_url installs a global one that
                        # follows no redirects
                        with urllib.request.build_opener().open(request, timeout=10) as resp:
                            mirror.cache[self.path] = resp.read()
                    except urllib.error.HTTPError as err:
                        body = err.read()
                        self.send_response(err.code)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                body = mirror.cache[self.path]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Cache-Status", status)
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(upstream):
    server = Mirror(upstream.hub_url)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _s: None)


def warm(capsys, lock, endpoint, **kw):
    args = {"lock": lock, "endpoint": endpoint}
    args.update(kw)
    return run_module(hf_warm.main, args, capsys)


def test_the_mirror_is_filled_once_and_then_serves_everything(upstream, mirror, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    code, result, _out = warm(capsys, lock, mirror.url)
    assert code == 0, result
    assert result["changed"] is True
    assert (result["fetched"], result["cached"]) == (len(lock["files"]), 0)
    assert result["bytes"] == lock["size"]
    assert [(f["path"], f["bytes"], f["cache_status"]) for f in result["files"]] == [
        (e["path"], e["size"], "MISS") for e in lock["files"]]
    assert sorted(mirror.cache) == sorted("/%s/resolve/%s/%s" % (TINY_CHAT, lock["commit"], e["path"])
                                          for e in lock["files"])
    upstream.clear_log()
    code, result, _out = warm(capsys, lock, mirror.url)
    assert code == 0 and result["changed"] is False, result
    assert (result["fetched"], result["cached"]) == (0, len(lock["files"]))
    assert upstream.log() == []  # the mirror had every file


def test_bad_bytes_from_the_hub_fail_naming_the_file(upstream, mirror, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    upstream.fault("tamper", filename="pytorch_model.bin")
    code, result, _out = warm(capsys, lock, mirror.url)
    assert code == 1
    entry = [e for e in lock["files"] if e["path"] == "pytorch_model.bin"][0]
    assert result["msg"].startswith("pytorch_model.bin of %s@%s through %s is not the lock's file: got %d bytes with "
                                    "sha256 " % (TINY_CHAT, lock["commit"][:12], mirror.url, entry["size"]))
    assert "expected %d bytes with sha256 %s" % (entry["size"], entry["sha256"]) in result["msg"]
    assert result["file"] == "pytorch_model.bin" and result["got_hash"] != entry["sha256"]
    # it names the purge that removes the bad copy from the mirror, in the form engine_cache takes
    assert result["purge"] == "%s@%s/pytorch_model.bin" % (TINY_CHAT, lock["commit"])
    assert "-e '{\"engine_cache_hub_mirror_purge\": [\"%s\"]}'" % result["purge"] in result["msg"]
    from tests.unit.plugins.filter._plugins import filter_plugin

    assert filter_plugin("engine_cache_hub_mirror").engine_cache_hub_mirror_problems({"purge": [result["purge"]]}) == []
    # the files checked before it stopped the others are reported (in the lock's order), never the bad one
    reported = [f["path"] for f in result["files"]]
    assert entry["path"] not in reported
    assert reported == [e["path"] for e in lock["files"] if e["path"] in reported]
    # one at a time (parallel=1): exactly the files before it
    code, result, _out = warm(capsys, lock, mirror.url, parallel=1)
    assert code == 1 and result["file"] == "pytorch_model.bin"
    assert [f["path"] for f in result["files"]] == [e["path"] for e in lock["files"]][:lock["files"].index(entry)]


def test_a_git_file_with_other_bytes_fails_with_its_git_blob_id(upstream, mirror, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    entry = [e for e in lock["files"] if e["path"] == "config.json"][0]
    mirror.cache["/%s/resolve/%s/config.json" % (TINY_CHAT, lock["commit"])] = b"x" * entry["size"]
    code, result, _out = warm(capsys, lock, mirror.url)
    assert code == 1
    assert "expected %d bytes with git_oid %s" % (entry["size"], entry["git_oid"]) in result["msg"]


def test_without_x_cache_status_nothing_is_called_changed(upstream, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    code, result, _out = warm(capsys, lock, upstream.hub_url)
    assert code == 0, result
    assert result["changed"] is False and (result["cached"], result["fetched"]) == (0, 0)
    assert all(f["cache_status"] is None for f in result["files"])
    assert result["msg"].endswith("%d without X-Cache-Status" % len(lock["files"]))


def test_check_mode_sends_nothing(upstream, mirror, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    code, result, _out = warm(capsys, lock, mirror.url, _ansible_check_mode=True)
    assert code == 0 and result["changed"] is False
    assert result["msg"] == "%s@%s: would fetch %d files (%s) through %s" % (
        TINY_CHAT, lock["commit"][:12], len(lock["files"]), _hfhub.human_size(lock["size"]), mirror.url)
    assert mirror.cache == {} and upstream.log() == []


def test_the_token_reaches_the_endpoint_only_and_is_never_shown(upstream, capsys):
    lock = hub_lock(upstream, GATED_TINY)
    code, result, out = warm(capsys, lock, upstream.hub_url)
    assert code == 1 and "answered 401" in result["msg"]
    code, result, out = warm(capsys, lock, upstream.hub_url, token=HUB_TOKEN)
    assert code == 0, result
    assert HUB_TOKEN not in out
    to_cdn = [r for r in upstream.log() if r["path"].startswith("/hub-cdn/")]
    assert to_cdn and all("Authorization" not in r["headers"] for r in to_cdn)
