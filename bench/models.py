"""Benchmark 6: model weights, what a rollout takes from the hub, with and without the fleet's hub
mirror, against the fake hub (tests/upstream/hub.py) and a real nginx run from the configuration the
engine_cache role renders (``engine_cache_hub_mirror_conf``).

One run, two parts:

1. For each N: a rollout of the bench model (``llmfleet-test/bench-model``: one LFS
   ``model.safetensors`` of ``--model-mib`` MiB and a ``config.json``) to N simulated nodes, each
   with its own cache dir, in the role's order: the lock resolved once on the controller (the code
   of ``hf_revision``: ``fetch_model_info``, ``select_files``, ``build_lock``), then

   - *from the hub*: each node stages the lock straight from the hub (the code of
     ``model_snapshot``: ``Snapshot`` and ``Fetcher``);
   - *through the mirror*: a fresh nginx (empty cache, as on a first rollout) is filled once by the
     controller (the code of ``hf_warm``: ``Fetcher`` and ``HashSink``), then every node stages
     from it.

   The nodes run one after the other (what is measured is bytes; on 2 cores, concurrent nodes
   would measure the CPU). What reached the hub and its CDN: the fake's request log (requests,
   by kind) and the size of every body the hub answered (counted in the fake's process, beside
   the log); the model's bytes are the bodies of file answers (200/206 of the CDN, of
   ``/resolve/`` and of ``/api/resolve-cache/``), also recomputed from the log and the lock.
2. One node, the time to a complete snapshot in a fresh dir, from the hub and from the warm mirror
   (alternated, ``--model-reps`` times, medians), and a second run on a complete snapshot (no
   request: its time, and the requests seen by the hub and the mirror).

The module code runs in this process, without Ansible (and without model_snapshot's check that
the cache dir's path is root's). The fake hub runs in a subprocess of its own
(``python -m bench.models --serve-hub``), as does nginx (``daemon off``, on 127.0.0.1, a free port,
its workers as ``nobody`` when run as root), both stopped by their PID.

    python -m bench.models [--n 1 10 50] [--model-mib 32] [--reps 5] [--keep] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pwd
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from bench.common import (
    COLLECTIONS,
    REPO,
    WORK,
    alternate,
    du_bytes,
    ensure_collection_link,
    http_json,
    human_bytes,
    median,
    ratio,
    rel,
    shell_line,
    summary,
    write_json,
)

MIB = 1 << 20
DEFAULT_MIB = 32
BENCH_MODEL = "llmfleet-test/bench-model"  # tests.upstream.hub.BENCH_MODEL
REVISION = "main"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
WORKER = "nobody"  # the workers' user when nginx starts as root (the role's is llmfleet-hub-mirror)
# model_snapshot's and hf_warm's defaults (the llmfleet.engines.http fragment, model_snapshot's options)
HTTP = {"timeout": 30, "retries": 3, "backoff": 1.0}
FREE_SPACE_MARGIN_MIB = 1024
KEEP = 2
VARIANTS = (
    ("hub", "from the hub", "each node stages the lock straight from the hub (and its CDN)"),
    ("mirror", "through the mirror", "a fresh hub mirror (nginx, empty) filled once by the controller (hf_warm's"
                                     " code), then every node stages from it"),
)
KINDS = ("api", "resolve", "resolve_cache", "cdn")


# --------------------------------------------------------------------------------------------
# The collection's code, imported as Ansible imports it.


class Collection:
    """The module_utils and the filter this benchmark runs (imported once)."""

    def __init__(self):
        ensure_collection_link()
        if str(COLLECTIONS) not in sys.path:
            sys.path.insert(0, str(COLLECTIONS))
        # pylint: disable=import-outside-toplevel
        from ansible_collections.llmfleet.engines.plugins.filter import engine_cache_nginx as hub_mirror
        from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _fetch, _hfhub, _snapshot
        from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http, _pathlock

        self.fetch, self.snapshot, self.hfhub, self.http, self.pathlock, self.hub_mirror = (
            _fetch, _snapshot, _hfhub, _http, _pathlock, hub_mirror)


def resolve_lock(c: Collection, endpoint: str) -> dict:
    """The model's lock, as hf_revision resolves it (default selection of files)."""
    client = c.http.HttpClient(**HTTP)
    info = c.hfhub.fetch_model_info(client, endpoint, BENCH_MODEL, REVISION)
    return c.hfhub.build_lock(BENCH_MODEL, REVISION, info, c.hfhub.select_files(info["siblings"]), endpoint=endpoint)


