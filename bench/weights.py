"""Benchmark 8: time to a complete snapshot of a sharded model (issue 29), model_snapshot against
huggingface_hub's ``snapshot_download`` and against a raw parallel download of the same files.

The origin is a real nginx (``daemon off``, 127.0.0.1, a free port, stopped by its PID) that looks like
the hub for these files (model info and tree included): ``/<repo>/resolve/<commit>/<path>`` answers 302 to ``http://127.0.0.2:<port>/cdn/<sha256>`` (as
the hub sends LFS files to its CDN, another host) with the hub's ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size``
headers, ``/cdn/`` serves the files from disk (sendfile, ``Range``), and
``/api/models/<repo>/revision/<commit>`` answers the file list. nginx serves from the page cache, so the
limit is the client side: what the raw download (curl, all files at once, no hashing, no fsync) reaches
is the transfer limit of this machine.

Sides, alternated (A B C, C B A, ...), each into a fresh directory removed afterwards:

- ``model_snapshot pN``: the module as Ansible runs it (``python model_snapshot.py args.json``), with
  ``parallel=N``; each file hashed as it arrives, fsynced and checked before it is renamed into place;
- ``snapshot_download``: ``huggingface_hub.snapshot_download`` of the tool venv (``max_workers`` = the
  largest N), when it is installed;
- ``curl``: ``curl --parallel --parallel-max <largest N> -L`` of every file (no check, no fsync): the
  transfer limit;
- ``curl, then sync``: the same, then ``sync -- <files>`` (an fsync of each, what model_snapshot does
  before a rename; no check): the transfer and the disk's write limit.

Wall seconds, CPU seconds of the process tree (user + system, from ``RUSAGE_CHILDREN``; nginx's CPU is not
counted on any side) and CPU seconds per GB.

    python -m bench.weights [--shards 8] [--shard-mib 64] [--parallel 1 4 8] [--reps 2] [--json F]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench.common import COLLECTIONS, REPO, WORK, alternate, ensure_collection_link, run_timed, shell_line, summary

MIB = 1 << 20
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CURL = shutil.which("curl") or "/usr/bin/curl"
MODEL = "llmfleet-bench/sharded"
COMMIT = "b" * 40
MODULE = REPO / "plugins" / "modules" / "model_snapshot.py"


def make_shards(where: pathlib.Path, shards: int, size: int) -> dict:
    """``shards`` files of ``size`` bytes (pseudo-random, so nothing compresses) in ``where``/blobs,
    named by their sha256; the lock of them."""
    blobs = where / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    entries = []
    for n in range(shards):
        path = "model-%05d-of-%05d.safetensors" % (n + 1, shards)
        seed = hashlib.sha256(b"%d %d" % (n, size)).digest()
        digest = hashlib.sha256()
        tmp = blobs / ("tmp-%d" % n)
        with open(tmp, "wb") as handle:
            block = b"".join(hashlib.sha256(seed + b"%d" % i).digest() for i in range(MIB // 32))
            left = size
            i = 0
            while left > 0:
                piece = bytes(b ^ (i & 0xFF) for b in block[:64]) + block[64:]  # differs per MiB
                piece = piece[:left]
                handle.write(piece)
                digest.update(piece)
                left -= len(piece)
                i += 1
        sha = digest.hexdigest()
        tmp.rename(blobs / sha)
        entries.append({"path": path, "size": size, "sha256": sha})
    return {"format": 1, "repo": MODEL, "revision": COMMIT, "commit": COMMIT, "files": entries,
            "size": sum(e["size"] for e in entries)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Origin:
    """nginx as the hub and its CDN for the lock's files (see the module's docstring)."""

    def __init__(self, root: pathlib.Path, lock: dict):
        self.root = root
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        for sub in ("logs", "tmp"):
            (root / sub).mkdir(exist_ok=True)
        info = {"id": MODEL, "modelId": MODEL, "sha": COMMIT, "private": False, "gated": False,
                "siblings": [{"rfilename": e["path"]} for e in lock["files"]]}
        tree = [{"type": "file", "path": e["path"], "size": e["size"], "oid": hashlib.sha1(e["sha256"].encode()).hexdigest(),
                 "lfs": {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}} for e in lock["files"]]
        locations = []
        for e in lock["files"]:
            locations.append(
                "location = /%s/resolve/%s/%s { add_header X-Repo-Commit %s always; "
                "add_header X-Linked-Etag '\"%s\"' always; add_header X-Linked-Size %d always; "
                "add_header ETag '\"%s\"' always; return 302 http://127.0.0.2:%d/cdn/%s; }"
                % (MODEL, COMMIT, e["path"], COMMIT, e["sha256"], e["size"], e["sha256"], self.port, e["sha256"]))
        user = "user root root;" if os.geteuid() == 0 else ""
        conf = """%s
