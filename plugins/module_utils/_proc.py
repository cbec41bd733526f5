# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The one process runner of the collection's modules.
"""

from __future__ import annotations

import threading

KILL_GRACE_S = 10.0
TAIL_LINES = 6


def tail(text, lines=TAIL_LINES):
    """The last few non-empty lines of a command's output, joined with `` / ``.

    uv explains a failed resolution over several lines; the last alone rarely says why.
    """
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " / ".join(kept[-lines:]).rstrip(".")


class CommandResult:
    def __init__(self, rc, out, err, timed_out=False):
        self.rc = rc
        self.out = out or ""
        self.err = err or ""
        self.timed_out = timed_out

    @property
    def output(self):
        return (self.out + "\n" + self.err).strip()


def _stop(proc, grace=KILL_GRACE_S):
    try:
        proc.terminate()
        proc.wait(grace)
    except Exception:  # pylint: disable=broad-except
        try:
            proc.kill()
        except OSError:
            pass


class ModuleRunner:
    """Runs argv lists with ``module.run_command``, killing a command at its time limit.

    ``keep_fds`` (the path's lock) are passed to every command: a uv left running after this
    process is killed still holds the lock, so the next run cannot clear a partial
    environment that is still being written.
    """

    def __init__(self, module, keep_fds=()):
        self.module = module
        self.keep_fds = list(keep_fds)

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        timers = []
        state = {"timed_out": False}

        def arm(proc):
            if timeout is None:
                return

            def expire():
                state["timed_out"] = True
                _stop(proc)

            timer = threading.Timer(max(float(timeout), 0.01), expire)
            timer.daemon = True
            timer.start()
            timers.append(timer)

        kwargs = {"environ_update": env or {}, "cwd": cwd, "expand_user_and_vars": False,
                  "before_communicate_callback": arm}
        if data is not None:
            kwargs["data"] = data
        if self.keep_fds:
            kwargs["pass_fds"] = self.keep_fds
        try:
            rc, out, err = self.module.run_command(argv, **kwargs)
        finally:
            for timer in timers:
                timer.cancel()
        return CommandResult(rc, out, err, state["timed_out"])
