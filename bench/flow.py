"""Benchmark 1, flow overhead: one environment built by uv_engine_env against the same environment
built by the raw uv commands of the reference flow (uv venv --relocatable, uv pip compile
--generate-hashes --exclude-newer, uv pip install --require-hashes --no-deps, import check).

Sides, alternated within each repetition:

- ``raw``: the four commands, one after the other (with a cold cache, the cache is removed at the
  end, as the reference flow does after a success);
- ``module``: the module run as a program (``python uv_engine_env.py args.json``), as Ansible runs
  it on a node, without Ansible: the module's own cost;
- ``ansible``: ``ansible localhost -m llmfleet.engines.uv_engine_env -a <json>``: what one task
  costs, Ansible's start, module transfer and result included.

Cases: the fake upstream (vllm 0.20.0 with its fake torch and dependency) and, unless
``--no-pypi``, the real PyPI with a small real package (black 24.1.0 and five dependencies).
Cache cold (an empty uv cache each run) and warm (a cache filled once before, kept). Then the
no-op re-run of an up-to-date environment, against the floor of any task (``ansible.builtin.stat``).

    python -m bench.flow [--reps 5] [--pypi-reps 3] [--no-pypi] [--json F]
"""

from __future__ import annotations

import argparse
import datetime
import functools
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
    Upstream,
    alternate,
    ansible_env,
    ensure_collection_link,
    http_json,
    median,
    ratio,
    rel,
    run_timed,
    shell_line,
    summary,
    system_python,
    write_json,
)

FAKE = {"label": "fake upstream: vllm 0.20.0 (vllm, torch, llmfleet-fakedep)", "engine": "vllm",
        "version": "0.20.0", "import": "vllm", "exclude_newer": "2026-06-11T12:00:00Z"}
PYPI = {"label": "real PyPI: black 24.1.0 (black + 5 dependencies)", "engine": "black", "version": "24.1.0",
        "import": "black"}
SIDES = ("raw", "module", "ansible")
UV_STEPS = ("venv", "resolve", "install", "verify")


@functools.lru_cache(maxsize=None)
def pypi_project(project: str) -> dict:
    return http_json("https://pypi.org/pypi/%s/json" % project, timeout=120)


