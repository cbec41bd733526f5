"""uv_engine_env with the real uv (issue 11): a mirror that needs credentials, a source
distribution that must not be built, and a node's UV_* variables that must not reach uv.

The module runs as its own process, as Ansible runs it on a node. The mirror is a small proxy in
front of the fake upstream, on 127.0.0.1, that answers 401 without HTTP Basic credentials and
rewrites the upstream's URLs in what it serves to its own (so the files need them too).
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.integration.test_targets import system_python

MODULE = REPO / "plugins" / "modules" / "uv_engine_env.py"
UV = REPO / ".venv" / "bin" / "uv"
CUTOFF_0110 = "2025-10-03T20:10:00Z"
CUTOFF_0200 = "2026-06-11T12:00:00Z"
SECRET = "s3cret-Token-42"

pytestmark = pytest.mark.integration


class AuthMirror:
    """The fake upstream behind HTTP Basic auth: ``user``/``password`` (changeable), each request
    recorded as ``(method, path, authorised)``."""

    def __init__(self, upstream_url, user, password):
        self.upstream_url = upstream_url
        self.user = user
        self.password = password
        self.requests = []
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 - http.server's names
                self.answer(head=True)

            def do_GET(self):  # noqa: N802
                self.answer(head=False)

            def answer(self, head):
                expected = "Basic " + base64.b64encode(
                    ("%s:%s" % (mirror.user, mirror.password)).encode()).decode()
                authorised = self.headers.get("Authorization") == expected
                mirror.requests.append((self.command, self.path, authorised))
                if not authorised:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = urllib.request.Request(mirror.upstream_url + self.path,
                                                 headers={"Accept": self.headers.get("Accept", "*/*")})
                try:
                    with urllib.request.urlopen(request) as resp:  # noqa: S310 - 127.0.0.1 only
                        status, ctype, body = resp.status, resp.headers.get("Content-Type"), resp.read()
                except urllib.error.HTTPError as exc:
                    status, ctype, body = exc.code, exc.headers.get("Content-Type"), exc.read()
                body = body.replace(mirror.upstream_url.encode(), mirror.url.encode())
                self.send_response(status)
                self.send_header("Content-Type", ctype or "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def index(self, password=None):
        return "http://%s:%s@%s/simple" % (self.user, password or self.password, self.url[len("http://"):])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.server.shutdown()
        self.server.server_close()


def run_module(tmp_path, args, environ=None):
    """Run the module as a process; returns (its JSON result, its whole stdout)."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env["PYTHONPATH"] = str(COLLECTIONS)
    env.update(environ or {})
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


def module_args(path, **extra):
    args = {
        "path": str(path),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF_0110,
        "python": system_python(),
        "python_preference": "only-system",
        "uv": str(UV),
        "gpu_check": False,
        "timeout": 240,
    }
    args.update(extra)
    return args


def texts_under(root):
    found = {}
    for directory, _dirs, names in os.walk(str(root)):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    found[path] = handle.read()
    return found


def test_a_mirror_with_credentials(upstream, tmp_path):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    with AuthMirror(upstream.url, "alice", SECRET) as mirror:
        result, out = run_module(tmp_path, module_args(path, index_url=mirror.index()))
        assert result.get("failed") is not True, result.get("msg")
        assert result["changed"] is True
        assert SECRET not in out
        invocation = result.get("invocation")  # not echoed any more by ansible-core 2.21
        assert invocation is None or invocation["module_args"]["index_url"] == mirror.index("********")
        assert result["marker"]["spec"]["index_url"] == mirror.url + "/simple"
        # uv sent the credentials for the index and for its files, on every request
        assert any(p.startswith("/files/vllm-0.11.0") for _m, p, _ok in mirror.requests)
        assert all(ok for _m, _p, ok in mirror.requests), [r for r in mirror.requests if not r[2]]
        # nothing on disk holds them: marker, lock (its annotations), the path lock's record
        leaked = [p for p, data in texts_under(tmp_path / "engines").items() if SECRET.encode() in data]
        assert leaked == []
        lock = (path / "llmfleet-requirements.txt").read_text()
        assert "# from %s/simple" % mirror.url in lock

        # the token rotates: up to date, and no request at all
        mirror.password = "rotated-token"
        mirror.requests.clear()
        result, out = run_module(tmp_path, module_args(path, index_url=mirror.index()))
        assert result.get("failed") is not True, result.get("msg")
        assert result["changed"] is False
        assert mirror.requests == []
        assert "rotated-token" not in out

        # a wrong token: uv's refusal comes back, without the token
        result, out = run_module(tmp_path, module_args(path, index_url=mirror.index("wrong-token"), force=True))
        assert result["failed"] is True and result["failed_step"] == "resolve"
        assert "401 Unauthorized" in result["msg"]
        assert "wrong-token" not in out
        assert "llmfleet-default=%s/simple" % mirror.url in result["cmd"]
        assert (path / ".llmfleet-engine.json").is_file()  # the environment is still there


def test_a_source_distribution_is_refused_not_built(upstream, tmp_path):
    with urllib.request.urlopen(upstream.url + "/github/api/repos/vllm-project/vllm/releases/tags/v0.20.0") as resp:
        assets = {a["name"]: a for a in json.load(resp)["assets"]}
    sdist = assets["vllm-0.20.0.tar.gz"]
    path = tmp_path / "engines" / "vllm" / "0.20.0"
    result, _out = run_module(tmp_path, module_args(
        path, version="0.20.0", exclude_newer=CUTOFF_0200, index_url=upstream.url + "/simple",
        wheel={"url": sdist["browser_download_url"], "sha256": sdist["digest"]}))
    assert result["failed"] is True and result["failed_step"] == "install", result["msg"]
    assert "cannot take a wheel of vllm" in result["msg"]
    assert "no source builds are done" in result["msg"]
    assert "Building source distributions is disabled" in result["uv_output"]
    # uv fetched no build backend to build it with
    assert not [e["path"] for e in upstream.log() if e["path"].startswith(("/simple/setuptools", "/simple/wheel"))]
    assert not path.exists() and not (tmp_path / "engines" / "vllm" / "0.20.0.partial").exists()


def test_a_node_uv_link_mode_does_not_tie_the_environment_to_the_cache(upstream, tmp_path):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    result, _out = run_module(tmp_path, module_args(path, index_url=upstream.url + "/simple", keep_cache=False),
                              environ={"UV_LINK_MODE": "symlink", "UV_NO_BUILD_ISOLATION": "1"})
    assert result.get("failed") is not True, result.get("msg")
    installed = list(path.glob("lib/python*/site-packages/vllm/__init__.py"))
    assert installed and not installed[0].is_symlink()
    assert not (tmp_path / "engines" / "vllm" / ".uv-cache").exists() or not any(
        (tmp_path / "engines" / "vllm" / ".uv-cache").iterdir())
    out = subprocess.run([str(path / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.11.0"
