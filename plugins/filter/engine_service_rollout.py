# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's rollout, as filters, in the order of its steps (the rollout lock is the
``rollout_lock`` module's): the unit files found on a node, kept to be restored when a
change does not serve (``engine_service_saved_units``), which of them a change rewrites
(``engine_service_changed_units``), the figures of a readiness gate (``engine_service_gate_figures``) and
what failed in a rolled-out version, in words (``engine_service_failure``), which step the rollout
takes next, read from its one state fact (``engine_service_rollout_may``), and the node's readiness
line of the run's report (``engine_service_readiness``).

Unit tests: ``tests/unit/plugins/filter/test_rollout_filter.py``, ``test_service_filter.py``,
``test_engine_service_steps_filter.py``, ``test_rollout_state_filter.py``.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import base64
import binascii

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_rollout import engine_service_readiness


def _text(read):
    """The text of one looped ``slurp`` result, or None when the file was not there."""
    if not isinstance(read, dict):
        raise AnsibleFilterError("the input must be the results of a looped slurp, not %r" % (read,))
    content = read.get("content")
    if content is None or read.get("failed"):
        return None
    try:
        return base64.b64decode(content).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, TypeError) as exc:
        raise AnsibleFilterError("the slurped file %s cannot be read as UTF-8 text: %s" % (read.get("source"), exc))


def _unit_of(read):
    item = read.get("item") if isinstance(read, dict) else None
    if isinstance(item, dict) and isinstance(item.get("unit"), str):
        return item["unit"]
    raise AnsibleFilterError("each slurp result must have the unit (from engine_service_units) as its item, not %r"
                             % (item,))


def engine_service_saved_units(results):
    """``{unit: text or None}``: what each unit file holds on the node now (None: no file)."""
    return dict((_unit_of(read), _text(read)) for read in results or [])


def engine_service_changed_units(results, units):
    """The units (names, in the order of ``units``) whose file on the node is missing or differs
    from the ``text`` engine_service_units rendered."""
    saved = engine_service_saved_units(results)
    out = []
    for unit in units or []:
        if not isinstance(unit, dict) or "unit" not in unit or "text" not in unit:
            raise AnsibleFilterError("engine_service_changed_units: each unit must come from engine_service_units")
        if saved.get(unit["unit"]) != unit["text"]:
            out.append(unit["unit"])
    return out


def engine_service_gate_figures(results, env_name, stage="start"):
    """The readiness figures of a gate (the looped engine_ready results), one dict per unit."""
    # imported here: _ready is the gate's node side (its HTTP client, http.client and all), which the other
    # filters of this file do not need, and engine_service_look's worker imports this file on every serving
    # node of every run (about 13 ms of compiling and importing each time)
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.llmfleet.engines.plugins.module_utils.serve._ready import gate_record

    out = []
    for item in results or []:
        if not isinstance(item, dict) or item.get("skipped"):
            continue
        unit = (item.get("item") or {}).get("unit") if isinstance(item.get("item"), dict) else item.get("item")
        out.append(gate_record(unit, env_name, stage, item))
    return out


def engine_service_failure(result, task=""):
    """What failed in a rolled-out version, in words: the task, its message and the unit's last journal
    lines (from ``ansible_failed_result``; a looped task's first failed item)."""
    if not isinstance(result, dict):
        return "%s failed" % (task or "a task")
    failed = result
    for item in result.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            failed = item
            break
    msg = str(failed.get("msg") or "no message").strip()
    text = "%s: %s" % (task, msg) if task else msg
    journal = [str(line) for line in failed.get("journal") or [] if str(line).strip()]
    if journal and not all(line in msg for line in journal[-5:]):
        text += " Last journal lines: %s" % " | ".join(journal[-10:])
    return text


# The keys of the rollout's state (roll.yml's __engine_service_rollout, started there and updated by each step)
ROLLOUT_KEYS = ("drain", "drain_why", "undo_why", "failure", "rolled_back", "rollback_why", "rollback_served",
                "gateway_unready", "undrained")
ROLLOUT_FLAGS = ("rolled_back", "rollback_served", "gateway_unready", "undrained")
# 'ok', or where the drain failed (then nothing stops)
DRAIN_STATES = ("ok", "failed_on_gateways", "failed_in_tasks")
ROLLOUT_STEPS = ("drain_tasks", "restart", "undrain", "record", "prune")


def _rollout(state):
    if not isinstance(state, dict):
        raise AnsibleFilterError("engine_service_rollout_may: the rollout's state must be the dict roll.yml starts"
                                 " (__engine_service_rollout), not %r" % (state,))
    missing = [key for key in ROLLOUT_KEYS if key not in state]
    if missing:
        raise AnsibleFilterError("engine_service_rollout_may: the rollout's state lacks %s (it has %s; roll.yml starts"
                                 " it with %s)" % (", ".join(missing), ", ".join(sorted(state)) or "nothing",
                                                   ", ".join(ROLLOUT_KEYS)))
    if state["drain"] not in DRAIN_STATES:
        raise AnsibleFilterError("engine_service_rollout_may: the rollout's drain is %r; it must be one of %s"
                                 % (state["drain"], ", ".join(DRAIN_STATES)))
    for key in ROLLOUT_FLAGS:
        if not isinstance(state[key], bool):
            raise AnsibleFilterError("engine_service_rollout_may: the rollout's %s is %r; it must be true or false"
                                     % (key, state[key]))
    return state


def engine_service_rollout_may(state, step):
    """Whether the rollout in ``state`` (roll.yml's ``__engine_service_rollout``) takes ``step``:

    - ``drain_tasks``: the user's drain tasks run unless the gateways' drain failed. (Their own failure
      is ``failed_in_tasks``, so that their rescue, under the same condition, still runs.)
    - ``restart``: stop, switch, start and gate only after a drain that went through.
    - ``undrain``: the node goes back in rotation (gateways, undrain tasks) when it serves: the change
      passed its gate, or the rollback's previous version passed it again.
    - ``record``: the change served (no failed drain, no rollback): its failure note goes.
    - ``prune``: the change served and the node is back in rotation (the undrain tasks and the gateways):
      only then are the environments beyond engine_node_keep removed.
    """
    state = _rollout(state)
    if step not in ROLLOUT_STEPS:
        raise AnsibleFilterError("engine_service_rollout_may: the step is %r; it must be one of %s"
                                 % (step, ", ".join(ROLLOUT_STEPS)))
    if step == "drain_tasks":
        return state["drain"] != "failed_on_gateways"
    drained = state["drain"] == "ok"
    if step == "restart":
        return drained
    if step == "undrain":
        return drained and (not state["rolled_back"] or state["rollback_served"])
    served = drained and not state["rolled_back"]
    if step == "record":
        return served
    return served and state["undrained"] and not state["gateway_unready"]


class FilterModule:
    """llmfleet.engines filters for the engine_service role's rollout."""

    def filters(self):
        return {
            "engine_service_saved_units": engine_service_saved_units,
            "engine_service_changed_units": engine_service_changed_units,
            "engine_service_gate_figures": engine_service_gate_figures,
            "engine_service_failure": engine_service_failure,
            "engine_service_rollout_may": engine_service_rollout_may,
            "engine_service_readiness": engine_service_readiness,
        }
