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

With ``--mirror`` (the default; ``--no-mirror`` leaves them out), the same files through the collection's
hub mirror: the engine_cache role's nginx caching proxy, from the role's own configuration - the text the
filter ``engine_cache_hub_mirror_conf`` renders (``plugins/filter/engine_cache_nginx.py``, with the token
file of ``engine_cache_hub_mirror_token_conf``: a dummy token, which the origin ignores) - before the
origin above (its ``upstream``; the CDN origin ``http://127.0.0.2:<port>`` its ``cdn``, the bench model at
its commit its only pin, 127.0.0.1 its only client). nginx runs as the tests run it (``nginx -p <root> -c
<conf> -g 'daemon off;'``, umask 0077, 127.0.0.1, a free port, a temporary directory under /var/tmp
removed afterwards, stopped by its PID); as root, with the workers as ``nobody`` and the cache theirs alone
(0700). It follows the hub's redirect to the CDN itself, caches each whole file under its resolve URL and
serves it from there (``X-Cache-Status``):

- ``hf_warm pN, cold mirror`` (the largest N): the module ``hf_warm`` as Ansible runs it (``python
  hf_warm.py args.json``), every file through the mirror, hashed and thrown away; checked: not failed,
  ``bytes`` the lock's size, ``fetched`` (files the mirror did not have) every file;
- ``curl, N at once, through the cold mirror``: the transfer limit through a cold mirror;
- ``model_snapshot pN, from the warm mirror`` (each N): model_snapshot with the mirror as its endpoint,
  every file already in the mirror's cache; checked: ``bytes_downloaded`` the lock's size;
- ``curl, N at once, through the warm mirror``: the transfer limit from a warm mirror.

Cold: before each run (not timed), nginx is stopped, its cache emptied, and started again. Warm: before
each run (not timed), a ``HEAD`` of every file must answer ``X-Cache-Status: HIT`` (a file that does not is
fetched through the mirror first). After each run the mirror's own access log (the role's format, with
``cache=$upstream_cache_status``) must show the run's requests: every file a ``MISS`` once (it came from
the origin) on a cold run, every request a ``HIT`` on a warm run, and the lock's bytes sent either way.
``over_raw`` stays relative to the direct ``curl, N at once``; ``over_mirror_raw`` (JSON, and the last
column) is a mirror side's wall relative to the curl through the mirror in the same state (cold or warm).
The page cache holds the origin's files and, once written, the mirror's cache files: a warm mirror serves
from memory, a cold one writes every file to its cache directory as it streams it.

