"""Shared pieces of the benchmarks: the machine, timing, medians, the fake upstream, traffic, disk."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import platform
import resource
import shlex
import signal
import stat
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
UV = BIN / "uv"
COLLECTIONS = REPO / "build" / "collections"
FIXTURES = REPO / "tests" / "fixtures"
WORK = REPO / "build" / "bench"
MODULE = REPO / "plugins" / "modules" / "uv_engine_env.py"


def ensure_collection_link() -> None:
    """build/collections/ansible_collections/llmfleet/engines -> this checkout (as make and pytest do)."""
    link = COLLECTIONS / "ansible_collections" / "llmfleet" / "engines"
    if link.is_symlink() and link.resolve() == REPO:
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(REPO, target_is_directory=True)


def system_python() -> str:
    """A plain interpreter for ``uv venv --python`` (not the tool venv's)."""
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def rel(path) -> str:
    """A path as the results show it: relative to the repository when inside it."""
    path = pathlib.Path(path)
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def shell_line(argv, env=None) -> str:
    """A command line someone can paste: ``VAR=value ... argv``."""
    words = ["%s=%s" % (k, shlex.quote(str(v))) for k, v in sorted((env or {}).items())]
    return " ".join(words + [shlex.quote(str(a)) for a in argv])


# --------------------------------------------------------------------------------------------
# The machine.


def _meminfo_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tool_versions() -> dict:
    from ansible.release import __version__ as ansible_core  # pylint: disable=import-outside-toplevel

    uv = subprocess.run([str(UV), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    return {"ansible_core": ansible_core, "uv": uv, "python": platform.python_version(),
            "system_python": system_python()}


def git_commit() -> str:
    """The checkout measured: its commit, and whether tracked files differed from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True, check=False)
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def machine() -> dict:
    """What the figures were measured on."""
    return {
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": _meminfo_gib(),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "os": _os_name(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **tool_versions(),
    }


def _os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


# --------------------------------------------------------------------------------------------
# Timing.


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Timed:
    """One timed command: wall seconds, CPU seconds of the command and everything it waited for."""

    def __init__(self, argv, proc, wall, cpu):
        self.argv = [str(a) for a in argv]
        self.rc = proc.returncode
        self.out = proc.stdout or ""
        self.err = proc.stderr or ""
        self.wall = wall
        self.cpu = cpu

    def check(self, what: str) -> "Timed":
        if self.rc != 0:
            raise RuntimeError("%s failed (exit %s): %s\n%s\n%s"
                               % (what, self.rc, shell_line(self.argv), self.out[-4000:], self.err[-4000:]))
        return self


def run_timed(argv, env=None, cwd=None, data=None, timeout=3600) -> Timed:
    """Run ``argv`` and time it (wall clock and the CPU time of the process tree it waited for)."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, input=data, capture_output=True,
                          text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - t0
    return Timed(argv, proc, wall, _children_cpu() - cpu0)


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def ratio(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)


def alternate(reps: int, sides):
    """Run each side ``reps`` times, interleaved (A B, B A, A B, ...), so that a change in the
    machine's load falls on both. ``sides`` is [(name, fn(i) -> dict with wall and cpu)].
    Returns {name: [sample, ...]}."""
    samples = {name: [] for name, _fn in sides}
    for i in range(reps):
        order = sides if i % 2 == 0 else list(reversed(sides))
        for name, fn in order:
            samples[name].append(fn(i))
    return samples


def summary(samples) -> dict:
    """Medians of wall and CPU seconds of a side's samples, with the samples themselves."""
    return {
        "runs": len(samples),
        "wall_median": median([s["wall"] for s in samples]),
        "cpu_median": median([s["cpu"] for s in samples]),
        "wall": [round(s["wall"], 3) for s in samples],
        "cpu": [round(s["cpu"], 3) for s in samples],
    }


# --------------------------------------------------------------------------------------------
# The fake upstream (tests/upstream), as a separate process.


def http_json(url, method="GET", body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


class Upstream:
    """``python -m tests.upstream`` on 127.0.0.1: PyPI, GitHub and the torch indexes, with a request log."""

    def __init__(self, work: pathlib.Path):
        self.packages = work / "packages"
        self.work = work
        self.proc = None
        self.url = None
        self.command = None

    def start(self) -> "Upstream":
        self.work.mkdir(parents=True, exist_ok=True)
        ready = self.work / "upstream.ready"
        if ready.exists():
            ready.unlink()
        argv = [sys.executable, "-m", "tests.upstream", "--port", "0", "--packages", str(self.packages),
                "--ready-file", str(ready)]
        self.command = shell_line([rel(a) if a.startswith(str(REPO)) else a for a in argv])
        log = open(self.work / "upstream.log", "wb")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
        log.close()
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake upstream did not start: %s"
                                   % (self.work / "upstream.log").read_text(errors="replace")[-2000:])
            time.sleep(0.1)
        self.url = json.loads(ready.read_text())["url"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log(self) -> list[dict]:
        return http_json(self.url + "/_control/log")["requests"]

    def clear_log(self) -> None:
        http_json(self.url + "/_control/clear_log", method="POST", body={})

    def catalog(self) -> dict:
        return http_json(self.url + "/_control/catalog")

    def hub_catalog(self) -> dict:
        return http_json(self.url + "/_control/hub_catalog")


def catalog_sizes(catalog: dict) -> dict[str, int]:
    """File name -> size of every file the fake upstream serves (PyPI, torch indexes, GitHub assets)."""
    sizes = {}
    for release in catalog.get("releases", []):
        for entry in release.get("files", []):
            sizes[entry["filename"]] = entry["size"]
    return sizes


# Kinds of upstream requests, by path prefix (the fake upstream's URL layout, CONTRACTS.md).
KINDS = (
    ("pypi_json", "/pypi/"),
    ("simple_index", "/simple/"),
    ("pypi_files", "/files/"),
    ("torch_files", "/torch/files/"),
    ("torch_index", "/torch/"),
    ("github_api", "/github/api/"),
    ("github_download", "/github/download/"),
    # github.com redirects a download to a signed URL elsewhere (here /github-objects/...)
    ("github_objects", "/github-objects/"),
    # the Hugging Face hub (tests/upstream/hub.py): its API (model info, resolve-cache), its files
    # (/hub/<org>/<name>/resolve/...), and its CDN (another port of the same upstream, the same log)
    ("hub_api", "/hub/api/"),
    ("hub_files", "/hub/"),
    ("hub_cdn", "/hub-cdn/"),
)


def request_kind(path: str) -> str:
    for kind, prefix in KINDS:
        if path.startswith(prefix):
            return kind
    return "other"


class Traffic:
    """Counts and bytes of an upstream request log. File bodies are sized from the catalogue;
    index and API bodies by asking the same URL again once, with the same Accept header."""

    def __init__(self, base_url: str, catalog: dict, hub_catalog: dict | None = None):
        self.base = base_url
        self.sizes = catalog_sizes(catalog)
        # the hub's CDN serves a blob as /hub-cdn/<org>/<name>/<sha256>: sized from the hub's catalogue
        self.hub_blobs = {entry["sha256"]: entry["size"] for repo in (hub_catalog or {}).get("repos", {}).values()
                          for commit in repo["commits"] for entry in commit["files"] if "sha256" in entry}
        self._bodies: dict[tuple[str, str], int] = {}

    def body_size(self, entry: dict) -> int:
        if entry.get("method") == "HEAD" or entry.get("status") != 200:
            return 0
        path = urllib.parse.unquote(entry["path"])
        name = path.rsplit("/", 1)[-1]
        if request_kind(path) == "github_objects":  # the name is in the signed URL's query
            name = (urllib.parse.parse_qs(entry.get("query") or "").get("filename") or [""])[0]
        if request_kind(path) in ("pypi_files", "torch_files", "github_objects") and name in self.sizes:
            return self.sizes[name]
        if request_kind(path) == "hub_cdn" and name in self.hub_blobs:
            return self.hub_blobs[name]
        accept = (entry.get("headers") or {}).get("Accept", "*/*")
        key = (entry.get("raw_path") or entry["path"], accept)
        if key not in self._bodies:
            url = self.base + key[0] + ("?" + entry["query"] if entry.get("query") else "")
            request = urllib.request.Request(url, headers={"Accept": accept})
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    self._bodies[key] = len(resp.read())
            except OSError:
                self._bodies[key] = 0
        return self._bodies[key]

    def summarize(self, log: list[dict]) -> dict:
        """{"requests": n, "bytes": n, "by_kind": {kind: {"requests", "bytes"}}}"""
        by_kind: dict[str, dict] = {}
        total = 0
        for entry in log:
            kind = request_kind(urllib.parse.unquote(entry["path"]))
            size = self.body_size(entry)
            slot = by_kind.setdefault(kind, {"requests": 0, "bytes": 0})
            slot["requests"] += 1
            slot["bytes"] += size
            total += size
        return {"requests": len(log), "bytes": total, "by_kind": dict(sorted(by_kind.items()))}


# --------------------------------------------------------------------------------------------
# Disk.


def du_bytes(*paths) -> int:
    """Bytes used by ``paths`` together, as ``du -s -B1`` counts them in one invocation: a file with
    several hard links among them counts once (block usage, so small files cost a block)."""
    existing = [str(p) for p in paths if os.path.lexists(p)]
    if not existing:
        return 0
    out = subprocess.run(["du", "-s", "-B1", "-c", *existing], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def apparent_bytes(*paths) -> int:
    """Sum of file sizes (``du -sb``), hard links counted once per invocation."""
    existing = [str(p) for p in paths if os.path.lexists(p)]
    if not existing:
        return 0
    out = subprocess.run(["du", "-s", "-b", "-c", *existing], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def _tree(root) -> tuple[list, int]:
    """(path relative to ``root``, lstat) of every regular file under ``root``, no link followed;
    and the disk bytes of everything else there (directories, links, ``root`` itself)."""
    files, other = [], os.lstat(root).st_blocks * 512
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                files.append((os.path.relpath(path, root), st))
            else:
                other += st.st_blocks * 512
    return files, other


def _sha256(path, st, memo: dict) -> str:
    """The sha256 of a file's content, read in 1 MiB chunks; once per inode (``memo``)."""
    key = (st.st_dev, st.st_ino)
    if key not in memo:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        memo[key] = digest.hexdigest()
    return memo[key]


def _group(rel_path: str) -> str:
    """Where a file of an environment belongs: its top directory in site-packages, else the
    environment's top directory (or file)."""
    parts = rel_path.split(os.sep)
    if "site-packages" in parts[:-1]:
        return parts[parts.index("site-packages") + 1]
    return parts[0]


def content_difference(first, second, groups: int = 10) -> dict:
    """What ``second`` holds that ``first`` does not, by content: every regular file of both trees
    hashed (sha256), the files of ``second`` whose content is nowhere in ``first``, at any path.
    Their bytes are the floor of any file-level sharing of ``second`` with ``first``.

    ``files``: such paths in ``second``; ``contents``: distinct contents among them; ``bytes``:
    their sizes, each content once (``path_bytes``: once per path); ``disk_bytes``: the blocks of
    one file per content; ``other_disk_bytes``: blocks of ``second``'s directories and links, which
    no file sharing saves; ``pyc_bytes``: ``bytes`` of ``.pyc`` files; ``by_group``: ``bytes`` by
    top directory of site-packages (else of the environment), the ``groups`` largest."""
    t0 = time.perf_counter()
    memo: dict = {}
    first_files, _other = _tree(first)
    known = {_sha256(os.path.join(first, rel_path), st, memo) for rel_path, st in first_files}
    second_files, other = _tree(second)
    new: dict[str, tuple[int, int]] = {}
    by_group: dict[str, int] = {}
    files = path_bytes = pyc_bytes = 0
    for rel_path, st in second_files:
        digest = _sha256(os.path.join(second, rel_path), st, memo)
        if digest in known:
            continue
        files += 1
        path_bytes += st.st_size
        if digest not in new:
            new[digest] = (st.st_size, st.st_blocks * 512)
            group = _group(rel_path)
            by_group[group] = by_group.get(group, 0) + st.st_size
            if rel_path.endswith(".pyc"):
                pyc_bytes += st.st_size
    largest = sorted(by_group.items(), key=lambda kv: (-kv[1], kv[0]))[:groups]
    return {
        "first_files": len(first_files),
        "second_files": len(second_files),
        "files": files,
        "contents": len(new),
        "bytes": sum(size for size, _blocks in new.values()),
        "path_bytes": path_bytes,
        "disk_bytes": sum(blocks for _size, blocks in new.values()),
        "other_disk_bytes": other,
        "pyc_bytes": pyc_bytes,
        "by_group": [{"group": name, "bytes": size} for name, size in largest],
        "inodes_hashed": len(memo),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def human_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n


def ansible_env(work: pathlib.Path, **extra) -> dict:
    """The environment of every ansible / ansible-playbook command of the benchmarks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "UV_"))}
    env.pop("GITHUB_TOKEN", None)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(work / "ansible-remote"),
        "ANSIBLE_ASYNC_DIR": str(work / "ansible-async"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_HOST_KEY_CHECKING": "0",
        "PATH": "%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")),
    })
    env.update({k: str(v) for k, v in extra.items()})
    return env


def write_json(path: pathlib.Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# Bytes pulled from the internet: a counting HTTPS proxy (CONNECT only) on 127.0.0.1.


class CountingProxy:
    """``HTTPS_PROXY=http://127.0.0.1:PORT``: tunnels CONNECT requests and counts the bytes that
    come back from the internet (TLS records: the bodies plus a few percent of framing)."""

    def __init__(self):
        import socket  # pylint: disable=import-outside-toplevel
        import socketserver  # pylint: disable=import-outside-toplevel
        import threading  # pylint: disable=import-outside-toplevel

        proxy = self
        self.lock = threading.Lock()
        self.bytes_down = 0
        self.bytes_up = 0
        self.connections = []

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = self.request.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
                if len(line) < 2 or line[0] != "CONNECT":
                    self.request.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    return
                host, _sep, port = line[1].rpartition(":")
                try:
                    remote = socket.create_connection((host, int(port)), timeout=60)
                except OSError:
                    self.request.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                with proxy.lock:
                    proxy.connections.append(line[1])
                self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                done = threading.Event()

                def pipe(src, dst, down):
                    try:
                        while True:
                            data = src.recv(65536)
                            if not data:
                                break
                            dst.sendall(data)
                            with proxy.lock:
                                if down:
                                    proxy.bytes_down += len(data)
                                else:
                                    proxy.bytes_up += len(data)
                    except OSError:
                        pass
                    finally:
                        done.set()

                up = threading.Thread(target=pipe, args=(self.request, remote, False), daemon=True)
                up.start()
                pipe(remote, self.request, True)
                done.wait(5)
                remote.close()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def start(self) -> "CountingProxy":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self) -> dict:
        """Bytes and connections since the last take."""
        with self.lock:
            out = {"bytes": self.bytes_down, "bytes_up": self.bytes_up, "connections": len(self.connections)}
            self.bytes_down = self.bytes_up = 0
            self.connections = []
        return out
