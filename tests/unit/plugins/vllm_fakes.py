"""Stand-ins for engine_ready's tests: a vLLM OpenAI-compatible server on 127.0.0.1 (stdlib
``http.server`` in a thread) and a systemd unit (``systemctl``/``journalctl`` scripts on PATH).

The server answers what its attributes say, and records every request (method, path, the
``Authorization`` header, the JSON body). It can start listening late (:meth:`FakeVllm.start`
with ``after``), so that a client first meets a refused connection, as while vLLM loads.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeVllm:
    """``health``: /health's status (an int, or a list used in order, the last repeated);
    ``version``: what /version answers; ``models``: the ids /v1/models lists; ``completion``:
    the completion's status (int or list, like ``health``); ``choices``: how many choices a 200
    completion has; ``api_key``: when set, /v1/* answer 401 without ``Bearer <api_key>``
    (``echo_auth``: a 401 that quotes the header it got, as a careless proxy may)."""

    def __init__(self, models=("m",), version="0.20.0", health=200, completion=200, choices=1, api_key=None,
                 echo_auth=False):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.models = list(models)
        self.version = version
        self.health = health
        self.completion = completion
        self.choices = choices
        self.api_key = api_key
        self.echo_auth = echo_auth
        self.requests = []
        self._server = None
        self._thread = None
        self._timer = None
        self._lock = threading.Lock()

    # -- what is answered ----------------------------------------------------------------------
    @staticmethod
    def _next(value):
        if isinstance(value, list):
            return value.pop(0) if len(value) > 1 else value[0]
        return value

    def answer(self, method, path, headers, body):
        """``(status, json or None)`` for one request."""
        with self._lock:
            self.requests.append({"method": method, "path": path, "auth": headers.get("Authorization"),
                                  "body": body})
            if path == "/health":
                return self._next(self.health), None
            if path == "/version":
                return 200, {"version": self.version}
            if path.startswith("/v1/") and self.api_key and headers.get("Authorization") != "Bearer " + self.api_key:
                if self.echo_auth:
                    return 401, {"error": "Unauthorized: %s is not valid" % headers.get("Authorization")}
                return 401, {"error": "Unauthorized"}
            if method == "GET" and path == "/v1/models":
                return 200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "vllm"} for m in self.models]}
            if method == "POST" and path == "/v1/completions":
                status = self._next(self.completion)
                if status != 200:
                    return status, {"object": "error", "message": "loading", "code": status}
                return 200, {"id": "cmpl-1", "object": "text_completion", "model": body.get("model"),
                             "choices": [{"index": i, "text": " pong", "finish_reason": "length"}
                                         for i in range(self.choices)]}
            return 404, {"detail": "Not Found"}

    def seen(self):
        """``METHOD path`` of every request so far."""
        with self._lock:
            return ["%s %s" % (r["method"], r["path"]) for r in self.requests]

    # -- serving ------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, data = fake.answer(method, self.path, self.headers, body)
                payload = b"" if data is None else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802 (http.server's name)
                self._reply("GET")

            def do_POST(self):  # noqa: N802
                self._reply("POST")

            def log_message(self, format, *args):  # pylint: disable=redefined-builtin
                pass

        return Handler

    def _listen(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def start(self, after=0.0):
        """Listen now, or ``after`` seconds from now (connections are refused until then)."""
        if after:
            self._timer = threading.Timer(after, self._listen)
            self._timer.start()
        else:
            self._listen()
        return self

    def stop(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class FakeUnit:
    """``systemctl`` and ``journalctl`` scripts in ``<tmp>/bin`` that answer from files in
    ``<tmp>/unit`` and log each call's arguments, one line per call, to ``<tmp>/unit/calls``.

    :meth:`set` writes the state ``systemctl show`` prints (``started_ago``: seconds before now,
    on CLOCK_MONOTONIC, of ExecMainStartTimestampMonotonic); ``journal`` the journal's lines;
    ``show_rc`` makes ``systemctl`` fail."""

    def __init__(self, tmp_path):
        self.bin = tmp_path / "bin"
        self.dir = tmp_path / "unit"
        self.bin.mkdir()
        self.dir.mkdir()
        self.calls_file = self.dir / "calls"
        for name, answer in (("systemctl", "show"), ("journalctl", "journal")):
            script = self.bin / name
            script.write_text(
                "#!/bin/sh\n"
                "printf '%%s %%s\\n' %s \"$*\" >> '%s'\n"
                "if [ -f '%s/%s.rc' ]; then cat '%s/%s.err' >&2; exit \"$(cat '%s/%s.rc')\"; fi\n"
                "cat '%s/%s'\n" % (name, self.calls_file, self.dir, answer, self.dir, answer,
                                   self.dir, answer, self.dir, answer))
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.set()
        self.journal([])

    def set(self, active="active", sub="running", started_ago=30.0, restarts=0, result="success", main_pid=0):
        start_us = int((time.monotonic() - started_ago) * 1e6) if started_ago is not None else 0
        (self.dir / "show").write_text(
            "ActiveState=%s\nSubState=%s\nActiveEnterTimestampMonotonic=%d\n"
            "ExecMainStartTimestampMonotonic=%d\nNRestarts=%d\nResult=%s\nMainPID=%d\n"
            % (active, sub, start_us, start_us, restarts, result, main_pid))
        return start_us

    def journal(self, lines):
        (self.dir / "journal").write_text("".join(line + "\n" for line in lines))

    def show_fails(self, rc, err):
        (self.dir / "show.rc").write_text(str(rc))
        (self.dir / "show.err").write_text(err)

    def calls(self):
        if not self.calls_file.exists():
            return []
        return self.calls_file.read_text().splitlines()

    def on_path(self, monkeypatch):
        monkeypatch.setenv("PATH", str(self.bin) + os.pathsep + os.environ.get("PATH", ""))
        return self
