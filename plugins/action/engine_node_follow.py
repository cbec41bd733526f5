# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_node_follow action (documentation: plugins/modules/engine_node_follow.py).

Follows a build that uv_engine_env runs in the background (``async``) until it ends, in one task:
every ``interval`` seconds it asks async_status and reads the step the build is in
(``<path>.progress.json``, which uv_engine_env keeps), and prints a line. A loop here, not a task
file that includes itself once per interval (about 240 levels for an hour's build), and bounded by
``timeout``. Its result is async_status's last one: a build that failed fails this task.
"""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def step_now(progress, before):
    """The step a build is in from its progress file's content (None: no file): the file's ``step``; without
    a file, '' before the first step and 'finishing' once a step was seen (uv_engine_env removes it last)."""
    if progress is None:
        return "finishing" if before else ""
    return (progress.get("step") or "") if isinstance(progress, dict) else ""


def progress_line(what, host, words, step, in_step, building):
    """The line printed for a build still running: its step in words and for how long, and for how long it
    has been building (whole seconds)."""
    return "%s on %s: %s, %d s (building for %d s)" % (
        what, host, words.get(step) or step or "starting", round(in_step), round(building))


class ActionModule(ActionBase):
    """Follow a background build until it ends, printing its step every interval."""

    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "progress": {"type": "str", "required": True},
            "interval": {"type": "int", "default": 15},
            "timeout": {"type": "int", "required": True},
            "what": {"type": "str", "default": "the build"},
            "steps": {"type": "dict", "default": {}},
        })
        host = (task_vars or {}).get("inventory_hostname", "")
        if args["interval"] < 1 or args["timeout"] < 1:
            raise AnsibleActionFail("%s: engine_node_follow: interval is %r and timeout %r, allowed: whole numbers of "
                                    "seconds, 1 or more" % (host, args["interval"], args["timeout"]))
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        started = time.monotonic()
        step, since, tick = "", started, started
        while True:
            # asked at once too: a build that ended while the forks followed other nodes waits no interval
            status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                          module_args={"jid": args["jid"], "mode": "status", "_async_dir": async_dir})
            if status.get("failed") or status.get("finished"):
                result.update(status)
                result["finished"] = bool(status.get("finished"))
                return result
            now = time.monotonic()
            if now - started >= args["timeout"]:
                result.update(failed=True, finished=False, ansible_job_id=args["jid"],
                              msg="%s: %s did not end within %d s (the job %s may still run on the node)"
                                  % (host, args["what"], args["timeout"], args["jid"]))
                return result
            if tick > started:  # a line per interval, the first after one
                current = step_now(self._progress(args["progress"], step, task_vars), step)
                if current != step:
                    step, since = current, now
                display.display(progress_line(args["what"], host, args["steps"], step, now - since, now - started))
            # every interval from the start, however long the questions took
            tick += args["interval"]
            time.sleep(max(0.0, tick - time.monotonic()))

    def _progress(self, path, step, task_vars):
        """The progress file's content; None where there is none."""
        read = self._execute_module(module_name="ansible.legacy.slurp", task_vars=task_vars, module_args={"src": path})
        if read.get("failed") or "content" not in read:
            return None
        try:
            return json.loads(base64.b64decode(read["content"]).decode("utf-8"))
        except ValueError:  # read while it was written: the step before
            return {"step": step}
