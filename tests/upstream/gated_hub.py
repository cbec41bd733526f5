"""A hub look-alike that shows how many downloads a client runs at once (issue 29).

It speaks what ``model_snapshot`` and ``hf_warm`` ask of the hub: ``GET /<org>/<name>/resolve/<commit>/<path>``
answers 302 to ``/cdn/<sha256>`` (another path, as the hub sends LFS files to its CDN), which serves the
bytes with ``Content-Length``, ``Range`` (206 and ``Content-Range``), ``ETag`` and ``X-Cache-Status: MISS``.

Each CDN answer is *held* before its first byte until ``hold`` answers are in flight (itself counted),
or ``hold_timeout`` seconds have passed (``timeouts`` counts those): a client that downloads one file after
another makes every answer wait out the time-out, and a test that asserts ``timeouts == 0`` fails instead of
hanging. ``max_in_flight`` is the most answers that were ever in flight at once. ``rate`` (bytes a second,
per answer) slows the bytes of every file but those in ``fast``; ``tamper`` files get one byte flipped;
``late`` files (path -> seconds) wait that long after the hold; ``stall`` files send their first 64 KiB and
then nothing until the hub stops (a client that is not cut
loose waits for its read time-out).
Each answer is logged: ``{"path", "range", "sent", "size", "complete", "began", "held"}`` (``complete``: every
byte written before the client went away; ``held``: seconds it waited for the others); ``asked`` lists every
request as ``(time.monotonic(), path)``.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import select
import socket
import threading
import time

CHUNK = 64 * 1024


def lock_of(repo, commit, files):
    """The model lock (docs/dev/MODELS.md) of ``files`` (path -> bytes), every file an LFS one."""
    entries = [{"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
               for path, data in sorted(files.items())]
    return {"format": 1, "repo": repo, "revision": commit, "commit": commit, "files": entries,
            "size": sum(e["size"] for e in entries)}


def shard(seed, size):
    """``size`` bytes that differ from file to file (and are cheap to make)."""
    block = hashlib.sha256(b"shard %d" % seed).digest() * (CHUNK // 32)
    return (block * (size // len(block) + 1))[:size]


class GatedHub(object):
    def __init__(self, repo, commit, files, hold=0, hold_timeout=3.0, rate=None, fast=(), tamper=(), stall=(), late=None):
        self.repo, self.commit = repo, commit
        self.files = dict(files)
        self.by_sha = dict((hashlib.sha256(data).hexdigest(), path) for path, data in self.files.items())
        self.hold, self.hold_timeout, self.rate = hold, hold_timeout, rate
        self.fast, self.tamper, self.stall = set(fast), set(tamper), set(stall)
        self.closing = threading.Event()
        self.late = dict(late or {})
        self.cond = threading.Condition()
        self.in_flight = 0
        self.max_in_flight = 0
        self.timeouts = 0
        self.reached = 0  # how many times `hold` answers were in flight at once
        self.log = []
        self.asked = []  # (time, path) of every request, as it came
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def do_GET(self):  # noqa: N802 - the http.server name
                hub.answer(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="gated-hub", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def settled(self, timeout=5.0):
        """Wait until no answer is in flight (the client closed or read every one); True when so."""
        with self.cond:
            return self.cond.wait_for(lambda: self.in_flight == 0, timeout)

    def answer(self, req):
        prefix = "/%s/resolve/%s/" % (self.repo, self.commit)
        self.asked.append((time.monotonic(), req.path))
        if req.path.startswith(prefix) and req.path[len(prefix):] in self.files:
            data = self.files[req.path[len(prefix):]]
            req.send_response(302)
            req.send_header("Location", "/cdn/%s" % hashlib.sha256(data).hexdigest())
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        match = re.match(r"^/cdn/([0-9a-f]{64})$", req.path)
        if not match or match.group(1) not in self.by_sha:
            req.send_response(404)
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        path = self.by_sha[match.group(1)]
        self._serve(req, path, self.files[path])

    def _stall(self, req):
        req.wfile.flush()
        deadline = time.monotonic() + 30
        while not self.closing.is_set() and time.monotonic() < deadline:
            readable, _w, _x = select.select([req.connection], [], [], 0.05)
            if readable and not req.connection.recv(1, socket.MSG_PEEK):
                raise ConnectionResetError("the client went away")

    def _serve(self, req, path, data):
        arrived = time.monotonic()
        with self.cond:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.cond.notify_all()
            if self.hold and self.in_flight >= self.hold:
                self.reached += 1  # every answer held so far goes now
                self.cond.notify_all()
            elif self.hold:
                seen = self.reached
                if not self.cond.wait_for(lambda: self.reached != seen, self.hold_timeout):
                    self.timeouts += 1
        counted = True
        entry = {"path": path, "range": req.headers.get("Range"), "sent": 0, "size": len(data), "complete": False,
                 "began": arrived, "held": time.monotonic() - arrived}
        try:
            if path in self.tamper:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            time.sleep(self.late.get(path, 0))
            start = 0
            match = re.match(r"^bytes=(\d+)-$", entry["range"] or "")
            if match and int(match.group(1)) < len(data):
                start = int(match.group(1))
                req.send_response(206)
                req.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
            else:
                req.send_response(200)
            req.send_header("Content-Length", str(len(data) - start))
            req.send_header("ETag", '"%s"' % hashlib.sha256(data).hexdigest())
            req.send_header("X-Cache-Status", "MISS")
            req.end_headers()
            pos = start
            while pos < len(data):
                piece = data[pos:pos + CHUNK]
                if pos + len(piece) >= len(data):
                    # out of flight before the last byte goes: the client cannot start its next request
                    # while this answer still counts
                    counted = self._leave(counted)
                req.wfile.write(piece)
                pos += len(piece)
                entry["sent"] = pos - start
                if path in self.stall:
                    self._stall(req)  # one chunk, then nothing until the hub stops or the client goes
                if self.rate and path not in self.fast:
                    time.sleep(len(piece) / float(self.rate))
            req.wfile.flush()
            entry["complete"] = True
        except (BrokenPipeError, ConnectionResetError):
            req.close_connection = True
        finally:
            self._leave(counted)
            with self.cond:
                self.log.append(entry)
                self.cond.notify_all()

    def _leave(self, counted):
        if counted:
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()
        return False
