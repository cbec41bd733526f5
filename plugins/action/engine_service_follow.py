# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service_follow action (documentation: plugins/modules/engine_service_follow.py).

Follows the downloads that model_snapshot runs in the background (``async``, one job per model) until
every one has ended, in one task: every ``interval`` seconds it keeps the run's rollout lock fresh
(rollout_lock with the run's token; a lock another run took over fails the task), asks async_status
and, for each download still going, reads model_snapshot's progress file and prints a line. The loop,
bounded by ``timeout``, is plugin_utils/_follow.py's, which engine_node_follow shares. A job that failed
does not fail this task: the task that collects the results does, with the module's message.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmfleet.engines.plugins.plugin_utils._follow import async_dir, follow, job_status, read_json

display = Display()

MIB = 1048576.0


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def download_line(host, name, progress, seen, elapsed):
    """The line printed for a download still going: the files its workers are on (else the last one), MiB
    done of the total, the rate and which file of how many, from model_snapshot's progress file (a dict);
    without one, 'starting' before the first was seen and 'finishing' after (the module removes it last)."""
    if not isinstance(progress, dict):
        return "%s %s: %s (%d s)" % (host, name, "finishing" if seen else "starting", round(elapsed))
    files = progress.get("files") if isinstance(progress.get("files"), list) else []
    where = ", ".join(str(f) for f in files) or progress.get("file") or "starting"
    total = int(_number(progress.get("files_total")))
    return "%s %s: %s, %.1f of %.1f MiB at %.1f MiB/s, file %d of %d (%d s)" % (
        host, name, where, _number(progress.get("bytes_done")) / MIB, _number(progress.get("bytes_total")) / MIB,
        _number(progress.get("rate_bps")) / MIB, min(int(_number(progress.get("files_done"))) + 1, total), total,
        round(elapsed))


class LockLost(Exception):
    """The run's rollout lock could not be refreshed: rollout_lock's failed result."""

    def __init__(self, answer):
        super().__init__(answer.get("msg", "no message"))
        self.answer = answer


class ActionModule(ActionBase):
    """Follow background downloads until they end, printing their progress and keeping the lock fresh."""

    TRANSFERS_FILES = False
    _requires_connection = True
    _supports_check_mode = False  # no background job in check mode: skipped there

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(argument_spec={
            "jobs": {"type": "list", "elements": "dict", "required": True, "options": {
                "jid": {"type": "str", "required": True},
                "name": {"type": "str"},
                "progress": {"type": "str"},
            }},
            "interval": {"type": "int", "default": 15},
            "timeout": {"type": "int", "required": True},
            "lock": {"type": "str"},
            "lock_token": {"type": "str", "no_log": True},
        }, required_together=[["lock", "lock_token"]])
        host = (task_vars or {}).get("inventory_hostname", "")
        for option in ("interval", "timeout"):
            if args[option] < 1:
                raise AnsibleActionFail("%s: engine_service_follow: %s is %r, allowed: a whole number of seconds, 1 or "
                                        "more" % (host, option, args[option]))
        jobs = {job["jid"]: job for job in args["jobs"]}
        directory = async_dir(self)
        seen = {}  # jid -> the last progress read (a dict), once one was

        def each_interval(running, elapsed, rounds):
            # at once and every interval: a run that waits on the downloads longer than
            # engine_service_lock_stale would otherwise lose its lock to the next run
            if args["lock"]:
                answer = self._execute_module(module_name="llmfleet.engines.rollout_lock", task_vars=task_vars,
                                              module_args={"path": args["lock"], "token": args["lock_token"]})
                if answer.get("failed"):
                    raise LockLost(answer)
            if not rounds:  # the lines from the first interval on, as the downloads start
                return
            for jid in running:
                job = jobs[jid]
                progress = None
                if job.get("progress"):
                    try:
                        progress = read_json(self, task_vars, job["progress"])
                    except ValueError:  # not JSON (the module renames it into place): the last one read
                        progress = seen.get(jid)
                if isinstance(progress, dict):
                    seen[jid] = progress
                display.display(download_line(host, job.get("name") or jid, progress, jid in seen, elapsed))

        try:
            ended, running = follow(lambda jid: job_status(self, task_vars, jid, directory), list(jobs),
                                    args["interval"], args["timeout"], each_interval)
        except LockLost as lost:
            result.update(failed=True, finished=False, lost=bool(lost.answer.get("lost")),
                          msg="%s: keeping the rollout lock %s failed, so nothing more is done on this node (the "
                              "downloads may still run there): %s" % (host, args["lock"], lost))
            return result
        result["finished"] = not running
        result["jobs"] = [{"jid": jid, "name": jobs[jid].get("name") or jid, "finished": jid in ended,
                           "failed": bool(ended.get(jid, {}).get("failed"))} for jid in jobs]
        if running:
            result.update(failed=True, msg="%s: the downloads of %s did not end within %d s (their jobs may still run "
                                           "on the node)" % (host, ", ".join(jobs[j].get("name") or j for j in running),
                                                             args["timeout"]))
        return result
