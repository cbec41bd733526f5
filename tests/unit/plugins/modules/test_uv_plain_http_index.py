"""uv_fleet_lock and uv_engine_env: an index's credentials go over plain http:// only to this host's
loopback, unless allow_plain_http_password says so: the collection's one policy
(``_http.plain_http_credential_problem``), the same as its own HTTP client's (issue 44, finding 13).

The real uv runs, with a real HTTP server on 127.0.0.1 as its proxy: uv reaches the index host the URL
names (``mirror.example``, a LAN mirror's kind of name; no resolver or /etc/hosts is involved, the proxy
takes the request) and the server records every Authorization header it is sent, answering 401 with a
Basic challenge to a request without one, as a private mirror does."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import sys
import threading

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.engines.plugins.modules import uv_engine_env, uv_fleet_lock

PASSWORD = "s3cret-Index-Token-77"
UV = shutil.which("uv", path=os.path.dirname(sys.executable))


class RecordingProxy(object):
    """An HTTP proxy (and index) on 127.0.0.1 that answers nothing useful and records what it is sent."""

    def __init__(self):
        self.seen = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                auth = self.headers.get("Authorization")
                owner.seen.append((self.path, auth))
                self.send_response(404 if auth else 401)
                if not auth:
                    self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def authorizations(self):
        return [auth for _path, auth in self.seen if auth]


@pytest.fixture
def proxy(monkeypatch):
    server = RecordingProxy()
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("http_proxy", server.url)
    yield server
    server.close()


def run(main, args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out), out


MIRROR = "http://alice:%s@mirror.example:8080/simple" % PASSWORD
SHOWN = "http://mirror.example:8080/simple"


def cases(loopback):
    """(option, the options' values): the credentials in each URL option uv is given."""
    return [
        ("index_url", {"index_url": MIRROR}),
        ("extra_index_url[0]", {"index_url": loopback, "extra_index_url": [MIRROR]}),
        ("kernels_index_url", {"index_url": loopback, "kernels_index_url": MIRROR, "kernels_label": "cu129"}),
    ]


def fleet_args(tmp_path, **kw):
    out = {"dest": str(tmp_path / "locks" / "vllm.txt"), "engine": "vllm", "version": "0.11.0",
           "exclude_newer": "2025-10-03T20:10:00Z", "python_version": "3.11",
           "python_platform": "x86_64-manylinux_2_28", "uv": UV, "cache_dir": str(tmp_path / "cache"),
           "timeout": 120}
    out.update(kw)
    return out


def env_args(tmp_path, **kw):
    out = {"path": str(tmp_path / "engines" / "vllm" / "0.11.0"), "engine": "vllm", "version": "0.11.0",
           "exclude_newer": "2025-10-03T20:10:00Z", "python": sys.executable, "python_preference": "only-system",
           "uv": UV, "gpu_check": False, "cache_dir": str(tmp_path / "uvcache"), "timeout": 120}
    out.update(kw)
    return out


MODULES = [(uv_fleet_lock.main, fleet_args), (uv_engine_env.main, env_args)]


@pytest.mark.parametrize("main, make", MODULES, ids=["uv_fleet_lock", "uv_engine_env"])
@pytest.mark.parametrize("which", range(3), ids=["index_url", "extra_index_url", "kernels_index_url"])
def test_credentials_for_plain_http_to_another_host_are_refused_before_uv_runs(proxy, tmp_path, capsys, main, make, which):
    option, values = cases(proxy.url + "/simple")[which]
    code, result, out = run(main, make(tmp_path, **values), capsys)
    assert code == 1 and result["failed"] is True, result
    assert proxy.authorizations() == [] and proxy.seen == []
    msg = result["msg"]
    assert msg.startswith("refusing to send the credentials in %s to mirror.example over plain HTTP (%s)"
                          % (option, SHOWN)), msg
    assert "allow_plain_http_password=true" in msg and "engine_node_index_allow_plain_http" in msg, msg
    assert PASSWORD not in out


@pytest.mark.parametrize("main, make", MODULES, ids=["uv_fleet_lock", "uv_engine_env"])
def test_allowed_they_go_to_the_mirror(proxy, tmp_path, capsys, main, make):
    code, result, out = run(main, make(tmp_path, index_url=MIRROR, allow_plain_http_password=True), capsys)
    # nothing to resolve from a mirror that answers 404: uv fails, after sending what it was allowed to
    assert code == 1 and result["failed"] is True, result
    assert "refusing" not in result["msg"]
    assert proxy.authorizations(), proxy.seen
    assert PASSWORD not in out


def test_the_loopback_gets_them_without_the_option(proxy, tmp_path, capsys):
    loopback = proxy.url.replace("http://", "http://alice:%s@" % PASSWORD) + "/simple"
    code, result, out = run(uv_fleet_lock.main, fleet_args(tmp_path, index_url=loopback), capsys)
    assert code == 1 and "refusing" not in result["msg"], result
    assert proxy.authorizations(), proxy.seen
    assert PASSWORD not in out
