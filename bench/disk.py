"""Benchmark 3, disk and download per node: what one environment built by uv_engine_env occupies
(the environment, the uv cache), what a second engine version costs beside the first with the
cache kept (files hard-linked from the cache into both environments) and without it (the role's
default, engine_node_keep_cache false), and the bytes each build pulled from the upstream.

Sizes are ``du -s -B1`` (disk usage in bytes) of the named paths together in one invocation, so
a file hard-linked into several of them counts once. Downloads: the fake upstream's request log
(files sized from its catalogue, index pages measured), and for the real PyPI the bytes through
a counting HTTPS proxy on 127.0.0.1 (``HTTPS_PROXY``; TLS records, so bodies plus framing).

    python -m bench.disk [--no-pypi] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys

from bench.common import (
    COLLECTIONS,
    MODULE,
    UV,
    WORK,
    CountingProxy,
    Traffic,
    Upstream,
    ansible_env,
    apparent_bytes,
    content_difference,
    du_bytes,
    ensure_collection_link,
    run_timed,
    system_python,
    write_json,
)
from bench.flow import pypi_cutoff

FAKE = {
    "label": "fake upstream: vllm 0.20.0 (cu13), then 0.15.1 (cu129 on PyPI)",
    "engine": "vllm",
    "versions": [("0.20.0", "cu13", "2026-06-11T12:00:00Z"), ("0.15.1", "cu129", "2026-02-11T12:00:00Z")],
}
PYPI = {"label": "real PyPI: black 24.1.0, then black 24.2.0", "engine": "black",
        "versions": [("24.1.0", "pypi", None), ("24.2.0", "pypi", None)]}


class Builder:
    def __init__(self, work: pathlib.Path, index_url: str | None, upstream: Upstream | None,
                 proxy: CountingProxy | None, timeout: int = 900):
        self.work = work
        self.timeout = timeout
        self.work.mkdir(parents=True, exist_ok=True)
        self.index_url = index_url
        self.upstream = upstream
        self.traffic = Traffic(upstream.url, upstream.catalog()) if upstream else None
        self.proxy = proxy
        self.args_log = []

    def build(self, root: pathlib.Path, engine: str, version: str, build: str, cutoff: str, keep_cache: bool) -> dict:
        path = root / "engines" / engine / ("%s-%s" % (version, build))
        args = {"path": str(path), "engine": engine, "version": version, "build": build, "exclude_newer": cutoff,
                "python": system_python(), "python_preference": "only-system", "uv": str(UV), "gpu_check": False,
                "cache_dir": str(root / "cache" / "uv"), "keep_cache": keep_cache, "timeout": self.timeout}
        if self.index_url:
            args["index_url"] = self.index_url
        args_file = self.work / ("args-%d.json" % len(self.args_log))
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        self.args_log.append(args)
        env = ansible_env(self.work, PYTHONPATH=str(COLLECTIONS))
        if self.proxy:
            env["HTTPS_PROXY"] = self.proxy.url
            self.proxy.take()
        if self.upstream:
            self.upstream.clear_log()
        res = run_timed([sys.executable, MODULE, args_file], env=env, cwd=self.work).check("uv_engine_env")
        result = json.loads(res.out.strip().splitlines()[-1])
        if result.get("failed") or not result.get("changed"):
            raise RuntimeError("uv_engine_env: %s" % json.dumps(result)[:3000])
        if self.upstream:
            pulled = self.traffic.summarize(self.upstream.log())
        else:
            pulled = self.proxy.take()
        return {"path": path, "download": pulled, "packages": len(result["lock"]["packages"]),
                "shared": result.get("shared"),
                "steps": {st["name"]: st.get("seconds") for st in result.get("steps") or []}}


def scenario(builder: Builder, root: pathlib.Path, case: dict, keep_cache: bool) -> dict:
    engine = case["engine"]
    cache = root / "cache" / "uv"
    (v1, b1, c1), (v2, b2, c2) = case["versions"]
    first = builder.build(root, engine, v1, b1, c1, keep_cache)
    after_first = {
        "env": du_bytes(first["path"]),
        "env_apparent": apparent_bytes(first["path"]),
        "cache": du_bytes(cache),
        "root": du_bytes(root),
    }
    second = builder.build(root, engine, v2, b2, c2, keep_cache)
    both = du_bytes(first["path"], second["path"])
    after_second = {
        "env": du_bytes(second["path"]),
        "envs_together": both,
        "envs_shared": du_bytes(first["path"]) + du_bytes(second["path"]) - both,
        "root": du_bytes(root),
    }
    # the first environment pruned (engine_node_keep 0): what stays is the second one, and the cache
    shutil.rmtree(first["path"])
    pruned = du_bytes(root)
    return {
        "keep_cache": keep_cache,
        "first": {"version": v1, "packages": first["packages"], "download": first["download"], **after_first},
        "second": {"version": v2, "packages": second["packages"], "download": second["download"], **after_second},
        "second_costs_disk": after_second["root"] - after_first["root"],
        "root_after_pruning_first": pruned,
    }


def bench_case(work: pathlib.Path, case: dict, index_url, upstream, proxy) -> dict:
    builder = Builder(work, index_url, upstream, proxy)
    out = {"case": case["label"], "scenarios": []}
    for keep_cache in (True, False):
        root = work / ("keep" if keep_cache else "drop")
        out["scenarios"].append(scenario(builder, root, case, keep_cache))
        shutil.rmtree(root, ignore_errors=True)
    out["module_args"] = [{k: v for k, v in a.items() if k not in ("path", "cache_dir")} for a in builder.args_log[:2]]
    return out


# Real vLLM upgrades, resolved (not installed: several GB each) for Python 3.12 on x86_64 glibc 2.35.
VLLM_VERSIONS = ("0.11.0", "0.11.1", "0.11.2", "0.12.0")
VLLM_TARGET = ("3.12", "x86_64-manylinux_2_35")


def vllm_lock(work: pathlib.Path, version: str, cutoff: str) -> dict:
    """The wheels uv picks for vllm==version as of cutoff: {url: size} (a pylock.toml lists each with its size)."""
    import tomllib  # pylint: disable=import-outside-toplevel

    out = work / ("pylock.vllm%s.toml" % version.replace(".", ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update({"UV_CACHE_DIR": str(work / "cache"), "UV_NO_CONFIG": "1"})
    argv = [UV, "pip", "compile", "-", "--quiet", "--exclude-newer", cutoff, "--format", "pylock.toml",
            "--python-version", VLLM_TARGET[0], "--python-platform", VLLM_TARGET[1], "--output-file", out]
    run_timed(argv, env=env, data="vllm==%s\n" % version, cwd=work, timeout=900).check("uv pip compile vllm==%s" % version)
    doc = tomllib.loads(out.read_text())
    files = {}
    for package in doc["packages"]:
        for wheel in package.get("wheels", []) or [package.get("sdist", {})]:
            if wheel.get("url"):
                files[wheel["url"]] = wheel.get("size") or 0
    return {"packages": len(doc["packages"]), "files": files,
            "command": "echo vllm==%s | uv pip compile - --exclude-newer %s --format pylock.toml --python-version %s "
                       "--python-platform %s -o pylock.toml" % (version, cutoff, VLLM_TARGET[0], VLLM_TARGET[1])}


def vllm_upgrades(work: pathlib.Path, versions=VLLM_VERSIONS) -> dict:
    """What each upgrade of a real vLLM downloads with the uv cache kept (only files the previous
    version did not have) and dropped (everything again)."""
    work.mkdir(parents=True, exist_ok=True)
    locks = {v: vllm_lock(work, v, pypi_cutoff("vllm", v)) for v in versions}
    rows = []
    for old, new in zip(versions, versions[1:]):
        a, b = locks[old]["files"], locks[new]["files"]
        shared = sum(size for url, size in b.items() if url in a)
        total = sum(b.values())
        rows.append({"from": old, "to": new, "packages": locks[new]["packages"],
                     "shared_files": sum(1 for url in b if url in a), "files": len(b),
                     "download_cache_dropped": total, "download_cache_kept": total - shared,
                     "saved": round(shared / total, 3) if total else None})
    return {"target": "Python %s, %s" % VLLM_TARGET,
            "versions": {v: {"packages": l["packages"], "bytes": sum(l["files"].values())} for v, l in locks.items()},
            "upgrades": rows, "commands": [l["command"] for l in locks.values()]}


# Two adjacent real vLLM releases installed one after the other under one node root, as the role
# does (uv cache dropped after each build, share_files on, its default): ~5 GB of downloads and
# ~11 GB of disk each, so ~25 GB free are needed.
VLLM_SHARE = ("vllm", ("0.11.1", "cu129"), ("0.11.2", "cu129"))


def vllm_share(work: pathlib.Path, proxy: CountingProxy, differing: bool = False, timeout: int = 900) -> dict:
    """Disk of two kept environments of adjacent real vLLM versions: each alone, both together
    (files shared by hard links count once), and the copy they would be without sharing. With
    ``differing`` (bench.real), also what the second holds whose content is nowhere in the first
    (``content_difference``: the floor of any file-level sharing), beside what share_files added."""
    engine, (v1, b1), (v2, b2) = VLLM_SHARE
    builder = Builder(work, None, None, proxy, timeout)
    root = work / "root"
    try:
        first = builder.build(root, engine, v1, b1, pypi_cutoff(engine, v1), False)
        first_env = du_bytes(first["path"])
        second = builder.build(root, engine, v2, b2, pypi_cutoff(engine, v2), False)
        second_env = du_bytes(second["path"])
        together = du_bytes(first["path"], second["path"])
        difference = content_difference(first["path"], second["path"]) if differing else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "first": {"version": "%s-%s" % (v1, b1), "packages": first["packages"], "env": first_env,
                  "download": first["download"]["bytes"]},
        "second": {"version": "%s-%s" % (v2, b2), "packages": second["packages"], "env": second_env,
                   "download": second["download"]["bytes"], "shared": second["shared"],
                   "share_seconds": second["steps"].get("share")},
        "together": together,
        "copied": first_env + second_env,
        "together_over_one": round(together / second_env, 3),
        "module_args": {k: v for k, v in builder.args_log[-1].items() if k not in ("path", "cache_dir")},
    }
    if difference is not None:
        out["share_added"] = together - first_env
        out["differing"] = difference
    return out


def run(pypi: bool = True, work: pathlib.Path | None = None) -> dict:
    ensure_collection_link()
    work = work or WORK / "disk"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = {"name": "disk", "cases": []}
    with Upstream(work / "upstream") as up:
        data = bench_case(work / "fake", FAKE, up.url + "/simple", up, None)
        out["cases"].append(json.loads(json.dumps(data).replace(up.url, "$UPSTREAM")))
    if pypi:
        case = dict(PYPI, versions=[(v, b, pypi_cutoff(PYPI["engine"], v)) for v, b, _c in PYPI["versions"]])
        proxy = CountingProxy().start()
        try:
            out["cases"].append(bench_case(work / "pypi", case, None, None, proxy))
            out["vllm_share"] = vllm_share(work / "vllm-share", proxy)
        finally:
            proxy.stop()
        out["vllm"] = vllm_upgrades(work / "vllm")
    shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.disk", description=__doc__.splitlines()[0])
    parser.add_argument("--no-pypi", action="store_true", help="leave out the real-PyPI case")
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "disk.json")
    args = parser.parse_args(argv)
    data = run(not args.no_pypi)
    write_json(args.json, data)
    print(json.dumps(data, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
