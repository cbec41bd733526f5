# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the engine_node role checks and tells the operator, as filters: the variables it checks
(``engine_node_checked_variables``), what is wrong with a host's variables (``engine_node_problems``), the line
that sums up a node (``engine_node_summary``), the reason a node failed (``engine_node_error``), the look-ups and
the controller's fleet steps that left a node without an answer (``engine_node_lookup_errors``,
``engine_node_fleet_errors``), and why an attempt installs the build it does (``engine_node_attempt_why``).

The code is ``plugins/plugin_utils/_node_checks.py``'s, which the engine_node_plan action calls too. The other
engine_node filters: ``engine_node_wheels.py`` (where a wheel is taken from), ``engine_node_lock.py`` (what a node
resolves against), ``builds.py`` (the build table and policy), ``engine_node_layout.py`` (the node's layout and
the role's result). Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import (
    engine_node_checked_variables,
    engine_node_problems,
    engine_node_summary,
    engine_node_error,
    engine_node_lookup_errors,
    engine_node_fleet_errors,
    engine_node_attempt_why,
)


class FilterModule:
    """llmfleet.engines filters for what the engine_node role checks and reports."""

    def filters(self):
        return {
            "engine_node_checked_variables": engine_node_checked_variables,
            "engine_node_problems": engine_node_problems,
            "engine_node_summary": engine_node_summary,
            "engine_node_error": engine_node_error,
            "engine_node_lookup_errors": engine_node_lookup_errors,
            "engine_node_fleet_errors": engine_node_fleet_errors,
            "engine_node_attempt_why": engine_node_attempt_why,
        }
