# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's rollout decisions, as filters: the unit files found on a node (kept
to be restored when a change does not serve) and which of them a change rewrites.

Unit tests: ``tests/unit/plugins/filter/test_rollout_filter.py``. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import base64
import binascii
import json

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement


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


def engine_service_seconds_problem(value, variable, least=0):
    """``[]``, or the one problem of a role variable that must be a whole number of seconds >= ``least``."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    if text.isdigit() and int(text) >= least:
        return []
    return ["variable %s is %s, allowed: a whole number of seconds, %d or more"
            % (variable, json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value),
               least)]


def engine_service_tensor_parallel(model):
    """The tensor-parallel size a model runs with: what its ``args`` ask vLLM for (``--tensor-parallel-size N``,
    ``--tensor-parallel-size=N``, ``-tp N``); when they do not, the number of its ``gpus`` (divided by its pipeline
    and data parallel sizes), which the role then passes; else 1. 0 for a value that is not a whole number."""
    return _placement.parallel_sizes(model if isinstance(model, dict) else {})["tensor"]


class FilterModule:
    """llmfleet.engines filters for the engine_service role's rollout."""

    def filters(self):
        return {
            "engine_service_saved_units": engine_service_saved_units,
            "engine_service_changed_units": engine_service_changed_units,
            "engine_service_seconds_problem": engine_service_seconds_problem,
            "engine_service_tensor_parallel": engine_service_tensor_parallel,
        }
