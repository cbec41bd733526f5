# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The path lock (an ``flock`` on ``<path>.lock``) that serialises runs on one environment, and
the reading of the progress file (``<path>.progress.json``, written by ``_progress.ProgressFile``) that
says what the holder is doing.

Whoever holds the lock exclusively writes who it is into the lock file (one JSON line: pid,
when that process started, what it does, and the process group of the command it is running),
and empties it on release. A run that finds the lock busy reads that record: it names the
holder, and tells a live holder from a dead one whose orphaned command still holds the lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LockBusy, OptionError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._progress import utc_now
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import group_alive, proc_stat

#: How much of a recorded command line the record keeps.
ARGV_KEPT = 4


def process_start(pid):
    """When ``pid`` started, in clock ticks since boot (Linux), or None: tells a reused pid."""
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def pid_alive(pid, start=None):
    """Whether process ``pid`` is there and running (not a zombie), and is still the process
    that started at ``start`` (when given and readable)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = proc_stat(pid)
    if fields:
        if fields[0] == "Z":
            return False
        if start is not None and process_start(pid) not in (None, start):
            return False
    return True


def read_holder(lock_path):
    """The record in ``lock_path`` (a dict), or None when it holds none."""
    try:
        # not through a link, nor blocking on a FIFO put in its place
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            text = handle.read(65536).decode("utf-8", "replace")
    except OSError:
        return None
    try:
        data = json.loads(text.strip().splitlines()[0]) if text.strip() else None
    except (ValueError, IndexError):
        return None
    return data if isinstance(data, dict) else None


def holder_report(lock_path, progress_path=None):
    """Who holds ``lock_path``, as far as its record (and the progress file) tell::

        {"lock": path, "recorded": bool, "pid": int|None, "alive": bool|None, "started": str|None,
         "about": str|None, "step": str|None, "step_started": str|None,
         "command": {"pgid", "argv", "started", "alive"}|None}
    """
    record = read_holder(lock_path) or {}
    pid = record.get("pid") if isinstance(record.get("pid"), int) else None
    report = {"lock": lock_path, "recorded": pid is not None, "pid": pid,
              "alive": pid_alive(pid, record.get("pid_start")) if pid is not None else None,
              "started": record.get("started"), "about": record.get("about"),
              "step": None, "step_started": None, "command": None}
    command = record.get("command")
    if isinstance(command, dict) and isinstance(command.get("pgid"), int):
        report["command"] = {"pgid": command["pgid"], "argv": command.get("argv"),
                             "started": command.get("started"),
                             "alive": group_alive(command["pgid"])}
    progress = read_progress(progress_path) if progress_path else None
    if progress and (pid is None or progress.get("pid") == pid):
        report["step"] = progress.get("step")
        report["step_started"] = progress.get("step_started")
        if pid is None and isinstance(progress.get("pid"), int):
            # a holder that wrote no record (an older release): the progress file names it
            report["pid"] = progress["pid"]
            report["alive"] = pid_alive(progress["pid"])
    return report


def _command_text(command):
    argv = command.get("argv") or []
    return " ".join(str(a) for a in argv) if argv else "a command"


def holder_text(report):
    """The holder in a few words: ``pid 12 (what it does, since T; step install since T)``."""
    if report.get("pid") is None:
        return "a process that did not record itself"
    about = [part for part in (report.get("about"),
                               "since %s" % report["started"] if report.get("started") else None)
             if part]
    detail = ", ".join(about)
    if report.get("step"):
        step = "step %s%s" % (report["step"], " since %s" % report["step_started"]
                              if report.get("step_started") else "")
        detail = "%s; %s" % (detail, step) if detail else step
    return "pid %s%s" % (report["pid"], " (%s)" % detail if detail else "")


def busy_message(report, waited=None):
    """Why the lock cannot be had, and what to do, for a LockBusy or a check-mode warning."""
    lock_path = report["lock"]
    wait = "; waited %d s (lock_timeout)" % waited if waited is not None else ""
    if report.get("pid") is None:
        return ("another run holds %s%s. It recorded no pid: `fuser -v %s` names the process "
                "holding it. Let it finish, or raise lock_timeout." % (lock_path, wait, lock_path))
    if report.get("alive") is not False:
        return ("another run holds %s: %s%s. Let it finish, or raise lock_timeout."
                % (lock_path, holder_text(report), wait))
    command = report.get("command")
    if command and command.get("alive"):
        orphan = ("a command it started outlived it and holds the lock: process group %d (%s, "
                  "since %s). Look at it with `ps -o pid,etime,args -g %d`; stop it with "
                  "`kill -- -%d` (or let it end), then run again"
                  % (command["pgid"], _command_text(command), command.get("started"),
                     command["pgid"], command["pgid"]))
    else:
        orphan = ("a process it left behind still holds the lock: `fuser -v %s` names it; stop "
                  "it, then run again" % lock_path)
    return ("%s is still locked, but the run that took it, %s, is gone (killed?): %s%s."
            % (lock_path, holder_text(report), orphan, wait))


def open_lock_file(lock_path, create):
    """Open the lock file ``lock_path`` (made 0644 when missing and ``create``) without following a
    link at its name, and only when it is a plain file: whoever can write the directory above it
    (the service user, on a node with an old layout) could otherwise plant a link there and have
    root create or truncate a file anywhere (``/etc/nologin``), or a FIFO that blocks the run.
    A link or anything but a plain file raises OptionError naming it; nothing is created there."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    flags |= (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY
    try:
        fd = os.open(lock_path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise OptionError("the lock file %s is a symbolic link (to %s): refusing to open it, a lock file is a "
                          "plain file that this module makes; whoever could put a link there can write the "
                          "directory %s: find who did, remove the link and close the directory to others"
                          % (lock_path, _link_target(lock_path), os.path.dirname(lock_path)), lock_path=lock_path)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OptionError("the lock file %s is not a plain file (mode %o): refusing to lock it; remove it"
                          % (lock_path, st.st_mode), lock_path=lock_path)
    flag = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flag & ~os.O_NONBLOCK)
    return fd


