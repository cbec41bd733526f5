"""uv_fleet_lock with the real uv against the fake upstream (issue 12): an aarch64 and an x86_64
lock compiled on this x86_64 machine, both checked; the x86_64 one then built into an environment
by uv_engine_env lock=..., which resolves nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.integration.test_targets import system_python
from tests.system.test_uv_engine_env_credentials import module_args, run_module as run_engine_env

MODULE = REPO / "plugins" / "modules" / "uv_fleet_lock.py"
UV = REPO / ".venv" / "bin" / "uv"
CUTOFF_0200 = "2026-06-11T12:00:00Z"

pytestmark = pytest.mark.integration


def run_fleet_lock(tmp_path, args):
    args_file = tmp_path / "fleet-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env["PYTHONPATH"] = str(COLLECTIONS)
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


def fleet_args(upstream, tmp_path, platform, python_version="3.12", **extra):
    args = {
        "dest": str(tmp_path / "locks" / ("vllm-0.20.0-%s.txt" % platform)),
        "engine": "vllm",
        "version": "0.20.0",
        "exclude_newer": CUTOFF_0200,
        "index_url": upstream.url + "/simple",
        "python_version": python_version,
        "python_platform": platform,
        "uv": str(UV),
        "cache_dir": str(tmp_path / "uv-cache"),
        "timeout": 120,
    }
    args.update(extra)
    return args


def pylock_wheels(path):
    text = open(path).read()
    return dict(re.findall(r'url = "[^"]*/(vllm-[^"]+\.whl)".*?sha256 = "([0-9a-f]{64})"', text))


def test_aarch64_and_x86_64_locks_on_this_machine_then_a_node_from_the_x86_64_one(upstream, tmp_path):
    node_python = "%d.%d" % tuple(int(x) for x in subprocess.check_output(
        [system_python(), "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"], text=True).split())
    arm = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "aarch64-manylinux_2_28"))
    assert arm.get("failed") is not True, arm.get("msg")
    x86 = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", node_python))
    assert x86.get("failed") is not True, x86.get("msg")
    for result in (arm, x86):
        assert result["changed"] is True
        assert result["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.11.0", "vllm": "0.20.0"}
        assert "--python" not in result["cmd"] and "--no-build" in result["cmd"]
    assert arm["cmd"][arm["cmd"].index("--python-platform") + 1] == "aarch64-manylinux_2_28"

    # both pass the checks a node applies to a given lock
    from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import lock_text_problems
    arm_text, x86_text = open(arm["path"]).read(), open(x86["path"]).read()
    assert lock_text_problems(arm_text) == [] and lock_text_problems(x86_text) == []

    # the PEP 751 form names the one wheel of each platform: the vllm wheels (and hashes) differ
    arm_wheels, x86_wheels = pylock_wheels(arm["pylock_path"]), pylock_wheels(x86["pylock_path"])
    assert list(arm_wheels) == ["vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl"]
    assert list(x86_wheels) == ["vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl"]
    assert set(arm_wheels.values()).isdisjoint(x86_wheels.values())
    # the requirements form pins the version with every file's hash (uv writes them all), so both
    # hold both platforms' hashes of vllm 0.20.0
    for sha in list(arm_wheels.values()) + list(x86_wheels.values()):
        assert "--hash=sha256:" + sha in arm_text and "--hash=sha256:" + sha in x86_text

    # the second run compiles nothing
    upstream.clear_log()
    again = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "aarch64-manylinux_2_28"))
    assert again["changed"] is False and again["lock_sha256"] == arm["lock_sha256"]
    assert upstream.log() == []

    # a node from the x86_64 lock: nothing resolved there
    upstream.clear_log()
    path = tmp_path / "node" / "vllm" / "0.20.0"
    args = module_args(path, version="0.20.0", index_url=upstream.url + "/simple", lock=x86_text)
    del args["exclude_newer"]
    result, _out = run_engine_env(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["lock_sha256"] == x86["lock_sha256"]
    assert result["marker"]["verified"] == {"import": "vllm", "version": "0.20.0"}
    log = upstream.log()
    assert all('"subcommand":["pip","install"]' in e["headers"]["User-Agent"] for e in log)
    assert not [e for e in log if e["path"].endswith(".metadata")]
    assert "/files/vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl" in [e["path"] for e in log]


def test_github_wheels_give_locks_that_differ_in_the_vllm_wheel(upstream, tmp_path):
    with urllib.request.urlopen(upstream.url + "/github/api/repos/vllm-project/vllm/releases/tags/v0.20.0") as resp:
        assets = {a["name"]: a for a in json.load(resp)["assets"]}
    locks = {}
    for arch in ("aarch64", "x86_64"):
        asset = assets["vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_%s.whl" % arch]
        result = run_fleet_lock(tmp_path, fleet_args(
            upstream, tmp_path, "%s-manylinux_2_28" % arch, pylock=False,
            wheel={"url": asset["browser_download_url"], "sha256": asset["digest"]}))
        assert result.get("failed") is not True, result.get("msg")
        assert result["packages"]["vllm"] == "0.20.0+cu129"
        text = open(result["path"]).read()
        assert "--hash=sha256:" + asset["digest"].split(":", 1)[1] in text
        locks[arch] = (asset["digest"], text)
    assert locks["aarch64"][0] != locks["x86_64"][0]
    assert locks["aarch64"][0].split(":", 1)[1] not in locks["x86_64"][1]


def test_a_platform_without_a_wheel_writes_nothing(upstream, tmp_path):
    result = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_17"))
    assert result["failed"] is True
    assert "has no wheel for x86_64-manylinux_2_17 (Python 3.12)" in result["msg"]
    assert not os.path.exists(result["path"]) and not os.path.exists(result["path"] + ".json")


def test_uv_by_name_on_path_and_no_cache_dir_leave_nothing_in_the_default_cache(upstream, tmp_path):
    """Issue #44 (9, 11) with the real uv: the name uv found on PATH and run by its absolute path; without
    cache_dir the compile uses no cache, so uv's default one (XDG_CACHE_HOME, HOME) stays untouched."""
    home = tmp_path / "home"
    xdg = tmp_path / "xdg"
    home.mkdir()
    xdg.mkdir()
    args = fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", uv="uv")
    del args["cache_dir"]
    old = {name: os.environ.get(name) for name in ("PATH", "HOME", "XDG_CACHE_HOME")}
    os.environ.update(PATH="%s:%s" % (UV.parent, old["PATH"]), HOME=str(home), XDG_CACHE_HOME=str(xdg))
    try:
        result = run_fleet_lock(tmp_path, args)
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert result.get("failed") is not True, result.get("msg")
    assert result["cmd"][0] == str(UV.parent / "uv")
    assert os.path.getsize(result["path"]) > 0
    assert list(home.iterdir()) == [] and list(xdg.iterdir()) == []
