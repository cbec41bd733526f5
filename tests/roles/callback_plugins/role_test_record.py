# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role tests' record of a playbook run, as JSON, beside the default output.

ansible-core 2.19 has no JSON callback of its own; this one writes every task result (the
module's result as the stdout callbacks get it, no_log honoured), the play recap and the
set_stats data to the file named by LLMFLEET_ROLE_RECORD when the run ends.
"""

from __future__ import annotations

DOCUMENTATION = """
name: role_test_record
type: aggregate
short_description: JSON record of a run for tests/roles (not part of the collection)
description:
  - Writes the task results, the recap and the custom stats to the file named by the
    environment variable E(LLMFLEET_ROLE_RECORD).
requirements:
  - enabled with ANSIBLE_CALLBACKS_ENABLED=role_test_record
"""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Collects the results; writes them in v2_playbook_on_stats."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "role_test_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.tasks = []

    def _add(self, result, status, **extra):
        data = json.loads(self._dump_results(result._result, indent=None, keep_invocation=False))
        self.tasks.append(dict({
            "task": result._task.get_name(),
            "action": result._task.action,
            "host": result._host.get_name(),
            "status": status,
            "changed": bool(data.get("changed")),
            "result": data,
        }, **extra))

    def v2_runner_on_ok(self, result):
        self._add(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._add(result, "failed", ignore_errors=bool(ignore_errors))

    def v2_runner_on_skipped(self, result):
        self._add(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._add(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("LLMFLEET_ROLE_RECORD")
        if not path:
            return
        record = {
            "tasks": self.tasks,
            "stats": {host: stats.summarize(host) for host in sorted(stats.processed)},
            "custom_stats": json.loads(self._dump_results(stats.custom.get("_run", {}), indent=None)),
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
