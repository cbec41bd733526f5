"""uv_engine_env as processes: killed mid-install, two runs on one path at once.

The module runs as its own process (``python plugins/modules/uv_engine_env.py ARGS``, as Ansible
would run it on a node) against the fake upstream; the ``slow`` fault keeps an install busy long
enough to be caught in the middle.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.integration.test_targets import system_python

MODULE = REPO / "plugins" / "modules" / "uv_engine_env.py"
UV = REPO / ".venv" / "bin" / "uv"
CUTOFF_0110 = "2025-10-03T20:10:00Z"

pytestmark = pytest.mark.integration


def module_args(upstream, path, **extra):
    args = {
        "path": str(path),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF_0110,
        "index_url": upstream.url + "/simple",
        "python": system_python(),
        "python_preference": "only-system",
        "uv": str(UV),
        "timeout": 120,
    }
    args.update(extra)
    return args


def start(tmp_path, name, args):
    """Start the module as a process of its own session; its output goes to files."""
    args_file = tmp_path / ("%s.json" % name)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env["PYTHONPATH"] = str(COLLECTIONS)
    out = open(tmp_path / ("%s.out" % name), "w")  # noqa: SIM115 - closed by finish()
    proc = subprocess.Popen(
        [sys.executable, str(MODULE), str(args_file)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(tmp_path),
        start_new_session=True,
    )
    proc.out_file = out
    proc.out_path = tmp_path / ("%s.out" % name)
    return proc


def finish(proc, timeout=120):
    try:
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.out_file.close()
    text = proc.out_path.read_text()
    try:
        return json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + text)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def progress_step(path):
    try:
        return json.loads((path.parent / (path.name + ".progress.json")).read_text()).get("step")
    except (OSError, ValueError):
        return None


def children(pid):
    """Direct children of pid (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open("/proc/%s/stat" % entry).read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def lock_is_held(lock_path):
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def import_version(path):
    return subprocess.run(
        [str(path / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()


def test_sigkill_mid_install_then_rerun_converges(upstream, tmp_path):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    partial = path.parent / (path.name + ".partial")
    upstream.fault("slow", delay=4, count=2, path="/files/torch-2.8.0")
    proc = start(tmp_path, "killed", module_args(upstream, path))
    try:
        wait_for(partial.exists, "the partial environment")
        wait_for(lambda: progress_step(path) == "install", "the install step")
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the module and the uv it runs
        proc.wait()
        proc.out_file.close()
    assert partial.exists() and not path.exists(), "the kill did not land mid-install"

    upstream.reset()
    result = finish(start(tmp_path, "rerun", module_args(upstream, path)))
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    assert str(partial) in result["debris"]
    assert not partial.exists()
    assert not (path.parent / (path.name + ".progress.json")).exists()
    assert import_version(path) == "0.11.0"

    again = finish(start(tmp_path, "again", module_args(upstream, path)))
    assert again["changed"] is False


def test_killed_module_leaves_its_uv_holding_the_lock(upstream, tmp_path):
    """Only the module dies: the uv it started keeps the path's lock until it ends too."""
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    lock_path = path.parent / (path.name + ".lock")
    upstream.fault("slow", delay=5, count=1, path="/files/torch-2.8.0")
    proc = start(tmp_path, "killed", module_args(upstream, path))
    try:
        wait_for(lambda: progress_step(path) == "resolve", "the resolve step")
        wait_for(lambda: children(proc.pid), "uv started by the module")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert lock_is_held(lock_path), "nobody holds the lock once the module is killed"
        result = finish(start(tmp_path, "rerun", module_args(upstream, path)))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.out_file.close()
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    assert import_version(path) == "0.11.0"


def test_two_runs_at_once_on_one_path(upstream, tmp_path):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    upstream.fault("slow", delay=2, count=1, path="/files/torch-2.8.0")
    first = start(tmp_path, "first", module_args(upstream, path))
    second = start(tmp_path, "second", module_args(upstream, path))
    results = [finish(first), finish(second)]
    assert [r.get("failed") for r in results] == [None, None], [r.get("msg") for r in results]
    assert sorted(r["changed"] for r in results) == [False, True]
    assert results[0]["lock"]["sha256"] == results[1]["lock"]["sha256"]
    installs = [e for e in upstream.log() if e["method"] == "GET" and e["path"] == "/files/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl"]
    assert len(installs) == 2, "one build (resolve + install downloads), not two"
    assert import_version(path) == "0.11.0"