def warm(c: Collection, lock: dict, endpoint: str) -> list:
    """hf_warm's loop: every file of the lock through the mirror, hashed and thrown away, checked.
    Returns the mirror's X-Cache-Status of each file."""
    fetcher = c.fetch.Fetcher(**HTTP)
    statuses = []
    for entry in lock["files"]:
        sink = c.fetch.HashSink(entry)
        got = fetcher.fetch(c.hfhub.file_url(endpoint, lock["repo"], lock["commit"], entry["path"]), sink,
                            limit=entry["size"])
        problem = sink.digest.problem()
        if problem:
            raise RuntimeError("warming %s through %s: %s" % (entry["path"], endpoint, problem))
        statuses.append(got.cache_status)
    return statuses


def stage(c: Collection, lock: dict, cache_dir: pathlib.Path, endpoint: str) -> dict:
    """model_snapshot's path (its main() and _apply(), default options): survey; nothing to do and no
    request when complete; else under its lock file, download each missing blob (checked, renamed),
    link, write the ref. Returns what it did and whether the snapshot is complete afterwards."""
    snap = c.snapshot.Snapshot(lock, str(cache_dir))
    survey = snap.survey("size")
    if survey["in_the_way"]:
        raise RuntimeError("in the way in %s: %s" % (cache_dir, survey["in_the_way"]))
    work = snap.work(survey)
    plan = snap.prune_plan(KEEP, [lock["commit"]])
    out = {"changed": False, "files": 0, "bytes": 0}
    if work["fetch"] or work["links"] or work["ref"] or plan["snapshots"]:
        snap.prepare_repo()
        held = c.pathlock.PathLock(snap.lock_path, 3600, about="bench model_snapshot %s" % lock["repo"])
        held.acquire()
        try:
            snap.prepare()
            survey = snap.survey("size")
            work = snap.work(survey)
            by_path = {e["path"]: e for e in snap.files}
            if work["fetch"]:
                snap.check_space(work["fetch"], FREE_SPACE_MARGIN_MIB)
                fetcher = c.fetch.Fetcher(**HTTP)
                for item in work["fetch"]:
                    url = c.hfhub.file_url(endpoint, snap.repo, snap.commit, item["path"])
                    out["bytes"] += snap.download(item, by_path[item["path"]], fetcher, url)
                    out["files"] += 1
            if work["links"]:
                snap.link_all(work["links"])
            if work["ref"]:
                snap.write_ref()
            plan = snap.prune_plan(KEEP, [lock["commit"]])
            if plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"]:
                snap.prune(plan)
        finally:
            held.release()
        out["changed"] = True
    after = snap.survey("size")
    out["complete"] = (all(f["blob_state"] == "ok" and f["link_state"] == "ok" for f in after["files"])
                       and after["ref_state"] in ("ok", "none"))
    return out


# --------------------------------------------------------------------------------------------
# The fake hub, in a process of its own, counting the bytes of its answers.


def serve_hub(packages: pathlib.Path, size: int, ready_file: pathlib.Path, sizes_file: pathlib.Path) -> int:
    """The fake upstream with the bench model of ``size`` bytes; every answer of the hub and its CDN
    (their routes) appends ``{"path", "status", "bytes"}`` (the body's length) to ``sizes_file``."""
    # pylint: disable=import-outside-toplevel
    from tests.upstream import FakeUpstream, build_packages
    from tests.upstream.serve import serve_until_signalled

    if not packages.is_dir() or not any(packages.iterdir()):
        build_packages(packages)
    upstream = FakeUpstream(packages, hub_bench_size=size).start()
    upstream.hub.repo(BENCH_MODEL)  # built now (its bytes), not during the first request
    route = upstream.hub.route
    lock = threading.Lock()
    out = open(sizes_file, "a", encoding="utf-8")  # pylint: disable=consider-using-with

    def counted(raw_path, raw_query, headers):
        reply = route(raw_path, raw_query, headers)
        with lock:
            out.write(json.dumps({"path": raw_path, "status": reply.status, "bytes": len(reply.body)}) + "\n")
            out.flush()
        return reply

    upstream.hub.route = counted
    try:
        return serve_until_signalled(upstream, {"url": upstream.url, "hub_url": upstream.hub_url,
                                                "hub_cdn_url": upstream.hub_cdn_url}, ready_file)
    finally:
        out.close()


