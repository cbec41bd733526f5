"""Benchmark 5: the rollout of N fresh nodes through one fleet lock and one cache host, side by
side with today's per-node flow, in the same run, against the fake upstream.

For each N, three rollouts of ``playbooks/site.yml`` on fresh simulated nodes (as in section 4):

- ``per node``: today's flow; each node resolves its own lock and downloads every wheel itself;
- ``fleet lock``: ``engine_node_fleet_lock_dir`` set: the controller compiles one lock per group
  of nodes once, against the upstream; each node installs it, still from the upstream;
- ``fleet lock + cache``: also ``engine_node_cache_url``: the nodes install that lock through a
  devpi-server on 127.0.0.1 (mirror indexes of the upstream's PyPI and torch indexes, a stage
  index for GitHub wheels), fresh for each N, so it starts empty as on a first rollout.

Each rollout: requests and bytes that reached the upstream (its request log, by kind), those of
the uv index (tests/uv_index.py, apart), how many times each wheel file came from the upstream,
wall time, disk of all node roots; with the cache also the devpi's requests and its serverdir's
disk. The devpi-server comes from ``roles/engine_cache/files/devpi-server.txt`` (hashes, no
builds) into a venv kept between runs (``build/bench/devpi/venv``); it runs as a subprocess
with a random root password that is never written to a file, and is stopped by its PID.

    python -m bench.cache [--n 1 10 50] [--variants per-node fleet-lock cache] [--keep] [--json F]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from bench.common import (
    BIN,
    REPO,
    UV,
    WORK,
    Traffic,
    Upstream,
    ansible_env,
    du_bytes,
    ensure_collection_link,
    ratio,
    rel,
    run_timed,
    shell_line,
    system_python,
    write_json,
)
from bench.fleet import CALLBACKS, FORKS, SITE, VERSION, Fleet, UvTraffic, _scrub, per_node, uv_index_server

DEVPI_REQUIREMENTS = REPO / "roles" / "engine_cache" / "files" / "devpi-server.txt"
DEVPI_VENV = WORK / "devpi" / "venv"
VARIANTS = (
    ("per node", "per-node", "playbooks/site.yml as it is: each node resolves its own lock and downloads every wheel"),
    ("fleet lock", "fleet-lock", "engine_node_fleet_lock_dir: one lock per group compiled once on the controller;"
                                 " the nodes install it from the upstream"),
    ("fleet lock + cache", "cache", "engine_node_fleet_lock_dir and engine_node_cache_url: the nodes install the"
                                    " fleet lock through one devpi-server, fresh"),
    ("fleet lock + cache, list loaded", "cache-warm",
     "the same, with the devpi's list of PyPI projects loaded before the play (one GET of a simple page through"
     " it, as a cache's setup could do)"),
)
WHEEL_KINDS = ("pypi_files", "torch_files", "github_objects")


# --------------------------------------------------------------------------------------------
# devpi-server: its venv, and one server.


def devpi_venv(path: pathlib.Path = DEVPI_VENV) -> dict:
    """The venv of devpi-server from the pinned requirements (kept between runs while they are
    unchanged). Returns its path, whether it was built now, and the commands that build it."""
    digest = hashlib.sha256(DEVPI_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = path / ".bench-requirements.sha256"
    commands = [
        shell_line([rel(UV), "venv", "-p", system_python(), rel(path)]),
        shell_line([rel(UV), "pip", "install", "-p", rel(path / "bin" / "python"), "--require-hashes", "--no-deps",
                    "--no-build", "-r", rel(DEVPI_REQUIREMENTS)]),
    ]
    built = False
    if not (stamp.exists() and stamp.read_text().strip() == digest and (path / "bin" / "devpi-server").exists()):
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        for argv in ([UV, "venv", "-q", "-p", system_python(), path],
                     [UV, "pip", "install", "-q", "-p", path / "bin" / "python", "--require-hashes", "--no-deps",
                      "--no-build", "-r", DEVPI_REQUIREMENTS]):
            proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False,
                                  env=_env(), timeout=900)
            if proc.returncode != 0:
                raise RuntimeError("building the devpi-server venv failed: %s\n%s" % (shell_line(argv), proc.stderr[-4000:]))
        stamp.write_text(digest + "\n")
        built = True
    version = subprocess.run([str(path / "bin" / "devpi-server"), "--version"], capture_output=True, text=True,
                             check=True, env=_env()).stdout.strip()
    return {"path": path, "built_now": built, "commands": commands, "devpi_server": version}


def _env() -> dict:
    """The environment of the devpi processes: no proxy for 127.0.0.1, no user config of uv."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("UV_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Devpi:
    """One devpi-server on 127.0.0.1 in ``serverdir``, mirroring the fake upstream."""

    INDEXES = ("root/pypi", "root/torch-cu129", "root/torch-cu130", "root/github")

    def __init__(self, venv: pathlib.Path, serverdir: pathlib.Path):
        self.venv = venv
        self.serverdir = serverdir
        self.logfile = serverdir.parent / (serverdir.name + ".log")
        self.proc = None
        self.url = None
        self.auth = None
        self.commands = []

    def _bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def start(self, upstream_url: str) -> "Devpi":
        shutil.rmtree(self.serverdir, ignore_errors=True)
        self.serverdir.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(24)  # for this run only, never written to a file
        hashed = subprocess.run(
            [self._bin("python"), "-c",
             "import sys; from devpi_server.auth import hash_password; print(hash_password(sys.stdin.read()))"],
            input=password, capture_output=True, text=True, check=True, env=_env()).stdout.strip()
        init = [self._bin("devpi-init"), "--serverdir", str(self.serverdir), "--no-root-pypi", "--root-passwd-hash", hashed]
        proc = subprocess.run(init, capture_output=True, text=True, check=False, env=_env(), timeout=300)
        if proc.returncode != 0:
            raise RuntimeError("devpi-init failed: %s" % (proc.stdout + proc.stderr)[-4000:])
        port = free_port()
        argv = [self._bin("devpi-server"), "--serverdir", str(self.serverdir), "--host", "127.0.0.1", "--port", str(port)]
        self.commands = [
            "printf %s \"$PASSWORD\" | " + shell_line([
                rel(self._bin("python")), "-c",
                "import sys; from devpi_server.auth import hash_password; print(hash_password(sys.stdin.read()))"]),
            shell_line([rel(a) for a in init[:-1]]) + " \"$HASH\"",
            shell_line([rel(a) for a in argv[:-1]]) + " $PORT &",
        ]
        with open(self.logfile, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=_env(),  # pylint: disable=consider-using-with
                                         start_new_session=True)
        self.url = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("devpi-server exited %s: %s" % (self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("devpi-server did not answer in 180 s: %s" % self.log_tail())
            time.sleep(0.3)
        token = self._call("POST", "/+login", {"user": "root", "password": password})["result"]["password"]
        self.auth = base64.b64encode(("root:" + token).encode()).decode()
        up = upstream_url.rstrip("/")
        self._call("PUT", "/root/pypi", {"type": "mirror", "mirror_url": up + "/simple/"})
        for cuda in ("cu129", "cu130"):
            self._call("PUT", "/root/torch-" + cuda, {"type": "mirror", "mirror_url": "%s/torch/%s/" % (up, cuda)})
        self._call("PUT", "/root/github", {"type": "stage", "bases": [], "volatile": False})
        self.commands += [
            "curl -s -X POST $CACHE/+login -H 'Content-Type: application/json' -H 'Accept: application/json'"
            " -d '{\"user\": \"root\", \"password\": \"'\"$PASSWORD\"'\"}'  # result.password: TOKEN",
            "AUTH=$(printf 'root:%s' \"$TOKEN\" | base64 -w0)",
        ] + ["curl -s -X PUT $CACHE/%s -H \"X-Devpi-Auth: $AUTH\" -H 'Content-Type: application/json' -d '%s'"
             % (name, json.dumps(body)) for name, body in (
                 ("root/pypi", {"type": "mirror", "mirror_url": "$UPSTREAM/simple/"}),
                 ("root/torch-cu129", {"type": "mirror", "mirror_url": "$UPSTREAM/torch/cu129/"}),
                 ("root/torch-cu130", {"type": "mirror", "mirror_url": "$UPSTREAM/torch/cu130/"}),
                 ("root/github", {"type": "stage", "bases": [], "volatile": False}))]
        return self

    def _call(self, method: str, path: str, body) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.auth:
            headers["X-Devpi-Auth"] = self.auth
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError("devpi %s %s answered %s: %s" % (method, path, exc.code, exc.read()[:2000])) from exc
        return json.loads(raw) if raw else {}

    def log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def requests_served(self) -> dict:
        """Requests in devpi-server's log (one INFO line per request), by kind of path."""
        kinds = {}
        try:
            text = self.logfile.read_text(errors="replace")
        except OSError:
            return kinds
        for match in re.finditer(r"\[req\d+\] (GET|HEAD|POST|PUT|PATCH|DELETE) (\S+)", text):
            path = match.group(2)
            kind = ("login" if path.startswith("/+login") else "files" if "/+f/" in path or "/+e/" in path
                    else "simple" if "/+simple/" in path else "other")
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    def stored_wheels(self) -> list[str]:
        """Names of the wheel files the devpi holds (it keeps them under <serverdir>/+files)."""
        return sorted({p.name for p in self.serverdir.rglob("*.whl")})

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


# --------------------------------------------------------------------------------------------
# The rollouts.


def wheel_fetches(log: list[dict]) -> dict:
    """How many times each wheel file came from the upstream (GET, 200; PEP 658 metadata apart)."""
    counts = {}
    for entry in log:
        path = urllib.parse.unquote(entry["path"])
        name = path.rsplit("/", 1)[-1]
        if "/github-objects/" in path or path.startswith("/github-objects/"):
            name = (urllib.parse.parse_qs(entry.get("query") or "").get("filename") or [name])[0]
        if entry.get("method", "GET") != "GET" or entry.get("status") != 200 or not name.endswith(".whl"):
            continue
        counts[name] = counts.get(name, 0) + 1
    return {"files": len(counts), "fetches": sum(counts.values()), "max_per_file": max(counts.values(), default=0),
            "by_file": dict(sorted(counts.items()))}


def play(fleet: Fleet, *args: str) -> dict:
    """``Fleet.play`` of site.yml that does not stop at a failed node: its exit status, the nodes
    that failed (from the recap) and the tail of its output come with the figures."""
    fleet.runs += 1
    count_out = fleet.work / ("count-%d.json" % fleet.runs)
    extra = {"ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS), "ANSIBLE_CALLBACKS_ENABLED": "bench_count",
             "BENCH_COUNT_OUT": str(count_out), "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_FORKS": str(FORKS)}
    argv = [BIN / "ansible-playbook", "-i", fleet.inventory, SITE, *args]
    fleet.upstream.clear_log()
    fleet.uv_index.requests.clear()
    res = run_timed(argv, env=ansible_env(fleet.work, **extra), cwd=REPO, timeout=3600)
    (fleet.work / ("play-%d.out" % fleet.runs)).write_text(res.out + res.err)
    failed = sorted(line.split()[0] for line in res.out.splitlines()
                    if " : ok=" in line and (" failed=0" not in line or " unreachable=0" not in line))
    shown = {k: v for k, v in extra.items() if k != "BENCH_COUNT_OUT"}
    shown["ANSIBLE_CALLBACK_PLUGINS"] = rel(CALLBACKS)
    return {"wall": res.wall, "cpu": res.cpu, "rc": res.rc, "failed_hosts": failed,
            "counts": json.loads(count_out.read_text()) if count_out.exists() else None,
            "upstream_log": fleet.upstream.log(), "uv_requests": list(fleet.uv_index.requests),
            "command": shell_line([rel(a) for a in argv], shown),
            "errors": _errors(res.out) if res.rc else []}


def _errors(out: str) -> list[str]:
    """The first lines of each distinct failure message in a play's output."""
    seen = []
    for match in re.finditer(r'^fatal: \[[^\]]+\]: FAILED! => ', out, re.M):
        text = out[match.end():match.end() + 6000]
        msg = re.search(r'"msg": "((?:[^"\\]|\\.)*)"', text)
        line = re.sub(r"/nodes/node\d+/", "/nodes/NODE/", (msg.group(1) if msg else text.split("\n", 1)[0]))[:400]
        if line not in seen:
            seen.append(line)
    return seen[:5]


def python_version() -> str:
    return subprocess.run([system_python(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def rollout(work: pathlib.Path, n: int, variant: str, up: Upstream, uv_index, traffic: Traffic,
            uv_traffic: UvTraffic, venv: pathlib.Path | None) -> dict:
    """One rollout of site.yml on ``n`` fresh nodes under ``variant``."""
    shutil.rmtree(work, ignore_errors=True)
    fleet = Fleet(work, n, up, uv_index)
    extra = {}
    if variant in ("fleet-lock", "cache", "cache-warm"):
        extra["engine_node_fleet_lock_dir"] = str(work / "locks")
        extra["engine_node_fleet_lock_python"] = python_version()
    devpi = None
    try:
        if variant in ("cache", "cache-warm"):
            devpi = Devpi(venv, work / "devpi" / "server").start(up.url)
            extra["engine_node_cache_url"] = devpi.url
            if variant == "cache-warm":
                with urllib.request.urlopen(devpi.url + "/root/pypi/+simple/vllm/", timeout=120) as resp:
                    resp.read()
                up.clear_log()
            before = devpi.requests_served()
        args = ()
        if extra:  # a file: rel() of the command line would take a URL in it for a path
            (work / "vars.json").write_text(json.dumps(extra, indent=1, sort_keys=True) + "\n")
            args = ("-e", "@%s" % (work / "vars.json"))
        played = play(fleet, *args)
        currents = {name: os.readlink(root / "engines" / "vllm" / "current")
                    for name, root in fleet.roots.items() if (root / "engines" / "vllm" / "current").is_symlink()}
        converged = sorted(name for name, target in currents.items() if target == "%s-cu13" % VERSION)
        if not converged or played["counts"] is None:
            raise RuntimeError("the %s rollout of %s nodes converged none (exit %s; output in %s): %s" % (
                variant, n, played["rc"], fleet.work, played["errors"]))
        out = {
            "variant": variant,
            "n": n,
            "converged": len(converged),
            "failed_hosts": played["failed_hosts"],
            "errors": played["errors"],
            "wall": round(played["wall"], 3),
            "cpu": round(played["cpu"], 3),
            "upstream": traffic.summarize(played["upstream_log"]),
            "wheels_from_upstream": wheel_fetches(played["upstream_log"]),
            "uv_index": uv_traffic.summarize(played["uv_requests"]),
            "disk_roots_bytes": du_bytes(*fleet.roots.values()),
            "per_node": per_node(played["counts"]),
            "command": played["command"],
            "extra_vars": extra,
        }
        if extra:
            out["locks"] = sorted(p.name for p in (work / "locks").glob("*.txt"))
            if len(out["locks"]) != 1:
                raise RuntimeError("the %s rollout compiled %s locks, not one: %s" % (variant, len(out["locks"]), out["locks"]))
        if devpi is not None:
            after = devpi.requests_served()
            out["cache"] = {
                "requests": {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after) if after.get(k, 0) - before.get(k, 0)},
                "serverdir_bytes": du_bytes(devpi.serverdir),
                "wheels_stored": devpi.stored_wheels(),
                "commands": devpi.commands,
            }
            out["cache"]["requests_total"] = sum(out["cache"]["requests"].values())
            out["_cache_url"] = devpi.url
    finally:
        if devpi is not None:
            devpi.stop()
    return out


def run(ns=(1, 10, 50), variants=("per-node", "fleet-lock", "cache", "cache-warm"), work: pathlib.Path | None = None,
        keep: bool = False, venv: pathlib.Path = DEVPI_VENV) -> dict:
    ensure_collection_link()
    work = work or WORK / "cache"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = {"name": "cache", "variants": [{"key": key, "name": name, "how": how} for name, key, how in VARIANTS
                                         if key in variants], "rollouts": []}
    venv_info = devpi_venv(venv) if {"cache", "cache-warm"} & set(variants) else None
    if venv_info:
        out["devpi"] = {"venv": rel(venv_info["path"]), "built_now": venv_info["built_now"],
                        "commands": venv_info["commands"], "version": venv_info["devpi_server"],
                        "requirements": rel(DEVPI_REQUIREMENTS)}
    uv_index = uv_index_server()
    try:
        with Upstream(work / "upstream") as up:
            out["upstream_command"] = up.command
            traffic = Traffic(up.url, up.catalog())
            uv_traffic = UvTraffic(uv_index)
            for n in sorted(ns):
                for _name, key, _how in VARIANTS:
                    if key not in variants:
                        continue
                    where = work / ("n%d-%s" % (n, key))
                    result = rollout(where, n, key, up, uv_index, traffic, uv_traffic,
                                     venv_info["path"] if venv_info else None)
                    cache_url = result.pop("_cache_url", None)
                    result = _scrub(result, up.url, uv_index.url)
                    if cache_url:
                        result = json.loads(json.dumps(result).replace(cache_url, "$CACHE"))
                    out["rollouts"].append(result)
                    if not keep:
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        uv_index.stop()
    out["ratios"] = ratios(out["rollouts"])
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def ratios(rollouts: list[dict]) -> dict:
    """Per variant: upstream bytes (and requests, wall) of the largest N over those of the smallest."""
    out = {}
    by_variant = {}
    for r in rollouts:
        by_variant.setdefault(r["variant"], {})[r["n"]] = r
    for variant, by_n in by_variant.items():
        lo, hi = min(by_n), max(by_n)
        if lo == hi:
            continue
        out[variant] = {"n": [lo, hi],
                        "upstream_bytes": ratio(by_n[hi]["upstream"]["bytes"], by_n[lo]["upstream"]["bytes"]),
                        "upstream_requests": ratio(by_n[hi]["upstream"]["requests"], by_n[lo]["upstream"]["requests"]),
                        "wall": ratio(by_n[hi]["wall"], by_n[lo]["wall"])}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--variants", nargs="+", choices=[k for _n, k, _h in VARIANTS],
                        default=[k for _n, k, _h in VARIANTS])
    parser.add_argument("--keep", action="store_true", help="keep the simulated nodes under build/bench/cache")
    parser.add_argument("--devpi-venv", type=pathlib.Path, default=DEVPI_VENV)
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "cache.json")
    args = parser.parse_args(argv)
    data = run(args.n, args.variants, keep=args.keep, venv=args.devpi_venv)
    write_json(args.json, data)
    print(json.dumps({k: v for k, v in data.items() if k != "rollouts"}, indent=2))
    for r in data["rollouts"]:
        print("N=%-3s %-10s wall %7.2f s upstream %s requests %s bytes, wheels max %s per file, uv %s bytes" % (
            r["n"], r["variant"], r["wall"], r["upstream"]["requests"], r["upstream"]["bytes"],
            r["wheels_from_upstream"]["max_per_file"], r["uv_index"]["bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
