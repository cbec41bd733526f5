"""A stand-in vLLM for the gateway scenario: GET /health 200, GET /v1/models, POST /v1/completions answered at
once with the engine's name; after a file <dir>/stopping-<name> exists, completions are answered 500 while
/health stays 200 (vLLM 0.32.0 after SIGTERM).

    python3 fake_engine.py PORT NAME DIR
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, NAME, DIR = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if os.path.exists(os.path.join(DIR, "stopping-" + NAME)):
            self._send(500, {"object": "error", "message": "the engine is shutting down"})
        else:
            self._send(200, {"object": "text_completion", "engine": NAME, "choices": [{"index": 0, "text": " pong"}]})

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