class Hub:
    """``python -m bench.models --serve-hub`` on 127.0.0.1: the fake hub, its request log, the sizes
    of its answers. ``take()`` returns what reached it since the last take."""

    def __init__(self, work: pathlib.Path, size: int):
        self.work = work
        self.size = size
        self.sizes_file = work / "hub-sizes.jsonl"
        self.offset = 0
        self.proc = None
        self.url = self.hub_url = self.cdn_url = None
        self.command = None

    def start(self) -> "Hub":
        self.work.mkdir(parents=True, exist_ok=True)
        ready = self.work / "hub.ready"
        for path in (ready, self.sizes_file):
            if path.exists():
                path.unlink()
        self.sizes_file.touch()
        argv = [sys.executable, "-m", "bench.models", "--serve-hub", "--hub-bytes", str(self.size),
                "--packages", str(self.work / "packages"), "--ready-file", str(ready),
                "--sizes-file", str(self.sizes_file)]
        self.command = shell_line([rel(a) if a.startswith(str(REPO)) else a for a in argv])
        with open(self.work / "hub.log", "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the fake hub did not start: %s"
                                   % (self.work / "hub.log").read_text(errors="replace")[-2000:])
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        self.url, self.hub_url, self.cdn_url = info["url"], info["hub_url"], info["hub_cdn_url"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def take(self) -> dict:
        """The hub's request log (hub and CDN paths) and the sizes of its answers since the last take."""
        log = [e for e in http_json(self.url + "/_control/log")["requests"]
               if e["path"].startswith(("/hub/", "/hub-cdn/"))]
        http_json(self.url + "/_control/clear_log", method="POST", body={})
        with open(self.sizes_file, encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
        complete = text[:text.rfind("\n") + 1]
        self.offset += len(complete.encode())
        return {"log": log, "sizes": [json.loads(line) for line in complete.splitlines() if line]}


def hub_kind(path: str) -> str:
    if path.startswith("/hub-cdn/"):
        return "cdn"
    if path.startswith("/hub/api/models/"):
        return "api"
    if path.startswith("/hub/api/resolve-cache/"):
        return "resolve_cache"
    if "/resolve/" in path:
        return "resolve"
    return "other"


def _range_length(spec: str, size: int) -> int:
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", (spec or "").replace(" ", ""))
    if not match or match.groups() == ("", ""):
        return size
    first, last = match.groups()
    if not first:
        return min(size, int(last))
    return max(0, min(size - 1, int(last) if last else size - 1) - int(first) + 1)


def log_model_bytes(log: list[dict], lock: dict) -> int:
    """The model's bytes the hub and its CDN sent, from the request log and the lock alone (the files'
    sizes; a 206 by its Range): a check of the sizes counted in the hub's process."""
    by_sha = {e["sha256"]: e for e in lock["files"] if e.get("sha256")}
    by_path = {e["path"]: e for e in lock["files"]}
    total = 0
    for entry in log:
        if entry.get("method", "GET") != "GET" or entry["status"] not in (200, 206):
            continue
        path = urllib.parse.unquote(entry["path"])
        kind = hub_kind(path)
        if kind == "cdn":
            file = by_sha.get(path.rstrip("/").rsplit("/", 1)[-1])
        elif kind in ("resolve", "resolve_cache"):
            file = by_path.get(path.split("/" + lock["commit"] + "/", 1)[-1])
        else:
            continue
        if file is None:
            continue
        total += (_range_length((entry.get("headers") or {}).get("Range", ""), file["size"])
                  if entry["status"] == 206 else file["size"])
    return total


def _ordered(by_kind: dict) -> dict:
    order = KINDS + ("other",)
    return {k: by_kind[k] for k in sorted(by_kind, key=order.index)}


def traffic(taken: dict, lock: dict | None) -> dict:
    """Requests and bytes that reached the hub and its CDN: by kind; ``model_bytes`` the bodies of
    file answers (200/206 of /resolve/, /api/resolve-cache/, the CDN)."""
    by_kind = {}
    for entry in taken["log"]:
        slot = by_kind.setdefault(hub_kind(entry["path"]), {"requests": 0, "bytes": 0})
        slot["requests"] += 1
    model = 0
    total = 0
    for record in taken["sizes"]:
        kind = hub_kind(urllib.parse.unquote(record["path"]))
        slot = by_kind.setdefault(kind, {"requests": 0, "bytes": 0})
        slot["bytes"] += record["bytes"]
        total += record["bytes"]
        if kind in ("resolve", "resolve_cache", "cdn") and record["status"] in (200, 206):
            model += record["bytes"]
    out = {"requests": len(taken["log"]), "bytes": total, "model_bytes": model,
           "by_kind": _ordered(by_kind),
           "head_requests": sum(1 for e in taken["log"] if e.get("method") == "HEAD"),
           "answers_counted": len(taken["sizes"])}
    if lock is not None:
        out["model_bytes_from_log"] = log_model_bytes(taken["log"], lock)
    return out


def _add(*parts: dict) -> dict:
    out = {"requests": 0, "bytes": 0, "model_bytes": 0, "model_bytes_from_log": 0, "head_requests": 0,
           "answers_counted": 0, "by_kind": {}}
    for part in parts:
        for key in ("requests", "bytes", "model_bytes", "model_bytes_from_log", "head_requests", "answers_counted"):
            out[key] += part.get(key, 0)
        for kind, slot in part["by_kind"].items():
            mine = out["by_kind"].setdefault(kind, {"requests": 0, "bytes": 0})
            mine["requests"] += slot["requests"]
            mine["bytes"] += slot["bytes"]
    out["by_kind"] = _ordered(out["by_kind"])
    return out


# --------------------------------------------------------------------------------------------
# The hub mirror: a real nginx from the role's configuration.


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Mirror:
    """nginx with ``engine_cache_hub_mirror_conf`` before a hub (``hub_url``, its CDN ``cdn_url``), pinned to
    ``model`` at ``revision``, in a fresh temporary directory under ``tmp_dir`` (default the system's: the
    workers, ``nobody``, must cross every directory above their cache, and pytest's are root's alone),
    removed by ``stop()``. ``umask``: nginx's (-1: this process's). Also used by bench/weights.py."""

    def __init__(self, c: Collection, hub_url: str, cdn_url: str, model: str = BENCH_MODEL, revision: str = REVISION,
                 token: str = "", tmp_dir: str | None = None, umask: int = -1):
        self.c = c
        self.root = None
        self.hub_url = hub_url
        self.cdn_url = cdn_url
        self.model = model
        self.revision = revision
        self.token = token
        self.tmp_dir = tmp_dir
        self.umask = umask
        self.dir = None
        self.proc = None
        self.url = None
        self.params = None
        self.argv = None
        self.command = None
        self.log_offset = 0

    def start(self) -> "Mirror":
        if not os.access(NGINX, os.X_OK):
            raise RuntimeError("nginx is not installed (%s): apt-get install nginx-light" % NGINX)
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-bench-hub-mirror-", dir=self.tmp_dir))
        try:
            self.root.chmod(0o755)  # the workers cross it to their cache
            self.dir = self.root / "mirror"
            for sub, mode in (("", 0o755), ("cache", 0o700), ("tmp", 0o755), ("log", 0o755), ("run", 0o755)):
                (self.dir / sub).mkdir(mode=mode, exist_ok=True)
            token_file = self.root / "hub-mirror-token.conf"
            token_file.write_text(self.c.hub_mirror.engine_cache_hub_mirror_token_conf(self.token))
            token_file.chmod(0o600)
            port = free_port()
            self.url = "http://127.0.0.1:%d" % port
            self.params = {"dir": str(self.dir), "token_file": str(token_file), "upstream": self.hub_url,
                           "listen": "127.0.0.1", "port": port, "resolver": ["127.0.0.1"],
                           # the mirror serves only the fleet: this machine, the bench model's pin, the hub's CDN
                           "clients": ["127.0.0.1"], "models": [{"model": self.model, "revision": self.revision}],
                           "cdn": [self.cdn_url]}
            if os.geteuid() == 0:
                worker = pwd.getpwnam(WORKER)
                os.chown(self.dir / "cache", worker.pw_uid, worker.pw_gid)
                import grp  # pylint: disable=import-outside-toplevel
                self.params.update(user=WORKER, group=grp.getgrgid(worker.pw_gid).gr_name)
            conf = self.root / "hub-mirror.conf"
            conf.write_text(self.c.hub_mirror.engine_cache_hub_mirror_conf(self.params))
            self.argv = [NGINX, "-p", str(self.root), "-c", str(conf), "-g", "daemon off;"]
            self.command = shell_line(self.argv).replace(str(self.root), "$MIRROR")
            self.spawn()
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> None:
        """nginx started (again) on the configuration written by start(), answering; its probe's log line taken."""
        with open(self.root / "nginx.stderr", "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=err, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                         umask=self.umask)
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(self.url + "/", timeout=5).close()  # pylint: disable=consider-using-with
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and b"llmfleet hub mirror" in exc.read():
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                said = (self.root / "nginx.stderr").read_text(errors="replace") + self.error_log()
                self.stop_nginx()
                raise RuntimeError("nginx did not start: %s" % said[-3000:])
            time.sleep(0.05)
        # the start's probe is not counted (nginx logs it once the answer is sent: wait for the line)
        probe_deadline = time.monotonic() + 5
        while not self.lines() and time.monotonic() < probe_deadline:
            time.sleep(0.02)

    def error_log(self) -> str:
        path = self.dir / "log" / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def lines(self) -> list:
        """The mirror's access log since the last take, one ``(method, path, status, bytes sent, cache status or
        None)`` per request."""
        path = self.dir / "log" / "access.log"
        if not path.exists():
            return []
        with open(path, "rb") as handle:
            handle.seek(self.log_offset)
            raw = handle.read()
        raw = raw[:raw.rfind(b"\n") + 1]
        self.log_offset += len(raw)
        out = []
        for line in raw.decode(errors="replace").splitlines():
            match = re.search(r'"(\S+) (.*?)" (\d{3}) (\d+) cache=(\S*) ', line)
            if match:
                out.append((match.group(1), match.group(2), int(match.group(3)), int(match.group(4)),
                            match.group(5) if match.group(5) not in ("", "-") else None))
        return out

    def take(self) -> dict:
        """The mirror's access log since the last take: requests, bytes sent, by cache status."""
        out = {"requests": 0, "bytes": 0, "cache": {}, "statuses": {}}
        for _method, _path, status, sent, cache in self.lines():
            out["requests"] += 1
            out["bytes"] += sent
            cache = cache or "none"
            out["cache"][cache] = out["cache"].get(cache, 0) + 1
            out["statuses"][str(status)] = out["statuses"].get(str(status), 0) + 1
        return out

    def cache_bytes(self) -> int:
        return du_bytes(self.dir / "cache")

    def stop_nginx(self) -> None:
        """nginx stopped by its PID; its directory (and cache) kept."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        self.stop_nginx()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# The runs.


def rollout(c: Collection, hub: Hub, work: pathlib.Path, n: int, variant: str) -> dict:
    """The lock once, then (through the mirror) the warm, then N nodes one after the other."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    hub.take()
    t0 = time.perf_counter()
    lock = resolve_lock(c, hub.hub_url)
    t_lock = time.perf_counter() - t0
    phases = {"lock": traffic(hub.take(), lock)}
    mirror = None
    out = {"n": n, "variant": variant}
    try:
        endpoint = hub.hub_url
        t_warm = 0.0
        if variant == "mirror":
            mirror = Mirror(c, hub.hub_url, hub.cdn_url).start()
            t1 = time.perf_counter()
            statuses = warm(c, lock, mirror.url)
            t_warm = time.perf_counter() - t1
            phases["warm"] = traffic(hub.take(), lock)
            out["warm"] = {"wall": round(t_warm, 3), "cache_status": statuses, "mirror": mirror.take()}
            endpoint = mirror.url
        walls = []
        results = []
        t2 = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            results.append(stage(c, lock, work / "nodes" / ("node%d" % i) / "models", endpoint))
            walls.append(time.perf_counter() - t)
        t_nodes = time.perf_counter() - t2
        phases["nodes"] = traffic(hub.take(), lock)
        out.update({
            "lock_size": lock["size"],
            "lock_files": [{"path": f["path"], "size": f["size"]} for f in lock["files"]],
            "nodes_complete": sum(1 for r in results if r["complete"]),
            "nodes_bytes_received": sum(r["bytes"] for r in results),
            "nodes_files_downloaded": sum(r["files"] for r in results),
            "hub": _add(*phases.values()),
            "hub_phases": {k: {"requests": v["requests"], "model_bytes": v["model_bytes"]} for k, v in phases.items()},
            "wall": round(t_lock + t_warm + t_nodes, 3),
            "wall_lock": round(t_lock, 3),
            "wall_warm": round(t_warm, 3),
            "wall_nodes": round(t_nodes, 3),
            "node_wall_median": median(walls),
            "node_wall_max": round(max(walls), 3) if walls else None,
            "disk_nodes_bytes": du_bytes(work / "nodes"),
        })
        out["model_copies"] = round(out["hub"]["model_bytes"] / lock["size"], 3)
        if mirror is not None:
            out["mirror"] = mirror.take()
            out["mirror"]["cache_bytes"] = mirror.cache_bytes()
            out["mirror"]["command"] = mirror.command
            out["mirror"]["params"] = {k: v for k, v in mirror.params.items() if k not in ("dir", "token_file", "port")}
    finally:
        if mirror is not None:
            mirror.stop()
    return out


def one_node(c: Collection, hub: Hub, work: pathlib.Path, reps: int) -> dict:
    """Time to a complete snapshot in a fresh dir, from the hub and from a warm mirror (alternated),
    then a run on a complete snapshot (no request)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lock = resolve_lock(c, hub.hub_url)
    mirror = Mirror(c, hub.hub_url, hub.cdn_url).start()
    try:
        warm(c, lock, mirror.url)
        hub.take()
        mirror.take()
        counts = {"from the hub": [], "from the warm mirror": []}

        def side(name, endpoint):
            def fn(i):
                where = work / ("%s-%d" % ("hub" if endpoint == hub.hub_url else "mirror", i)) / "models"
                cpu0 = time.process_time()
                t0 = time.perf_counter()
                done = stage(c, lock, where, endpoint)
                wall = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                if not done["complete"]:
                    raise RuntimeError("the snapshot in %s is not complete" % where)
                counts[name].append({"hub": len(hub.take()["log"]), "mirror": mirror.take()["requests"]})
                return {"wall": wall, "cpu": cpu, "where": where}
            return fn

        samples = alternate(reps, [("from the hub", side("from the hub", hub.hub_url)),
                                   ("from the warm mirror", side("from the warm mirror", mirror.url))])
        out = {"reps": reps, "lock_size": lock["size"], "sides": {}}
        for name, runs in samples.items():
            out["sides"][name] = summary(runs)
            out["sides"][name]["hub_requests"] = [x["hub"] for x in counts[name]]
            out["sides"][name]["mirror_requests"] = [x["mirror"] for x in counts[name]]
        # again on a complete snapshot: the first one from the hub, asked of each endpoint in turn
        complete = samples["from the hub"][0]["where"]
        noop = []
        for i in range(reps):
            endpoint = hub.hub_url if i % 2 == 0 else mirror.url
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            done = stage(c, lock, complete, endpoint)
            noop.append({"wall": time.perf_counter() - t0, "cpu": time.process_time() - cpu0,
                         "changed": done["changed"], "complete": done["complete"]})
        # microseconds: a survey of a complete snapshot takes well under a millisecond
        out["sides"]["complete snapshot, again"] = {
            "runs": len(noop),
            "wall_median": round(statistics.median(r["wall"] for r in noop), 6),
            "cpu_median": round(statistics.median(r["cpu"] for r in noop), 6),
            "wall": [round(r["wall"], 6) for r in noop], "cpu": [round(r["cpu"], 6) for r in noop],
            "hub_requests": [len(hub.take()["log"])], "mirror_requests": [mirror.take()["requests"]],
            "changed": sum(1 for r in noop if r["changed"]),
            "complete": sum(1 for r in noop if r["complete"]),
        }
        for name in ("from the hub", "from the warm mirror"):
            wall = out["sides"][name]["wall_median"]
            out["sides"][name]["mib_per_s"] = round(lock["size"] / MIB / wall, 1) if wall else None
        out["ratio_wall"] = {"mirror/hub": ratio(out["sides"]["from the warm mirror"]["wall_median"],
                                                 out["sides"]["from the hub"]["wall_median"])}
    finally:
        mirror.stop()
    return out


def run(ns=(1, 10, 50), model_mib: float = DEFAULT_MIB, reps: int = 5, work: pathlib.Path | None = None,
        keep: bool = False) -> dict:
    c = Collection()
    work = work or WORK / "models"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = int(model_mib * MIB)
    out = {"name": "models", "model": BENCH_MODEL, "revision": REVISION, "model_mib": model_mib,
           "variants": [{"key": k, "name": name, "how": how} for k, name, how in VARIANTS], "rollouts": [],
           "nodes": "one after the other"}
    with Hub(work / "hub", size) as hub:
        out["hub_command"] = hub.command
        for n in sorted(ns):
            for key, _name, _how in VARIANTS:
                where = work / ("n%d-%s" % (n, key))
                out["rollouts"].append(rollout(c, hub, where, n, key))
                if not keep:
                    shutil.rmtree(where, ignore_errors=True)
        out["one_node"] = one_node(c, hub, work / "one-node", reps)
        urls = (hub.url, hub.cdn_url)
    out["lock_size"] = out["rollouts"][0]["lock_size"] if out["rollouts"] else out["one_node"]["lock_size"]
    out["ratios"] = ratios(out["rollouts"])
    text = json.dumps(out)
    for url, name in zip(urls, ("$UPSTREAM", "$HUB_CDN")):
        text = text.replace(url, name)
    out = json.loads(text.replace(str(REPO) + "/", ""))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def ratios(rollouts: list[dict]) -> dict:
    """Per variant: the hub's model bytes (and requests, wall) at the largest N over the smallest."""
    by_variant = {}
    for r in rollouts:
        by_variant.setdefault(r["variant"], {})[r["n"]] = r
    out = {}
    for variant, by_n in by_variant.items():
        lo, hi = min(by_n), max(by_n)
        if lo == hi:
            continue
        out[variant] = {"n": [lo, hi],
                        "model_bytes": ratio(by_n[hi]["hub"]["model_bytes"], by_n[lo]["hub"]["model_bytes"]),
                        "requests": ratio(by_n[hi]["hub"]["requests"], by_n[lo]["hub"]["requests"]),
                        "wall": ratio(by_n[hi]["wall"], by_n[lo]["wall"])}
    return out


# --------------------------------------------------------------------------------------------
# The page (bench/report.py renders it as section 6).


def _t(seconds) -> str:
    """Seconds, in milliseconds below a tenth of a second."""
    if seconds is None:
        return "n/a"
    return "%.2f ms" % (seconds * 1000) if seconds < 0.1 else "%.2f s" % seconds


def section(models: dict) -> list[str]:
    # pylint: disable=import-outside-toplevel
    from bench.report import _code, _s, _table, _x

    names = {v["key"]: v["name"] for v in models["variants"]}
    size = models["lock_size"]
    out = ["## 6. Model weights: what a rollout takes from the hub, with and without the hub mirror", "",
           "The fake hub's `%s` (one LFS `model.safetensors` and a `config.json`: %s, %d bytes, in its lock)"
           % (models["model"], human_bytes(size), size),
           "staged on N simulated nodes, each in a cache dir of its own, in the role's order: the lock resolved once",
           "on the controller (hf_revision's code), then *from the hub*: each node stages it straight from the hub",
           "and its CDN (model_snapshot's code: `Snapshot`, `Fetcher`); *through the mirror*: a real nginx from the",
           "role's own configuration (`engine_cache_hub_mirror_conf`), started empty for each N as on a first",
           "rollout, filled once by the controller (hf_warm's code), then each node stages from it. The nodes run",
           "%s (what is measured is bytes). The module code runs in the benchmark's process, without Ansible;"
           % models.get("nodes", "one after the other"),
           "the fake hub and nginx each in a process of their own. *model bytes*: bodies of the hub's file answers",
           "(CDN, `/resolve/`, `/api/resolve-cache/`), as the hub's process counted them (the request log and the",
           "lock give the same figure); *hub requests*: its request log, hub and CDN, the lock's model info",
           "included. *received by the nodes*: what the nodes' downloads wrote.", ""]
    rows = []
    for r in models["rollouts"]:
        h = r["hub"]
        kinds = ", ".join("%s %s" % (k, v["requests"]) for k, v in h["by_kind"].items())
        phases = ", ".join("%s %s" % (k, p["requests"]) for k, p in r["hub_phases"].items())
        m = r.get("mirror")
        rows.append([r["n"], names.get(r["variant"], r["variant"]), "%s of %s" % (r["nodes_complete"], r["n"]),
                     "**%s**" % human_bytes(h["model_bytes"]), "**%.2fx**" % r["model_copies"],
                     "%s (%s)" % (h["requests"], phases), kinds, human_bytes(h["bytes"]),
                     human_bytes(r["nodes_bytes_received"]),
                     ("%s (%s), %s sent, %s on disk" % (
                         m["requests"], ", ".join("%s %s" % (k, v) for k, v in sorted(m["cache"].items())),
                         human_bytes(m["bytes"]), human_bytes(m["cache_bytes"]))) if m else "-",
                     "%s (%s + %s + %s)" % (_s(r["wall"]), _s(r["wall_lock"]), _s(r["wall_warm"]), _s(r["wall_nodes"])),
                     _s(r["node_wall_median"]), human_bytes(r["disk_nodes_bytes"])])
    out += _table(["N", "variant", "nodes complete", "model bytes from the hub", "model copies",
                   "hub requests (by phase)", "hub requests by kind", "all hub bytes",
                   "received by the nodes", "mirror: node requests (cache status), sent, cache on disk",
                   "rollout wall (lock + warm + nodes)", "node wall (median)", "disk all nodes"], rows)
    if models.get("ratios"):
        out += ["Growth from the smallest to the largest N, within the same run (expected: N-fold from the hub,"
                " flat through the mirror):", ""]
        out += _table(["variant", "N", "model bytes from the hub", "hub requests", "rollout wall"],
                      [[names.get(k, k), "%s / %s" % (v["n"][1], v["n"][0]), "**%sx**" % _x(v["model_bytes"]),
                        "%sx" % _x(v["requests"]), "%sx" % _x(v["wall"])] for k, v in models["ratios"].items()])
    one = models.get("one_node")
    if one:
        out += ["One node, time to a complete snapshot in a fresh dir (%s runs of each, alternated, medians; the"
                " mirror warm), and the same staging again on a complete snapshot (%s runs; asked of the hub and of"
                " the mirror in turn): *CPU* is the staging process's (hashing, writing, HTTP)." % (one["reps"], one["reps"]),
                ""]
        rows = []
        for name, s in one["sides"].items():
            rows.append([name, s["runs"], _t(s["wall_median"]), _t(s["cpu_median"]),
                         "%s MiB/s" % s["mib_per_s"] if s.get("mib_per_s") else "-",
                         sum(s["hub_requests"]), sum(s["mirror_requests"])])
        out += _table(["staging", "runs", "wall", "CPU", "rate", "hub requests (all runs)",
                       "mirror requests (all runs)"], rows)
        out += ["Wall, mirror over hub: **%s**." % _x(one["ratio_wall"]["mirror/hub"]), ""]
    first = next((r for r in models["rollouts"] if r.get("mirror")), None)
    out += ["Commands (`$UPSTREAM` the fake upstream, its hub under `$UPSTREAM/hub`, `$HUB_CDN` its CDN;"
            " rerun: `.venv/bin/python -m bench.run --only models`, or `-m bench.models --n 1 10 50`):", ""]
    lines = [models["hub_command"]]
    if first:
        lines += ["# the mirror's configuration: engine_cache_hub_mirror_conf(%s) with dir, token_file (no token)"
                  " and a free port" % json.dumps(first["mirror"]["params"], sort_keys=True),
                  first["mirror"]["command"]]
    out += _code(lines)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--model-mib", type=float, default=DEFAULT_MIB, help="size of model.safetensors (MiB)")
    parser.add_argument("--reps", type=int, default=5, help="runs of each side of the one-node timing")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' dirs under build/bench/models")
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "models.json")
    # the fake hub's process (Hub.start)
    parser.add_argument("--serve-hub", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hub-bytes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--packages", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--ready-file", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--sizes-file", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_hub:
        return serve_hub(args.packages, args.hub_bytes, args.ready_file, args.sizes_file)
    data = run(args.n, args.model_mib, args.reps, keep=args.keep)
    write_json(args.json, data)
    for r in data["rollouts"]:
        print("N=%-3s %-7s hub %3s requests, model bytes %s (%.2fx), nodes complete %s, wall %.2f s" % (
            r["n"], r["variant"], r["hub"]["requests"], human_bytes(r["hub"]["model_bytes"]), r["model_copies"],
            r["nodes_complete"], r["wall"]))
    for name, s in data["one_node"]["sides"].items():
        print("one node, %-26s wall %.3f s (median of %s), hub requests %s, mirror requests %s" % (
            name, s["wall_median"], s["runs"], sum(s["hub_requests"]), sum(s["mirror_requests"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
