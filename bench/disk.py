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
                 proxy: CountingProxy | None):
        self.work = work
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
                "cache_dir": str(root / "cache" / "uv"), "keep_cache": keep_cache, "timeout": 900}
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
        return {"path": path, "download": pulled, "packages": len(result["lock"]["packages"])}


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
    return {
        "keep_cache": keep_cache,
        "first": {"version": v1, "packages": first["packages"], "download": first["download"], **after_first},
        "second": {"version": v2, "packages": second["packages"], "download": second["download"], **after_second},
        "second_costs_disk": after_second["root"] - after_first["root"],
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
        finally:
            proxy.stop()
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
