# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the engine_service role checks before anything is touched, as filters: what is wrong with a host's
served models and the role variables that reach their units (``engine_service_problems``), with a role variable
of whole seconds (``engine_service_seconds_problem``), the variables the role checks
(``engine_service_checked_variables``) and everything it checks in them (``engine_service_variable_problems``),
and the words of a preflight problem found on the node (``engine_service_says``).

The code is ``plugins/plugin_utils/_service_checks.py``'s, which the engine_service_look action calls too.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import (
    engine_service_problems,
    engine_service_seconds_problem,
    engine_service_checked_variables,
    engine_service_variable_problems,
    engine_service_says,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_groups


def engine_service_group_problems(groups, host, hostvars):
    """What is wrong with ``engine_service_model_groups`` (``groups``), and with the group ``host`` is a member of,
    read across its members in ``hostvars``; empty when nothing is."""
    return _service_groups.group_problems(groups) + _service_groups.member_problems(groups, host, hostvars)


def engine_service_group_member(groups, host, hostvars):
    """``host``'s place in its model group (``_service_groups.member``), or None."""
    if engine_service_group_problems(groups, host, hostvars):
        return None
    return _service_groups.member(groups, host, hostvars)


class FilterModule:
    """llmfleet.engines filters for the engine_service role's checks."""

    def filters(self):
        return {
            "engine_service_problems": engine_service_problems,
            "engine_service_seconds_problem": engine_service_seconds_problem,
            "engine_service_checked_variables": engine_service_checked_variables,
            "engine_service_variable_problems": engine_service_variable_problems,
            "engine_service_says": engine_service_says,
            "engine_service_group_problems": engine_service_group_problems,
            "engine_service_group_member": engine_service_group_member,
            "engine_service_rollout_batches": _service_groups.rollout_batches,
            "engine_service_group_settled": _service_groups.group_settled,
        }
