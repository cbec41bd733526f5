"""_proc: the one runner, with real processes: output, stdin, environment, kept descriptors,
exit statuses, and a timeout that stops the command's whole process group."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc

# a command that starts a child which ignores SIGTERM and outlives its parent, then hangs
# itself; argv[1]: where to write {"leader": pid, "child": pid}
STUBBORN = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    with open(sys.argv[1] + ".tmp", "w") as handle:
        json.dump({"leader": os.getpid(), "child": child.pid}, handle)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(300)
""")


def alive(pid):
    """Whether ``pid`` is there and not a zombie."""
    try:
        state = pathlib.Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def members(pgid):
    """Live (non-zombie) processes of group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = pathlib.Path("/proc/%s/stat" % entry).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[2] == str(pgid) and fields[0] != "Z":
                found.append(int(entry))
    return found


def kill_group(pgid):
    """Clean-up after a failed test: nothing of it may outlive it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, TypeError):
        pass


def wait_for_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError("%s never appeared" % path)
        time.sleep(0.02)


def test_output_exit_status_and_stdin():
    run = _proc.Runner()
    res = run([sys.executable, "-c", "import sys; d = sys.stdin.read(); print(d.upper()); "
               "sys.stderr.write('err'); sys.exit(3)"], data="locked\nreqs")
    assert (res.rc, res.out, res.err, res.timed_out, res.signum) == (3, "LOCKED\nREQS\n", "err", False, None)
    assert res.output == "LOCKED\nREQS\n\nerr" and res.pgid > 0 and res.seconds >= 0


def test_stdin_is_empty_without_data():
    res = _proc.Runner()([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=30)
    assert res.out.strip() == "''"


def test_each_command_runs_in_a_session_of_its_own():
    res = _proc.Runner()([sys.executable, "-c", "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"])
    pid, pgid, sid = (int(x) for x in res.out.split())
    assert pid == pgid == sid == res.pgid
    assert pgid != os.getpgid(0)


def test_environment_updates_on_top_of_this_process(monkeypatch):
    monkeypatch.setenv("LLMFLEET_KEPT", "kept")
    monkeypatch.setenv("LLMFLEET_DROPPED", "dropped")
    code = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('LLMFLEET_KEPT', 'LLMFLEET_DROPPED', 'LLMFLEET_ADDED')}))"
    res = _proc.Runner()([sys.executable, "-c", code], env={"LLMFLEET_ADDED": 1, "LLMFLEET_DROPPED": None})
    assert json.loads(res.out) == {"LLMFLEET_KEPT": "kept", "LLMFLEET_DROPPED": None, "LLMFLEET_ADDED": "1"}


def test_kept_descriptors_reach_the_command_and_others_do_not(tmp_path):
    kept = os.open(str(tmp_path / "kept"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    other = os.open(str(tmp_path / "other"), os.O_RDWR | os.O_CREAT)
    try:
        code = "import os, sys; print(' '.join(str(int(os.path.exists('/proc/self/fd/' + a))) for a in sys.argv[1:]))"
        argv = [sys.executable, "-c", code, str(kept), str(other)]
        assert _proc.Runner(keep_fds=(kept,))(argv).out.split() == ["1", "0"]
        assert _proc.Runner()(argv).out.split() == ["0", "0"]
    finally:
        os.close(kept)
        os.close(other)


def test_a_signal_death_is_reported_as_a_shell_does():
    res = _proc.Runner()([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=30)
    assert (res.rc, res.signum, res.timed_out) == (137, 9, False)


@pytest.mark.parametrize("argv, rc", [(["/nonexistent/nvidia-smi"], 127), ([os.devnull], 126)])
def test_a_command_that_cannot_start(argv, rc):
    res = _proc.Runner()(argv)
    assert (res.rc, res.timed_out) == (rc, False)
    assert res.err.startswith("cannot run %s: " % argv[0])


def test_a_shell_string_is_refused():
    with pytest.raises(TypeError, match="not a shell string"):
        _proc.Runner()("echo hi")


def test_a_timeout_stops_the_whole_process_group(tmp_path):
    """The command's child ignores SIGTERM and outlives it: it must be gone too."""
    info = tmp_path / "pids.json"
    run = _proc.Runner(grace=0.5)
    started = time.monotonic()
    res = run([sys.executable, "-c", STUBBORN, str(info)], timeout=3)
    try:
        assert res.timed_out is True and time.monotonic() - started < 15
        pids = json.loads(info.read_text())
        assert res.pgid == pids["leader"]
        assert not alive(pids["leader"]) and not alive(pids["child"]), "a process of the command outlived its timeout"
        assert members(res.pgid) == []
    finally:
        kill_group(res.pgid)


def test_what_a_command_leaves_in_its_group_is_stopped_when_it_ends(tmp_path):
    pidfile = tmp_path / "bg.pid"
    res = _proc.Runner(grace=0.5)(
        ["sh", "-c", "sleep 300 >/dev/null 2>&1 </dev/null & echo $! > %s; echo started" % pidfile], timeout=30)
    try:
        assert (res.rc, res.out.strip(), res.timed_out) == (0, "started", False)
        assert not alive(int(pidfile.read_text()))
    finally:
        kill_group(res.pgid)


def test_the_command_group_is_announced_and_then_cleared():
    seen = []
    run = _proc.Runner(on_command=lambda pgid, argv: seen.append((pgid, argv)))
    res = run([sys.executable, "-c", "pass"])
    assert seen == [(res.pgid, [sys.executable, "-c", "pass"]), (None, None)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_module_ended_by_a_signal_stops_its_command_first(tmp_path, signum):
    """SIGTERM/SIGHUP to the module while a command runs: the command's group goes with it."""
    info = tmp_path / "pids.json"
    module = textwrap.dedent("""
        import sys
        from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
        Runner(grace=0.5)([sys.executable, "-c", sys.argv[1], sys.argv[2]], timeout=300)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # The module starts with the signal's default disposition, as under ansible: a test run under
    # nohup would otherwise pass SIGHUP ignored on (and the runner leaves an ignored signal alone).
    proc = subprocess.Popen([sys.executable, "-c", module, STUBBORN, str(info)], env=env,
                            preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))  # pylint: disable=subprocess-popen-preexec-fn
    try:
        wait_for_file(str(info))
        pids = json.loads(info.read_text())
        proc.send_signal(signum)
        assert proc.wait(30) == -signum
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        deadline = time.monotonic() + 10
        while (alive(pids["leader"]) or alive(pids["child"])) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pids["leader"]) and not alive(pids["child"])
    finally:
        kill_group(pids["leader"])
