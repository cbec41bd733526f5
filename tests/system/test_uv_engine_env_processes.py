"""uv_engine_env as processes: killed mid-install, two runs on one path at once, a command that
outlives its time limit, and the lock's holder named to a run that finds it busy.

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


def alive(pid):
    """Whether ``pid`` is there and not a zombie."""
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def group_members(pgid):
    """The live (non-zombie) processes of group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open("/proc/%s/stat" % entry).read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[2] == str(pgid) and fields[0] != "Z":
                found.append(int(entry))
    return found


def lock_record(lock_path):
    """The holder's record in the path lock (what PathLock writes), or None."""
    try:
        text = lock_path.read_text().strip()
    except OSError:
        return None
    return json.loads(text) if text else None


def stubborn_uv(tmp_path):
    """A uv whose ``pip install`` starts a child that ignores SIGTERM and would outlive it, both
    holding the descriptors uv was given (the path's lock among them), then hangs; every other
    command is the real uv's. The pids land in tmp_path/uv.pid and tmp_path/child.pid."""
    wrapper = tmp_path / "wrap" / "uv"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = pip ] && [ \"$2\" = install ]; then\n"
        "    sh -c 'trap \"\" TERM; echo $$ > %(dir)s/child.pid.tmp; mv %(dir)s/child.pid.tmp %(dir)s/child.pid; "
        "exec sleep 300' </dev/null &\n"
        "    echo $$ > %(dir)s/uv.pid.tmp; mv %(dir)s/uv.pid.tmp %(dir)s/uv.pid\n"
        "    wait\n"
        "    exit 1\n"
        "fi\n"
        "exec %(uv)s \"$@\"\n" % {"dir": tmp_path, "uv": UV})
    wrapper.chmod(0o755)
    return wrapper


def kill_uv_group(tmp_path):
    """The stubborn uv's group (uv, its child), by the pid it wrote: a test cleans up after itself."""
    try:
        os.killpg(int((tmp_path / "uv.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def read_pid(path):
    wait_for(path.exists, str(path))
    return int(path.read_text())


def import_version(path):
    return subprocess.run(
        [str(path / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()


def test_sigkill_mid_install_then_rerun_converges(upstream, tmp_path):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    partial = path.parent / (path.name + ".partial")
    upstream.fault("slow", delay=4, count=2, path="/files/torch-2.8.0")
    lock_path = path.parent / (path.name + ".lock")
    proc = start(tmp_path, "killed", module_args(upstream, path))
    try:
        wait_for(partial.exists, "the partial environment")
        wait_for(lambda: progress_step(path) == "install", "the install step")
        wait_for(lambda: ((lock_record(lock_path) or {}).get("command") or {}).get("argv", [])[1:3] == ["pip", "install"],
                 "uv pip install recorded in the lock")
        time.sleep(0.5)
    finally:
        # the module and the uv it runs (in a process group of its own, recorded in the lock)
        uv_group = ((lock_record(lock_path) or {}).get("command") or {}).get("pgid")
        os.killpg(proc.pid, signal.SIGKILL)
        if uv_group:
            os.killpg(uv_group, signal.SIGKILL)
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
    # resolve reads the wheel's metadata file (PEP 658), install downloads the wheel: once per build
    assert len(installs) == 1, "one build, not two"
    assert import_version(path) == "0.11.0"


def test_a_timeout_stops_every_process_of_the_command_and_frees_the_lock(upstream, tmp_path):
    """uv's child ignores SIGTERM and would outlive uv, holding the path's lock: at the build's
    timeout the whole group goes, and the next run finds the lock free. Meanwhile a check-mode
    run does not wait: it names the build, its step and the command's process group."""
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    lock_path = path.parent / (path.name + ".lock")
    args = module_args(upstream, path, uv=str(stubborn_uv(tmp_path)), timeout=20)
    proc = start(tmp_path, "build", args)
    try:
        uv_pid = read_pid(tmp_path / "uv.pid")
        child_pid = read_pid(tmp_path / "child.pid")
        record = lock_record(lock_path)
        assert record["pid"] == proc.pid and record["about"] == "uv_engine_env state=present, vllm 0.11.0"
        assert record["command"]["pgid"] == uv_pid and record["command"]["argv"][:3] == ["uv", "pip", "install"]

        started = time.monotonic()
        checked = finish(start(tmp_path, "check", dict(args, _ansible_check_mode=True)), timeout=60)
        assert time.monotonic() - started < 30, "check mode waited for the build's lock"
        assert checked.get("failed") is not True, checked.get("msg")
        assert checked["changed"] is True and checked["debris"] == []
        holder = checked["holder"]
        assert (holder["pid"], holder["alive"], holder["step"]) == (proc.pid, True, "install")
        assert (holder["command"]["pgid"], holder["command"]["alive"]) == (uv_pid, True)
        assert "another run holds %s: pid %d (" % (lock_path, proc.pid) in checked["msg"]

        result = finish(proc, timeout=90)
        assert result.get("failed") is True
        assert "did not finish within timeout (20 s); stopped during step install" in result["msg"], result["msg"]
        assert not alive(child_pid), "uv's child %d outlived the timeout" % child_pid
        assert not alive(uv_pid) and group_members(uv_pid) == []
        assert not lock_is_held(lock_path), "the lock is still held after the timeout"
        assert lock_record(lock_path) is None
        assert not (path.parent / (path.name + ".partial")).exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        kill_uv_group(tmp_path)  # whatever a failed assertion would leave behind

    again = finish(start(tmp_path, "next", dict(args, _ansible_check_mode=True)), timeout=60)
    assert again.get("failed") is not True and "holder" not in again, again.get("msg")


def test_a_killed_module_s_orphaned_command_is_named(upstream, tmp_path):
    """The module is killed; the command it ran lives on and holds the lock. The next run says
    the holder is dead, names the orphaned process group and how to stop it; once stopped, the
    lock is free."""
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    lock_path = path.parent / (path.name + ".lock")
    args = module_args(upstream, path, uv=str(stubborn_uv(tmp_path)))
    proc = start(tmp_path, "killed", args)
    uv_pid = None
    try:
        uv_pid = read_pid(tmp_path / "uv.pid")
        read_pid(tmp_path / "child.pid")
        os.kill(proc.pid, signal.SIGKILL)  # the module only
        proc.wait()
        proc.out_file.close()
        assert lock_is_held(lock_path)

        result = finish(start(tmp_path, "blocked", dict(args, lock_timeout=1)), timeout=60)
        assert result.get("failed") is True
        assert result["msg"].startswith("%s is still locked, but the run that took it, pid %d (uv_engine_env "
                                        "state=present, vllm 0.11.0, since " % (lock_path, proc.pid)), result["msg"]
        assert ("is gone (killed?): a command it started outlived it and holds the lock: process group %d (uv pip "
                "install --python" % uv_pid) in result["msg"]
        assert "stop it with `kill -- -%d` (or let it end), then run again; waited 1 s (lock_timeout)." % uv_pid \
            in result["msg"]
        assert (result["holder"]["alive"], result["holder"]["command"]["alive"]) == (False, True)

        os.killpg(uv_pid, signal.SIGKILL)  # what the message says to do
        wait_for(lambda: not lock_is_held(lock_path), "the lock to be free once the group is stopped", timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_uv_group(tmp_path)
