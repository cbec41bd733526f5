# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The line that tells how a node's units served after their readiness gates (the filter
``engine_service_readiness`` of ``plugins/filter/engine_service_rollout.py``, and the engine_service_look
action's settled node).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_stage import _field


def engine_service_readiness(gates, host):
    """One line telling how each unit of ``host`` served after its readiness gate (``gates``: the
    role's gate records: unit, environment, stage, ready, ready_s, completion_ms)."""
    if not isinstance(gates, list):
        raise AnsibleFilterError("the input must be the node's gates (a list), not %r" % (gates,))
    told = []
    for gate in gates:
        ready_s = _field(gate, "ready_s", "gate")
        completion_ms = _field(gate, "completion_ms", "gate")
        told.append("%s (%s, %s) %s%s" % (
            _field(gate, "unit", "gate"), _field(gate, "environment", "gate"), _field(gate, "stage", "gate"),
            "ready, %.1f s after the unit started" % ready_s if _field(gate, "ready", "gate") and ready_s is not None
            else "not ready",
            ", one-token completion %.0f ms" % completion_ms if completion_ms is not None else ""))
    return "%s readiness: %s" % (host, "; ".join(told))