worker_processes 2;
pid %s/nginx.pid;
error_log %s/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on; tcp_nopush on;
  client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;
  uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;
  server {
    listen 127.0.0.1:%d;
    listen 127.0.0.2:%d;
    location = /api/models/%s/revision/%s { default_type application/json; return 200 '%s'; }
    location = /api/models/%s/tree/%s { default_type application/json; return 200 '%s'; }
    %s
    location /cdn/ { alias %s/blobs/; default_type application/octet-stream; }
  }
}
""" % (user, root, root, root, root, root, root, root, self.port, self.port, MODEL, COMMIT, json.dumps(info),
            MODEL, COMMIT, json.dumps(tree), "\n    ".join(locations), root)
        (root / "nginx.conf").write_text(conf)
        self.argv = [NGINX, "-p", str(root), "-c", str(root / "nginx.conf"), "-g", "daemon off;"]
        with open(root / "nginx.stderr", "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=err, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen("%s/api/models/%s/revision/%s" % (self.url, MODEL, COMMIT), timeout=5).close()  # pylint: disable=consider-using-with
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start: %s" % (root / "nginx.stderr").read_text(errors="replace"))
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _fresh(work: pathlib.Path, name: str) -> pathlib.Path:
    # under /var/tmp: model_snapshot refuses a cache dir another user could change, and a clone may
    # sit under a 0700 home; the directory is root's (or the runner's) and 0755
    path = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-bench-weights-%s-" % name, dir="/var/tmp"))
    path.chmod(0o755)
    return path


def side_snapshot(origin: Origin, lock: dict, work: pathlib.Path, parallel: int):
    def run(_i):
        target = _fresh(work, "snapshot")
        args = target / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
            "lock": lock, "cache_dir": str(target / "hub"), "endpoint": origin.url, "parallel": parallel,
            "prune": False}}))
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
        try:
            timed = run_timed([sys.executable, MODULE, args], env=env).check("model_snapshot")
            result = json.loads(timed.out)
            if result.get("failed") or result["bytes_downloaded"] != lock["size"]:
                raise RuntimeError("model_snapshot: %s" % result.get("msg"))
        finally:
            shutil.rmtree(target)
        return {"wall": timed.wall, "cpu": timed.cpu}
    return run


HF_SCRIPT = """
import sys
from huggingface_hub import snapshot_download
snapshot_download(sys.argv[1], revision=sys.argv[2], cache_dir=sys.argv[3], max_workers=int(sys.argv[4]))
"""


def hf_available() -> str | None:
    try:
        import huggingface_hub  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return huggingface_hub.__version__


def side_hf(origin: Origin, lock: dict, work: pathlib.Path, workers: int):
    def run(_i):
        target = _fresh(work, "hf")
        env = dict(os.environ, HF_ENDPOINT=origin.url, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ENABLE_HF_TRANSFER="0",
                   HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HOME=str(target / "home"))
        try:
            timed = run_timed([sys.executable, "-c", HF_SCRIPT, MODEL, COMMIT, target / "hub", workers],
                              env=env).check("snapshot_download")
            snap = target / "hub" / ("models--" + MODEL.replace("/", "--")) / "snapshots" / COMMIT
            got = sum((snap / e["path"]).stat().st_size for e in lock["files"])
            if got != lock["size"]:
                raise RuntimeError("snapshot_download: %d bytes, not %d" % (got, lock["size"]))
        finally:
            shutil.rmtree(target)
        return {"wall": timed.wall, "cpu": timed.cpu}
    return run


def side_curl(origin: Origin, lock: dict, work: pathlib.Path, workers: int, durable: bool = False):
    def run(_i):
        target = _fresh(work, "curl")
        argv = [CURL, "-sS", "--fail", "-L", "--parallel", "--parallel-max", str(workers)]
        for e in lock["files"]:
            argv += ["-o", str(target / e["path"]), "%s/%s/resolve/%s/%s" % (origin.url, MODEL, COMMIT, e["path"])]
        if durable:  # then fsync every file, as model_snapshot does before it renames one into place
            argv = ["sh", "-c", '"$@" && exec sync -- %s' % " ".join(
                shlex.quote(str(target / e["path"])) for e in lock["files"]), "sh"] + argv
        try:
            timed = run_timed(argv).check("curl")
            got = sum((target / e["path"]).stat().st_size for e in lock["files"])
            if got != lock["size"]:
                raise RuntimeError("curl: %d bytes, not %d" % (got, lock["size"]))
        finally:
            shutil.rmtree(target)
        return {"wall": timed.wall, "cpu": timed.cpu}
    return run


def run(shards=8, shard_mib=64, parallel=(1, 4, 8), reps=2, work: pathlib.Path | None = None) -> dict:
    ensure_collection_link()
    work = work or WORK / "weights"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    work.chmod(0o755)
    lock = make_shards(work, shards, shard_mib * MIB)
    origin = Origin(work, lock)
    most = max(parallel)
    hf = hf_available()
    try:
        sides = [("model_snapshot p%d" % n, side_snapshot(origin, lock, work, n)) for n in parallel]
        if hf:
            sides.append(("snapshot_download (max_workers %d)" % most, side_hf(origin, lock, work, most)))
        sides.append(("curl, %d at once" % most, side_curl(origin, lock, work, most)))
        sides.append(("curl, %d at once, then sync of the files" % most, side_curl(origin, lock, work, most, True)))
        samples = alternate(reps, sides)
    finally:
        origin.stop()
    gb = lock["size"] / 1e9
    out = {"shards": shards, "shard_mib": shard_mib, "bytes": lock["size"], "reps": reps,
           "huggingface_hub": hf, "nginx": shell_line(origin.argv).replace(str(work), "$WORK"), "sides": {}}
    for name, values in samples.items():
        s = summary(values)
        s["cpu_per_gb"] = round(s["cpu_median"] / gb, 2)
        s["rate_mib_s"] = round(lock["size"] / MIB / s["wall_median"], 1)
        out["sides"][name] = s
    raw = out["sides"]["curl, %d at once" % most]["wall_median"]
    for s in out["sides"].values():
        s["over_raw"] = round(s["wall_median"] / raw, 2)
    return out


def section(data: dict) -> list[str]:
    lines = ["| side | runs | wall (median; each run) | CPU (median) | CPU s per GB | rate | wall over raw |",
             "|---|---|---|---|---|---|---|"]
    for name, s in data["sides"].items():
        lines.append("| %s | %d | %.2f s (%s) | %.2f s | %.2f | %.0f MiB/s | **%.2fx** |" % (
            name, s["runs"], s["wall_median"], ", ".join("%.2f" % x for x in s["wall"]),
            s["cpu_median"], s["cpu_per_gb"], s["rate_mib_s"], s["over_raw"]))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mib", type=int, default=64)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    data = run(args.shards, args.shard_mib, args.parallel, args.reps)
    print("\n".join(section(data)))
    print("huggingface_hub: %s" % (data["huggingface_hub"] or "not in the tool venv"))
    if args.json:
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
