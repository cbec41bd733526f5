"""_pathlock: the holder's record in the lock file, and what a run that finds the lock busy says
about a live holder, a dead one whose orphaned command still holds the lock, and a reused pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _errors
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _pathlock

ABOUT = "uv_engine_env state=present, vllm 0.11.0 (cu129)"

# A run as a process of its own: takes the lock, records ABOUT, optionally starts a command
# (in a session of its own, holding the lock's descriptor, as the runner does) and records its
# group; writes {"pid", "started", "pgid"} to argv[2] and waits to be killed.
HOLDER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from ansible_collections.llmfleet.engines.plugins.module_utils.common._pathlock import PathLock
    lock = PathLock(sys.argv[1], 5, about=%r)
    lock.acquire()
    pgid = None
    if sys.argv[3] != "none":
        cmd = subprocess.Popen(["sleep", "300"], pass_fds=[lock.fd], start_new_session=True)
        pgid = cmd.pid
        if sys.argv[3] == "recorded":
            lock.note_command(pgid, ["/usr/bin/sleep", "300"])
    with open(sys.argv[2] + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid(), "started": lock.record["started"], "pgid": pgid}, handle)
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(300)
""" % ABOUT)


@pytest.fixture
def holder(tmp_path):
    """Start a holder process: ``start(command)`` with command none|recorded|unrecorded."""
    procs, groups = [], []

    def start(command="none"):
        lock_path = str(tmp_path / "env.lock")
        info = tmp_path / "holder.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, lock_path, str(info), command], env=env)
        procs.append(proc)
        deadline = time.monotonic() + 30
        while not info.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the holder did not start"
            time.sleep(0.02)
        data = json.loads(info.read_text())
        if data["pgid"]:
            groups.append(data["pgid"])
        return proc, lock_path, data

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def busy(lock_path):
    with pytest.raises(_errors.LockBusy) as exc:
        _pathlock.PathLock(lock_path, 0).acquire()
    return exc.value


def test_the_holder_is_recorded_while_it_holds_the_lock(tmp_path):
    lock_path = str(tmp_path / "env.lock")
    lock = _pathlock.PathLock(lock_path, 5, about=ABOUT)
    lock.acquire()
    record = _pathlock.read_holder(lock_path)
    assert (record["pid"], record["about"], record["command"]) == (os.getpid(), ABOUT, None)
    assert record["pid_start"] == _pathlock.process_start(os.getpid()) and record["started"]
    lock.note_command(4321, ["/opt/llmfleet/uv/0.13.8/uv", "pip", "install", "--python", "/x/bin/python", "-r"])
    assert _pathlock.read_holder(lock_path)["command"]["argv"] == ["uv", "pip", "install", "--python"]
    assert _pathlock.read_holder(lock_path)["command"]["pgid"] == 4321
    lock.note_command(None, None)
    assert _pathlock.read_holder(lock_path)["command"] is None
    lock.release()
    assert os.path.getsize(lock_path) == 0 and _pathlock.read_holder(lock_path) is None


def test_a_shared_lock_records_nothing(tmp_path):
    lock_path = str(tmp_path / "env.lock")
    open(lock_path, "w").close()
    lock = _pathlock.PathLock(lock_path, 5, shared=True, create=False, about=ABOUT)
    assert lock.acquire() is True
    lock.note_command(1, ["x"])
    lock.release()
    assert os.path.getsize(lock_path) == 0


def test_a_live_holder_is_named(holder):
    proc, lock_path, data = holder("none")
    exc = busy(lock_path)
    assert exc.msg == ("another run holds %s: pid %d (%s, since %s); waited 0 s (lock_timeout). Let it finish, "
                       "or raise lock_timeout." % (lock_path, proc.pid, ABOUT, data["started"]))
    report = exc.details["holder"]
    assert (report["pid"], report["alive"], report["recorded"], report["about"]) == (proc.pid, True, True, ABOUT)


