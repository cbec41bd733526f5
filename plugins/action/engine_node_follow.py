# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_node_follow action (documentation: plugins/modules/engine_node_follow.py).

Follows a build that uv_engine_env runs in the background (``async``) until it ends, in one task:
every ``interval`` seconds it asks async_status and reads the step the build is in
(``<path>.progress.json``, which uv_engine_env keeps), and prints a line. The loop, bounded by
``timeout``, is plugin_utils/_follow.py's, which engine_service_follow shares. Its result is
async_status's last one: a build that failed fails this task.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmfleet.engines.plugins.plugin_utils._follow import async_dir, follow, job_status, read_json

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
        directory = async_dir(self)
        seen = {"step": "", "since": 0.0}

        def each_interval(_running, elapsed, rounds):
            if not rounds:  # a line per interval, the first after one
                return
            current = step_now(self._progress(args["progress"], seen["step"], task_vars), seen["step"])
            if current != seen["step"]:
                seen.update(step=current, since=elapsed)
            display.display(progress_line(args["what"], host, args["steps"], seen["step"], elapsed - seen["since"],
                                          elapsed))

        ended, _running = follow(lambda jid: job_status(self, task_vars, jid, directory), [args["jid"]],
                                 args["interval"], args["timeout"], each_interval)
        if args["jid"] not in ended:
            result.update(failed=True, finished=False, ansible_job_id=args["jid"],
                          msg="%s: %s did not end within %d s (the job %s may still run on the node)"
                              % (host, args["what"], args["timeout"], args["jid"]))
            return result
        # the build's own result: one that failed fails this task
        result.update(ended[args["jid"]])
        result["finished"] = bool(ended[args["jid"]].get("finished"))
        return result

    def _progress(self, path, step, task_vars):
        """The progress file's content; None where there is none."""
        try:
            return read_json(self, task_vars, path)
        except ValueError:  # read while it was written: the step before
            return {"step": step}
