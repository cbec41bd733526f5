"""A real HTTP server on 127.0.0.1 for the bounded reads (issue 44, I): answers whose body never ends, or
comes a byte at a time, as a hostile index, API or cache would send them.

``BodyServer().route(path, ...)`` scripts one path (the query is part of it); ``endless(path)`` sends a
body that never ends (no Content-Length, or a lying one), ``drip(path, every)`` one byte every ``every``
seconds, for ever. Anything else: 404. ``log()`` lists ``(method, path, headers)`` of every request;
``sent(path)`` how many body bytes went out on that path. Each connection ends when the client closes
it or the server stops: a test that leaves never leaves a writer behind.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time

BLOCK = b"x" * 65536


class BodyServer:
    def __init__(self, host="127.0.0.1"):
        self.host = host
        self.routes = {}
        self._log = []
        self._sent = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = None
        self._thread = None

    # -- scripting ------------------------------------------------------------------------------
    def route(self, path, body=b"", status=200, headers=None, content_type="application/octet-stream"):
        if isinstance(body, (dict, list)):
            body, content_type = json.dumps(body).encode(), "application/json"
        heads = {"Content-Type": content_type, "Content-Length": str(len(body))}
        heads.update(headers or {})
        self.routes[path] = ("bytes", status, heads, body)
        return self

    def endless(self, path, content_type="application/json", length=None, status=200):
        """A body that never ends; ``length`` a Content-Length to claim (a lie), else none."""
        heads = {"Content-Type": content_type, "Connection": "close"}
        if length is not None:
            heads["Content-Length"] = str(length)
        self.routes[path] = ("endless", status, heads, None)
        return self

    def drip(self, path, every=0.05, content_type="application/json", status=200):
        """One byte every ``every`` seconds, for ever: each wait far below any socket time-out."""
        self.routes[path] = ("drip", status, {"Content-Type": content_type, "Connection": "close"}, every)
        return self

    def log(self):
        with self._lock:
            return list(self._log)

    def paths(self):
        return [path for _method, path, _headers in self.log()]

    def sent(self, path):
        with self._lock:
            return self._sent.get(path, 0)

    # -- serving --------------------------------------------------------------------------------
    def _count(self, path, size):
        with self._lock:
            self._sent[path] = self._sent.get(path, 0) + size

    def start(self):
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                self.connection.settimeout(10)
                line = self.rfile.readline(65537).decode("latin-1").strip()
                if not line:
                    return
                method, path = line.split(" ")[:2]
                headers = {}
                while True:
                    raw = self.rfile.readline(65537).decode("latin-1")
                    if raw in ("\r\n", "\n", ""):
                        break
                    key, _sep, value = raw.partition(":")
                    headers[key.strip()] = value.strip()
                length = int(headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with owner._lock:
                    owner._log.append((method, path, headers))
                kind, status, heads, extra = owner.routes.get(
                    path, ("bytes", 404, {"Content-Type": "application/json", "Content-Length": "23"},
                           b'{"message":"Not Found"}'))
                head = "HTTP/1.1 %d %s\r\n" % (status, "OK" if status == 200 else "Answer")
                head += "".join("%s: %s\r\n" % item for item in heads.items()) + "\r\n"
                try:
                    self.wfile.write(head.encode("latin-1"))
                    if method == "HEAD":
                        return
                    if kind == "bytes":
                        self.wfile.write(extra)
                        owner._count(path, len(extra))
                        return
                    while not owner._stop.is_set():
                        if kind == "endless":
                            self.wfile.write(BLOCK)
                            owner._count(path, len(BLOCK))
                        else:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            owner._count(path, 1)
                            time.sleep(extra)
                except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
                    return  # the client went away: what a bounded read does

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((self.host, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="body-server", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is None:
            return
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self._server.server_address[1])