def _link_target(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


class PathLock:
    """An flock on ``<path>.lock``, waited for at most ``timeout`` seconds.

    After the lock is taken, the file at the lock path must still be the one locked (a run
    removing the environment may have unlinked it); otherwise it is opened again. With
    ``create=False`` (check mode) a missing lock file means there is nothing to wait for.
    An exclusive lock records its holder in the file (``about``: what the holder does);
    ``note_command`` adds the process group of the command it runs. A busy lock raises
    LockBusy with the holder's report (``holder``) in its details.
    """

    def __init__(self, lock_path, timeout, shared=False, create=True, about=None,
                 progress_path=None, sleep=time.sleep, clock=time.monotonic):
        self.lock_path = lock_path
        self.timeout = timeout
        self.shared = shared
        self.create = create
        self.about = about
        self.progress_path = progress_path
        self.fd = None
        self.record = None
        self._sleep = sleep
        self._clock = clock

    def acquire(self):
        deadline = self._clock() + self.timeout
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while True:
            try:
                fd = open_lock_file(self.lock_path, self.create)
            except FileNotFoundError:
                if self.create:
                    raise
                return False
            delay = 0.05
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        os.close(fd)
                        raise
                    if self._clock() >= deadline:
                        os.close(fd)
                        report = holder_report(self.lock_path, self.progress_path)
                        raise LockBusy(busy_message(report, self.timeout), holder=report)
                    self._sleep(delay)
                    delay = min(delay * 2, 1.0)
            try:
                # lstat: a link planted since the open is not the file locked
                same = os.lstat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                if not self.shared and self.create:
                    self.record = {"pid": os.getpid(), "pid_start": process_start(os.getpid()),
                                   "started": utc_now(), "about": self.about, "command": None}
                    self._write_record()
                return True
            os.close(fd)
            if not self.create:
                return False

    def _write_record(self):
        data = (json.dumps(self.record, sort_keys=True) + "\n").encode("utf-8")
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        except OSError:
            pass  # a lock without its record still locks

    def note_command(self, pgid, argv):
        """Record the process group of the command now running (None: no command runs)."""
        if self.fd is None or self.record is None:
            return
        self.record["command"] = None if pgid is None else {
            "pgid": pgid, "argv": [os.path.basename(str(argv[0]))] + [str(a) for a in argv[1:ARGV_KEPT]]
            if argv else [], "started": utc_now()}
        self._write_record()

    def release(self, unlink=False):
        if self.fd is None:
            return
        if self.record is not None:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            self.record = None
        if unlink:
            try:
                os.unlink(self.lock_path)
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def read_progress(progress_path):
    try:
        with open(progress_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
