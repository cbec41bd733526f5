"""A PEP 503 simple index on 127.0.0.1 over a directory of wheels (a wheelhouse).

The fleet cache role (llmfleet.engines.engine_cache) installs devpi-server and its dependencies
from a simple index (``engine_cache_index_url``) with ``--require-hashes``. In the tests no
container reaches PyPI, so tools/molecule.sh downloads those wheels once on the host (pip, the
ordinary client) and this serves them as PyPI's simple pages do: ``/simple/<project>/`` lists
each file with ``#sha256=`` and ``data-requires-python``-less links to ``/files/<name>``; a name
that is not normalized (PEP 503) answers 301 to the normalized one; anything else is 404.

    python -m tests.wheelhouse --dir DIR [--index-path simple] [--port 0] [--ready-file F]

``--index-path whl/cpu`` serves the pages under ``/whl/cpu/<project>/`` instead, as PyTorch's
``cpu`` index is laid out (the real-engine scenario's torch index: the CPU torch wheel of the
machine image, ``tests/cpu_torch.py``).

prints ``{"url": ..., "pid": ...}`` as one JSON line once it serves (and writes it to F) and
stops on SIGTERM/SIGINT. ``requests`` counts the files served, by name.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import pathlib
import re
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.upstream.serve import serve_until_signalled


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    """The normalized project of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        return normalize(filename.split("-", 1)[0])
    return normalize(re.sub(r"-[0-9][^-]*\.(tar\.gz|zip)$", "", filename))


class Wheelhouse:
    """Serves ``directory``'s ``*.whl`` (and sdists) as a simple index."""

    def __init__(self, directory: pathlib.Path, host: str = "127.0.0.1", port: int = 0, index_path: str = "simple"):
        self.directory = pathlib.Path(directory)
        self.index = [p for p in index_path.split("/") if p]
        self.files: dict[str, pathlib.Path] = {}
        self.digests: dict[str, str] = {}
        self.projects: dict[str, list[str]] = {}
        for path in sorted(self.directory.iterdir()):
            if path.is_file() and (path.suffix == ".whl" or path.name.endswith((".tar.gz", ".zip"))):
                self.files[path.name] = path
                self.digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
                self.projects.setdefault(project_of(path.name), []).append(path.name)
        self.requests: dict[str, int] = {}
        self._lock = threading.Lock()
        house = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - the base class's signature
                """Silent."""

            def do_GET(self):  # noqa: N802
                self._answer(True)

            def do_HEAD(self):  # noqa: N802 - uv asks HEAD of a large wheel before it reads its metadata
                self._answer(False)

            def _answer(self, with_body):
                status, headers, body = house.route(urllib.parse.urlsplit(self.path).path, count=with_body)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "Wheelhouse":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def route(self, path: str, count: bool = True):
        """(status, headers, body) for a GET of ``path`` (a HEAD is not counted in ``requests``)."""
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        page = {"Content-Type": "text/html; charset=utf-8"}
        base = "/" + "/".join(self.index)
        depth = len(self.index)
        if parts == self.index:
            links = "".join('<a href="%s/%s/">%s</a>\n' % (base, p, p) for p in sorted(self.projects))
            return 200, page, ("<!DOCTYPE html><html><body>\n%s</body></html>\n" % links).encode()
        if len(parts) == depth + 1 and parts[:depth] == self.index:
            name = normalize(parts[depth])
            if name != parts[depth]:
                return 301, {"Location": "%s/%s/" % (base, name)}, b""
            if name not in self.projects:
                return 404, page, b"Not Found"
            links = "".join('<a href="/files/%s#sha256=%s">%s</a><br>\n' % (
                urllib.parse.quote(f), self.digests[f], html.escape(f)) for f in self.projects[name])
            return 200, page, ("<!DOCTYPE html><html><body>\n%s</body></html>\n" % links).encode()
        if len(parts) == 2 and parts[0] == "files" and parts[1] in self.files:
            if count:
                with self._lock:
                    self.requests[parts[1]] = self.requests.get(parts[1], 0) + 1
            return 200, {"Content-Type": "application/octet-stream"}, self.files[parts[1]].read_bytes()
        return 404, page, b"Not Found"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.wheelhouse", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=pathlib.Path, help="directory of wheels")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=pathlib.Path)
    parser.add_argument("--index-path", default="simple", help="where the index pages are (default: simple)")
    args = parser.parse_args(argv)
    house = Wheelhouse(args.dir, args.host, args.port, args.index_path).start()
    return serve_until_signalled(house, {"url": house.url}, args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
