# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The helpers several flows share (common._fs, common._progress, common._errors) and the hub's
downloads over the one HTTP client (hub._fetch over common._http.HttpClient), on 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import stat
import threading

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _fs, _http, _progress
from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _fetch
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv
from tests.unit.plugins.modules.test_uv_engine_env import base, fake, run_module  # noqa: F401 pylint: disable=unused-import

DATA = b'{"model_type": "llama"}\n'


def git_entry(data):
    return {"path": "config.json", "size": len(data),
            "git_oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}  # nosec: git's blob id


class Server(object):
    """An HTTP/1.1 server on 127.0.0.1 that answers each GET from ``answers`` in turn:
    ``(status, headers, body)``; then 200 with DATA."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                outer.requests.append(self.path)
                status, headers, body = outer.answers.pop(0) if outer.answers else (200, {}, DATA)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def waits(monkeypatch):
    seen = []
    monkeypatch.setattr(_http, "_sleep", seen.append)
    return seen


def test_the_hub_download_waits_as_long_as_the_server_asks(waits):
    # the one back-off policy: Retry-After counts when it is longer than the back-off
    server = Server([(503, {"Retry-After": "7"}, b"busy")])
    try:
        sink = _fetch.HashSink(git_entry(DATA))
        _fetch.Fetcher(retries=1, backoff=0.5).fetch(server.url + "/config.json", sink)
    finally:
        server.stop()
    assert waits == [7.0] and sink.digest.problem() is None
    assert server.requests == ["/config.json", "/config.json"]


def test_a_redirect_target_that_does_not_answer_is_named(waits):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    server = Server([(302, {"Location": "http://127.0.0.1:%d/blob" % closed}, b"")] * 2)
    try:
        with pytest.raises(_http.UnreachableError) as err:
            _fetch.Fetcher(retries=1, backoff=0.5).fetch(server.url + "/config.json", _fetch.HashSink(git_entry(DATA)))
    finally:
        server.stop()
    assert "connection failed to http://127.0.0.1:%d" % closed in err.value.msg
    assert err.value.msg.startswith("could not get %s/config.json after 2 attempts" % server.url)
    assert waits == [0.5]


def test_the_progress_file_never_writes_through_a_planted_link(tmp_path):
    path = str(tmp_path / "progress.json")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    # the names a writer that is not atomic-by-mkstemp would use
    for name in ("%s.tmp.%d" % (path, os.getpid()), "%s.tmp" % path):
        os.symlink(str(victim), name)
    progress = _progress.ProgressFile(path, {"step": None})
    progress.step("install", ["resolve"])
    assert victim.read_text() == "keep"
    with open(path) as handle:
        data = json.load(handle)
    assert (data["step"], data["done"]) == ("install", ["resolve"])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert sorted(os.listdir(str(tmp_path))) == sorted(["victim", "progress.json", os.path.basename(path) + ".tmp",
                                                        "%s.tmp.%d" % (os.path.basename(path), os.getpid())])
    progress.remove()
    progress.remove()  # gone already: fine
    assert not os.path.exists(path)


def test_write_atomic_leaves_nothing_behind_when_it_fails(tmp_path):
    target = tmp_path / "dir-in-the-way"
    target.mkdir()
    with pytest.raises(OSError):
        _fs.write_atomic(str(target), b"x")  # a rename over a directory fails
    assert os.listdir(str(tmp_path)) == ["dir-in-the-way"]


def test_too_little_space_for_an_environment_names_the_step(fake, base, capsys, monkeypatch):
    monkeypatch.setattr(_uvenv, "available_gb", lambda directory: 1.5)
    code, result = run_module(dict(base, free_gb=20.0), capsys)
    assert code == 1 and result["failed"]
    assert result["failed_step"] == "prepare"
    assert "needs about 20 GB free" in result["msg"]
