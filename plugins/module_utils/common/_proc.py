# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The one process runner of the collection's modules: every command a module starts (uv, the
verification, ``nvidia-smi``, the GPU compute check) goes through :class:`Runner`.

Each command runs in a session, hence a process group, of its own. At its time limit the whole
group is stopped (SIGTERM, then SIGKILL after a grace) and waited for until no process of it is
left, so that nothing a command started (uv's build backends, torch's workers) outlives it, holds
the path's lock or keeps writing into a directory the module is about to delete. A SIGTERM or
SIGHUP that ends the module while a command runs stops that command's group first.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time

#: Seconds between SIGTERM to a command's process group and SIGKILL.
KILL_GRACE_S = 5.0
#: Seconds to wait, after SIGKILL, for the group's last processes to be gone.
REAP_WAIT_S = 5.0
TAIL_LINES = 6
#: Signals that, while a command runs, stop the command's group before they end this process.
#: (SIGINT raises KeyboardInterrupt, which does the same.)
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def last_lines(text, lines=TAIL_LINES):
    """The last few non-empty lines of a command's output, joined with `` / ``.

    uv explains a failed resolution over several lines; the last alone rarely says why.
    """
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " / ".join(kept[-lines:]).rstrip(".")


class CommandResult:
    """What a command did. ``rc`` is its exit status, or ``128 + N`` when signal N ended it
    (as a shell reports it; ``signum`` is then N). ``timed_out``: it was stopped at its limit;
    ``pgid``: the process group it ran as."""

    def __init__(self, rc, out, err, timed_out=False, signum=None, pgid=None, seconds=None):
        self.rc = rc
        self.out = out or ""
        self.err = err or ""
        self.timed_out = timed_out
        self.signum = signum
        self.pgid = pgid
        self.seconds = seconds

    @property
    def output(self):
        return (self.out + "\n" + self.err).strip()


def proc_stat(pid):
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or None."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return None
    return text.rsplit(")", 1)[-1].split()


def group_alive(pgid):
    """Whether a process of group ``pgid`` is left that is not a zombie (a zombie holds no file
    and runs nothing; the one that is our command's is reaped by the caller)."""
    if not isinstance(pgid, int) or pgid <= 0:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc: the group is there
    for entry in entries:
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def _signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(proc, seconds):
    """Reap the command and wait for its group to be empty; False if it is not within ``seconds``."""
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        proc.poll()
        if not group_alive(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def stop_group(proc, grace=KILL_GRACE_S):
    """Stop every process of ``proc``'s group (the command was started as its leader): SIGTERM,
    then SIGKILL to those still there after ``grace`` seconds; the command is reaped.

    Returns False when a process of the group is still there after all (one in uninterruptible
    sleep, or a zombie nobody reaps)."""
    _signal_group(proc.pid, signal.SIGTERM)
    gone = _wait_group_gone(proc, grace)
    if not gone:
        _signal_group(proc.pid, signal.SIGKILL)
        gone = _wait_group_gone(proc, REAP_WAIT_S)
    if gone:
        proc.wait()  # the command itself is dead by now: reap it
    return gone


class _Interrupted(BaseException):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _exit_status(returncode):
    """``(rc, signal)``: Popen's negative return code as the shell's 128 + N."""
    if returncode is not None and returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


class Runner:
    """Runs argv lists (never a shell string), each in a new session.

    ``run(argv, data=None, env=None, cwd=None, timeout=None) -> CommandResult``:

    - ``data``: text fed to the command's stdin (stdin is ``/dev/null`` otherwise);
    - ``env``: updates on top of ``os.environ``; a value of None removes the variable;
    - ``timeout``: seconds; then the command's whole process group is stopped (SIGTERM, SIGKILL
      after ``grace``) and the result says ``timed_out``. Anything of the group left behind by a
      command that ended by itself is stopped the same way.

    ``keep_fds`` (the path's lock) are passed to every command: a uv left running after this
    process is killed still holds the lock, so the next run cannot clear a partial environment
    that is still being written. ``on_command(pgid, argv)`` is told when each command starts and
    ``on_command(None, None)`` when it is over (the path lock records the group).
    """

    def __init__(self, keep_fds=(), on_command=None, grace=KILL_GRACE_S):
        self.keep_fds = tuple(keep_fds)
        self.on_command = on_command
        self.grace = grace

    def _announce(self, pgid, argv):
        if self.on_command is None:
            return
        try:
            self.on_command(pgid, argv)
        except Exception:  # pylint: disable=broad-except
            pass  # a record that cannot be written must not fail the command

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        if isinstance(argv, (str, bytes)):
            raise TypeError("Runner runs an argv list, not a shell string: %r" % (argv,))
        argv = [str(a) for a in argv]
        environ = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = str(value)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                argv, stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=environ,
                close_fds=True, pass_fds=self.keep_fds, start_new_session=True)
        except OSError as exc:
            # as a shell says it: 127 not found, 126 found but not runnable
            rc = 127 if exc.errno == errno.ENOENT else 126
            return CommandResult(rc, "", "cannot run %s: %s" % (argv[0], exc),
                                 seconds=round(time.monotonic() - started, 3))
        self._announce(proc.pid, argv)
        previous = self._forward_signals()
        timed_out = False
        try:
            try:
                out, err = proc.communicate(None if data is None else data.encode("utf-8"), timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                stop_group(proc, self.grace)
                out, err = self._drain(proc)
            else:
                if group_alive(proc.pid):
                    stop_group(proc, self.grace)  # what the command left behind in its group
        except BaseException as exc:
            # interrupted (KeyboardInterrupt, SIGTERM/SIGHUP, an error): the group goes first
            self._restore_signals(previous)
            stop_group(proc, self.grace)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            self._announce(None, None)
            if isinstance(exc, _Interrupted):
                os.kill(os.getpid(), exc.signum)  # the default action, now that the handler is back
                raise SystemExit(128 + exc.signum)
            raise
        self._restore_signals(previous)
        self._announce(None, None)
        rc, signum = _exit_status(proc.returncode)
        return CommandResult(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                             timed_out=timed_out, signum=signum, pgid=proc.pid,
                             seconds=round(time.monotonic() - started, 3))

    @staticmethod
    def _drain(proc):
        """The output left in the pipes once the group is stopped."""
        try:
            return proc.communicate(timeout=REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            # a process that left the group (setsid) still holds the pipes open
            for stream in (proc.stdout, proc.stderr):
                stream.close()
            try:
                proc.wait(REAP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel: rc stays None, timed_out says what happened
            return b"", b"(output lost: a process outside the command's group kept it open)"

    @staticmethod
    def _forward_signals():
        """Handlers that turn SIGTERM/SIGHUP into an exception while a command runs, where the
        process would otherwise die of them at once (the default action) and leave it running."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, _frame):
            raise _Interrupted(signum)

        for signum in FORWARDED_SIGNALS:
            try:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    previous[signum] = signal.signal(signum, handler)
            except (OSError, ValueError):
                pass
        return previous

    @staticmethod
    def _restore_signals(previous):
        for signum, handler in previous.items():
            try:
                signal.signal(signum, handler)
            except (OSError, ValueError):
                pass