def test_the_progress_file_adds_the_holder_s_step(holder, tmp_path):
    proc, lock_path, data = holder("none")
    progress = str(tmp_path / "env.progress.json")
    with open(progress, "w") as handle:
        json.dump({"pid": proc.pid, "step": "install", "step_started": "2026-01-01T00:00:00Z"}, handle)
    with pytest.raises(_errors.LockBusy) as exc:
        _pathlock.PathLock(lock_path, 0, progress_path=progress).acquire()
    assert "pid %d (%s, since %s; step install since 2026-01-01T00:00:00Z)" % (
        proc.pid, ABOUT, data["started"]) in exc.value.msg
    # a progress file of another (earlier, killed) run says nothing about this holder
    with open(progress, "w") as handle:
        json.dump({"pid": proc.pid + 100000, "step": "resolve"}, handle)
    with pytest.raises(_errors.LockBusy) as exc:
        _pathlock.PathLock(lock_path, 0, progress_path=progress).acquire()
    assert "resolve" not in exc.value.msg


def test_a_dead_holder_whose_orphaned_command_holds_the_lock(holder):
    """The holder is killed; the command it started (recorded) keeps the lock: say so, name the
    group and how to stop it; stopping it frees the lock."""
    proc, lock_path, data = holder("recorded")
    proc.kill()
    proc.wait()
    exc = busy(lock_path)
    pgid = data["pgid"]
    assert exc.msg == (
        "%s is still locked, but the run that took it, pid %d (%s, since %s), is gone (killed?): a command it "
        "started outlived it and holds the lock: process group %d (sleep 300, since %s). Look at it with "
        "`ps -o pid,etime,args -g %d`; stop it with `kill -- -%d` (or let it end), then run again; waited 0 s "
        "(lock_timeout)." % (lock_path, proc.pid, ABOUT, data["started"], pgid,
                             exc.details["holder"]["command"]["started"], pgid, pgid))
    report = exc.details["holder"]
    assert (report["pid"], report["alive"], report["command"]["pgid"], report["command"]["alive"]) == (
        proc.pid, False, pgid, True)
    os.killpg(pgid, signal.SIGKILL)  # what the message says to do
    lock = _pathlock.PathLock(lock_path, 10)
    assert lock.acquire() is True
    assert _pathlock.read_holder(lock_path)["pid"] == os.getpid()
    lock.release()


def test_a_dead_holder_and_an_unrecorded_process_holding_the_lock(holder):
    proc, lock_path, _data = holder("unrecorded")
    proc.kill()
    proc.wait()
    exc = busy(lock_path)
    assert exc.msg.startswith("%s is still locked, but the run that took it, pid %d (" % (lock_path, proc.pid))
    assert exc.msg.endswith("is gone (killed?): a process it left behind still holds the lock: `fuser -v %s` "
                            "names it; stop it, then run again; waited 0 s (lock_timeout)." % lock_path)


def test_a_reused_pid_is_not_the_holder(tmp_path):
    """The recorded pid exists, but it is another process (it started at another time)."""
    lock_path = str(tmp_path / "env.lock")
    with open(lock_path, "w") as handle:
        json.dump({"pid": os.getpid(), "pid_start": 1, "started": "2026-01-01T00:00:00Z", "about": ABOUT}, handle)
    report = _pathlock.holder_report(lock_path)
    assert (report["pid"], report["alive"]) == (os.getpid(), False)
    with open(lock_path, "w") as handle:
        json.dump({"pid": os.getpid(), "pid_start": _pathlock.process_start(os.getpid())}, handle)
    assert _pathlock.holder_report(lock_path)["alive"] is True


@pytest.mark.parametrize("create", [True, False])
def test_a_planted_link_is_not_followed(tmp_path, create):
    """A link at the lock's name to a file outside: not created, not truncated, not locked."""
    outside = tmp_path / "outside" / "nologin"
    outside.parent.mkdir()
    lock = tmp_path / "uv.lock"
    lock.symlink_to(outside)
    with pytest.raises(_errors.OptionError, match="is a symbolic link"):
        _pathlock.PathLock(str(lock), 1, create=create).acquire()
    assert not os.path.lexists(str(outside))
    outside.write_text("keep\n")
    with pytest.raises(_errors.OptionError, match="is a symbolic link"):
        _pathlock.PathLock(str(lock), 1, create=create).acquire()
    assert outside.read_text() == "keep\n"
    assert _pathlock.read_holder(str(lock)) is None


def test_a_fifo_at_the_lock_is_refused_without_blocking(tmp_path):
    lock = tmp_path / "uv.lock"
    os.mkfifo(str(lock))
    with pytest.raises(_errors.OptionError, match="not a plain file"):
        _pathlock.PathLock(str(lock), 1).acquire()
    assert _pathlock.read_holder(str(lock)) is None
