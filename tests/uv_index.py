"""A PyPI-like index on 127.0.0.1 that serves one release of uv, as a wheel holding a real uv binary.

The fake upstream (``tests/upstream``) has no uv in its catalogue, and the role installs uv from
a PyPI-compatible index (``engine_node_uv_index_url``): it takes ``uv-<v>.data/scripts/uv`` out of
the manylinux wheel of the node's architecture, checked against the sha256 the index lists. This
index answers ``/pypi/uv/json`` and ``/files/<name>`` with such a wheel, built from a uv binary
on this machine (the tool venv's), so that the binary also runs inside a container, where the
machine's paths do not exist. Like the PyPI these machines reach, it answers 404 for the release
JSON ``/pypi/uv/<v>/json``.

Python API::

    index = UvIndex(pathlib.Path(".venv/bin/uv")).start()
    index.url, index.version, index.requests
    index.stop()

Command line (tools/molecule.sh)::

    python -m tests.uv_index [--uv PATH] [--port 0] [--ready-file F]

prints ``{"url": ..., "version": ..., "pid": ...}`` as one JSON line once it serves (and writes
it to F), and stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import pathlib
import platform
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.upstream.serve import serve_until_signalled

UPLOAD_TIME = "2025-11-01T00:00:00.000000Z"


def uv_version(binary: pathlib.Path) -> str:
    """The version a uv binary reports (``uv 0.13.8 (...)`` -> ``0.13.8``)."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    words = out.split()
    if len(words) < 2 or words[0] != "uv":
        raise RuntimeError(f"{binary} --version answered {out!r}, not 'uv <version>'")
    return words[1]


def uv_wheel(binary: pathlib.Path, version: str, arch: str) -> tuple[str, bytes]:
    """(file name, bytes) of a manylinux wheel of uv ``version`` holding ``binary`` as PyPI's does."""
    name = f"uv-{version}-py3-none-manylinux_2_17_{arch}.manylinux2014_{arch}.whl"
    info = f"uv-{version}.dist-info"
    members = {
        f"uv-{version}.data/scripts/uv": (binary.read_bytes(), 0o755),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode(), 0o644),
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: llmfleet-tests\nRoot-Is-Purelib: false\n"
            f"Tag: py3-none-manylinux_2_17_{arch}\n".encode(),
            0o644,
        ),
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        for member, (data, mode) in members.items():
            entry = zipfile.ZipInfo(member, date_time=(2025, 11, 1, 0, 0, 0))
            entry.external_attr = mode << 16
            archive.writestr(entry, data)
        record = "".join(f"{m},,\n" for m in members) + f"{info}/RECORD,,\n"
        entry = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2025, 11, 1, 0, 0, 0))
        archive.writestr(entry, record)
    return name, buf.getvalue()


class UvIndex:
    """``/pypi/uv/json`` and ``/files/<name>`` on 127.0.0.1, with a request log (``/pypi/uv/<v>/json``: 404)."""

    def __init__(self, binary: pathlib.Path, host: str = "127.0.0.1", port: int = 0):
        self.binary = pathlib.Path(binary)
        self.version = uv_version(self.binary)
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
        filename, data = uv_wheel(self.binary, self.version, arch)
        self.files = {filename: data}
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # noqa: D102 - quiet
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                self.reply(send_body=True)

            def do_HEAD(self):  # noqa: N802 - http.server's name (get_url asks HEAD in check mode)
                self.reply(send_body=False)

            def reply(self, send_body):
                index.requests.append(self.command + " " + self.path)
                status, ctype, body = index.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def release(self) -> list[dict]:
        return [
            {
                "filename": name,
                "url": f"{self.url}/files/{name}",
                "packagetype": "bdist_wheel",
                "python_version": "py3",
                "size": len(data),
                "upload_time": UPLOAD_TIME[:19],
                "upload_time_iso_8601": UPLOAD_TIME,
                "digests": {"sha256": hashlib.sha256(data).hexdigest()},
                "yanked": False,
                "yanked_reason": None,
            }
            for name, data in sorted(self.files.items())
        ]

    def answer(self, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if path.startswith("/files/") and path[len("/files/"):] in self.files:
            return 200, "application/octet-stream", self.files[path[len("/files/"):]]
        if path.rstrip("/") == "/pypi/uv/json":
            files = self.release()
            doc = {
                "info": {"name": "uv", "version": self.version, "yanked": False, "yanked_reason": None},
                "urls": files,
                "releases": {self.version: files},
            }
            return 200, "application/json", json.dumps(doc).encode()
        return 404, "application/json", b'{"message": "Not Found"}'

    def start(self) -> UvIndex:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.uv_index", description=__doc__.splitlines()[0])
    parser.add_argument("--uv", type=pathlib.Path, default=pathlib.Path(sys.executable).parent / "uv",
                        help="the uv binary to serve (default: the one beside this Python)")
    parser.add_argument("--port", type=int, default=0, help="port (0: a free one)")
    parser.add_argument("--ready-file", type=pathlib.Path, help="also write the JSON line here")
    args = parser.parse_args(argv)

    index = UvIndex(args.uv, port=args.port).start()
    return serve_until_signalled(index, {"url": index.url, "version": index.version}, args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