Wall seconds, CPU seconds of the process tree (user + system, from ``RUSAGE_CHILDREN``; nginx's CPU, the origin's
and the mirror's, is not counted on any side) and CPU seconds per GB.

    python -m bench.weights [--shards 8] [--shard-mib 64] [--parallel 1 4 8] [--reps 2] [--no-mirror] [--work DIR] [--json F]
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
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench import models
from bench.common import COLLECTIONS, REPO, WORK, alternate, ensure_collection_link, run_timed, shell_line, summary
from bench.models import free_port

MIB = 1 << 20
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CURL = shutil.which("curl") or "/usr/bin/curl"
MODEL = "llmfleet-bench/sharded"
COMMIT = "b" * 40
MODULE = REPO / "plugins" / "modules" / "model_snapshot.py"
HF_WARM = REPO / "plugins" / "modules" / "hf_warm.py"
DUMMY_TOKEN = "hf_llmfleetBenchDummyToken"  # the mirror sends it to the origin, which ignores it


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
            except OSError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start: %s" % (root / "nginx.stderr").read_text(errors="replace")) from exc
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _resolve_path(entry: dict) -> str:
    return "/%s/resolve/%s/%s" % (MODEL, COMMIT, entry["path"])


class Mirror(models.Mirror):
    """The engine_cache role's hub mirror before ``origin`` (bench/models.py's, see the module's docstring),
    pinned to the bench's repo at its commit, under /var/tmp, nginx with umask 0077 as the role's unit runs
    it; and ``cold()`` (stopped, cache emptied, started), ``warm()``, ``check()`` (its log of a run), ``close()``
    (stopped, its directory removed)."""

    def __init__(self, origin: Origin, lock: dict):
        super().__init__(models.Collection(), origin.url, "http://127.0.0.2:%d" % origin.port, model=MODEL,
                         revision=COMMIT, token=DUMMY_TOKEN, tmp_dir="/var/tmp", umask=0o077)
        self.lock = lock
        self.start()

    def close(self):
        self.stop()

    def cold(self):
        """Stopped, its cache and its temporary files emptied, its log restarted, started again."""
        self.stop_nginx()
        for sub in ("cache", "tmp"):
            for child in (self.dir / sub).iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        (self.dir / "log" / "access.log").unlink(missing_ok=True)
        self.log_offset = 0
        self.spawn()

    def head(self, entry: dict) -> str | None:
        request = urllib.request.Request(self.url + _resolve_path(entry), method="HEAD")
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.headers.get("X-Cache-Status")

    def warm(self):
        """Every file of the lock in the cache: a HEAD of each answers HIT (one that does not is fetched
        through the mirror, then asked again)."""
        missing = [e for e in self.lock["files"] if self.head(e) != "HIT"]
        if missing:
            argv = [CURL, "-sS", "--fail", "--parallel", "--parallel-max", "8"]
            for e in missing:
                argv += ["-o", "/dev/null", self.url + _resolve_path(e)]
            subprocess.run(argv, check=True, capture_output=True, timeout=600)
            still = [e["path"] for e in self.lock["files"] if self.head(e) != "HIT"]
            if still:
                raise RuntimeError("the hub mirror did not cache %s" % ", ".join(still))
        self.settle(len(self.lock["files"]) + (len(missing) + len(self.lock["files"]) if missing else 0))

    def settle(self, at_least: int) -> list:
        """The log's next ``at_least`` lines or more (nginx writes one once the answer is sent, which may be
        a moment after the client has it), waiting up to 5 seconds."""
        lines = self.lines()
        deadline = time.monotonic() + 5
        while len(lines) < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
            lines += self.lines()
        return lines

    def check(self, what: str, cold: bool) -> dict:
        """What the mirror's log says of the run just done: every file a MISS once (cold: it came from the
        origin), or every request a HIT (warm), and the lock's bytes sent. Returns the cache statuses."""
        files = self.lock["files"]
        lines = self.settle(len(files))
        time.sleep(0.05)
        lines += self.lines()
        paths = {_resolve_path(e) for e in files}
        served = [x for x in lines if x[1] in paths]
        counts = {}
        for x in served:
            counts[x[4] or "none"] = counts.get(x[4] or "none", 0) + 1
        sent = sum(x[3] for x in served if x[0] == "GET" and x[2] in (200, 206))
        problems = []
        if len(served) != len(lines):
            problems.append("requests for other URLs: %s" % [x for x in lines if x[1] not in paths][:3])
        if any(x[2] not in (200, 206) for x in served):
            problems.append("statuses %s" % sorted({x[2] for x in served}))
        if cold:
            missed = {x[1] for x in served if x[4] == "MISS"}
            if missed != paths or counts.get("MISS") != len(files):
                problems.append("not every file came from the origin once (cache statuses %s)" % counts)
        elif counts.get("HIT", 0) != len(served) or {x[1] for x in served} != paths:
            problems.append("not every file was served from the cache (cache statuses %s)" % counts)
        if sent != self.lock["size"]:
            problems.append("%d bytes sent, not the lock's %d" % (sent, self.lock["size"]))
        if problems:
            raise RuntimeError("%s through the %s mirror: %s" % (what, "cold" if cold else "warm", "; ".join(problems)))
        return counts


def _fresh(_work: pathlib.Path, name: str) -> pathlib.Path:
    # under /var/tmp: model_snapshot refuses a cache dir another user could change, and a clone may
    # sit under a 0700 home; the directory is root's (or the runner's) and 0755
    path = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-bench-weights-%s-" % name, dir="/var/tmp"))
    path.chmod(0o755)
    return path


def _before(server, state: str | None):
    """The mirror's state for a run (not timed): ``cold`` (emptied, restarted) or ``warm`` (every file cached)."""
    if state == "cold":
        server.cold()
    elif state == "warm":
        server.warm()


def _after(server, state: str | None, what: str) -> dict:
    """The sample's extra: what the mirror's log says of the run (checked), for a side through the mirror."""
    return {"cache": server.check(what, state == "cold")} if state else {}


def side_snapshot(server, lock: dict, work: pathlib.Path, parallel: int, state: str | None = None):
    """model_snapshot from ``server`` (the origin, or the mirror in ``state``)."""
    def one(_i):
        target = _fresh(work, "snapshot")
        args = target / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
            "lock": lock, "cache_dir": str(target / "hub"), "endpoint": server.url, "parallel": parallel,
            "prune": False}}))
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
        try:
            _before(server, state)
            timed = run_timed([sys.executable, MODULE, args], env=env).check("model_snapshot")
            result = json.loads(timed.out)
            if result.get("failed") or result["bytes_downloaded"] != lock["size"]:
                raise RuntimeError("model_snapshot: %s" % result.get("msg"))
            extra = _after(server, state, "model_snapshot")
        finally:
            shutil.rmtree(target)
        return dict(extra, wall=timed.wall, cpu=timed.cpu)
    return one