def pypi_cutoff(project: str, version: str) -> str:
    """The reference flow's cut-off: the release's last upload on PyPI plus 24 h."""
    stamps = [datetime.datetime.fromisoformat(f["upload_time_iso_8601"].replace("Z", "+00:00"))
              for f in pypi_project(project)["releases"][version]]
    return (max(stamps) + datetime.timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Flow:
    def __init__(self, work: pathlib.Path, case: dict, index_url: str | None):
        self.work = work
        self.work.mkdir(parents=True, exist_ok=True)
        self.case = case
        self.index_url = index_url
        self.python = system_python()
        self.commands: dict[str, list[str]] = {}

    # -- the raw uv commands ----------------------------------------------------------------

    def raw_argvs(self, env_dir: pathlib.Path):
        py = env_dir / "bin" / "python"
        lock = env_dir / "requirements.lock"
        index = ["--index-url", self.index_url] if self.index_url else []
        return [
            ([UV, "venv", "--relocatable", "--quiet", "--python", self.python, env_dir], None),
            ([UV, "pip", "compile", "--generate-hashes", "--quiet", "--exclude-newer", self.case["exclude_newer"],
              *index, "--python", py, "--output-file", lock, "-"], "%s==%s\n" % (self.case["engine"], self.case["version"])),
            ([UV, "pip", "install", "--quiet", "--python", py, "--require-hashes", "--no-deps", "-r", lock, *index], None),
            ([py, "-I", "-c", "import %s; print(%s.__version__)" % (self.case["import"], self.case["import"])], None),
        ]

    def raw(self, env_dir: pathlib.Path, cache: pathlib.Path, drop_cache: bool) -> dict:
        # the environment the module's commands get too (the machine's, less uv's own settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "ANSIBLE_"))}
        env.update({"UV_CACHE_DIR": str(cache), "UV_NO_CONFIG": "1", "UV_PYTHON_PREFERENCE": "only-system",
                    "NO_COLOR": "1"})
        wall = cpu = 0.0
        lines = []
        argvs = self.raw_argvs(env_dir)
        if drop_cache:
            argvs.append((["rm", "-rf", cache], None))
        for argv, data in argvs:
            res = run_timed(argv, env=env, data=data, cwd=self.work).check("raw flow")
            wall += res.wall
            cpu += res.cpu
            lines.append(shell_line(argv) + (" <<< %r" % data.strip() if data else ""))
        self.commands.setdefault("raw", ["export " + shell_line([], {k: v for k, v in env.items() if k.startswith("UV_")})] + lines)
        return {"wall": wall, "cpu": cpu}

    # -- the module -------------------------------------------------------------------------

    def module_args(self, env_dir: pathlib.Path, cache: pathlib.Path, keep_cache: bool) -> dict:
        args = {"path": str(env_dir), "engine": self.case["engine"], "version": self.case["version"],
                "exclude_newer": self.case["exclude_newer"], "python": self.python,
                "python_preference": "only-system", "uv": str(UV), "gpu_check": False,
                "cache_dir": str(cache), "keep_cache": keep_cache, "timeout": 900}
        if self.index_url:
            args["index_url"] = self.index_url
        return args

    def module(self, args: dict, name: str, expect_changed: bool = True) -> dict:
        args_file = self.work / ("args-%s.json" % name)
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        env = ansible_env(self.work, PYTHONPATH=str(COLLECTIONS))
        argv = [sys.executable, MODULE, args_file]
        res = run_timed(argv, env=env, cwd=self.work).check("uv_engine_env as a program")
        result = json.loads(res.out.strip().splitlines()[-1])
        if result.get("failed") or result.get("changed") is not expect_changed:
            raise RuntimeError("uv_engine_env: %s" % json.dumps(result)[:3000])
        self.commands.setdefault("module" if expect_changed else "module (no-op)", [
            "PYTHONPATH=build/collections %s %s %s" % (rel(sys.executable), rel(MODULE), "args.json"),
            "# args.json: " + json.dumps({"ANSIBLE_MODULE_ARGS": args})])
        return {"wall": res.wall, "cpu": res.cpu, "steps": result.get("steps", [])}

    def adhoc(self, module: str, args: dict, expect_changed) -> dict:
        argv = [pathlib.Path(sys.executable).parent / "ansible", "localhost", "-m", module, "-a", json.dumps(args)]
        res = run_timed(argv, env=ansible_env(self.work), cwd=self.work).check("ansible localhost -m " + module)
        text = res.out.split("=>", 1)[1] if "=>" in res.out else "{}"
        result = json.loads(text)
        if result.get("failed") or (expect_changed is not None and result.get("changed") is not expect_changed):
            raise RuntimeError("ansible -m %s: %s" % (module, res.out[-3000:]))
        key = "ansible " + module.rsplit(".", 1)[-1] + ("" if expect_changed else " (no-op)")
        self.commands.setdefault(key, [shell_line([rel(argv[0]), *argv[1:]])])
        return {"wall": res.wall, "cpu": res.cpu, "steps": result.get("steps", [])}


def _uv_seconds(samples) -> float | None:
    """Median seconds the module spent in its uv commands and the import check."""
    sums = []
    for sample in samples:
        steps = {s["name"]: s["seconds"] for s in sample.get("steps", [])}
        if steps:
            sums.append(sum(steps.get(name, 0) for name in UV_STEPS))
    return median(sums)


def bench_case(work: pathlib.Path, case: dict, index_url, reps: int) -> list[dict]:
    flow = Flow(work, case, index_url)
    results = []
    for cache_state in ("cold", "warm"):
        base = work / cache_state
        warm_caches = {side: base / ("cache-" + side) for side in SIDES}
        if cache_state == "warm":
            # fill each side's cache once, with a build that is not timed
            flow.raw(base / "prime-raw", warm_caches["raw"], drop_cache=False)
            flow.module(flow.module_args(base / "prime-module", warm_caches["module"], True), "prime-module")
            flow.module(flow.module_args(base / "prime-ansible", warm_caches["ansible"], True), "prime-ansible")

        def cache_for(side, i):
            return warm_caches[side] if cache_state == "warm" else base / ("cache-%s-%d" % (side, i))

        sides = [
            ("raw", lambda i: flow.raw(base / ("raw-%d" % i), cache_for("raw", i), drop_cache=cache_state == "cold")),
            ("module", lambda i: flow.module(flow.module_args(base / ("module-%d" % i), cache_for("module", i),
                                                              cache_state == "warm"), "module-%s-%d" % (cache_state, i))),
            ("ansible", lambda i: flow.adhoc("llmfleet.engines.uv_engine_env",
                                             flow.module_args(base / ("ansible-%d" % i), cache_for("ansible", i),
                                                              cache_state == "warm"), True)),
        ]
        samples = alternate(reps, sides)
        sums = {name: summary(s) for name, s in samples.items()}
        raw_wall, raw_cpu = sums["raw"]["wall_median"], sums["raw"]["cpu_median"]
        uv_in_module = _uv_seconds(samples["module"])
        results.append({
            "case": case["label"],
            "cache": cache_state,
            "sides": sums,
            "ratio_wall": {"module/raw": ratio(sums["module"]["wall_median"], raw_wall),
                           "ansible/raw": ratio(sums["ansible"]["wall_median"], raw_wall)},
            "ratio_cpu": {"module/raw": ratio(sums["module"]["cpu_median"], raw_cpu),
                          "ansible/raw": ratio(sums["ansible"]["cpu_median"], raw_cpu)},
            "module_uv_and_import_seconds": uv_in_module,
            "module_own_seconds": round(sums["module"]["wall_median"] - uv_in_module, 3) if uv_in_module is not None else None,
            "module_steps_median": _steps_median(samples["module"]),
        })
        for sample_dir in base.glob("*-[0-9]*"):
            shutil.rmtree(sample_dir, ignore_errors=True)
    # the no-op re-run: an up-to-date environment, against the floor of any module call
    env_dir = work / "noop-env"
    args = flow.module_args(env_dir, work / "noop-cache", True)
    flow.module(args, "noop-build")
    sides = [
        ("ansible uv_engine_env", lambda i: flow.adhoc("llmfleet.engines.uv_engine_env", args, False)),
        ("ansible stat", lambda i: flow.adhoc("ansible.builtin.stat", {"path": str(env_dir)}, False)),
        ("module", lambda i: flow.module(args, "noop", expect_changed=False)),
    ]
    samples = alternate(reps, sides)
    sums = {name: summary(s) for name, s in samples.items()}
    results.append({
        "case": case["label"],
        "cache": "no-op (up to date)",
        "sides": sums,
        "ratio_wall": {"uv_engine_env/stat": ratio(sums["ansible uv_engine_env"]["wall_median"],
                                                   sums["ansible stat"]["wall_median"])},
        "ratio_cpu": {"uv_engine_env/stat": ratio(sums["ansible uv_engine_env"]["cpu_median"],
                                                  sums["ansible stat"]["cpu_median"])},
        "module_steps_median": _steps_median(samples["module"]),
    })
    return results, flow.commands


def _steps_median(samples) -> dict:
    names = []
    for sample in samples:
        for step in sample.get("steps", []):
            if step["name"] not in names:
                names.append(step["name"])
    return {name: median([next((s["seconds"] for s in sample.get("steps", []) if s["name"] == name), None)
                          for sample in samples]) for name in names}


def run(reps: int = 5, pypi_reps: int = 3, pypi: bool = True, work: pathlib.Path | None = None) -> dict:
    ensure_collection_link()
    work = work or WORK / "flow"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = {"name": "flow", "reps": reps, "pypi_reps": pypi_reps if pypi else 0, "cases": [], "commands": {}}
    with Upstream(work / "upstream") as up:
        results, commands = bench_case(work / "fake", FAKE, up.url + "/simple", reps)
        out["cases"] += results
        out["commands"]["fake upstream"] = {k: [c.replace(up.url, "$UPSTREAM") for c in v] for k, v in commands.items()}
        out["upstream_command"] = up.command
    if pypi:
        case = dict(PYPI, exclude_newer=pypi_cutoff(PYPI["engine"], PYPI["version"]))
        results, commands = bench_case(work / "pypi", case, None, pypi_reps)
        out["cases"] += results
        out["commands"]["real PyPI"] = commands
    shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--pypi-reps", type=int, default=3)
    parser.add_argument("--no-pypi", action="store_true", help="leave out the real-PyPI case")
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "flow.json")
    args = parser.parse_args(argv)
    data = run(args.reps, args.pypi_reps, not args.no_pypi)
    write_json(args.json, data)
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
