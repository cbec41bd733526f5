# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Following background jobs (tasks started with ``async`` and ``poll: 0``) from an action on the
controller, until they end: the engine_node_follow action (a build of uv_engine_env) and
engine_service_follow (model_snapshot's downloads) share it. One loop in one task, bounded by a
timeout, instead of a task file that includes itself once per interval (hundreds of levels for an
hour's job).

``follow`` is the loop; what each interval does besides asking (print a line, keep a lock fresh) is
the caller's. ``async_dir``, ``job_status`` and ``read_json`` are the questions an action asks the
node through its own ``_execute_module``.
"""

from __future__ import annotations

import base64
import json
import time


def follow(ask, jids, interval, timeout, each_interval, clock=time.monotonic, sleep=time.sleep):
    """Follow the jobs ``jids`` until every one has ended.

    ``ask(jid)`` is async_status's result for a job. Each job still running is asked at once (a job that
    ended while the forks followed other nodes costs no interval), then every ``interval`` seconds from
    the start, however long the questions took. A job has ended when async_status says it finished, or
    fails (as it does, finished, for a job it cannot find). While some still run,
    ``each_interval(running, elapsed, round)`` is called after each round of questions: ``round`` 0 the
    first time, at once; what it raises ends the follow.

    Returns ``(ended, running)``: the last status of each ended job by id, and the ids still running
    when ``timeout`` seconds had passed (``[]`` once every job ended)."""
    started = clock()
    ended = {}
    rounds = 0
    while True:
        for jid in jids:
            if jid not in ended:
                status = ask(jid)
                if status.get("failed") or status.get("finished"):
                    ended[jid] = status
        running = [jid for jid in jids if jid not in ended]
        now = clock()
        if not running or now - started >= timeout:
            return ended, running
        each_interval(running, now - started, rounds)
        rounds += 1
        sleep(max(0.0, started + rounds * interval - clock()))


def async_dir(action):
    """The node's directory of background jobs, as ansible.builtin.async_status finds it."""
    return action._remote_expand_user(action.get_shell_option("async_dir", default="~/.ansible_async"))


def job_status(action, task_vars, jid, directory):
    """async_status's answer for the job ``jid`` (its module, run on the node)."""
    return action._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                  module_args={"jid": jid, "mode": "status", "_async_dir": directory})


def read_json(action, task_vars, path):
    """The JSON in the node's file ``path``; None where there is none (or it cannot be read). A file that is
    not JSON (read while a writer that does not rename was at it) raises ValueError."""
    read = action._execute_module(module_name="ansible.legacy.slurp", task_vars=task_vars, module_args={"src": path})
    if read.get("failed") or "content" not in read:
        return None
    return json.loads(base64.b64decode(read["content"]).decode("utf-8"))
