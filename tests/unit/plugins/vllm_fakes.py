"""Stand-ins for engine_ready's tests: a vLLM OpenAI-compatible server on 127.0.0.1 (stdlib
``http.server`` in a thread) and a systemd unit (``systemctl``/``journalctl`` scripts on PATH).

The server answers what its attributes say, and records every request (method, path, the
``Authorization`` header, the JSON body). It can start listening late (:meth:`FakeVllm.start` with ``after``),
so that a client first meets a refused connection, as while vLLM loads. :class:`ProcessVllm` runs one in a
process of its own (as another user, if asked): the unit's server, or a stranger's on the same port, for the
gate's check of the process its connection reached.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def base_url(host, port):
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def has_ipv6_loopback():
    """Whether ``::1`` can be bound here (a container may have no IPv6)."""
    try:
        free_port("::1")
    except OSError:
        return False
    return True


class FakeVllm:
    """``health``: /health's status (an int, or a list used in order, the last repeated);
    ``version``: what /version answers; ``models``: the ids /v1/models lists; ``completion``:
    the completion's status (int or list, like ``health``); ``choices``: how many choices a 200
    completion has; ``api_key``: when set, /v1/* answer 401 without ``Bearer <api_key>``
    (``echo_auth``: a 401 that quotes the header it got, as a careless proxy may). ``host`` and ``port``:
    where it listens (127.0.0.1 and a free port by default); ``record``: called with each request's record."""

    def __init__(self, models=("m",), version="0.20.0", health=200, completion=200, choices=1, api_key=None,
                 echo_auth=False, host="127.0.0.1", port=None, record=None):
        self.host = host
        self.port = port or free_port(host)
        self.url = base_url(host, self.port)
        self.record = record
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
            if self.record is not None:
                self.record(self.requests[-1])
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
        server = type("Server", (ThreadingHTTPServer,),
                      {"address_family": socket.AF_INET6 if ":" in self.host else socket.AF_INET})
        self._server = server((self.host, self.port), self._handler())
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


def _everyone_may_run(path):
    """Whether every user may run ``path``: it and each directory above it open to others (o+x)."""
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _interpreter_for(user):
    """The Python to run the fake with: this one's real interpreter, or, for another user who may not run it (a
    pyenv Python under root's 0700 home, the newest-ansible-core run's), the system's python3."""
    mine = os.path.realpath(sys.executable)
    if user is None or _everyone_may_run(mine):
        return mine
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if _everyone_may_run(os.path.realpath(candidate)):
            return os.path.realpath(candidate)
    raise RuntimeError("no Python that user %s may run: %s is not open to others" % (user, mine))


class ProcessVllm:
    """A :class:`FakeVllm` in a process of its own, a child of this one (``user``: run as that uid, such as 65534,
    as another user's server; this needs root): a pid that the gate can find holding the connection it made.
    Takes FakeVllm's arguments; listens before the constructor returns. Every request it gets comes back as one
    JSON line on its stdout: :meth:`stop` it, then read ``requests`` (all of them, the pipe drained)."""

    def __init__(self, user=None, **kw):
        kw.setdefault("host", "127.0.0.1")
        kw["port"] = kw.get("port") or free_port(kw["host"])
        self.host, self.port = kw["host"], kw["port"]
        self.url = base_url(self.host, self.port)
        self.requests = []
        with open(__file__) as handle:
            source = handle.read()
        # the real interpreter, isolated (-I -S: the standard library only): another user may not read the venv
        argv = [_interpreter_for(user), "-I", "-S", "-c", source, "serve", json.dumps(kw)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,  # pylint: disable=consider-using-with
                                     user=user)
        self.pid = self.proc.pid
        line = self.proc.stdout.readline()
        if line.strip() != "listening":
            self.stop()
            raise RuntimeError("the fake vLLM at %s did not start: %r" % (self.url, line))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.requests.append(json.loads(line))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.join(10)
        self.proc.stdout.close()
        return self


def _serve(config):
    """``ProcessVllm``'s child: serve, one JSON line per request on stdout."""
    def record(entry):
        sys.stdout.write(json.dumps({k: entry[k] for k in ("method", "path", "auth")}) + "\n")
        sys.stdout.flush()

    fake = FakeVllm(record=record, **config)
    fake._listen()  # pylint: disable=protected-access
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    fake._thread.join()  # pylint: disable=protected-access


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
                "cat '%s/%s'\n"
                "if [ -f '%s/%s.next' ]; then mv '%s/%s.next' '%s/%s'; fi\n"
                % (name, self.calls_file, self.dir, answer, self.dir, answer, self.dir, answer, self.dir, answer,
                   self.dir, answer, self.dir, answer, self.dir, answer))
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.set()
        self.journal([])

    def set(self, active="active", sub="running", started_ago=30.0, restarts=0, result="success", main_pid=None,
            then=False):
        """``main_pid``: this process by default, which serves the :class:`FakeVllm` (the gate talks only to a
        process of the unit's). ``then``: the state ``systemctl show`` answers from its next call on, after it
        answered the current one once more."""
        main_pid = os.getpid() if main_pid is None else main_pid
        current = (self.dir / "show").read_text() if then else None
        start_us = int((time.monotonic() - started_ago) * 1e6) if started_ago is not None else 0
        (self.dir / "show").write_text(
            "ActiveState=%s\nSubState=%s\nActiveEnterTimestampMonotonic=%d\n"
            "ExecMainStartTimestampMonotonic=%d\nNRestarts=%d\nResult=%s\nMainPID=%d\n"
            % (active, sub, start_us, start_us, restarts, result, main_pid))
        if then:  # the next call shows this state, the ones after it too (systemd restarted the unit)
            (self.dir / "show").rename(self.dir / "show.next")
            (self.dir / "show").write_text(current)
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


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    _serve(json.loads(sys.argv[2]))
