"""github_digest: the controller's GITHUB_TOKEN goes only to GitHub's own API (issue 44, finding 14).

A look-alike API on 127.0.0.1 (a real HTTP server that records every request's Authorization header)
is given as api_url while GITHUB_TOKEN is set: no Authorization reaches it. The same server given an
explicit token receives it (a mirror needs one, named)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import github_digest
from tests.unit.plugins.lookup_fakes import run_module

ENV_TOKEN = "ghp_CONTROLLERTOKEN0123456789"
OWN_TOKEN = "ghp_MIRRORTOKEN9876543210"
ASSET = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl"


class LookAlike(object):
    """A GitHub REST API look-alike: the release of vllm-project/vllm v0.15.1 with one pinned asset."""

    def __init__(self):
        self.seen = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                owner.seen.append((self.path, self.headers.get("Authorization")))
                body = json.dumps({"tag_name": "v0.15.1", "assets": [
                    {"name": ASSET, "size": 1, "digest": "sha256:" + "1" * 64}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/api/v3" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def lookalike(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", ENV_TOKEN)
    server = LookAlike()
    yield server
    server.close()


def args(api_url, **kw):
    out = {"repo": "vllm-project/vllm", "tag": "v0.15.1", "asset": ASSET, "api_url": api_url,
           "download_url": "http://127.0.0.1:9/dl", "retries": 0}
    out.update(kw)
    return out


def test_the_environment_token_does_not_go_to_another_api(lookalike, capsys):
    code, result, out = run_module(github_digest.main, args(lookalike.url), capsys)
    assert code == 0 and "failed" not in result, result
    assert result["sha256"] == "1" * 64
    assert lookalike.seen == [("/api/v3/repos/vllm-project/vllm/releases/tags/v0.15.1", None)]
    assert ENV_TOKEN not in out


def test_an_explicit_token_goes_to_the_mirror(lookalike, capsys):
    code, result, out = run_module(github_digest.main, args(lookalike.url, token=OWN_TOKEN), capsys)
    assert code == 0 and "failed" not in result, result
    assert [auth for _path, auth in lookalike.seen] == ["Bearer " + OWN_TOKEN]
    assert OWN_TOKEN not in out and ENV_TOKEN not in out
