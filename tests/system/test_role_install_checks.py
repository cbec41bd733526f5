"""The engine_node role's install side against hostile inputs (issue 30, items 7 and 11): a uv wheel
URL the index's JSON points elsewhere, and an environment on disk that holds only its marker.

Each node is the simulated fleet of test_role_fleet (ansible_connection local, fake upstream on
127.0.0.1, a uv index served here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.system.node_state import MARKER
from tests.system.test_role_fleet import NODES, Fleet, UvIndex, uv_index, uv_wheels  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.integration


class Listener:
    """A plain HTTP server on 127.0.0.2 that logs every request and answers 200 with a body."""

    def __init__(self):
        self.requests: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                listener.requests.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.2:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class HostileUvIndex(UvIndex):
    """The uv index whose JSON lists each wheel (right name, right sha256) at ``where(name)``."""

    def __init__(self, files, where):
        super().__init__(files)
        self.where = where

    def answer(self, path):
        body, ctype, status = super().answer(path)
        if path.rstrip("/") == "/pypi/uv/json":
            doc = json.loads(body)
            for entry in doc["urls"]:
                entry["url"] = self.where(entry["filename"])
            doc["releases"] = {self.version: doc["urls"]}
            body = json.dumps(doc).encode()
        return body, ctype, status


@pytest.mark.parametrize("case", ["other-host", "file", "dollar"])
def test_a_uv_wheel_url_elsewhere_is_not_fetched(upstream, tmp_path, case):
    listener = Listener()
    where = {
        "other-host": lambda name: f"{listener.url}/files/{name}",
        "file": lambda name: "file:///etc/hostname",
        "dollar": lambda name: f"{listener.url}/${{UV_INDEX_LLMFLEET_DEFAULT_PASSWORD}}/{name}",
    }[case]
    index = HostileUvIndex(uv_wheels(), where).start()
    try:
        fleet = Fleet(tmp_path, upstream, index, {"h100": NODES["h100"]})
        run = fleet.play("site.yml")
    finally:
        index.stop()
        listener.stop()
    assert run.rc != 0, run
    assert run.recap()["h100"]["failed"] == 1, run
    assert "/pypi/uv/json" in " ".join(index.requests)
    assert listener.requests == [], listener.requests
    assert "is not fetched" in run.out and f"that {index.url} lists" in run.out, run
    uv_dir = fleet.roots["h100"] / "uv" / "0.13.8"
    assert not uv_dir.exists()  # stopped before its directory was made
    assert fleet.envs("h100") == [] and fleet.current("h100") is None


def test_an_environment_on_disk_with_only_its_marker_is_built_again_not_switched_to(upstream, uv_index, tmp_path):  # noqa: F811
    """What a killed prune could leave: <root>/engines/vllm/0.20.0-cu13 holding the marker alone.
    The role does not switch `current` to it: the check before the switch finds no bin/python, and
    the environment is built again (and proven) before it is switched to."""
    fleet = Fleet(tmp_path, upstream, uv_index, {"h100": NODES["h100"]})
    env = fleet.roots["h100"] / "engines" / "vllm" / "0.20.0-cu13"
    env.mkdir(parents=True)
    (env / MARKER).write_text(json.dumps({"format": 1, "spec": {"engine": "vllm", "version": "0.20.0", "build": "cu13"},
                                          "lock": {"sha256": "0" * 64}}) + "\n")
    run = fleet.play("site.yml")
    assert run.rc == 0, run
    assert "is on disk but is not switched to" in run.out and "bin/python is missing" in run.out, run
    assert fleet.current("h100") == "0.20.0-cu13"
    assert (env / "bin" / "python").exists()
    assert fleet.imports("h100")[0] == "0.20.0"
    assert fleet.marker("h100", "0.20.0-cu13")["verified"]["version"] == "0.20.0"