def side_hf_warm(mirror: Mirror, lock: dict, work: pathlib.Path, parallel: int):
    """hf_warm through the cold mirror, as Ansible runs it."""
    def one(_i):
        target = _fresh(work, "hf-warm")
        args = target / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"lock": lock, "endpoint": mirror.url, "parallel": parallel}}))
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
        try:
            _before(mirror, "cold")
            timed = run_timed([sys.executable, HF_WARM, args], env=env).check("hf_warm")
            result = json.loads(timed.out)
            if result.get("failed") or result["bytes"] != lock["size"] or result["fetched"] != len(lock["files"]):
                raise RuntimeError("hf_warm: %s" % result.get("msg"))
            extra = _after(mirror, "cold", "hf_warm")
        finally:
            shutil.rmtree(target)
        return dict(extra, wall=timed.wall, cpu=timed.cpu)
    return one


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
    def one(_i):
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
    return one


def side_curl(server, lock: dict, work: pathlib.Path, workers: int, durable: bool = False, state: str | None = None):
    """curl of every file from ``server`` (the origin, or the mirror in ``state``)."""
    def one(_i):
        target = _fresh(work, "curl")
        argv = [CURL, "-sS", "--fail", "-L", "--parallel", "--parallel-max", str(workers)]
        for e in lock["files"]:
            argv += ["-o", str(target / e["path"]), server.url + _resolve_path(e)]
        if durable:  # then fsync every file, as model_snapshot does before it renames one into place
            argv = ["sh", "-c", '"$@" && exec sync -- %s' % " ".join(
                shlex.quote(str(target / e["path"])) for e in lock["files"]), "sh"] + argv
        try:
            _before(server, state)
            timed = run_timed(argv).check("curl")
            got = sum((target / e["path"]).stat().st_size for e in lock["files"])
            if got != lock["size"]:
                raise RuntimeError("curl: %d bytes, not %d" % (got, lock["size"]))
            extra = _after(server, state, "curl")
        finally:
            shutil.rmtree(target)
        return dict(extra, wall=timed.wall, cpu=timed.cpu)
    return one


