# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark helper, not shipped: counts the tasks and module calls of a playbook run, per host.

Enabled by the benchmarks with ``ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins`` and
``ANSIBLE_CALLBACKS_ENABLED=bench_count``; writes JSON to the file named by ``BENCH_COUNT_OUT``.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_count
type: aggregate
short_description: Count tasks and module calls per host (benchmarks only)
description:
  - Writes, to the file named by E(BENCH_COUNT_OUT), per host the task results by status, the module
    calls (results of tasks that ran a module on the host or on the controller for it), and per task
    its wall time.
requirements:
  - E(BENCH_COUNT_OUT) set to a writable path.
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

# Actions that run on the controller only: no module is sent to a node for them.
CONTROLLER_ONLY = frozenset((
    "add_host", "assert", "debug", "fail", "group_by", "import_playbook", "import_role", "import_tasks",
    "include_role", "include_tasks", "include_vars", "meta", "pause", "set_fact", "set_stats",
    "validate_argument_spec", "wait_for_connection",
))


def short_action(action):
    for prefix in ("ansible.builtin.", "ansible.legacy."):
        if action.startswith(prefix):
            return action[len(prefix):]
    return action


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = time.monotonic()
        self.hosts = {}
        self.tasks = []
        self.current = None
        self.includes = 0

    # -- tasks -------------------------------------------------------------------------------

    def _task_start(self, task):
        now = time.monotonic()
        # the linear strategy starts a meta task (end_host, ...) once per host: one task all the same
        if self.current is not None and self.current["_uuid"] == task._uuid:  # pylint: disable=protected-access
            return
        if self.current is not None:
            self.current["seconds"] = round(now - self.current["_t0"], 4)
        self.current = {"name": task.get_name(), "action": short_action(task.action), "_t0": now,
                        "_uuid": task._uuid,  # pylint: disable=protected-access
                        "seconds": None, "results": 0, "skipped": 0, "module_calls": 0,
                        "delegated": bool(task.delegate_to)}
        self.tasks.append(self.current)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def v2_playbook_on_include(self, included_file):
        self.includes += len(included_file._hosts)  # pylint: disable=protected-access

    # -- results -----------------------------------------------------------------------------

    def _host(self, name):
        return self.hosts.setdefault(name, {"results": 0, "ok": 0, "changed": 0, "skipped": 0, "failed": 0,
                                            "unreachable": 0, "module_calls": 0, "controller_module_calls": 0,
                                            "by_action": {}})

    def _record(self, result, status):
        # pylint: disable=protected-access
        host = self._host(result._host.get_name())
        task = result._task
        action = short_action(task.action)
        data = result._result
        host["results"] += 1
        host[status] += 1
        if status == "ok" and data.get("changed"):
            host["changed"] += 1
            host["ok"] -= 1
        calls = 0
        if status != "skipped" and data.get("asked_node") is False:
            pass  # an action of the collection that says it ran no module (a read of this run stood for it)
        elif status != "skipped" and action not in CONTROLLER_ONLY:
            if isinstance(data.get("results"), list):
                calls = sum(1 for item in data["results"] if not item.get("skipped"))
            else:
                calls = 1
        if calls:
            host["module_calls"] += calls
            if task.delegate_to:
                host["controller_module_calls"] += calls
            host["by_action"][action] = host["by_action"].get(action, 0) + calls
        if self.current is not None:
            self.current["results"] += 1
            self.current["skipped"] += status == "skipped"
            self.current["module_calls"] += calls

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    # -- the end -----------------------------------------------------------------------------

    def v2_playbook_on_stats(self, stats):
        now = time.monotonic()
        if self.current is not None and self.current["seconds"] is None:
            self.current["seconds"] = round(now - self.current["_t0"], 4)
        for task in self.tasks:
            task.pop("_t0", None)
            task.pop("_uuid", None)
        path = os.environ.get("BENCH_COUNT_OUT")
        if not path:
            return
        doc = {"seconds": round(now - self.started, 3), "hosts": self.hosts, "tasks": self.tasks,
               "includes": self.includes}
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
