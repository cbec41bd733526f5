# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The path lock (an ``flock`` on ``<path>.lock``) that serialises runs on one environment, and
the progress file (``<path>.progress.json``) that says what a running build is doing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from datetime import datetime, timezone

from ansible_collections.llmfleet.engines.plugins.module_utils._errors import LockBusy
from ansible_collections.llmfleet.engines.plugins.module_utils._envdir import write_json_atomic


def utc_now():
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class PathLock:
    """An flock on ``<path>.lock``, waited for at most ``timeout`` seconds.

    After the lock is taken, the file at the lock path must still be the one locked (a run
    removing the environment may have unlinked it); otherwise it is opened again. With
    ``create=False`` (check mode) a missing lock file means there is nothing to wait for.
    """

    def __init__(self, lock_path, timeout, shared=False, create=True, describe_holder=None,
                 sleep=time.sleep, clock=time.monotonic):
        self.lock_path = lock_path
        self.timeout = timeout
        self.shared = shared
        self.create = create
        self.describe_holder = describe_holder
        self.fd = None
        self._sleep = sleep
        self._clock = clock

    def acquire(self):
        started = self._clock()
        deadline = started + self.timeout
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while True:
            try:
                if self.create:
                    fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                else:
                    fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
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
                        holder = self.describe_holder() if self.describe_holder else ""
                        raise LockBusy(
                            "another run holds %s%s; waited %d s (lock_timeout). Let it finish, or "
                            "raise lock_timeout." % (self.lock_path, holder, self.timeout)
                        )
                    self._sleep(delay)
                    delay = min(delay * 2, 1.0)
            try:
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                self.waited = self._clock() - started
                return True
            os.close(fd)
            if not self.create:
                return False

    def release(self, unlink=False):
        if self.fd is None:
            return
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


class Progress:
    """``<path>.progress.json``: the current step and when it started, for whoever looks."""

    def __init__(self, progress_path, about):
        self.progress_path = progress_path
        self.data = dict(about, pid=os.getpid(), started=utc_now(), step=None, step_started=None,
                         done=[])

    def step(self, name, done):
        self.data.update(step=name, step_started=utc_now(), done=list(done))
        try:
            write_json_atomic(self.progress_path, self.data)
        except OSError:
            pass

    def remove(self):
        try:
            os.unlink(self.progress_path)
        except OSError:
            pass


def read_progress(progress_path):
    try:
        with open(progress_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