def run(shards=8, shard_mib=64, parallel=(1, 4, 8), reps=2, work: pathlib.Path | None = None,
        mirror: bool = True) -> dict:
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
    hub_mirror = None
    raw_of = {}  # a mirror side -> the curl through the mirror in the same state
    try:
        sides = [("model_snapshot p%d" % n, side_snapshot(origin, lock, work, n)) for n in parallel]
        if hf:
            sides.append(("snapshot_download (max_workers %d)" % most, side_hf(origin, lock, work, most)))
        sides.append(("curl, %d at once" % most, side_curl(origin, lock, work, most)))
        sides.append(("curl, %d at once, then sync of the files" % most, side_curl(origin, lock, work, most, True)))
        if mirror:
            hub_mirror = Mirror(origin, lock)
            cold_raw = "curl, %d at once, through the cold mirror" % most
            warm_raw = "curl, %d at once, through the warm mirror" % most
            sides.append(("hf_warm p%d, cold mirror" % most, side_hf_warm(hub_mirror, lock, work, most)))
            raw_of["hf_warm p%d, cold mirror" % most] = cold_raw
            sides.append((cold_raw, side_curl(hub_mirror, lock, work, most, state="cold")))
            raw_of[cold_raw] = cold_raw
            for n in parallel:
                name = "model_snapshot p%d, from the warm mirror" % n
                sides.append((name, side_snapshot(hub_mirror, lock, work, n, state="warm")))
                raw_of[name] = warm_raw
            sides.append((warm_raw, side_curl(hub_mirror, lock, work, most, state="warm")))
            raw_of[warm_raw] = warm_raw
        samples = alternate(reps, sides)
    finally:
        if hub_mirror is not None:
            hub_mirror.close()
        origin.stop()
    gb = lock["size"] / 1e9
    out = {"shards": shards, "shard_mib": shard_mib, "bytes": lock["size"], "reps": reps,
           "huggingface_hub": hf, "nginx": shell_line(origin.argv).replace(str(work), "$WORK"), "sides": {}}
    if hub_mirror is not None:
        out["mirror"] = {"nginx": hub_mirror.command,
                         "conf": "engine_cache_hub_mirror_conf (plugins/filter/engine_cache_nginx.py)",
                         "workers": hub_mirror.params.get("user")}
    for name, values in samples.items():
        s = summary(values)
        s["cpu_per_gb"] = round(s["cpu_median"] / gb, 2)
        s["rate_mib_s"] = round(lock["size"] / MIB / s["wall_median"], 1)
        if name in raw_of:
            s["mirror"] = "cold" if "cold" in name else "warm"
            s["cache"] = [v.get("cache") for v in values]  # the mirror's X-Cache-Status of each run's requests
        out["sides"][name] = s
    raw = out["sides"]["curl, %d at once" % most]["wall_median"]
    for name, s in out["sides"].items():
        s["over_raw"] = round(s["wall_median"] / raw, 2)
        if name in raw_of:
            s["over_mirror_raw"] = round(s["wall_median"] / out["sides"][raw_of[name]]["wall_median"], 2)
    return out


def section(data: dict) -> list[str]:
    mirror = "mirror" in data
    lines = ["| side | runs | wall (median; each run) | CPU (median) | CPU s per GB | rate | wall over raw |%s"
             % (" over the mirror's curl |" if mirror else ""),
             "|---|---|---|---|---|---|---|%s" % ("---|" if mirror else "")]
    for name, s in data["sides"].items():
        line = "| %s | %d | %.2f s (%s) | %.2f s | %.2f | %.0f MiB/s | **%.2fx** |" % (
            name, s["runs"], s["wall_median"], ", ".join("%.2f" % x for x in s["wall"]),
            s["cpu_median"], s["cpu_per_gb"], s["rate_mib_s"], s["over_raw"])
        if mirror:
            line += " %s |" % ("%.2fx" % s["over_mirror_raw"] if "over_mirror_raw" in s else "-")
        lines.append(line)
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mib", type=int, default=64)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--mirror", action=argparse.BooleanOptionalAction, default=True,
                        help="also the sides through the engine_cache role's hub mirror (default: on)")
    parser.add_argument("--work", type=pathlib.Path, help="the origin's files (default build/bench/weights; made afresh)")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    data = run(args.shards, args.shard_mib, args.parallel, args.reps, work=args.work, mirror=args.mirror)
    print("\n".join(section(data)))
    print("huggingface_hub: %s" % (data["huggingface_hub"] or "not in the tool venv"))
    if "mirror" in data:
        print("hub mirror: %s" % data["mirror"]["nginx"])
    if args.json:
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
